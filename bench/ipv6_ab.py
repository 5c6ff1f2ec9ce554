"""IPv4 against IPv6 line rate, A/B in the same run (root: one network
namespace it creates).

    sudo python bench/ipv6_ab.py [--reps 5] [--count 200000] [--sizes 64,1024] [--json out.json]

One sender and one receiver, publishing in batches as fast as flow control
lets it; msgs/s from the sender's first publish to the receiver's last
delivery, every message delivered exactly once or the rep does not count
(counted as failed, with what was missing or duplicated).  The two families
alternate rep by rep (v4, v6, then v6, v4, ...) in one namespace, on the same
devices, so the address family is the only difference:

* multicast: the group on the namespace's veth (rpbcast.tools.netns.enable_ipv6;
  IPv6 multicast does not loop back over lo), IPv4 239.255.92.x and IPv6
  ff05::92:x on that same interface (IPv4 nodes bound to 10.78.0.x there,
  IPv6 ones to fd77::x);
* unicast: transport = 'unicast' (fan-out), everything on lo.

The IPv6 path adds the handle table lookups in udpio (one lock per batch)
and 20 more header bytes per datagram.  Reported: medians per mode, family
and size, and v6/v4.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import machine  # noqa: E402

from rpbcast import Config, MemberSpec  # noqa: E402
from rpbcast.api import Node  # noqa: E402
from rpbcast.tools import netns  # noqa: E402


def ipv4_on_the_veth(ns):
    """IPv4 addresses and the groups' route on the IPv6 multicast veth (a
    multicast copy with a 127/8 source is a martian off lo)."""
    for k in (1, 2):
        netns._run("ip", "-n", ns, "addr", "add", f"10.78.0.{k}/24", "dev", netns.V6_MCAST_IF)
    netns._run("ip", "-n", ns, "route", "add", "239.255.92.0/24", "dev", netns.V6_MCAST_IF)


def nodes_for(mode, family, rep, run):
    port = 7500 + 20 * run
    if family == 4:
        net = "10.78.0." if mode == "multicast" else "127.0.0."
        addr = {1: f"{net}1:{port + 1}", 2: f"{net}2:{port + 2}"}
        grp = f"239.255.92.{1 + run % 200}:{port}"
    else:
        addr = {1: f"[fd77::1]:{port + 1}", 2: f"[fd77::2]:{port + 2}"}
        grp = f"[ff05::92:{1 + run % 200:x}]:{port}"
    itf = netns.V6_MCAST_IF if mode == "multicast" else ""
    specs = [MemberSpec(i, a) for i, a in addr.items()]
    return {i: Node(Config(node_id=i, bind=addr[i], group_addr=grp, interface=itf, members=specs,
                           transport=mode, gossip_interval=0.02, store_bytes=256 << 20,
                           store_entries=1 << 20))
            for i in addr}


def one(mode, family, size, count, rep, run):
    nodes = nodes_for(mode, family, rep, run)
    try:
        payload = np.zeros(size * 4096, np.uint8)
        lens = np.full(4096, size, np.uint32)
        seen = np.zeros(count, np.uint16)
        times = []

        def receive():
            buf = bytearray(64 << 20)
            end = time.time() + 60
            while time.time() < end and (seen > 0).sum() < count:
                b = nodes[2].recv_batch(65536, buf)
                if not b.count:
                    nodes[2].transport.wait(0.05)
                    continue
                s = b.seqs[:b.count]
                np.add.at(seen, s[s < count].astype(np.int64), 1)
            times.append(time.perf_counter())

        t = threading.Thread(target=receive)
        t.start()
        times.append(time.perf_counter())
        sent = 0
        while sent < count:
            k = nodes[1].publish_batch(payload, lens[:min(4096, count - sent)])
            sent += k
            if not k:
                time.sleep(0.0005)
        t.join()
        time.sleep(0.2)
        late = nodes[2].recv_batch(65536, bytearray(64 << 20))         # a duplicate would show now
        np.add.at(seen, late.seqs[:late.count][late.seqs[:late.count] < count].astype(np.int64), 1)
        ok = bool((seen == 1).all())
        rate = count / (times[-1] - times[0]) if ok and len(times) > 1 else None
        sock = nodes[1].stats()["sock"]
        return {"mode": mode, "family": family, "size": size, "rep": rep, "ok": ok, "rate": rate,
                "gso": sock["gso"], "gso_sends": sock["tx_gso_sends"], "tx_dgrams": sock["tx_dgrams"],
                "missing": int((seen == 0).sum()), "duplicated": int((seen > 1).sum())}
    finally:
        for n in nodes.values():
            n.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--count", type=int, default=50_000)
    ap.add_argument("--sizes", default="64,1024")
    ap.add_argument("--modes", default="multicast,unicast")
    ap.add_argument("--json")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    modes = a.modes.split(",")
    runs = []
    with netns.namespace6() as ns, netns.entered(ns):
        ipv4_on_the_veth(ns)
        n = 0
        for rep in range(a.reps):
            for mode in modes:
                for size in sizes:
                    for family in ((4, 6) if rep % 2 == 0 else (6, 4)):      # alternate, and who goes first
                        r = one(mode, family, size, a.count, rep, n)
                        n += 1
                        runs.append(r)
                        print(json.dumps(r), file=sys.stderr)
    table = []
    for mode in modes:
        for size in sizes:
            sel = [r for r in runs if r["mode"] == mode and r["size"] == size]
            med = {}
            for family in (4, 6):
                rates = [r["rate"] for r in sel if r["family"] == family and r["ok"]]
                med[family] = statistics.median(rates) if rates else None
            ratio = med[6] / med[4] if med[4] and med[6] else None
            table.append({"mode": mode, "size": size, "v4_msgs_s": med[4], "v6_msgs_s": med[6], "v6_over_v4": ratio,
                          "reps_ok": sum(r["ok"] for r in sel), "reps": len(sel),
                          "gso_v6": sorted({r["gso"] for r in sel if r["family"] == 6}),
                          "gso_v4": sorted({r["gso"] for r in sel if r["family"] == 4})})
    out = {"machine": machine(), "args": vars(a), "table": table, "runs": runs}
    for row in table:
        print(f"{row['mode']:>9} {row['size']:>5} B  v4 {row['v4_msgs_s'] or 0:>12,.0f}  "
              f"v6 {row['v6_msgs_s'] or 0:>12,.0f}  v6/v4 {row['v6_over_v4'] or 0:.3f}  "
              f"ok {row['reps_ok']}/{row['reps']}  gso v4 {row['gso_v4']} v6 {row['gso_v6']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
