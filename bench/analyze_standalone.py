"""`rpbcast analyze` on a real Spark standalone cluster started from
pyspark's own `spark-class` (master and one worker on 127.0.0.1 only).

    python bench/analyze_standalone.py RUN_DIR [--runs 4] [--worker-memory 4g]
        [--baseline ../other-checkout] [--json out.json]

Starts the master (its status page on Spark's default port 8080, or the
next free one up to 8083, where `rpbcast analyze` reads what the cluster
offers) and a worker (with Spark's defaults: every core and all memory but
1 GB, unless --worker-memory), then runs
`rpbcast analyze RUN_DIR --master spark://127.0.0.1:PORT --no-plots` --runs
times, alternating with the same command from --baseline (another checkout,
e.g. the main branch) when given, and prints per run: exit status, seconds,
and the first error line.  The cluster's processes are ended by PID.

RUN_DIR: a run directory with traces, e.g. from
`rpbcast stress --trace --run-dir RUN_DIR --duration 3`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from harness import machine  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spark_class():
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def port_free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Cluster:
    """A standalone master and one worker on 127.0.0.1, ended by PID."""

    def __init__(self, worker_memory=None, worker_cores=None):
        # the master's status page on Spark's default port (8080, or the next
        # ones up to 8083 as Spark itself would take), where `rpbcast analyze`
        # looks for it; only when all four are taken another port, which
        # self.ui_env then names to analyze
        self.port, self.wui = free_port(), free_port()
        self.ui = next((p for p in range(8080, 8084) if port_free(p)), None)
        self.ui_env = {}
        if self.ui is None:
            self.ui = free_port()
            self.ui_env = {"RPBCAST_SPARK_MASTER_UI": f"http://127.0.0.1:{self.ui}"}
        self.dir = tempfile.mkdtemp(prefix="rpbcast-spark-")
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=os.path.join(self.dir, "work"),
                   SPARK_LOG_DIR=self.dir)
        self.procs = []
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs.append(subprocess.Popen(
            [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
             str(self.port), "--webui-port", str(self.ui)], env=env, stdout=open(os.path.join(self.dir, "master.log"), "w"),
            stderr=subprocess.STDOUT))
        self._wait(lambda st: st.get("status") == "ALIVE")
        w = [spark_class(), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port",
             str(self.wui)]
        if worker_memory:
            w += ["--memory", worker_memory]
        if worker_cores:
            w += ["--cores", str(worker_cores)]
        self.procs.append(subprocess.Popen(w + [self.url], env=env,
                                           stdout=open(os.path.join(self.dir, "worker.log"), "w"),
                                           stderr=subprocess.STDOUT))
        self.state = self._wait(lambda st: st.get("aliveworkers", 0) >= 1)

    def _wait(self, ok, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                    st = json.load(r)
                if ok(st):
                    return st
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the standalone cluster did not come up (logs in {self.dir})")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def analyze(checkout, run_dir, master, out_dir, env_extra):
    env = dict(os.environ, PYTHONPATH=checkout, **env_extra)
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "rpbcast", "analyze", run_dir, "--master", master, "--no-plots",
                        "--out", out_dir], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    first = next((x for x in lines if "rpbcast analyze" in x or "Error" in x or "error" in x), lines[0] if lines else "")
    return {"rc": r.returncode, "s": round(time.monotonic() - t, 1), "stderr_lines": len(lines),
            "error": first[:200], "exactly_once_ok": "exactly-once: OK" in r.stdout,
            # the executors were sized from what the worker offers (else
            # analyze notes that it fell back to Spark's 1 GB default)
            "sized": "could not read what" not in r.stderr}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--worker-memory", help="the worker's offer (default: Spark's, all memory but 1 GB)")
    ap.add_argument("--worker-cores", type=int)
    ap.add_argument("--baseline", help="another checkout to alternate with (e.g. ../other-checkout)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    cl = Cluster(a.worker_memory, a.worker_cores)
    w = cl.state["workers"][0]
    print(f"cluster {cl.url}: worker {w['cores']} cores, {w['memory']} MB; status page on port {cl.ui}")
    rows = []
    out = tempfile.mkdtemp(prefix="rpbcast-analysis-")
    try:
        for k in range(a.runs):
            for name, checkout in ([("baseline", a.baseline)] if a.baseline else []) + [("this", HERE)]:
                r = analyze(checkout, os.path.abspath(a.run_dir), cl.url, os.path.join(out, f"{name}-{k}"),
                            cl.ui_env)
                r.update(run=k + 1, checkout=name)
                rows.append(r)
                print(f"  {name:<8} run {k + 1}: exit {r['rc']}, {r['s']} s, {r['stderr_lines']} stderr lines, "
                      f"exactly-once {'OK' if r['exactly_once_ok'] else 'not OK'}, "
                      f"executors {'sized from the worker' if r['sized'] else 'at Spark default 1 GB'}"
                      + (f": {r['error']}" if r["rc"] else ""), flush=True)
    finally:
        cl.stop()
        shutil.rmtree(out, ignore_errors=True)
    for name in sorted({r["checkout"] for r in rows}):
        rs = [r for r in rows if r["checkout"] == name]
        ok = sum(1 for r in rs if r["rc"] == 0)
        print(f"{name}: {ok} of {len(rs)} runs exit 0")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "worker": {"cores": w["cores"], "memory_mb": w["memory"]},
                       "run_dir": a.run_dir, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
