"""Build the C core under ASan+UBSan in a scratch copy of the tree and run a
fuzzer with it (fuzz/README.md, "The engine fuzzer under the sanitizers").

    python3 fuzz/sanitized.py [--work DIR] fuzz_engine.py --seed 1 --seconds 40

The copy lives under DIR (default $FUZZ_WORK or /tmp/rpbcast-fuzz), in a
directory named by a hash of the sources it is built from, so the normal
in-tree build is never touched and a stale sanitized build is never used.
Only the core extensions the engine imports are built (RPBCAST_ONLY), with
RPBCAST_DEBUG=1 (setup.py: -O0 -g -fsanitize=address,undefined).  The
fuzzer then runs with gcc's libasan and libubsan preloaded into the Python
interpreter, leak detection off (CPython keeps memory until exit by
design) and UBSan halting on its first report.  A sanitizer report kills
the run: its exit status is non-zero and the report is on stderr.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = ["core." + m for m in ("seqtrack", "digest", "signature", "stability", "srb", "msgstore", "wire",
                              "logstore", "node")]


def runtime_libs():
    """gcc's sanitizer runtimes, or None when the compiler lacks them."""
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        try:
            p = subprocess.run(["gcc", "-print-file-name=" + name], capture_output=True, text=True,
                               check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None
        if not os.path.isabs(p) or not os.path.exists(p):
            return None
        libs.append(os.path.realpath(p))
    return libs


def source_hash():
    """What the sanitized build depends on: csrc/, the core's .pyx/.pxd, setup.py."""
    h = hashlib.sha256()
    for top in ("csrc", "rpbcast/core"):
        for name in sorted(os.listdir(os.path.join(REPO, top))):
            if name.endswith((".c", ".h", ".pyx", ".pxd")) and not (top == "rpbcast/core" and name.endswith(".c")):
                with open(os.path.join(REPO, top, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    with open(os.path.join(REPO, "setup.py"), "rb") as f:
        h.update(f.read())
    return h.hexdigest()[:16]


def _skip(info):
    n = info.name
    if n.startswith(("./.git", "./build", "./fuzz-artifacts")) or n.endswith(".so") or "__pycache__" in n:
        return None
    # generated C of the extensions: rebuilt from the .pyx
    if n.startswith("./rpbcast/") and n.endswith(".c"):
        return None
    return info


def cython_path(work):
    """Where the build finds Cython: None if it is importable here; else a
    directory under work where pip installs it once (`pip install -e .`
    builds the extensions in an isolated environment, so a test
    environment need not have Cython)."""
    try:
        import Cython  # noqa: F401
        return None
    except ImportError:
        pass
    target = os.path.join(work, "buildtools")
    if not os.path.isdir(os.path.join(target, "Cython")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", target, "cython>=3.0"],
                       check=True)
    return target


def build(work=None, log=sys.stderr):
    """The sanitized copy's directory, building it if needed."""
    work = work or os.environ.get("FUZZ_WORK", "/tmp/rpbcast-fuzz")
    d = os.path.join(work, "asan-" + source_hash())
    if os.path.exists(os.path.join(d, ".built")):
        return d
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    t0 = time.monotonic()
    tmp = os.path.join(work, f".copy-{os.getpid()}.tar")
    with tarfile.open(tmp, "w") as t:
        t.add(REPO, arcname=".", filter=_skip)
    with tarfile.open(tmp) as t:
        t.extractall(d)
    os.unlink(tmp)
    env = dict(os.environ, RPBCAST_DEBUG="1", RPBCAST_ONLY=",".join(CORE))
    env.pop("CFLAGS", None)
    tools = cython_path(work)
    if tools:
        env["PYTHONPATH"] = tools
    with open(os.path.join(d, "build.log"), "w") as out:
        r = subprocess.run([sys.executable, "setup.py", "-q", "build_clib", "build_ext", "--inplace", "-j2"],
                           cwd=d, env=env, stdout=out, stderr=subprocess.STDOUT)
    if r.returncode:
        raise RuntimeError(f"sanitized build failed, see {d}/build.log")
    open(os.path.join(d, ".built"), "w").close()
    print(f"sanitized build in {d}: {time.monotonic() - t0:.0f} s", file=log, flush=True)
    return d


def sync_python(d):
    """The sanitized build is keyed by the C and Cython sources only: bring
    the copy's pure-Python files (the engine, the fuzzers) up to date."""
    for top in ("rpbcast", "fuzz"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            rel = os.path.relpath(root, REPO)
            for name in files:
                if name.endswith(".py"):
                    src, dst = os.path.join(root, name), os.path.join(d, rel, name)
                    with open(src, "rb") as f:
                        new = f.read()
                    try:
                        with open(dst, "rb") as f:
                            if f.read() == new:
                                continue
                    except OSError:
                        os.makedirs(os.path.dirname(dst), exist_ok=True)
                    with open(dst, "wb") as f:
                        f.write(new)


def env_for(d, libs):
    env = dict(os.environ)
    env.update(LD_PRELOAD=" ".join(libs), PYTHONPATH=d, PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return env


def main(argv):
    work = None
    if argv[:1] == ["--work"]:
        work, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    libs = runtime_libs()
    if libs is None:
        print("gcc has no ASan/UBSan runtime (libasan.so, libubsan.so)", file=sys.stderr)
        return 2
    d = build(work)
    sync_python(d)
    script = argv[0] if os.path.isabs(argv[0]) else os.path.join(REPO, "fuzz", os.path.basename(argv[0]))
    # the copy's own fuzzer: it imports the sanitized rpbcast next to it
    script = os.path.join(d, "fuzz", os.path.basename(script))
    return subprocess.run([sys.executable, script, *argv[1:]], env=env_for(d, libs), cwd=d).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
