"""SeqTracker (csrc/seqtrack.h, csrc/iset.h) against tests/models/seqtrack_model.py."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from models.seqtrack_model import DUP, FAR, FILL, NEW, NOMEM, SEQ_LIMIT, SeqTrackModel
from rpbcast.core import seqtrack
from rpbcast.core.seqtrack import SeqTracker


def test_codes_match_model():
    assert (seqtrack.DUP, seqtrack.NEW, seqtrack.FILL, seqtrack.FAR, seqtrack.NOMEM) == (
        DUP, NEW, FILL, FAR, NOMEM)
    assert seqtrack.SEQ_LIMIT == SEQ_LIMIT


def assert_same(t, m, probe_lo=None, probe_hi=None):
    """Full state comparison plus Property 3.5 of the thesis on [base, next)."""
    assert t.next == m.next
    assert t.lastseen == m.lastseen
    assert t.base == m.base
    assert t.contiguous == m.contiguous
    assert t.missing == m.missing_intervals()
    assert [tuple(r) for r in t.missing_array().tolist()] == m.missing_intervals()
    assert t.missing_count == len(m.missing)
    assert t.counters() == m.counters
    if m.max_intervals:
        assert len(t.missing) <= m.max_intervals
    lo = max(0, m.base - 3) if probe_lo is None else probe_lo
    hi = m.next + 3 if probe_hi is None else probe_hi
    for s in range(lo, hi):
        r, miss = t.received(s), t.is_missing(s)
        assert r == m.received(s), s
        assert miss == m.is_missing(s), s
        if m.base <= s < m.next:
            # Property 3.5: received or missing, never both.
            assert r != miss, s
            # ... and received means NEW/FILL was returned once, or forgotten.
            assert (s in m.accepted or s in m.forgotten) == r, s
        else:
            assert not r and not miss, s
    assert not (m.accepted & m.missing)


SPAN = 120  # seqs are drawn from [base - 5, base + SPAN]


class SeqTrackMachine(RuleBasedStateMachine):
    @initialize(base=st.sampled_from([0, 1, 7, 1000, SEQ_LIMIT - 300]),
                max_gap=st.sampled_from([1, 2, 5, 40, 1 << 32]),
                max_intervals=st.sampled_from([0, 0, 1, 2, 3, 6]))
    def init(self, base, max_gap, max_intervals):
        self.t = SeqTracker(base, max_gap, max_intervals)
        self.m = SeqTrackModel(base, max_gap, max_intervals)

    def seq(self, off):
        return max(0, self.m.base + off)

    @rule(off=st.integers(-5, SPAN))
    def accept(self, off):
        s = self.seq(off)
        code, _ = self.m.accept(s)
        assert self.t.accept(s) == code

    @rule(off=st.integers(-5, SPAN))
    def accept_gap(self, off):
        s = self.seq(off)
        expect = self.m.accept(s)
        assert self.t.accept_gap(s) == expect

    @rule(d=st.integers(0, 3))
    def accept_next(self, d):
        # in-order and near-in-order arrivals, the common case
        s = self.m.next + d
        code, _ = self.m.accept(s)
        assert self.t.accept(s) == code

    @rule(s=st.sampled_from([SEQ_LIMIT - 1, SEQ_LIMIT, SEQ_LIMIT + 1, 2**64 - 1]))
    def accept_huge(self, s):
        code, _ = self.m.accept(s)
        assert self.t.accept(s) == code

    @rule(offs=st.lists(st.integers(-5, SPAN), max_size=12), in_order=st.booleans())
    def accept_batch(self, offs, in_order):
        if in_order:
            seqs = list(range(self.m.next, self.m.next + len(offs)))
        else:
            seqs = [self.seq(o) for o in offs]
        expect = [self.m.accept(s)[0] for s in seqs]
        codes, good = self.t.accept_batch(np.array(seqs, dtype=np.uint64))
        assert codes.tolist() == expect
        assert good == sum(c in (NEW, FILL) for c in expect)

    @rule(off=st.integers(-5, SPAN))
    def heartbeat(self, off):
        s = self.seq(off)
        status, gap = self.m.heartbeat(s)
        if status == "far":
            with pytest.raises(ValueError):
                self.t.heartbeat(s)
        elif status == "nomem":
            with pytest.raises(MemoryError):
                self.t.heartbeat(s)
        else:
            assert self.t.heartbeat(s) == gap

    @rule(d=st.integers(-3, 3))
    def heartbeat_near_max_gap(self, d):
        # the FAR boundary for heartbeats
        s = self.m.next + min(self.m.max_gap, 50) + d
        if s < 0:
            return
        status, gap = self.m.heartbeat(s)
        if status == "far":
            with pytest.raises(ValueError):
                self.t.heartbeat(s)
        elif status == "nomem":
            with pytest.raises(MemoryError):
                self.t.heartbeat(s)
        else:
            assert self.t.heartbeat(s) == gap

    @rule(a=st.integers(-5, SPAN), length=st.integers(0, 10))
    def forget(self, a, length):
        lo = self.seq(a)
        hi = lo + length
        n = self.m.forget(lo, hi)
        if n is None:
            with pytest.raises(MemoryError):
                self.t.forget(lo, hi)
        else:
            assert self.t.forget(lo, hi) == n

    @invariant()
    def agree(self):
        if hasattr(self, "t"):
            assert_same(self.t, self.m)


TestSeqTrackMachine = SeqTrackMachine.TestCase
TestSeqTrackMachine.settings = settings(stateful_step_count=40)


# ---------------------------------------------------------------------------
# batch == sequence of single accepts

@given(base=st.sampled_from([0, 5, 10**6]),
       max_gap=st.sampled_from([1, 3, 50, 1 << 32]),
       max_intervals=st.sampled_from([0, 1, 2, 4]),
       batches=st.lists(st.lists(st.integers(-3, 80), max_size=20), max_size=6))
def test_batch_equals_singles(base, max_gap, max_intervals, batches):
    a = SeqTracker(base, max_gap, max_intervals)
    b = SeqTracker(base, max_gap, max_intervals)
    for batch in batches:
        seqs = [max(0, base + o) for o in batch]
        codes, good = a.accept_batch(np.array(seqs, dtype=np.uint64))
        singles = [b.accept(s) for s in seqs]
        assert codes.tolist() == singles
        assert good == sum(c in (NEW, FILL) for c in singles)
        assert a.next == b.next and a.missing == b.missing
        assert a.counters() == b.counters()


def test_batch_out_buffer_and_empty():
    t = SeqTracker()
    codes, good = t.accept_batch(np.zeros(0, dtype=np.uint64))
    assert len(codes) == 0 and good == 0
    out = np.full(8, 99, dtype=np.uint8)
    codes, good = t.accept_batch(np.array([0, 1, 1, 3], dtype=np.uint64), out)
    assert codes.tolist() == [NEW, NEW, DUP, NEW] and good == 3
    assert out[4:].tolist() == [99] * 4          # untouched past n
    with pytest.raises(ValueError):
        t.accept_batch(np.arange(4, 10, dtype=np.uint64), np.zeros(2, dtype=np.uint8))
    assert t.next == 4                            # rejected call changed nothing


# ---------------------------------------------------------------------------
# targeted examples

def test_in_order():
    t = SeqTracker()
    assert [t.accept(s) for s in range(5)] == [NEW] * 5
    assert t.missing == [] and t.contiguous == 5 and t.lastseen == 4
    assert t.counters()["gaps"] == 0


def test_empty_tracker():
    t = SeqTracker(base=10)
    assert t.lastseen == 9 and t.next == 10 and t.contiguous == 10
    assert not t.received(10) and not t.received(9) and t.missing == []
    t0 = SeqTracker()
    assert t0.lastseen == -1


def test_loss_then_repair_then_dup():
    t = SeqTracker()
    assert t.accept_gap(0) == (NEW, None)
    assert t.accept_gap(4) == (NEW, (1, 3))
    assert t.missing == [(1, 3)] and t.contiguous == 1
    assert t.accept(2) == FILL                    # split in the middle
    assert t.missing == [(1, 1), (3, 3)]
    assert t.accept(2) == DUP
    assert t.accept(1) == FILL and t.contiguous == 3
    assert t.accept(3) == FILL and t.contiguous == 5
    assert t.accept(4) == DUP and t.accept(0) == DUP


def test_reordering():
    t = SeqTracker()
    for s in [2, 0, 1, 4, 3]:
        assert t.accept(s) in (NEW, FILL)
    assert t.missing == [] and t.next == 5


def test_below_base_is_dup():
    t = SeqTracker(base=100)
    assert t.accept(99) == DUP and t.accept(0) == DUP
    assert t.accept(105) == NEW and t.missing == [(100, 104)]
    assert t.accept(50) == DUP                     # below base even with gaps
    assert not t.received(50) and not t.is_missing(50)


def test_base_validation():
    with pytest.raises(ValueError):
        SeqTracker(base=SEQ_LIMIT)
    with pytest.raises(ValueError):
        SeqTracker(max_gap=0)


def test_far_rejection_boundary():
    t = SeqTracker(base=0, max_gap=10)
    assert t.accept(0) == NEW                      # next == 1
    assert t.accept(1 + 11) == FAR                 # jump of 11 past next
    assert t.next == 1 and t.missing == []
    assert t.accept(1 + 10) == NEW                 # jump of exactly max_gap
    assert t.missing == [(1, 10)]
    assert t.counters()["far"] == 1


def test_seq_limit():
    t = SeqTracker(base=SEQ_LIMIT - 2)
    assert t.accept(SEQ_LIMIT - 2) == NEW
    assert t.accept(SEQ_LIMIT - 1) == NEW
    assert t.accept(SEQ_LIMIT) == FAR
    assert t.accept(2**64 - 1) == FAR
    assert t.next == SEQ_LIMIT
    with pytest.raises(ValueError):
        t.heartbeat(SEQ_LIMIT)


def test_heartbeat_ahead_and_behind():
    t = SeqTracker()
    t.accept(0)
    assert t.heartbeat(3) == (1, 3)                # 1..3 now missing, lastseen 3
    assert t.lastseen == 3 and t.missing == [(1, 3)]
    assert t.heartbeat(2) is None                  # behind: no change
    assert t.heartbeat(3) is None
    assert t.accept(4) == NEW and t.missing == [(1, 3)]
    assert t.accept(3) == FILL
    assert t.heartbeat(6) == (5, 6)
    assert t.missing == [(1, 2), (5, 6)]


def test_heartbeat_far_boundary():
    """A heartbeat exactly max_gap ahead of next is accepted, like accept();
    one past it is rejected ("more than max_gap ahead").  Regression: the C
    code rejected the boundary case (>= instead of >)."""
    t = SeqTracker(base=0, max_gap=10)
    with pytest.raises(ValueError):
        t.heartbeat(11)
    assert t.next == 0 and t.counters()["far"] == 1
    assert t.heartbeat(10) == (0, 10)
    assert t.next == 11


def test_heartbeat_then_data_merges_intervals():
    t = SeqTracker(max_intervals=1)
    t.accept(0)
    t.heartbeat(5)
    assert t.accept(9) == NEW                      # [6, 8] touches [1, 5]
    assert t.missing == [(1, 8)]


def test_max_intervals_nomem_state_unchanged():
    t = SeqTracker(max_intervals=2)
    t.accept(0)
    t.accept(3)                                     # [1, 2]
    t.accept(6)                                     # [4, 5]
    before = (t.next, t.missing, t.missing_count)
    assert t.accept(9) == NOMEM                     # would need a third interval
    assert (t.next, t.missing, t.missing_count) == before
    assert not t.received(9) and not t.is_missing(9)
    # a split in the middle of an interval also needs one more interval
    t2 = SeqTracker(max_intervals=1)
    t2.accept(0)
    t2.accept(5)                                    # [1, 4]
    assert t2.accept(2) == NOMEM
    assert t2.missing == [(1, 4)] and not t2.received(2)
    assert t2.accept(1) == FILL                     # at an end: no split
    assert t2.missing == [(2, 4)]
    with pytest.raises(MemoryError):
        t2.forget(3, 3)
    assert t2.missing == [(2, 4)]
    with pytest.raises(MemoryError):
        t.heartbeat(20)
    assert t.counters()["nomem"] == 2


def test_forget():
    t = SeqTracker()
    t.accept(0)
    t.accept(10)
    assert t.forget(3, 5) == 3
    assert t.missing == [(1, 2), (6, 9)]
    assert t.received(4) and not t.is_missing(4)
    assert t.forget(20, 30) == 0
    assert t.forget(0, 100) == 6 and t.missing == []
    with pytest.raises(ValueError):
        t.forget(5, 4)


def test_heartbeat_bound_is_not_reported_as_far():
    """Regression: a heartbeat that hits the gap-list bound returned
    RP_EFULL (-3), the same number as -RP_ACC_FAR, so the wrapper (and the
    node) read "gap list full" as "heartbeat too far ahead"."""
    t = SeqTracker(max_gap=100, max_intervals=1)
    t.accept(0)
    t.accept(3)                                     # [1, 2]
    with pytest.raises(MemoryError):
        t.heartbeat(5)                              # would add [4, 5]
    assert t.next == 4 and t.missing == [(1, 2)]
    assert t.counters()["nomem"] == 1 and t.counters()["far"] == 0
    assert t.heartbeat(3) is None                   # old heartbeat: fine
