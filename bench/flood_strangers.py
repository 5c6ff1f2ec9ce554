"""Cost of a flood of distinct node ids in the data plane (issue 14), A/B
alternating in one process: A = no member table told (every node id a
member: the max_streams path -- past 4,096 the flood is refused); B =
members told (the flood churns through the strangers' pool of 64).  Each
round: 20,000 own-heard DATA from distinct ids straight into rp_node_rx.
Reports us per datagram (rx, stream creation, retirement).

    PYTHONPATH=. python3 bench/flood_strangers.py [rounds]
"""
import statistics
import sys
import time

from rpbcast.core.node import Node

N = 20_000
sender_dgrams = []
for k in range(N):
    s = Node(1, 100_000 + k, 1, store_bytes=1 << 12, store_entries=16)
    s.publish(b"x", None, 0)
    sender_dgrams.extend(d for _, d in s.datagrams())


def one(pool):
    n = Node(1, 2, 1, max_streams=4096, max_per_node=8, store_bytes=64 << 20)
    if pool:
        n.set_members([1, 2, 3], [True] * 3)
    t = time.perf_counter()
    for i, d in enumerate(sender_dgrams):
        n.rx(d, 100_000 + i, i)
        if n.nretired > 256:
            n.take_retired()
    dt = time.perf_counter() - t
    return dt / N * 1e6, n.npeers, n.counters()["streams_refused"]


res = {False: [], True: []}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    for pool in (False, True):
        us, npeers, refused = one(pool)
        res[pool].append(us)
        print(f"round {r} {'pool' if pool else 'members-only'}: {us:.2f} us/stream, streams {npeers}, refused {refused}")
a, b = statistics.median(res[False]), statistics.median(res[True])
print(f"median: members-only {a:.2f} us, pool {b:.2f} us, ratio pool/members-only {b / a:.2f}")
