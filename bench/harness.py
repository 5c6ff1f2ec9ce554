"""Interleaved micro-benchmark runner for a noisy 2-core VM.

Each case is measured beside a baseline in the same process, alternating
(baseline, case, baseline, case, ...) so a shift in machine load hits both;
we report medians over the rounds and the ratio case / baseline.  A round
times `reps` calls and keeps the fastest (the usual way to strip scheduler
noise from a single sample).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d")}


def _best(fn, reps, prepare=None):
    best = float("inf")
    for _ in range(reps):
        if prepare is not None:
            prepare()              # untimed set-up of the next call
        t0 = time.perf_counter_ns()
        fn()
        dt = time.perf_counter_ns() - t0
        best = min(best, dt)
    return best


def compare(name, case, baseline, per_call, rounds=11, reps=5, unit="msg", prepare=None, warmup=1):
    """Time case() against baseline(); per_call = units of work per call.
    prepare(), if given, runs untimed before every call of case()."""
    for _ in range(warmup):
        if prepare is not None:
            prepare()
        case()
    baseline()                 # warm up both
    cs, bs = [], []
    for _ in range(rounds):
        bs.append(_best(baseline, reps) / per_call)
        cs.append(_best(case, reps, prepare) / per_call)
    c, b = statistics.median(cs), statistics.median(bs)
    return {"name": name, "ns_per_" + unit: round(c, 2), "baseline_ns_per_" + unit: round(b, 3),
            "ratio": round(c / b, 2), "stdev": round(statistics.pstdev(cs), 2), "rounds": rounds}


def report(results, title, out=None):
    print(f"{title}  ({machine()['cpu']}, {machine()['cores']} cores, {machine()['date']})")
    for r in results:
        unit = next(k for k in r if k.startswith("ns_per_"))
        print(f"  {r['name']:<44} {r[unit]:>9.2f} ns/{unit[7:]}   ratio to baseline {r['ratio']:>7.2f}"
              f"   (stdev {r['stdev']})")
    if out:
        with open(out, "w") as f:
            json.dump({"machine": machine(), "argv": sys.argv, "results": results}, f, indent=1)
