"""MAC cost: a keyed group against an unkeyed one, same run, alternating
(root: the stress job runs in network namespaces it creates).

    python bench/bench_auth.py [--reps 5] [--duration 2] [--impls ipsec-mb,openssl] [--json out.json]
    python bench/bench_auth.py --compare encrypt ...   # MAC only ("off") vs MAC + encryption ("on")
    python bench/bench_auth.py --baseline ../main ... # also "base": keyed, another checkout's build
    python bench/bench_auth.py --rtt [--impls ipsec-mb,openssl] [--blocks 20] [--per-block 200]
    python bench/bench_auth.py --cpu [--impls ...] [--baseline ../main] [--reps 5] [--n 400000]

--impls: the MAC engines measured keyed (Config.mac_impl: ipsec-mb,
openssl, auto), each a mode of its own beside "off" (unkeyed) in
every rep; default: the engine "auto" picks here ("on").

--cpu measures what a loaded machine can resolve: the CPU time (user +
system) per delivered 64 B message of one process holding a sender and a
receiver on real sockets (namespace, multicast on lo), unkeyed and keyed
with each engine, and keyed on the baseline's build; a fresh process per
run, modes rotating.  On a CPU-bound machine the line rate scales as its
inverse: off/<engine> is the predicted keyed/unkeyed line-rate ratio.

With --baseline, a third configuration runs in the same reps: the "on" mode
with the stress job's processes importing that checkout (its build of
csrc/auth.c), so an older MAC is measured beside the current one under the
same load.  The engine-level one-way cost runs unkeyed and keyed with each
engine.

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


def stress(duration, key_file, rate=0, encrypt=False, pythonpath=None, impl="auto"):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = [sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", "--size", "64",
            "--receivers", "1", "--loggers", "0", "--duration", str(duration), "--rate", str(rate)]
    if key_file:
        args += ["--key-file", key_file]
    if encrypt:
        args += ["--encrypt"]
    if key_file and impl != "auto":
        args += ["--mac-impl", impl]
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env,
                           cwd=pythonpath or None)
    except subprocess.TimeoutExpired:
        return None         # a run that never finished (seen once at load 20): no rate
    try:
        s = json.loads(r.stdout)
    except ValueError:
        return None
    return s


def rate_of(s):
    if not s or not s.get("exactly_once"):
        return None
    return s["recv_rate_min"]


def round_trip_ns(key_file, n=20000, encrypt=False, impl="auto"):
    """Per datagram, the data plane's CPU time: 16 x 64 B published as a
    batch, the datagram built (sealed) at one node, received (verified) and
    delivered at another; keyed vs unkeyed.  Thread CPU time, not wall
    time: on a shared machine the wall clock counts other tenants' turns."""
    import numpy as np
    from rpbcast.config import Config, MemberSpec
    from rpbcast.protocol.engine import Engine
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kw = {"key_file": key_file, "encrypt": encrypt, "mac_impl": impl} if key_file else {}
    a = Engine(Config(node_id=1, members=specs, incarnation=1, flow_control="receivers", **kw), 0,
               mac_counter0=1)
    b = Engine(Config(node_id=2, members=specs, incarnation=1, **kw), 0, mac_counter0=2)
    node_a, node_b = a.node, b.node
    batch = 16 * 100
    payloads = np.frombuffer(b"x" * 64 * batch, dtype=np.uint8)
    lens = np.full(batch, 64, dtype=np.uint32)
    rbuf = np.zeros(64 * batch, dtype=np.uint8)
    t_total = 0
    dg = 0
    for r in range(n // 100):
        t0 = time.thread_time_ns()
        node_a.publish_batch(payloads, lens, now=r)
        out = node_a.datagrams()
        t_total += time.thread_time_ns() - t0
        joined = np.frombuffer(b"".join(d for _, d in out), dtype=np.uint8)
        dl = np.array([len(d) for _, d in out], dtype=np.uint32)
        offs = np.zeros(len(out), dtype=np.uint32)
        offs[1:] = np.cumsum(dl)[:-1]
        t0 = time.thread_time_ns()
        node_b.rx_batch(joined, offs, dl, np.ones(len(out), dtype=np.uint64), r)
        node_b.recv_batch(batch, rbuf, now=r)
        t_total += time.thread_time_ns() - t0
        dg += len(out)
        b.recv(now=r)
    return t_total / dg


def cpu_one(mode, key_file, n):
    """One process, two nodes on real sockets in a namespace of its own:
    publish n x 64 B (256 a call) and receive them all; the process's CPU
    time (user + system: both nodes' threads and the kernel's work for
    them) per delivered message.  mode: off (unkeyed), on (keyed, the
    default engine) or an engine's name (Config.mac_impl)."""
    import socket
    from rpbcast import Config, MemberSpec
    from rpbcast.api import Node
    from rpbcast.tools import netns

    def free_port():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        return p

    with netns.namespace() as ns, netns.entered(ns):
        ports = {i: free_port() for i in (1, 2)}
        gport = free_port()
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in (1, 2)]
        nodes = {i: Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs,
                                group_addr=f"239.255.93.1:{gport}", store_entries=1 << 18,
                                key_file=key_file if mode != "off" else None,
                                mac_impl="auto" if mode in ("off", "on") else mode)) for i in (1, 2)}
        payload, lens = b"x" * 64 * 256, [64] * 256

        def pump(count):
            sent = got = 0
            end = time.time() + 60
            while got < count and time.time() < end:
                if sent < count:
                    try:
                        sent += nodes[1].publish_batch(payload, lens)
                    except BlockingIOError:
                        pass
                got += nodes[2].recv_batch(4096).count
            return got

        pump(50000)                                     # warm up: stores, sockets, caches
        c0, w0 = time.process_time(), time.perf_counter()
        got = pump(n)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        for x in nodes.values():
            x.close()
    return {"mode": mode, "got": got, "cpu_ns_per_msg": cpu * 1e9 / max(1, got),
            "wall_msgs_per_s": got / wall}


def rtt_compare(modes, key_file, blocks, per_block):
    """--rtt: the round trip through the public API on real sockets, one
    pair of nodes per mode (off = unkeyed, or a MAC engine), all in one
    namespace and one process: ping (node 1 publishes 64 B), pong (node 2
    receives it and publishes it back), node 1 receives the echo.  The
    modes take turns in blocks of per_block round trips, so a load change
    on a shared machine hits them alike; per mode the median round trip and,
    per block, the difference of its median to the unkeyed block's."""
    import socket
    from rpbcast import Config, MemberSpec
    from rpbcast.api import Node
    from rpbcast.tools import netns

    def free_port():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        return p

    samples = {m: [] for m in modes}
    block_med = {m: [] for m in modes}
    lost = {m: 0 for m in modes}
    with netns.namespace() as ns, netns.entered(ns):
        pairs = {}
        for g, mode in enumerate(modes):
            ports = {i: free_port() for i in (1, 2)}
            specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in (1, 2)]
            gport = free_port()
            pairs[mode] = [Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs,
                                       group_addr=f"239.255.94.{g + 1}:{gport}",
                                       key_file=key_file if mode != "off" else None,
                                       mac_impl="auto" if mode in ("off", "on") else mode))
                           for i in (1, 2)]
        engines = {m: x[0].stats().get("mac_impl") for m, x in pairs.items()}
        msg = b"p" * 64
        for b in range(blocks + 1):                     # block 0: warm-up, not kept
            order = modes[b % len(modes):] + modes[:b % len(modes)]
            for mode in order:
                ping, pong = pairs[mode]
                got = []
                for _ in range(per_block):
                    t0 = time.perf_counter_ns()
                    ping.publish(msg)
                    m = pong.receive(1.0)
                    if m is not None:
                        pong.publish(bytes(m.payload))
                        m = ping.receive(1.0)
                    if m is None:
                        lost[mode] += 1
                        continue
                    got.append(time.perf_counter_ns() - t0)
                if b and got:
                    samples[mode] += got
                    block_med[mode].append(statistics.median(got))
        for x in pairs.values():
            for node in x:
                node.close()
    med = {m: statistics.median(v) / 1e3 if v else None for m, v in samples.items()}
    paired = {m: [(a - o) / 1e3 for a, o in zip(block_med[m], block_med["off"])] for m in modes if m != "off"}
    return {"rtt_median_us": med, "lost": lost, "blocks": blocks, "per_block": per_block,
            "added_us_paired_median": {m: statistics.median(v) if v else None for m, v in paired.items()},
            "added_us_per_block": paired, "engines": engines}


def cpu_compare(a, kf):
    """--cpu: cpu_one in a fresh process per run, modes rotating per rep."""
    modes = ["off"] + a.impls + (["base"] if a.baseline else [])
    res = {m: [] for m in modes}
    load0 = os.getloadavg()
    for rep in range(a.reps):
        order = modes[rep % len(modes):] + modes[:rep % len(modes)]
        if rep % 2:
            order.reverse()
        for mode in order:
            env = dict(os.environ)
            if mode == "base":
                env["PYTHONPATH"] = os.path.abspath(a.baseline)
            try:
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--cpu-one",
                                    "on" if mode == "base" else mode, "--key-file", kf, "--n", str(a.n)],
                                   capture_output=True, text=True, timeout=300, env=env)
                v = json.loads(r.stdout.strip().splitlines()[-1])
                res[mode].append(v["cpu_ns_per_msg"] if v["got"] >= a.n else None)
            except (ValueError, IndexError, KeyError, subprocess.TimeoutExpired):
                res[mode].append(None)
            print(mode, res[mode][-1], flush=True)
    med = {m: statistics.median([x for x in v if x]) if any(v) else None for m, v in res.items()}
    # line rate when CPU-bound scales as 1 / CPU per message: unkeyed / keyed
    out = {"cpu_ns_per_msg": res, "median": med, "load_avg_start": load0, "load_avg_end": os.getloadavg(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
           "predicted_rate_ratio": {m: med["off"] / med[m] for m in modes if med.get(m) and med.get("off")},
           "per_rep_ratio": {m: [o / x for o, x in zip(res["off"], res[m]) if o and x] for m in modes}}
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--json")
    ap.add_argument("--compare", choices=["mac", "encrypt"], default="mac",
                    help="mac: unkeyed (off) vs MAC (on); encrypt: MAC only (off) vs MAC + encryption (on)")
    ap.add_argument("--no-latency", action="store_true", help="skip the 10 k msgs/s latency runs")
    ap.add_argument("--baseline", help="a checkout whose build runs as a third mode, 'base' (keyed)")
    ap.add_argument("--cpu", action="store_true",
                    help="CPU time per message (one process, two nodes) instead of the stress job's rate")
    ap.add_argument("--cpu-one", choices=["off", "on", "auto", "ipsec-mb", "openssl"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--impls", default="on",
                    help="comma-separated MAC engines measured keyed (Config.mac_impl), each a mode")
    ap.add_argument("--key-file", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=400000, help="--cpu: messages per run")
    ap.add_argument("--rtt", action="store_true",
                    help="only the round trip through the public API: a node pair per mode, blocks alternating")
    ap.add_argument("--blocks", type=int, default=20, help="--rtt: blocks per mode")
    ap.add_argument("--per-block", type=int, default=200, help="--rtt: round trips per block")
    a = ap.parse_args()
    a.impls = [x for x in a.impls.split(",") if x]
    if a.cpu_one:
        print(json.dumps(cpu_one(a.cpu_one, a.key_file, a.n)))
        return
    tmp = tempfile.mkdtemp()
    kf = os.path.join(tmp, "keys")
    with open(kf, "w") as f:
        f.write("1 " + os.urandom(16).hex() + "\n")
    enc = a.compare == "encrypt"
    if a.cpu:
        return cpu_compare(a, kf)
    if a.rtt:
        load0 = os.getloadavg()
        res = rtt_compare(["off"] + a.impls, kf, a.blocks, a.per_block)
        res.update({"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "load_avg_start": load0, "load_avg_end": os.getloadavg()})
        print(json.dumps(res, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return

    def keys(mode):      # (key file, encrypt, engine) of a mode
        impl = "auto" if mode in ("off", "on", "base") else mode
        if enc:
            return kf, mode != "off", impl
        return (kf if mode != "off" else None), False, impl

    load0 = os.getloadavg()
    modes = ["off"] + a.impls + (["base"] if a.baseline else [])
    rates = {m: [] for m in modes}
    for rep in range(a.reps):
        order = modes[rep % len(modes):] + modes[:rep % len(modes)]    # rotate: no mode always first
        if rep % 2:
            order.reverse()
        for mode in order:
            k, e, impl = keys(mode)
            pp = os.path.abspath(a.baseline) if mode == "base" else None
            rates[mode].append(rate_of(stress(a.duration, k, encrypt=e, pythonpath=pp, impl=impl)))
            print(mode, rates[mode][-1], flush=True)
    lmodes = ["off"] + a.impls
    lat = {m: [] for m in lmodes}
    for rep in range(0 if a.no_latency else a.reps):
        for mode in (lmodes if rep % 2 == 0 else lmodes[::-1]):
            k, e, impl = keys(mode)
            s = stress(a.duration, k, rate=10000, encrypt=e, impl=impl)
            lat[mode].append(s["latency_p50"] if s and s.get("exactly_once") else None)
            print("latency", mode, lat[mode][-1], flush=True)
    lmed = {m: (statistics.median([x for x in v if x is not None]) if any(x is not None for x in v) else None)
            for m, v in lat.items()}
    rt = {m: [] for m in lmodes}
    for rep in range(a.reps):
        for mode in (lmodes if rep % 2 == 0 else lmodes[::-1]):
            k, e, impl = keys(mode)
            rt[mode].append(round_trip_ns(k, encrypt=e, impl=impl))
    med = {m: statistics.median([x for x in v if x is not None]) if any(v) else None for m, v in rates.items()}
    rmed = {m: statistics.median(v) for m, v in rt.items()}
    # Each rep ran off and on back to back: the ratio within a rep is what
    # the shared machine's load drifts least over.
    pairs = {m: [on / off for on, off in zip(rates[m], rates["off"]) if on and off] for m in a.impls}
    base_pairs = [b / off for b, off in zip(rates.get("base", []), rates["off"]) if b and off]
    res = {"compare": a.compare, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "reps": a.reps, "duration": a.duration, "rates": rates, "rate_median": med,
           "ratio_keyed_off": {m: (med[m] / med["off"]) if med[m] and med["off"] else None for m in a.impls},
           "ratio_per_rep": pairs,
           "ratio_per_rep_median": {m: statistics.median(v) if v else None for m, v in pairs.items()},
           "baseline": a.baseline,
           "ratio_base_off": (med["base"] / med["off"]) if med.get("base") and med["off"] else None,
           "ratio_base_per_rep": base_pairs,
           "load_avg_start": load0, "load_avg_end": os.getloadavg(),
           "latency_p50_ns_at_10k": lat, "latency_p50_median_ns": lmed,
           "latency_p50_added_ns": {m: (lmed[m] - lmed["off"]) if lmed[m] and lmed["off"] else None
                                    for m in a.impls},
           "oneway_ns": rt, "oneway_median_ns": rmed,
           "oneway_added_ns": {m: rmed[m] - rmed["off"] for m in a.impls}}
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
