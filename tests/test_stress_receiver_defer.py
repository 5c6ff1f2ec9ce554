"""The stress receiver counts its takes later, many at once (issue 15: at
100 k msgs/s a Tally.add per take was most of the receiving application's
cycle, and messages waited in the socket meanwhile).  Deferring must not
change a count or a latency: against a Tally fed every take at once, with
the time of its take, the deferred one ends identical -- whatever the
takes' sizes, payload sizes (short ones carry no stamp), streams, repeats
and the buffer filling up -- and a large message the node put into a
buffer of its own is counted with its own time."""
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rpbcast.api import Batch
from rpbcast.tools.stress.tally import Tally
from rpbcast.tools.stress.worker import receiver as rw

T0 = 10 ** 12


class FakeNode:
    """recv_batch as the node does it: the next queued take's payloads back
    to back into the buffer given (a message larger than it: a buffer of
    its own, as Node.recv_batch does)."""

    def __init__(self, takes):
        self.takes = list(takes)

    def recv_batch(self, want, buf):
        if not self.takes:
            return Batch(0, *(np.zeros(0, t) for t in (np.uint32, np.uint32, np.uint64, np.uint64, np.int64,
                                                       np.uint32, np.uint32)), buf, np.zeros(0, np.uint32))
        msgs = self.takes.pop(0)
        payloads = [p for *_, p in msgs]
        lens = np.array([len(p) for p in payloads], np.uint32)
        offs = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.uint32)
        data = b"".join(payloads)
        if len(data) > len(buf):
            buf = bytearray(len(data))
        buf[:len(data)] = data
        k = len(msgs)
        return Batch(k, np.array([m[0] for m in msgs], np.uint32), np.array([m[1] for m in msgs], np.uint32),
                     np.array([m[2] for m in msgs], np.uint64), np.zeros(k, np.uint64), np.zeros(k, np.int64),
                     offs, lens, buf, np.zeros(k, np.uint32))


def payload(sent, size):
    return struct.pack("<Q", sent) + bytes(size - 8) if size >= 8 else bytes(size)


MSG = st.tuples(st.sampled_from([(1, 1), (1, 2), (7, 1)]), st.integers(0, 500),
                st.sampled_from([3, 8, 64, 100]), st.integers(1, 10 ** 9))
TAKES = st.lists(st.tuples(st.lists(MSG, min_size=1, max_size=30), st.integers(0, 3_000_000)),
                 min_size=1, max_size=30)


def tallies_equal(a, b):
    assert a.delivered == b.delivered
    assert (a.first, a.last) == (b.first, b.last)
    assert np.array_equal(a.hist, b.hist)
    assert a.counts.keys() == b.counts.keys()
    for k in a.counts:
        assert np.array_equal(a.counts[k], b.counts[k]), k
    assert a.have() == b.have()


@settings(max_examples=150, deadline=None)
@given(TAKES, st.integers(64, 4096), st.sampled_from([1, 4, 4096]))
def test_deferred_counting_equals_counting_every_take(takes, buf_bytes, defer_messages):
    now, timed = T0, []
    for msgs, gap in takes:
        now += gap
        timed.append(([(s, i, q, payload(now - lat, size)) for (s, i), q, size, lat in msgs], now))
    ref = Tally()
    for msgs, t in timed:
        ref.add(FakeNode([msgs]).recv_batch(1 << 16, bytearray(1 << 16)), t)

    old = (rw.BUF_BYTES, rw.BUF_RESERVE, rw.DEFER_MESSAGES)
    rw.BUF_BYTES, rw.BUF_RESERVE, rw.DEFER_MESSAGES = buf_bytes, buf_bytes // 4, defer_messages
    try:
        app = rw._Application(FakeNode([m for m, _ in timed]), inline=False, slow=0)
        tally = Tally()
        for _, t in timed:
            b = app.take()
            assert b.count
            app.hold(b, t, tally)
            app.settle(tally, t)
            assert app.pos <= rw.BUF_BYTES
        app.drain(tally)
    finally:
        rw.BUF_BYTES, rw.BUF_RESERVE, rw.DEFER_MESSAGES = old
    assert not app.held and app.pos == 0
    tallies_equal(tally, ref)


def test_takes_are_held_until_many_or_old_then_counted_at_their_own_times():
    size = 64
    takes = [[((1, 1), q, payload(T0 + 1000 * q, size))] for q in range(5)]
    takes = [[(s, i, q, p) for (s, i), q, p in m] for m in takes]
    app = rw._Application(FakeNode(takes), inline=False, slow=0)
    tally = Tally()
    for q in range(4):
        t = T0 + 1000 * q + 7_000          # every message taken 7 us after its send
        app.hold(app.take(), t, tally)
        app.settle(tally, t)
    assert tally.delivered == 0 and app.n_held == 4         # held: few and young
    t = T0 + 4000 + 7_000 + rw.DEFER_NS
    app.hold(app.take(), t, tally)
    app.settle(tally, t)                                    # the first is old now: all counted
    assert tally.delivered == 5 and not app.held
    lat = np.repeat(np.arange(len(tally.hist)), tally.hist)
    # four at 7 us, the last at 7 us + DEFER_NS: the times of the takes, not of the count
    ref = Tally()
    for q in range(4):
        ref.add(FakeNode([takes[q]]).recv_batch(1 << 16, bytearray(1 << 16)), T0 + 1000 * q + 7_000)
    ref.add(FakeNode([takes[4]]).recv_batch(1 << 16, bytearray(1 << 16)), t)
    assert np.array_equal(tally.hist, ref.hist), lat


class WaitingNode(FakeNode):
    """A node whose deliveries arrive while the application waits: the
    first take finds nothing, the wait then sees the next take's messages."""

    def __init__(self, takes):
        super().__init__(takes)
        self.calls = []
        self.arrived = False

    def recv_batch(self, want, buf):
        self.calls.append("take")
        return super().recv_batch(want, buf) if self.arrived else FakeNode([]).recv_batch(want, buf)

    def wait(self, timeout):
        self.calls.append("wait")
        self.arrived = bool(self.takes)
        return self.arrived


def test_the_receiver_takes_what_its_wait_saw_at_once():
    """A wait that saw deliveries is followed by the take in the same call
    (wait_take), not by a turn of orders, checks and reports first; a wait
    that saw nothing says so."""
    node = WaitingNode([[(1, 1, 0, payload(T0, 64))]])
    app = rw._Application(node, inline=False, slow=0)
    assert app.take().count == 0
    b = app.wait_take()
    assert b is not None and b.count == 1 and node.calls == ["take", "wait", "take"]
    assert int(b.seqs[0]) == 0
    assert app.wait_take() is None and node.calls[-1] == "wait"
