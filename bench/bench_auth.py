"""MAC cost: a keyed group against an unkeyed one, same run, alternating
(root: the stress job runs in network namespaces it creates).

    python bench/bench_auth.py [--reps 5] [--duration 2] [--json out.json]
    python bench/bench_auth.py --compare encrypt ...   # MAC only ("off") vs MAC + encryption ("on")
    python bench/bench_auth.py --baseline /work/main ... # also "base": keyed, another checkout's build

With --baseline, a third configuration runs in the same reps: the "on" mode
with the stress job's processes importing that checkout (its build of
csrc/auth.c), so an older MAC is measured beside the current one under the
same load.  The engine-level one-way cost also runs keyed with OpenSSL's EVP
forced ("evp": the path a CPU without VAES/VPCLMULQDQ takes).

Throughput: 1 sender -> 1 receiver, 64 B messages at max rate, no logger
(receiver-driven flow control), the receiver's msgs/s, median of the reps
in which every message arrived exactly once.  Round trip: engine-level
seal + verify per datagram (the MAC's share of a round trip: each way one
seal at the sender and one verify at the receiver), measured on the C data
plane with the same datagrams keyed and unkeyed.  The primitive comparison
is bench/bench_auth.c.
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


def stress(duration, key_file, rate=0, encrypt=False, pythonpath=None):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = [sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", "--size", "64",
            "--receivers", "1", "--loggers", "0", "--duration", str(duration), "--rate", str(rate)]
    if key_file:
        args += ["--key-file", key_file]
    if encrypt:
        args += ["--encrypt"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env,
                       cwd=pythonpath or None)
    try:
        s = json.loads(r.stdout)
    except ValueError:
        return None
    return s


def rate_of(s):
    if not s or not s.get("exactly_once"):
        return None
    return s["recv_rate_min"]


def round_trip_ns(key_file, n=20000, encrypt=False, fast=True):
    """Per datagram: build (seal) at one engine and receive (verify) at
    another, keyed vs unkeyed: ns per one-way datagram of 16 x 64 B."""
    from rpbcast.config import Config, MemberSpec
    from rpbcast.protocol.engine import Engine
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kw = {"key_file": key_file, "encrypt": encrypt} if key_file else {}
    a = Engine(Config(node_id=1, members=specs, incarnation=1, flow_control="receivers", **kw), 0,
               mac_counter0=1)
    b = Engine(Config(node_id=2, members=specs, incarnation=1, **kw), 0, mac_counter0=2)
    node_a, node_b = a.node, b.node
    if key_file and not fast:
        node_a.set_auth_fast(False)
        node_b.set_auth_fast(False)
    payload = b"x" * 64
    t_total = 0
    dg = 0
    for r in range(n // 100):
        t0 = time.perf_counter_ns()
        for _ in range(16 * 100):
            node_a.publish(payload, now=r)
        out = node_a.datagrams()
        for _, d in out:
            node_b.rx(d, 1, r)
        t_total += time.perf_counter_ns() - t0
        dg += len(out)
        b.recv(now=r)
    return t_total / dg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--json")
    ap.add_argument("--compare", choices=["mac", "encrypt"], default="mac",
                    help="mac: unkeyed (off) vs MAC (on); encrypt: MAC only (off) vs MAC + encryption (on)")
    ap.add_argument("--no-latency", action="store_true", help="skip the 10 k msgs/s latency runs")
    ap.add_argument("--baseline", help="a checkout whose build runs as a third mode, 'base' (keyed)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    kf = os.path.join(tmp, "keys")
    with open(kf, "w") as f:
        f.write("1 " + os.urandom(16).hex() + "\n")
    enc = a.compare == "encrypt"

    def keys(mode):      # (key file, encrypt) of a mode
        if enc:
            return kf, mode == "on"
        return (kf if mode == "on" else None), False

    load0 = os.getloadavg()
    modes = ["off", "on"] + (["base"] if a.baseline else [])
    rates = {m: [] for m in modes}
    for rep in range(a.reps):
        order = modes[rep % len(modes):] + modes[:rep % len(modes)]    # rotate: no mode always first
        if rep % 2:
            order.reverse()
        for mode in order:
            k, e = keys("on" if mode == "base" else mode)
            pp = os.path.abspath(a.baseline) if mode == "base" else None
            rates[mode].append(rate_of(stress(a.duration, k, encrypt=e, pythonpath=pp)))
            print(mode, rates[mode][-1], flush=True)
    lat = {"off": [], "on": []}
    for rep in range(0 if a.no_latency else a.reps):
        for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
            k, e = keys(mode)
            s = stress(a.duration, k, rate=10000, encrypt=e)
            lat[mode].append(s["latency_p50"] if s and s.get("exactly_once") else None)
            print("latency", mode, lat[mode][-1], flush=True)
    lmed = {m: (statistics.median([x for x in v if x is not None]) if any(x is not None for x in v) else None)
            for m, v in lat.items()}
    rt = {"off": [], "on": [], "evp": []}
    for rep in range(a.reps):
        for mode in (("off", "on", "evp") if rep % 2 == 0 else ("evp", "on", "off")):
            k, e = keys("on" if mode == "evp" else mode)
            rt[mode].append(round_trip_ns(k, encrypt=e, fast=mode != "evp"))
    med = {m: statistics.median([x for x in v if x is not None]) if any(v) else None for m, v in rates.items()}
    rmed = {m: statistics.median(v) for m, v in rt.items()}
    # Each rep ran off and on back to back: the ratio within a rep is what
    # the shared machine's load drifts least over.
    pairs = [on / off for on, off in zip(rates["on"], rates["off"]) if on and off]
    base_pairs = [b / off for b, off in zip(rates.get("base", []), rates["off"]) if b and off]
    res = {"compare": a.compare, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "reps": a.reps, "duration": a.duration, "rates": rates, "rate_median": med,
           "ratio_on_off": (med["on"] / med["off"]) if med["on"] and med["off"] else None,
           "ratio_per_rep": pairs, "ratio_per_rep_median": statistics.median(pairs) if pairs else None,
           "baseline": a.baseline,
           "ratio_base_off": (med["base"] / med["off"]) if med.get("base") and med["off"] else None,
           "ratio_base_per_rep": base_pairs,
           "load_avg_start": load0, "load_avg_end": os.getloadavg(),
           "latency_p50_ns_at_10k": lat, "latency_p50_median_ns": lmed,
           "latency_p50_added_ns": (lmed["on"] - lmed["off"]) if lmed["on"] and lmed["off"] else None,
           "oneway_ns": rt, "oneway_median_ns": rmed, "oneway_added_ns": rmed["on"] - rmed["off"]}
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
