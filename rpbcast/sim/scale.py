"""Measure how simulation time grows with members and messages
(docs/simulator.md, "Scale").

    python -m rpbcast.sim.scale                    # the growth table and the 1000 x 10k headline
    python -m rpbcast.sim.scale --only 1000x10000  # one configuration
    python -m rpbcast.sim.scale --json out.jsonl

Each configuration runs in a fresh process (so memory and allocator state
do not carry over): a balanced degree-4 tree, every node a member, 10
Poisson senders at 1,000 messages/s in total, loss 0, thesis parameters.
Prints a Markdown table with wall and CPU seconds, the run's own time
breakdown, RSS and the load average around the run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

GROWTH = [(100, 2000), (250, 2000), (500, 2000), (1000, 2000),
          (250, 1250), (250, 2500), (250, 5000), (250, 10000), (1000, 10000)]


def params(members: int, messages: int) -> dict:
    return {"topology": "tree", "nodes": members, "senders": 10, "messages": messages, "total_rate": 1000}


def _child(members, messages, extra):
    from rpbcast.sim import run_one
    p = params(members, messages)
    p.update(extra)
    r = run_one(p)
    r["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    print(json.dumps(r))


def measure(members: int, messages: int, extra: dict = None) -> dict:
    l0 = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-m", "rpbcast.sim.scale", "--child", f"{members}x{messages}",
                          "--set", json.dumps(extra or {})], check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    r["load"] = (l0, os.getloadavg()[0])
    r["n"], r["m"] = members, messages
    return r


HEADER = ("| members | messages | virtual s | events | wall s | CPU s | build | loop + data plane | engine timers "
          "| engine control | drain | results | RSS GB | load |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def row(r: dict) -> str:
    return (f"| {r['n']:,} | {r['m']:,} | {r['sim_time']:.1f} | {r['events'] / 1e6:.2f} M | {r['wall_s']:.1f} "
            f"| {r['cpu_s']:.1f} | {r['build_s']:.1f} | {r['t_loop']:.1f} | {r['t_engine_timers']:.1f} "
            f"| {r['t_engine_control']:.1f} | {r['t_drain']:.1f} | {r['results_s']:.1f} | {r['rss_mb'] / 1e3:.1f} "
            f"| {r['load'][0]:.1f}–{r['load'][1]:.1f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rpbcast.sim.scale")
    ap.add_argument("--only", action="append", default=[], metavar="MEMBERSxMESSAGES")
    ap.add_argument("--set", default="{}", help="JSON of extra run_one parameters")
    ap.add_argument("--json", default=None, help="append each result as a JSON line here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    extra = json.loads(a.set)
    if a.child:
        n, m = map(int, a.child.split("x"))
        _child(n, m, extra)
        return 0
    todo = [tuple(map(int, s.split("x"))) for s in a.only] or GROWTH
    print(HEADER)
    for n, m in todo:
        r = measure(n, m, extra)
        print(row(r), flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
