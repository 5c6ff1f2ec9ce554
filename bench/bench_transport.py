"""Line rate and latency on real sockets, beside the raw ceilings measured in
the same run (root: runs in network namespaces it creates).

    sudo python bench/bench_transport.py [--reps 3] [--json out.json] [--quick]

Throughput: 1 sender -> 1 and -> 2 receivers, 64 B and 1 KB messages, 0%
and 1% kernel loss (iptables statistic), rpbcast with no logger (peers-only
repair, receiver-driven flow control: the sender never outruns the slowest
receiver's reports) and, for 64 B, with one logger (the sender waits for
the logger's acknowledgments); reported as the slowest receiver's msgs/s,
median over the reps in which every message was delivered exactly once.  Beside
them: a raw C sendmmsg/recvmmsg blaster and a UDP GSO/GRO blaster, no
protocol, same sizes, same run.  Latency: one-way p50/p99/p99.9 at 10 k and
100 k msgs/s, lossless and at 1% loss.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import machine  # noqa: E402

from rpbcast.tools import netns  # noqa: E402


def build_blaster(tmp):
    exe = os.path.join(tmp, "blaster")
    subprocess.run(["gcc", "-O2", "-o", exe, os.path.join(HERE, "blaster.c")], check=True)
    return exe


def blaster(exe, size, count, nrecv, gso):
    """Raw ceiling: msgs/s of the slowest receiver (unique datagrams)."""
    with netns.namespace() as ns:
        grp = "239.255.77.9:7700"
        recvs = [subprocess.Popen(netns.exec_argv(ns, [exe, "recv", grp, str(size), str(count), "1" if gso else "0"]),
                                  stdout=subprocess.PIPE, text=True) for _ in range(nrecv)]
        for r in recvs:
            r.stdout.readline()                      # {"ready": true}
        time.sleep(0.2)
        # GSO: up to 64 segments, and the whole super-datagram within 64 KiB
        segs = min(64, 65000 // (size + 64)) if gso else 1
        subprocess.run(netns.exec_argv(ns, [exe, "send", grp, str(size), str(count), str(segs)]),
                       check=True, capture_output=True)
        rates = []
        for r in recvs:
            out, _ = r.communicate(timeout=30)
            rates.append(json.loads(out.strip().splitlines()[-1])["rate"])
        return min(rates)


def stress(*args):
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", *args],
                       capture_output=True, text=True, timeout=300)
    s = json.loads(r.stdout)
    return s


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="64 B, 1 receiver only")
    ap.add_argument("--sizes", default="64,1024", help="payload sizes to measure (comma-separated)")
    ap.add_argument("--recvs", default="1,2", help="receiver counts to measure (comma-separated)")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--no-throughput", action="store_true")
    a = ap.parse_args()
    if not netns.available():
        sys.exit("bench_transport needs root (network namespaces)")
    tmp = tempfile.mkdtemp()
    exe = build_blaster(tmp)
    sizes = [64] if a.quick else [int(x) for x in a.sizes.split(",")]
    recvs = [1] if a.quick else [int(x) for x in a.recvs.split(",")]
    if a.no_throughput:
        sizes = []
    results = {"machine": machine(), "throughput": [], "latency": []}
    for size in sizes:
        for nrecv in recvs:
            count = 3_000_000 if size == 64 else 600_000
            plain = median([blaster(exe, size, count // 4, nrecv, False) for _ in range(a.reps)])
            gso = median([blaster(exe, size, count, nrecv, True) for _ in range(a.reps)])
            for loggers in ([0, 1] if size == 64 else [0]):
                for loss in (0.0, 0.01):
                    runs = [stress("--size", str(size), "--receivers", str(nrecv), "--loggers", str(loggers),
                                   "--duration", str(a.duration), "--loss", str(loss)) for _ in range(a.reps)]
                    ok = sum(1 for s in runs if s["exactly_once"])
                    rate = median([s["recv_rate_min"] for s in runs if s["exactly_once"]])
                    row = {"size": size, "receivers": nrecv, "loggers": loggers, "loss": loss,
                           "flow_control": runs[0].get("flow_control"),
                           "rpbcast_msgs_s": rate, "all_delivered": f"{ok}/{len(runs)}",
                           "mb_s": rate * size / 1e6 if rate else None,
                           "raw_sendmmsg_msgs_s": plain, "raw_gso_gro_msgs_s": gso,
                           "ratio_to_gso": rate / gso if rate and gso else None,
                           "ratio_to_sendmmsg": rate / plain if rate and plain else None,
                           "repairs": median([s["repairs_peer"] + s["repairs_logger"] for s in runs]),
                           "gaps": median([s["gaps"] for s in runs])}
                    results["throughput"].append(row)
                    print(json.dumps(row), flush=True)
    for rate in (() if a.no_latency else (10_000, 100_000)):
        for loss in (0.0, 0.01):
            runs = [stress("--rate", str(rate), "--receivers", "1", "--loggers", "0", "--duration", str(a.duration),
                           "--loss", str(loss)) for _ in range(a.reps)]
            row = {"rate": rate, "loss": loss, "p50_us": median([s["latency_p50"] for s in runs]) / 1e3,
                   "p99_us": median([s["latency_p99"] for s in runs]) / 1e3,
                   "p999_us": median([s["latency_p999"] for s in runs]) / 1e3,
                   "all_delivered": f"{sum(1 for s in runs if s['exactly_once'])}/{len(runs)}"}
            results["latency"].append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
