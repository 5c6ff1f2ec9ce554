"""Batch paths create no Python object per message.

The batch loops run in C inside `with nogil:` blocks, where no Python object
can be created; these tests add evidence from the allocator: over a million
messages the traced peak stays at the size of the output arrays, and the
number of live blocks does not grow with the message count."""
import sys
import tracemalloc

import numpy as np

from rpbcast.core.node import Node
from rpbcast.core.seqtrack import SeqTracker


def traced(fn):
    tracemalloc.start()
    tracemalloc.reset_peak()
    blocks0 = sys.getallocatedblocks()
    cur0, _ = tracemalloc.get_traced_memory()
    fn()
    cur1, peak = tracemalloc.get_traced_memory()
    blocks1 = sys.getallocatedblocks()
    tracemalloc.stop()
    return peak - cur0, blocks1 - blocks0


def test_seqtrack_batch_allocates_no_object_per_message():
    seqs = np.arange(1_000_000, dtype=np.uint64)
    seqs = seqs[np.random.default_rng(0).random(seqs.size) >= 0.01]
    out = np.empty(seqs.size, np.uint8)
    t = SeqTracker()
    peak, blocks = traced(lambda: t.accept_batch(seqs, out))
    # One Python int per message would be 28 bytes x 990k = 27 MB.
    assert peak < 64 * 1024
    assert blocks < 50


def _datagrams(n, size=64):
    snd = Node(1, 1, 1, store_bytes=1 << 28, store_entries=1 << 21)
    snd.hold_send = False
    out = []
    for k in range(0, n, 1000):
        m = min(1000, n - k)
        snd.publish_batch(np.zeros(m * size, np.uint8), np.full(m, size, np.uint32))
        out += [d for _, d in snd.datagrams()]
    buf = np.frombuffer(b"".join(out), np.uint8)
    lens = np.array([len(d) for d in out], np.uint32)
    offs = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.uint32)
    return buf, offs, lens, np.zeros(len(out), np.uint64)


def test_node_rx_and_recv_batch_allocate_no_object_per_message():
    n = 200_000
    buf, offs, lens, srcs = _datagrams(n)
    r = Node(1, 2, 1, store_bytes=1 << 28, store_entries=1 << 20)
    out = bytearray(64 << 20)
    peak, blocks = traced(lambda: r.rx_batch(buf, offs, lens, srcs, 0))
    assert r.counters()["rx_new"] == n
    assert peak < 64 * 1024 and blocks < 50
    got = []
    # recv_batch returns 7 NumPy arrays of max_n entries per call: bounded by
    # max_n, not by the number of messages moved.
    peak, blocks = traced(lambda: got.append(r.recv_batch(n, out)[0]))
    assert got == [n]
    arrays = 7 * 8 * n
    assert peak < arrays + 64 * 1024


def test_publish_batch_allocates_no_object_per_message():
    snd = Node(1, 1, 1, store_bytes=1 << 28, store_entries=1 << 21)
    snd.hold_send = False
    m = 100_000
    payloads = np.zeros(m * 64, np.uint8)
    lens = np.full(m, 64, np.uint32)
    peak, blocks = traced(lambda: snd.publish_batch(payloads, lens))
    assert snd.next_seq == m
    assert peak < 64 * 1024 and blocks < 50
