"""Engine receive cost per message: whole datagrams through the C data plane
(parse, gap detection, store, delivery to the application) beside a same-run
baseline (copying the same bytes once, the least any receiver must do).

    python bench/bench_engine.py [--json out.json]

Two cases per payload size and loss:

* steady: one long-lived receiver, each timed call the next N messages of
  the stream (the sequence numbers in the prepared datagrams are advanced
  untimed between calls), then one gossip round of age GC, so the message
  ring recycles memory that is already mapped -- what a running receiver
  does;
* cold: a new receiver per call, so every page of its message ring is
  touched for the first time (first-touch page faults included) -- the
  cost of a receiver's first pass over its ring.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from harness import compare, report  # noqa: E402

from rpbcast.core.node import Node  # noqa: E402

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
    from rpbcast.core import wire
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


def deliver_all(node, out, n):
    """recv_batch until the n messages received are delivered."""
    got = 0
    while got < n:
        k = node.recv_batch(65536, out, 0)[0]
        if not k:
            break
        got += k
    assert got == n, (got, n)


def seq_positions(buf, offs, lens):
    """Byte offsets of every message's seq field (u64 at +16 in its header)."""
    raw = buf.tobytes()
    pos = []
    for o, n in zip(offs.tolist(), lens.tolist()):
        count = int.from_bytes(raw[o + 16:o + 18], "little")
        p = o + 24
        for _ in range(count):
            pos.append(p + 16)
            p += 24 + int.from_bytes(raw[p + 2:p + 4], "little")
        assert p == o + n
    return np.array(pos, np.int64)


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
                deliver_all(r, out, n)

            res.append(compare(f"cold: rx + deliver, {size} B, {label}", case,
                               lambda: np.copyto(copy_dst, buf), n, rounds=a.rounds, reps=3))

            # steady state: the same receiver, the stream continues
            live = Node(1, 2, 1, mtu=1472, store_bytes=(N * (size + 64)) * 5 // 2, store_entries=1 << 19)
            pos = seq_positions(buf, offs, lens)
            idx = pos[:, None] + np.arange(8)             # the 8 bytes of each seq
            base_seqs = buf[idx].copy().view("<u8").ravel()
            sbuf = buf.copy()

            def advance(k=[0]):
                # every seq + N*k: the next N messages of the same stream
                k[0] += 1
                seqs = base_seqs + np.uint64(N * k[0])
                sbuf[idx] = seqs.view(np.uint8).reshape(-1, 8)

            def steady():
                live.rx_batch(sbuf, offs, lens, srcs, 0)
                deliver_all(live, out, n)
                live.round(1)          # the gossip round's age GC frees the ring

            res.append(compare(f"steady: rx + deliver, {size} B, {label}", steady,
                               lambda: np.copyto(copy_dst, buf), n, rounds=a.rounds, reps=3,
                               prepare=advance, warmup=3))
    report(res, "bench_engine (C data plane, batch rx + recv_batch)", a.json)


if __name__ == "__main__":
    main()
