"""`rpbcast pub` against the library it runs on: msgs/s of the command
(`--batch B`, and one publish per message) and of a program calling
`Node.publish_batch` with the same batch, payload and group, alternating in
one run.

    python bench/bench_pub_cli.py [--count 1000000] [--batch 256] [--rounds 5] [--json out.json]

The group: a logger and a subscriber (`rpbcast sub --count-only`) that stay
up, and a publisher process started per round -- as root in a network
namespace with real multicast on its loopback, else unicast on 127.0.0.1.
Each publisher measures its publishing loop (first publish to last one
accepted, back-pressure included; the drain that follows is not counted)
and prints msgs/s; the table gives medians, the ratio of medians against
the library of the same run, and the median of the per-round ratios
(each round's case over that round's library).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import machine  # noqa: E402

from rpbcast.tools import netns  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LIBRARY = r"""
import sys, time
import numpy as np
from rpbcast.tools.node_options import add_node_options, config_from_args
from rpbcast.api import Node
import argparse
p = argparse.ArgumentParser(); add_node_options(p)
p.add_argument("--count", type=int); p.add_argument("--batch", type=int); p.add_argument("--size", type=int)
a = p.parse_args(sys.argv[1:])
node = Node(config_from_args(a))
body = b"x" * a.size
buf, lens = body * a.batch, np.full(a.batch, a.size, np.uint32)
n, t0 = 0, time.monotonic()
while n < a.count:
    k = min(a.batch, a.count - n)
    done = 0
    while done < k:
        got = node.publish_batch(memoryview(buf)[done * a.size:k * a.size], lens[done:k])
        done += got
        if done < k:
            time.sleep(0.0005)
    n += k
el = time.monotonic() - t0
print(f"published {n:,} messages in {el:.2f} s ({n / el:,.0f} msgs/s)", file=sys.stderr)
d = node.close(linger=30)
sys.exit(0 if d is None or d.drained else 1)
"""


def ports(n):
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        out.append(s.getsockname()[1])
        s.close()
    return out


def rate_of(stderr):
    m = re.search(r"published [\d,]+ messages in [\d.]+ s \(([\d,]+) msgs/s\)", stderr)
    if not m:
        raise RuntimeError(f"no rate in: {stderr[-500:]}")
    return int(m.group(1).replace(",", ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--single-count", type=int, default=100_000, help="messages for the --batch 1 case")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    ns = netns.create() if netns.available() else None
    tmp = tempfile.mkdtemp(prefix="rpbcast-pubbench-")
    p1, p2, p9 = ports(3)
    members = ["--member", f"1=127.0.0.1:{p1}", "--member", f"2=127.0.0.1:{p2}", "--member", f"9=127.0.0.1:{p9}/logger"]
    if ns is None:
        members = ["--transport", "unicast", *members]
    env = dict(os.environ, PYTHONPATH=HERE, RPBCAST_RUNTIME_DIR=os.path.join(tmp, "rt"))
    wrap = netns.exec_argv(ns, []) if ns else []
    rp = [*wrap, sys.executable, "-m", "rpbcast"]
    procs = [subprocess.Popen([*rp, "logger", "--node-id", "9", "--bind", f"127.0.0.1:{p9}", "--dir",
                               os.path.join(tmp, "log"), "--fsync", "never", *members], env=env,
                              stderr=subprocess.DEVNULL),
             subprocess.Popen([*rp, "sub", "--node-id", "2", "--bind", f"127.0.0.1:{p2}", "--count-only", *members],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    for sock in ("1-9.sock", "1-2.sock"):
        end = time.time() + 30
        while not os.path.exists(os.path.join(tmp, "rt", sock)) and time.time() < end:
            time.sleep(0.05)
    ident = ["--node-id", "1", "--bind", f"127.0.0.1:{p1}", *members]
    cases = {
        "library publish_batch": [*wrap, sys.executable, "-c", LIBRARY, *ident, "--count", str(a.count),
                                  "--batch", str(a.batch), "--size", str(a.size)],
        f"rpbcast pub --batch {a.batch}": [*rp, "pub", *ident, "--count", str(a.count), "--batch", str(a.batch),
                                           "--size", str(a.size), "--linger", "30"],
        "rpbcast pub (one publish per message)": [*rp, "pub", *ident, "--count", str(a.single_count),
                                                  "--size", str(a.size), "--linger", "30"],
    }
    got = {k: [] for k in cases}
    try:
        for _ in range(a.rounds):
            for name, argv_ in cases.items():
                r = subprocess.run(argv_, env=env, capture_output=True, text=True, timeout=600)
                if r.returncode:
                    raise RuntimeError(f"{name}: exit {r.returncode}: {r.stderr[-800:]}")
                got[name].append(rate_of(r.stderr))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if ns:
            netns.delete(ns)
    lib = got["library publish_batch"]
    base = statistics.median(lib)
    rows = []
    # the paired ratio (this round's case / this round's library) cancels
    # the drift between rounds that the ratio of medians keeps
    print(f"{'case':<40}{'median msgs/s':>16}{'vs library':>12}{'paired':>9}  rounds")
    for name, v in got.items():
        med = statistics.median(v)
        paired = statistics.median(x / y for x, y in zip(v, lib))
        rows.append({"case": name, "median": med, "ratio": round(med / base, 3),
                     "paired_ratio": round(paired, 3), "all": v})
        print(f"{name:<40}{med:>16,.0f}{med / base:>12.2f}{paired:>9.2f}  {', '.join(f'{x:,}' for x in v)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "transport": "multicast (netns)" if ns else "unicast",
                       "count": a.count, "batch": a.batch, "size": a.size, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
