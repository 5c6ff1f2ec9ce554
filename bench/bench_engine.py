"""Engine receive cost per message: whole datagrams through the C data plane
(parse, gap detection, store, delivery to the application) beside a same-run
baseline (copying the same bytes once, the least any receiver must do).

    python bench/bench_engine.py [--json out.json]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from harness import compare, report  # noqa: E402

from rpbcast.node import Node  # noqa: E402

N = 200_000


def datagrams(size, keep):
    """Datagrams of a sender carrying messages whose seq has keep[seq]."""
    snd = Node(1, 1, 1, mtu=1472, store_bytes=1 << 30, store_entries=1 << 22)
    out = []
    body = bytes(size)
    for seq in range(N):
        snd.publish(body, None, 0)
        if seq % 1024 == 1023:
            out += snd.datagrams()
            snd.logger_ack(snd.next_seq)
    out += snd.datagrams()
    # re-pack without the dropped messages: parse and rebuild
    from rpbcast import wire
    msgs = [m for _, d in out for m in wire.parse(d)[1] if keep[m.seq]]
    dgs = []
    b = wire.Builder(1, 1, 1, 0, 1472)
    for m in msgs:
        if not b.add(*m):
            dgs.append(b.finish())
            b = wire.Builder(1, 1, 1, 0, 1472)
            b.add(*m)
    dgs.append(b.finish())
    buf = np.frombuffer(b"".join(dgs), np.uint8)
    lens = np.array([len(d) for d in dgs], np.uint32)
    offs = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.uint32)
    return buf, offs, lens, np.zeros(len(dgs), np.uint64), int(sum(keep))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    res = []
    for size in (64, 1024):
        for label, keep in (("in order", np.ones(N, bool)), ("1% loss", rng.random(N) >= 0.01)):
            buf, offs, lens, srcs, n = datagrams(size, keep)
            out = bytearray(64 << 20)
            copy_dst = np.empty_like(buf)

            def case():
                r = Node(1, 2, 1, mtu=1472, store_bytes=1 << 29, store_entries=1 << 20)
                r.rx_batch(buf, offs, lens, srcs, 0)
                got = 0
                while got < n:
                    k = r.recv_batch(65536, out, 0)[0]
                    if not k:
                        break
                    got += k
                assert got == n

            res.append(compare(f"rx + deliver, {size} B payload, {label}", case,
                               lambda: np.copyto(copy_dst, buf), n, rounds=a.rounds, reps=3))
    report(res, "bench_engine (C data plane, batch rx + recv_batch)", a.json)


if __name__ == "__main__":
    main()
