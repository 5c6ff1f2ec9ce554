"""Where a flow window's rate goes (issue 15, the maximum-rate goal): runs
`rpbcast stress --json` with each configuration in turn (alternating, same
run), and for every worker thread samples /proc while it runs -- CPU time,
time *runnable but waiting for a core* (schedstat's run-queue wait: a
thread descheduled with work to do), context switches -- then prints,
per configuration, the medians of: rates, p50/p99, the receiver's
datagrams per receive call and messages per take, the sender's waits for
room, and each role's application and loop threads' CPU and run-queue
wait.

    python3 bench/window_breakdown.py --reps 3 --case "--receivers 1 --loggers 0" \\
        --config none="" --config w8192="--flow-window 8192"

A configuration named NAME@TREE runs the build in TREE (--config
main@../main="" --config this@.="--flow-window 8192"): A/B in one run.
receiver_ns_per_msg is the receiving process's CPU (application + loop
thread) per message it delivered -- what decides how fast a receiver with
one core of its own (`--pin`) can go.

A worker's main thread is its application (publish, take); of its other
threads the one with the most CPU is the node's loop thread.
app_threads_same_cpu: of the samples (every 50 ms), the fraction in which
the sender's application thread last ran on the CPU a receiver's did --
two threads that should run side by side taking turns on one core."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in _children(p):
            out.append(c)
            todo.append(c)
    return out


def _role(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    for a in argv:
        if a.startswith(b"{"):
            try:
                return json.loads(a).get("role")
            except ValueError:
                return None
    return None


def _cpu_of(pid, tid):
    """The CPU the thread last ran on (/proc stat field 39)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def _thread(pid, tid):
    """(cpu ns, run-queue wait ns, voluntary, involuntary switches) or None."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            run_ns, wait_ns, _ = (int(x) for x in f.read().split())
        vol = invol = 0
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol = int(line.split()[1])
        return run_ns, wait_ns, vol, invol
    except (OSError, ValueError):
        return None


def run_once(args, tree):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    p = subprocess.Popen([sys.executable, "-m", "rpbcast", "stress", "--json", *args], cwd=os.path.abspath(tree),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = {}           # (pid, tid) -> (role, main?, sample)
    roles = {}
    together = apart = 0    # samples with the sender's and a receiver's application thread on one CPU / not
    while p.poll() is None:
        apps = {}
        for c in _descendants(p.pid):
            if roles.get(c) in ("sender", "receiver"):
                apps.setdefault(roles[c], []).append(_cpu_of(c, c))
            if c not in roles:
                roles[c] = _role(c)
            if not roles[c]:
                continue
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{c}/task")]
            except OSError:
                continue
            for t in tids:
                s = _thread(c, t)
                if s:
                    last[(c, t)] = (roles[c], t == c, s)
        for tx in apps.get("sender", []):
            for rx in apps.get("receiver", []):
                if tx is not None and rx is not None:
                    together += tx == rx
                    apart += tx != rx
        time.sleep(0.05)
    out, err = p.communicate()
    try:
        summary = json.loads(out)
    except ValueError:
        return {"error": (out + err)[-400:]}
    threads = {}        # role -> {"app": sample, "loop": sample}
    by_pid = {}
    for (pid, _tid), (role, main, s) in last.items():
        by_pid.setdefault(pid, (role, []))[1].append((main, s))
    for pid, (role, ts) in by_pid.items():
        app = [s for m, s in ts if m]
        other = sorted((s for m, s in ts if not m), key=lambda s: -s[0])
        threads.setdefault(role, []).append({"app": app[0] if app else None, "loop": other[0] if other else None})
    return {"summary": summary, "threads": threads,
            "same_cpu": together / (together + apart) if together + apart else None}


def row(r):
    s = r["summary"]
    wc = s.get("window_counters", {})
    rx = [v for v in wc.values() if v["role"] == "receiver"]
    tx = [v for v in wc.values() if v["role"] == "sender"]
    d = {"sent_rate": s["send_rate"], "delivered": s["recv_rate_min"], "p50_ms": s["latency_p50"] / 1e6,
         "p99_ms": s["latency_p99"] / 1e6, "exactly_once": s["exactly_once"]}
    if rx:
        d["dgrams_per_rx_call"] = min(v["dgrams_per_rx_call"] or 0 for v in rx)
        d["msgs_per_take"] = min(v["msgs_per_take"] or 0 for v in rx)
        d["takes"] = max(v["takes"] for v in rx)
    d["app_threads_same_cpu"] = r["same_cpu"]
    # the receiving process's cost per message: its application and loop
    # threads' CPU over the messages it delivered (the slowest receiver's)
    rx_cpu = [(t["app"][0] if t["app"] else 0) + (t["loop"][0] if t["loop"] else 0)
              for t in r["threads"].get("receiver", [])]
    if rx and rx_cpu and min(v["delivered"] for v in rx):
        d["receiver_ns_per_msg"] = max(rx_cpu) / min(v["delivered"] for v in rx)
    if tx:
        d["window_waits"] = tx[0]["window_waits"]
        d["window_rx"] = tx[0]["window_rx"]
        # of the waits, those that found room while spinning (--publish-spin-us), and the sleeps
        d["window_spun"] = tx[0].get("window_spun", 0)
        d["window_sleeps"] = tx[0].get("window_sleeps", 0)
    for role in ("sender", "receiver"):
        for which in ("app", "loop"):
            xs = [t[which] for t in r["threads"].get(role, []) if t[which]]
            if xs:
                d[f"{role}_{which}_cpu_s"] = max(x[0] for x in xs) / 1e9
                d[f"{role}_{which}_rq_wait_s"] = max(x[1] for x in xs) / 1e9
                d[f"{role}_{which}_invol"] = max(x[3] for x in xs)
                d[f"{role}_{which}_vol"] = max(x[2] for x in xs)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=".")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--case", action="append", default=None, help="stress arguments of one case (repeatable)")
    ap.add_argument("--config", action="append", required=True,
                    help="NAME=\"stress arguments\" (repeatable; alternated, reversed every other repetition)")
    o = ap.parse_args()
    cases = o.case or [""]
    configs = [c.split("=", 1) for c in o.config]
    # NAME@TREE=ARGS: that configuration runs another build (same-run A/B)
    trees = {n: (n.split("@", 1)[1] if "@" in n else o.tree) for n, _ in configs}
    res = {(c, n): [] for c in cases for n, _ in configs}
    for k in range(o.reps):
        for c in cases:
            for name, extra in (configs if k % 2 == 0 else configs[::-1]):
                r = run_once(c.split() + extra.split(), trees[name])
                if "error" in r:
                    print(f"rep {k} [{c}] {name}: ERROR {r['error']}", flush=True)
                    continue
                d = row(r)
                d["load"] = round(os.getloadavg()[0], 1)
                res[(c, name)].append(d)
                print(f"rep {k} [{c}] {name}: " + json.dumps({x: round(v, 3) if isinstance(v, float) else v
                                                             for x, v in d.items()}), flush=True)
    print()
    for c in cases:
        print(f"## case `{c or '(defaults)'}`")
        base = None
        for name, _ in configs:
            rs = res[(c, name)]
            if not rs:
                continue
            keys = [x for x in rs[0] if x != "exactly_once"]
            med = {x: statistics.median(v) for x in keys
                   if (v := [r[x] for r in rs if r.get(x) is not None])}
            if base is None:
                base = med
            ratio = med["delivered"] / base["delivered"] if base["delivered"] else 0
            print(f"{name}: delivered x{ratio:.2f}, exactly once {sum(r['exactly_once'] for r in rs)}/{len(rs)}, "
                  + json.dumps({x: round(v, 3) for x, v in med.items()}))
    print("\n(machine load average during the runs: "
          f"{min(r['load'] for rs in res.values() for r in rs)}-{max(r['load'] for rs in res.values() for r in rs)})")


if __name__ == "__main__":
    main()
