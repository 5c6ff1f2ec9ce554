"""Large messages against small ones: MB/s of 1 MB messages (fragmented and
reassembled) beside 1 KB messages, in the same run, alternating, lossless
and at 1 % kernel loss (root: runs in network namespaces it creates).

    sudo python bench/large_messages.py [--reps 3] [--mbytes 64] [--json out.json]

One sender and one receiver, separate processes, multicast on a namespace's
loopback (a GSO super-datagram is dropped whole: bursts of up to 64
fragments) or, with --hosts, on two hosts of a veth LAN (per-packet loss); no logger: peers-only repair with receiver-driven flow control
(the sender never outruns the receiver's reports).  The receiver times from
its first delivery to its last and checks every message arrived exactly
once and whole; a rep that did not is reported, not counted.  Goal (issue
18): 1 MB at >= 80 % of the MB/s of 1 KB.

Per run it also prints where the loss went and what held the receiver:
`rule_drops` (the loss rule's), `sock_drops` (the receiver's own sockets',
a full receive buffer), `gap_ids`/`repairs`, `reasked_heads` (lost repairs
of the lowest missing ids asked again, rpbcast/protocol/pulls.py) and
`longest_recv_call_s` (the longest single recv_batch call: the application
thread waiting for the loop's mutex), and of that wait what the receiver's
loop counted: `app_wait_batches_max` (its receive batches during one wait,
csrc/loop.c rp_loop_lock_app), `lock_wait_max_ms`, `control_max_ms` (its
longest control-plane call, which holds the mutex and waits for the GIL),
`buffers_allocated` (fresh reassembly buffers, csrc/frag.c).  `--trees A,B` alternates checkouts
(each run's PYTHONPATH) within every rep, `--flow-windows 0,8192`
Config.flow_window values.
"""
import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import machine  # noqa: E402

from rpbcast.tools import netns  # noqa: E402

GROUP = "239.255.78.9"


def config(i, ports):
    from rpbcast import Config, MemberSpec
    ips = {1: "127.0.0.1", 2: "127.0.0.1"}
    extra = {}
    if os.environ.get("LM_HOSTS"):          # --hosts: each process its own host on a veth LAN
        ips = dict(zip((1, 2), os.environ["LM_HOSTS"].split(",")))
        extra = dict(interface="eth0", ttl=1)
    specs = [MemberSpec(j, f"{ips[j]}:{ports[j - 1]}") for j in (1, 2)]
    return Config(node_id=i, bind=f"{ips[i]}:{ports[i - 1]}", members=specs, gossip_interval=0.02, **extra,
                  group_addr=f"{GROUP}:{ports[0] + 1000}", flow_control="receivers",
                  store_bytes=256 << 20, store_entries=1 << 20, max_message_size=16 << 20,
                  gossip_buffer_bytes=128 << 20, rcvbuf=16 << 20, sndbuf=8 << 20,
                  flow_window=int(os.environ.get("LM_FLOW_WINDOW", "0")))


def run_recv(ports, size, count):
    from rpbcast import Node
    # the buffers first: zeroing 64 MB holds the GIL, which the node's
    # control calls (under its mutex) would wait for
    buf = bytearray(64 << 20)
    seen = np.zeros(count, np.uint8)
    node = Node(config(2, ports))
    py_ctl = _time_control(node.engine)
    print(json.dumps({"ready": True}), flush=True)
    got = nbytes = 0
    t1 = None
    end = time.time() + 120
    bad = 0
    gap = 0.0                  # the longest wait of this thread for recv_batch (the lock, the GIL, the CPU)
    while got < count and time.time() < end:
        t_call = time.monotonic()
        b = node.recv_batch(4096, buf)
        gap = max(gap, time.monotonic() - t_call)
        if not b.count:
            node.transport.wait(0.01)
            continue
        t1 = time.monotonic()
        for i in range(b.count):
            k = int(np.frombuffer(buf, np.uint64, 1, int(b.offs[i]))[0])
            if b.lens[i] != size or k >= count:
                bad += 1
                continue
            seen[k] += 1
        got += b.count
        nbytes += int(b.lens[:b.count].sum())
    st = node.stats()
    sock_drops = udp_drops()
    node.close(linger=0)
    ok = bool((seen == 1).all()) and not bad
    t0 = float(sys.stdin.readline() or 0)       # the sender's first publish (CLOCK_MONOTONIC, same host)
    dt = (t1 - t0) if t0 and t1 and t1 > t0 else None
    print(json.dumps({"ok": ok, "got": got, "bytes": nbytes, "seconds": dt,
                      "mbps": nbytes / dt / 1e6 if dt else None,
                      "repairs": st["repairs_peer"] + st["repairs_logger"], "gap_ids": st.get("gap_ids"),
                      "gaps": st.get("gaps"), "dropped_full": st.get("rx_dropped_full"),
                      "store_max_bytes": st.get("store_bytes"),
                      "sock_drops": sock_drops, "longest_recv_call_s": round(gap, 3), "reasked_heads": st.get("reasked_heads", 0),
                      "app_yields": st["loop"].get("app_yields"),
                      "app_wait_batches_max": st["loop"].get("app_wait_batches_max"),
                      "buffers_allocated": st["reassembly"].get("buffers_allocated"),
                      "control_max_ms": round(st["loop"]["control_max_us"] / 1e3, 1),
                      "control_py_max_ms": round(py_ctl[0] / 1e6, 1), "control_py_max_why": py_ctl[1],
                      "lock_wait_max_ms": round((st["loop"].get("app_lock_wait_max_us") or 0) / 1e3, 1),
                      "dropped_partials": sum(v for k, v in st["reassembly"].items()
                                              if k.startswith("dropped_"))}), flush=True)


def _time_control(engine):
    """The longest control-plane call as Python sees it (from inside the
    GIL): against the loop's own `control_max_ms` (from before it took the
    GIL) it tells a slow engine from a wait for the GIL under the mutex."""
    worst = [0, None]
    inner = engine.on_data_plane

    def timed(now, **why):
        t = time.perf_counter_ns()
        r = inner(now, **why)
        d = time.perf_counter_ns() - t
        if d > worst[0]:
            worst[0], worst[1] = d, "+".join(k for k, v in why.items() if v)
        return r
    engine.on_data_plane = timed
    return worst


def udp_drops():
    """Datagrams the kernel dropped at this process's UDP sockets (a full
    receive buffer: the receiving thread was not scheduled in time), as
    against the loss rule's drops -- on a loaded machine the larger part."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            mine.add(t[8:-1])
    n = 0
    for path in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if len(p) > 9 and p[9] in mine:
                        n += int(p[-1])
        except (OSError, ValueError, StopIteration):
            pass
    return n


def run_send(ports, size, count):
    from rpbcast import Node
    node = Node(config(1, ports))
    time.sleep(0.3)
    print(repr(time.monotonic()), flush=True)
    batch = max(1, min(256, (4 << 20) // size))
    body = bytearray(size * batch)
    lens = np.full(batch, size, np.uint32)
    sent = 0
    while sent < count:
        k = min(batch, count - sent)
        for j in range(k):
            body[j * size:j * size + 8] = (sent + j).to_bytes(8, "little")
        done = node.publish_batch(memoryview(body)[:k * size], lens[:k])
        sent += done
        if done < k:
            # back-pressure: keep what went out, shift the rest to the front
            rest = body[done * size:k * size]
            body[:len(rest)] = rest
            time.sleep(0.0005)
    node.flush(timeout=30)
    time.sleep(1.0)
    node.close(linger=0)


def free_ports(n):
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        out.append(s.getsockname()[1])
        s.close()
    return out


def one(size, mbytes, loss, hosts=False, tree=None, flow_window=0):
    count = max(1, (mbytes << 20) // size)
    with contextlib.ExitStack() as stack:
        env = dict(os.environ)
        if tree:
            env["PYTHONPATH"] = tree
        env["LM_FLOW_WINDOW"] = str(flow_window)
        if hosts:
            net = stack.enter_context(netns.HostNet([1, 2]))
            if loss:
                net.set_loss(loss)
            where = net.ns
            env["LM_HOSTS"] = f"{net.ip(1)},{net.ip(2)}"
        else:
            ns = stack.enter_context(netns.namespace(loss=loss))
            where = {1: ns, 2: ns}
        ports = [27700, 27701]
        me = [sys.executable, os.path.abspath(__file__)]
        args = ["--ports", f"{ports[0]},{ports[1]}", "--size", str(size), "--count", str(count)]
        r = subprocess.Popen(netns.exec_argv(where[2], me + ["--role", "recv", *args]), stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE, text=True, env=env)
        r.stdout.readline()
        s = subprocess.Popen(netns.exec_argv(where[1], me + ["--role", "send", *args]), stdout=subprocess.PIPE,
                             text=True, env=env)
        t0 = s.stdout.readline()
        try:
            out, _ = r.communicate(t0, timeout=200)
            s.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for p in (r, s):            # ours: stop them, report the run as not done
                p.kill()
                p.wait()
            return {"ok": False, "mbps": None, "timed_out": True}
        res = json.loads(out.strip().splitlines()[-1])
        res["rule_drops"] = net.loss_counters()[0] if hosts else netns.loss_counters(where[1])[0]
        return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mbytes", type=int, default=64, help="megabytes per run")
    ap.add_argument("--losses", default="0,0.01")
    ap.add_argument("--json")
    ap.add_argument("--hosts", action="store_true",
                    help="sender and receiver on two hosts of a veth LAN (per-packet loss) instead of loopback")
    ap.add_argument("--trees", help="comma-separated checkouts to compare (each run's PYTHONPATH), "
                                    "alternating within every rep; default: this one")
    ap.add_argument("--flow-windows", default="0",
                    help="comma-separated Config.flow_window values to compare (0: off), alternating like --trees")
    ap.add_argument("--role")
    ap.add_argument("--ports")
    ap.add_argument("--size", type=int)
    ap.add_argument("--count", type=int)
    a = ap.parse_args()
    if a.role:
        ports = [int(p) for p in a.ports.split(",")]
        (run_recv if a.role == "recv" else run_send)(ports, a.size, a.count)
        return
    sizes = {"1 KB": 1024, "1 MB": 1 << 20}
    trees = [(os.path.abspath(t) if t != "." else None, int(w)) for t in (a.trees or ".").split(",")
             for w in a.flow_windows.split(",")]
    rows = []
    for loss in [float(x) for x in a.losses.split(",")]:
        runs = {(t, k): [] for t in trees for k in sizes}
        for rep in range(a.reps):
            order = trees if rep % 2 == 0 else trees[::-1]    # which tree goes first alternates
            for t in order:
                for name, size in sizes.items():          # alternating, same run
                    res = one(size, a.mbytes, loss, a.hosts, *t)
                    runs[(t, name)].append(res)
                    print(f"loss {loss:.0%} rep {rep} {t[0] or '.'} flow_window {t[1]} {name}: {res}",
                          file=sys.stderr, flush=True)
        for t in trees:
            med = {k: statistics.median([r["mbps"] for r in runs[(t, k)] if r["ok"] and r["mbps"]] or [0])
                   for k in sizes}
            pairs = sorted(m["mbps"] / k["mbps"] for k, m in zip(runs[(t, "1 KB")], runs[(t, "1 MB")])
                           if k["ok"] and m["ok"] and k["mbps"] and m["mbps"])
            rows.append({"tree": t[0], "flow_window": t[1], "loss": loss, "mbps_1k": med["1 KB"], "mbps_1m": med["1 MB"],
                         "ratio": med["1 MB"] / med["1 KB"] if med["1 KB"] else None,
                         "paired_ratios": pairs,
                         "ok": {k: sum(r["ok"] for r in runs[(t, k)]) for k in sizes}, "reps": a.reps,
                         "runs": {k: runs[(t, k)] for k in sizes}})
    out = {"machine": machine(), "mbytes": a.mbytes, "rows": rows, "hosts": a.hosts,
           "command": "python " + " ".join(sys.argv)}
    for r in rows:
        print(f"{r['tree'] or '.'} flow_window {r['flow_window']} loss {r['loss']:.0%}: 1 KB {r['mbps_1k']:.0f} MB/s, 1 MB {r['mbps_1m']:.0f} MB/s, "
              f"ratio {r['ratio'] or 0:.2f}, paired {' '.join(f'{x:.2f}' for x in r['paired_ratios'])} "
              f"(exact reps {r['ok']} of {r['reps']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
