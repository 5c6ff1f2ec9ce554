"""The Python cost of the application's receive calls (issue 15), for a
message already in the node, so no wake-up and no kernel is in it:

    ip netns exec NS env PYTHONPATH=TREE python3 bench/receive_cost.py [N]

(the namespace needs `ip link set lo up multicast on` and a 224.0.0.0/4
route; bench/pingpong_modes.sh leaves one with KEEP_NS=1).  Prints the
median and p99, in microseconds, of:

    receive     Node.receive(0) returning a message that is pending
    recv_batch  Node.recv_batch(65536, buf) taking one pending message (the
                stress receiver's call)
    empty       Node.recv_batch(65536, buf) with nothing pending
    poll        Node.poll(0) on a node without a loop thread (start=False),
                nothing pending (the inline mode's idle call)
"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rpbcast import Config, MemberSpec  # noqa: E402
from rpbcast.api import Node  # noqa: E402

PORTS = {1: 17731, 2: 17732, 3: 17733}


def node(i, start=True):
    ids = (1, 2) if i < 3 else (3,)            # 3: alone in a group of its own (nothing pending)
    return Node(Config(node_id=i, bind=f"127.0.0.1:{PORTS[i]}", group_addr=f"239.192.1.{79 + len(ids)}:17530",
                       members=[MemberSpec(k, f"127.0.0.1:{PORTS[k]}") for k in ids],
                       member_timeout=3600), start=start)


def pending(n, want=1, timeout=1.0):
    end = time.monotonic() + timeout
    while n.transport.pending() < want and time.monotonic() < end:
        n.wait(0.01)


def main(count=2000):
    a, b, c = node(1), node(2), node(3, start=False)
    time.sleep(0.3)
    buf = bytearray(64 << 20)
    t = {"receive": [], "recv_batch": [], "empty": [], "poll": []}
    for k in range(count):
        a.publish(b"x" * 64)
        pending(b)
        t0 = time.perf_counter_ns()
        m = b.receive(0)
        t1 = time.perf_counter_ns()
        assert m is not None
        del m
        t["receive"].append(t1 - t0)
        a.publish(b"y" * 64)
        pending(b)
        t0 = time.perf_counter_ns()
        x = b.recv_batch(65536, buf)
        t1 = time.perf_counter_ns()
        assert x.count == 1
        t["recv_batch"].append(t1 - t0)
        t0 = time.perf_counter_ns()
        x = b.recv_batch(65536, buf)
        t1 = time.perf_counter_ns()
        assert x.count == 0
        t["empty"].append(t1 - t0)
        t0 = time.perf_counter_ns()
        c.poll(0)
        t1 = time.perf_counter_ns()
        t["poll"].append(t1 - t0)
    for n in (a, b, c):
        n.close(linger=0)
    print("RESULT " + " ".join(f"{k}_p50_us={np.median(v) / 1e3:.1f} {k}_p99_us={np.percentile(v, 99) / 1e3:.1f}"
                               for k, v in t.items()), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
