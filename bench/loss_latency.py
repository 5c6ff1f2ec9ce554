"""Latency under loss (issue 15): the round trip (ping-pong through the
public API) and one-way latency at 100 k msgs/s, lossless and at kernel
loss, in the same run, with the exactly-once check of every run.

    sudo python3 bench/loss_latency.py [--reps 5] [--loss 0.01] [--count 3000]
                                       [--hosts] [--baseline ../other-checkout] [--json out.json]
                                       [--setup default|low-latency|both]

Every run is in network namespaces of its own; loss is iptables
`statistic` on INPUT.  On loopback (the default) a GSO super-datagram is
dropped whole; --hosts puts each process on its own host of a veth LAN
(per-packet loss, like a real LAN).

    rtt       bench/pingpong.py ping COUNT 64 [--loss P] [--hosts]: p50, p99,
              p99.9 of the round trip; exact = every echo came once, none
              timed out
    one-way   rpbcast stress --rate 100000 --receivers 1 --loggers 0
              --duration 3 [--loss P] [--hosts]: the receiver's latency
              percentiles and the stress run's exactly-once check

--baseline DIR runs the same scripts against the library of another
checkout (PYTHONPATH=DIR), alternating with this one in every rep, so the
ratios compare trees under the same load.  Goals: round trip p99 <= 1 ms
and one-way p99 <= 2 ms at 1 % loss.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import machine  # noqa: E402


def env_for(tree):
    return dict(os.environ, PYTHONPATH=tree)


# --setup low-latency: docs/api.md's low-latency setup on both ends -- the
# application thread spins in receive() and is pinned to a CPU of its own
# (the ping's the first, the pong's the last); the ping-pong also freezes the
# start-up objects out of the collector (--gc-freeze)
SETUPS = {"default": ([], []),
          "low-latency": (["--receive-mode", "spin", "--pin", "--gc-freeze"], ["--receive-mode", "spin", "--pin"])}


def rtt(tree, loss, count, hosts, setup="default"):
    argv = [sys.executable, os.path.join(HERE, "pingpong.py"), "ping", str(count), "64", "--timeout", "0.5"]
    argv += SETUPS[setup][0]
    # always in a namespace of its own: lossless is a loss rule that never fires, the same path
    argv += ["--loss", repr(max(loss, 1e-12))]
    if hosts:
        argv.append("--hosts")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env_for(tree))
    out = r.stdout
    res = re.search(r"rtt_p50_us=([\d.]+) rtt_p99_us=([\d.]+)", out)
    tail = re.search(r"rtt_p999_us=([\d.]+)", out)
    exact = re.search(r"EXACT (\w+)", out)
    if not res:
        return {"ok": False, "error": (r.stderr or out)[-400:]}
    return {"p50": float(res.group(1)), "p99": float(res.group(2)),
            "p999": float(tail.group(1)) if tail else None,
            "exact": bool(exact and exact.group(1) == "yes"), "ok": True}


def oneway(tree, loss, seconds, hosts, setup="default"):
    argv = [sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", "--rate", "100000",
            "--receivers", "1", "--loggers", "0", "--duration", str(seconds)]
    argv += SETUPS[setup][1]
    if loss:
        argv += ["--loss", str(loss)]
    if hosts:
        argv.append("--hosts")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env_for(tree), cwd=tree)
    try:
        s = json.loads(r.stdout)
    except ValueError:
        return {"ok": False, "error": (r.stderr or r.stdout)[-400:]}
    us = 1e3
    return {"p50": s["latency_p50"] / us, "p99": s["latency_p99"] / us, "p999": s["latency_p999"] / us,
            "exact": bool(s["exactly_once"]), "ok": True}


def med(runs, k):
    xs = [r[k] for r in runs if r.get("ok") and r.get(k) is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--count", type=int, default=3000, help="round trips per ping-pong run")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of sending per one-way run")
    ap.add_argument("--hosts", action="store_true", help="two hosts on a veth LAN (per-packet loss)")
    ap.add_argument("--baseline", help="another checkout, measured alternately (its PYTHONPATH)")
    ap.add_argument("--only", choices=["rtt", "oneway"], help="one of the two measurements")
    ap.add_argument("--setup", choices=[*SETUPS, "both"], default="default",
                    help="the receivers' set-up (low-latency: spinning, pinned; both: each in turn, same run)")
    ap.add_argument("--json")
    a = ap.parse_args()
    trees = {"this": ROOT}
    if a.baseline:
        trees["baseline"] = os.path.abspath(a.baseline)
    setups = list(SETUPS) if a.setup == "both" else [a.setup]
    kinds = {"rtt": lambda t, p, su: rtt(t, p, a.count, a.hosts, su),
             "oneway": lambda t, p, su: oneway(t, p, a.seconds, a.hosts, su)}
    if a.only:
        kinds = {a.only: kinds[a.only]}
    runs = {}
    for rep in range(a.reps):
        for kind, fn in kinds.items():
            for su in setups:
                for loss in (0.0, a.loss):
                    for name, tree in trees.items():         # alternating, same load
                        res = fn(tree, loss, su)
                        runs.setdefault((kind, su, loss, name), []).append(res)
                        print(f"rep {rep} {kind} {su} loss {loss:.1%} {name}: {res}", file=sys.stderr, flush=True)
    rows = []
    for (kind, su, loss, name), rs in runs.items():
        rows.append({"kind": kind, "setup": su, "loss": loss, "tree": name, "p50_us": med(rs, "p50"),
                     "p99_us": med(rs, "p99"), "p999_us": med(rs, "p999"),
                     "exact": sum(1 for r in rs if r.get("ok") and r["exact"]), "runs": len(rs), "all": rs})
    where = "veth LAN (per-packet loss)" if a.hosts else "loopback (GSO bursts dropped whole)"
    print(f"{where}, medians of {a.reps} reps")
    print(f"{'kind':<7} {'setup':<11} {'loss':>5} {'tree':<8} {'p50 us':>9} {'p99 us':>9} {'p99.9 us':>9}  exact")
    for r in rows:
        f = lambda v: f"{v:9.0f}" if v is not None else "        -"  # noqa: E731
        print(f"{r['kind']:<7} {r['setup']:<11} {r['loss']:>5.1%} {r['tree']:<8} {f(r['p50_us'])} {f(r['p99_us'])} "
              f"{f(r['p999_us'])}  {r['exact']}/{r['runs']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"machine": machine(), "where": where, "command": "python3 " + " ".join(sys.argv),
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
