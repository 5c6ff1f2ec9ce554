"""The thesis's comparison on the wire: rpbcast, pbcast, LBRM and SRM as
real-socket groups (`rpbcast stress --protocol P`), 1 % kernel loss, on one
host's loopback and between hosts on a bridge (--hosts), several runs of
each, the protocols interleaved run by run (root: namespaces).

    sudo python bench/protocols_wire.py --runs 3 --rate 100000 [--duration 3] [--json runs.json]
    sudo python bench/protocols_wire.py --runs 3 --rate 0        # as fast as each sender goes
    python bench/protocols_wire.py --from-json runs.json          # re-print the table

Prints a markdown table of medians over the runs: messages/s delivered by
the slowest receiver, delivered fraction (worst receiver), ids given up,
repair bytes per data byte, latency p50/p99, and how many runs passed the
exactly-once check.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

PROTOCOLS = ("rpbcast", "pbcast", "lbrm", "srm")
SETTINGS = {"loopback": [], "hosts": ["--hosts"]}


def run(protocol, setting, args):
    argv = [sys.executable, "-m", "rpbcast", "stress", "--protocol", protocol, "--receivers", str(args.receivers),
            "--loss", str(args.loss), "--duration", str(args.duration), "--rate", str(args.rate),
            "--timeout", str(args.timeout), "--json", "--quiet", *SETTINGS[setting]]
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout + args.duration + 120)
    try:
        s = json.loads(r.stdout)
    except ValueError:
        return {"error": (r.stderr or r.stdout)[-500:], "rc": r.returncode}
    s["rc"] = r.returncode
    s["wall"] = time.time() - t0
    return s


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(results):
    rows = ["| setting | protocol | loggers | msgs/s (slowest receiver) | delivered fraction | ids given up "
            "| repair B / data B | p50 | p99 | exactly once |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for setting in SETTINGS:
        for p in PROTOCOLS:
            rs = [r for r in results if r["protocol"] == p and r["setting"] == setting and "error" not in r["s"]]
            if not rs:
                continue
            s = [r["s"] for r in rs]
            # a run whose receivers never reported (hung) delivered nothing checkable
            frac = med([x.get("delivered_fraction") or 0.0 for x in s])
            p50, p99 = med([x["latency_p50"] for x in s]), med([x["latency_p99"] for x in s])
            rows.append(f"| {setting} | {p} | {s[0]['loggers']} | {med([x['recv_rate_min'] for x in s]):,.0f} "
                        f"| {frac:.4f} | {med([x.get('given_up_ids', 0) for x in s]):,.0f} "
                        f"| {med([x['repair_bytes_per_data_byte'] for x in s]):.4f} "
                        f"| {p50 / 1e6:.2f} ms | {p99 / 1e6:.1f} ms "
                        f"| {sum(1 for x in s if x['exactly_once'])}/{len(s)} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--receivers", type=int, default=2)
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--rate", type=float, default=0, help="per sender (0: as fast as it goes)")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--settings", default="loopback,hosts")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--append", action="store_true", help="add to the runs already in --json")
    ap.add_argument("--json")
    ap.add_argument("--from-json")
    args = ap.parse_args()
    if args.from_json:
        print(table(json.load(open(args.from_json))))
        return
    results = json.load(open(args.json)) if args.append else []
    first = 1 + max((r["run"] for r in results), default=-1)
    settings = args.settings.split(",")
    for k in range(first, first + args.runs):
        for setting in settings:
            for p in args.protocols.split(","):             # interleaved: the machine's load hits every protocol alike
                s = run(p, setting, args)
                results.append({"protocol": p, "setting": setting, "run": k, "s": s})
                brief = s.get("error") or (f"{s['recv_rate_min']:,.0f} msgs/s, delivered {s['delivered_fraction']}, "
                                           f"exactly once {s['exactly_once']}, rc {s['rc']}, {s['wall']:.0f} s")
                print(f"run {k} {setting} {p}: {brief}", file=sys.stderr, flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(results, f, default=str)
    print(table(results))


if __name__ == "__main__":
    main()
