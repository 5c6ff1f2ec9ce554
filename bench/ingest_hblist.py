"""Cost per HBLIST entry as the number of streams a node knows grows
(issue 14: 1.9 us per entry at 4 k streams, 58 us at 100 k -- ingestion
was quadratic: each new stream scanned every known one for an older
incarnation).

    PYTHONPATH=. python3 bench/ingest_hblist.py [--streams 4000,20000,100000] [--reps 3]

For each size: a fresh member ingests that many new streams from HBLIST
messages of one peer (2,500 entries per message, as the wire allows), then
the same entries again (known streams).  Prints the median over reps of
the cost per entry (us); the ratio of the largest size's per-entry cost to
the smallest's is the complexity check (flat = linear ingestion).  Run
with PYTHONPATH pointing at another checkout to compare (A/B, alternating).
"""
from __future__ import annotations

import argparse
import statistics
import time

from rpbcast import Config, MemberSpec
from rpbcast.core import wire
from rpbcast.protocol.engine import Engine

T = wire.MsgType
MS = 1_000_000
PER_MSG = 2500


def datagrams(n):
    entries = [(2, 1000 + k, 5) for k in range(n)]      # member 2's incarnations
    return [wire.datagram([(T.HBLIST, 0, 2, 1, 0, 0, wire.hb_entries(entries[k:k + PER_MSG]))],
                          group=1, source=2, source_inc=1)
            for k in range(0, n, PER_MSG)]


def ingest_once(n, dgs):
    """(us per entry for new streams, us per entry for known ones)."""
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    kw = {"max_streams": max(n + 16, 4096)}
    try:
        cfg = Config(node_id=1, members=specs, incarnation=1, **kw)
    except TypeError:               # a checkout without max_streams
        cfg = Config(node_id=1, members=specs, incarnation=1)
    e = Engine(cfg, 0)
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        for d in dgs:
            e.receive_datagram(d, 2, MS)
        out.append((time.perf_counter() - t0) / n * 1e6)
    assert e.node.npeers >= n, (e.node.npeers, n)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="4000,20000,100000")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    sizes = [int(x) for x in a.streams.split(",")]
    dgs = {n: datagrams(n) for n in sizes}
    res = {n: [] for n in sizes}
    for _ in range(a.reps):
        for n in sizes:
            res[n].append(ingest_once(n, dgs[n]))
    print(f"{'streams':>8} {'new us/entry':>13} {'known us/entry':>15}")
    med = {}
    for n in sizes:
        new = statistics.median(r[0] for r in res[n])
        known = statistics.median(r[1] for r in res[n])
        med[n] = new
        print(f"{n:>8} {new:>13.2f} {known:>15.2f}")
    print(f"per-entry cost ratio {sizes[-1]} / {sizes[0]} streams: {med[sizes[-1]] / med[sizes[0]]:.2f}")


if __name__ == "__main__":
    main()
