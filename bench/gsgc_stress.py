"""GSGC on real sockets: buffers over time in long stress runs with a
receiver killed mid-run (root: each run in its own network namespace).

    sudo python bench/gsgc_stress.py --out docs/figures/gsgc-stress.png [--json runs.json]
    python bench/gsgc_stress.py --from-json runs.json --out plot.png      # re-plot

Two runs of `rpbcast stress --gsgc --receivers 2 --loggers 1 --kill-receiver
T --no-restart`: one paced (500 k msgs/s for 30 s, killed at 10 s), one as
fast as the sender goes (60 s, killed at 20 s).  Plots each node's stored
messages (store entries, sampled 4 times a second) against time, with the
kill marked, and prints time-to-stable, failure detection and peaks.
"""
import argparse
import json
import subprocess
import sys

RUNS = {
    "paced 500 k msgs/s": ["--rate", "500000", "--duration", "30", "--kill-receiver", "10"],
    "as fast as possible": ["--duration", "60", "--kill-receiver", "20"],
}


def run(extra):
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--gsgc", "--receivers", "2", "--loggers", "1",
                        "--no-restart", "--json", "--quiet", *extra], capture_output=True, text=True, timeout=900)
    return json.loads(r.stdout)


def describe(name, s):
    print(f"{name}: exactly once {s['exactly_once']}, {s['sent']:,} sent at {s['send_rate']:,.0f}/s, "
          f"slowest receiver {s['recv_rate_min']:,.0f}/s, latency p50 {s['latency_p50'] / 1e6:.2f} ms "
          f"p99 {s['latency_p99'] / 1e6:.1f} ms, killed at {s['kill_at_s']} s")
    for i, g in sorted(s["gsgc"].items()):
        t = g["time_to_stable"]
        print(f"  node {i}: {g['rounds']} rounds, K {g['K']} steps, time-to-stable p50 {t['p50'] * 1e3:.0f} ms "
              f"p99 {t['p99'] * 1e3:.0f} ms max {t['max'] * 1e3:.0f} ms ({t['count']} samples), failed {g['failed']}")
    for i, p in sorted(s["buffer_peaks"].items()):
        print(f"  node {i}: peak {p['store_entries']:,} stored ({p['store_bytes'] / 2**20:.0f} MiB), "
              f"gossip buffer peak {p['gossip_entries']:,}; at the end {s['buffer_end'][i]['store_entries']:,}")


def plot(runs, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 3.8))
    for ax, (name, s) in zip(axes, runs.items()):
        roles = {}
        for i in s["buffer_series"]:
            roles[i] = "sender" if int(i) == 1 else ("killed receiver" if int(i) in s["dead_receivers"] else "receiver")
        for i, pts in sorted(s["buffer_series"].items()):
            t = [p[0] for p in pts]
            n = [p[1] / 1e3 for p in pts]
            ax.plot(t, n, label=f"node {i} ({roles[i]})", lw=1.2)
        if s.get("kill_at_s"):
            ax.axvline(s["kill_at_s"], color="k", ls=":", lw=1)
            ax.text(s["kill_at_s"], ax.get_ylim()[1] * 0.95, " receiver killed", fontsize=8, va="top")
        tts = [g["time_to_stable"]["p50"] for g in s["gsgc"].values() if g]
        ax.set_title(f"{name}: {s['send_rate'] / 1e6:.2f} M msgs/s sent,\n"
                     f"time-to-stable p50 {1e3 * sorted(tts)[len(tts) // 2]:.0f} ms", fontsize=9)
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("stored messages (thousands)")
        ax.legend(fontsize=7)
    fig.suptitle("rpbcast stress --gsgc: 1 sender, 2 receivers, 1 logger; one receiver SIGKILLed, not restarted",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--json", help="save the runs' summaries here")
    ap.add_argument("--from-json", help="re-plot saved summaries instead of running")
    a = ap.parse_args()
    if a.from_json:
        runs = json.load(open(a.from_json))
    else:
        runs = {name: run(extra) for name, extra in RUNS.items()}
        if a.json:
            with open(a.json, "w") as f:
                json.dump(runs, f)
    for name, s in runs.items():
        describe(name, s)
    plot(runs, a.out)


if __name__ == "__main__":
    main()
