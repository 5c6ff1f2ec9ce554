"""A/B of `rpbcast stress` between two checkouts (issue 15, bounded
queueing): the same stress arguments against each build, alternating
A B A B ... in one run, each run's sent rate and latency parsed from the
report; prints every run and the medians, and B/A ratios.

    python3 bench/stress_ab.py --a ../main --b . --reps 3 -- --loggers 0 --receivers 1
    python3 bench/stress_ab.py --a ../main --b . --reps 3 \
        --case "--loggers 0 --receivers 1" --case "" --case "--loss 0.01"

With --case (repeatable) every case runs in each repetition, A then B, so
the cases see the same machine load; a Markdown table of medians ends the
output.

Each side runs with PYTHONPATH set to its checkout.  On the shared VM
compare figures of one run of this script only."""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(v, unit):
    return float(v.replace(",", "")) * UNIT[unit]


def parse(out: str) -> dict:
    r = {}
    m = re.search(r"sent\s+([\d,]+) messages at ([\d,]+) msgs/s", out)
    if m:
        r["sent"], r["rate"] = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
    m = re.search(r"received\s+([\d,]+) msgs/s", out)
    if m:
        r["recv_rate"] = int(m.group(1).replace(",", ""))
    m = re.search(r"latency\s+p50 ([\d.,]+) (us|ms|s), p99 ([\d.,]+) (us|ms|s)", out)
    if m:
        r["p50_ms"], r["p99_ms"] = _ms(m.group(1), m.group(2)), _ms(m.group(3), m.group(4))
    m = re.search(r"exactly once: (\w+)", out)
    r["exactly_once"] = bool(m and m.group(1) == "yes")
    return r


def run(tree: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "rpbcast", "stress", *args], cwd=os.path.abspath(tree), env=env,
                       capture_output=True, text=True, timeout=600)
    r = parse(p.stdout)
    r["rc"], r["wall_s"] = p.returncode, round(time.monotonic() - t0, 1)
    if "rate" not in r:
        r["error"] = (p.stdout + p.stderr)[-400:]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="checkout A (the baseline)")
    ap.add_argument("--b", required=True, help="checkout B")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--case", action="append", default=None,
                    help="stress arguments of one case (a quoted string; repeatable)")
    ap.add_argument("--b-extra", default="",
                    help="stress arguments for B only (an option A does not have, e.g. \"--flow-window 8192\")")
    ap.add_argument("--a-extra", default="",
                    help="stress arguments for A only (e.g. \"--send-window 0 --flow-window 0\" with --a . --b .: "
                         "one build, no windows against its defaults)")
    ap.add_argument("--c-extra", default=None,
                    help="a third side C: checkout B with these stress arguments (e.g. another window)")
    ap.add_argument("--swap", action="store_true",
                    help="B then A in every other repetition (a load that rises or falls during the run "
                         "does not favour one side)")
    ap.add_argument("stress", nargs=argparse.REMAINDER, help="-- then rpbcast stress arguments")
    o = ap.parse_args()
    cases = o.case if o.case is not None else [" ".join(a for a in o.stress if a != "--")]
    sides = [("A", o.a, o.a_extra), ("B", o.b, o.b_extra)]
    if o.c_extra is not None:
        sides.append(("C", o.b, o.c_extra))
    res = {c: {side: [] for side, _t, _x in sides} for c in cases}
    for k in range(o.reps):
        for c in cases:
            order = sides[::-1] if o.swap and k % 2 else sides
            for side, tree, extra in order:
                r = run(tree, c.split() + extra.split())
                r["load"] = round(os.getloadavg()[0], 1)
                res[c][side].append(r)
                print(f"rep {k} [{c}] {side}: {r}", flush=True)
    rows = []
    for c in cases:
        med = summarize(res[c])
        rows.append((c, med))
    # delivered: by the slowest receiver over the time to its last delivery
    # (what a subscriber got); sent: what the sender's publish calls took.
    # Ratios to A are given for both.
    print("\n| stress ARGS | build | sent msgs/s | delivered msgs/s | p50 | p99 | exactly once |")
    print("|---|---|---:|---:|---:|---:|---|")
    for c, med in rows:
        for side in med:
            m = med[side]
            ratio = (f" ({m['rate'] / med['A']['rate']:.2f}x)" if side != "A" and m["rate"] and med["A"]["rate"]
                     else "")
            dratio = (f" ({m['recv_rate'] / med['A']['recv_rate']:.2f}x)"
                      if side != "A" and m["recv_rate"] and med["A"]["recv_rate"] else "")
            print(f"| `{c or '(defaults)'}` | {side} | {m['rate'] or 0:,.0f}{ratio} | {m['recv_rate'] or 0:,.0f}{dratio} | "
                  f"{m['p50_ms'] or 0:.2f} ms | {m['p99_ms'] or 0:.2f} ms | {m['exactly_once']} |")


def summarize(res):
    med = {}
    for side in res:
        ok = [r for r in res[side] if "rate" in r]
        med[side] = {key: statistics.median(r[key] for r in ok if key in r) if any(key in r for r in ok) else None
                     for key in ("rate", "recv_rate", "p50_ms", "p99_ms")}
        med[side]["exactly_once"] = f"{sum(r['exactly_once'] for r in res[side])}/{len(res[side])}"
        print(f"median {side}: {med[side]}")
    for side in [x for x in med if x != "A"]:
        if med["A"]["rate"] and med[side]["rate"]:
            print(f"{side}/A: rate {med[side]['rate'] / med['A']['rate']:.2f}, "
                  + (f"delivered {med[side]['recv_rate'] / med['A']['recv_rate']:.2f}, "
                     if med[side]["recv_rate"] and med["A"]["recv_rate"] else "") +
                  f"p50 {med[side]['p50_ms'] / med['A']['p50_ms']:.3f}, "
                  f"p99 {med[side]['p99_ms'] / med['A']['p99_ms']:.3f}")
    return med


if __name__ == "__main__":
    main()
