"""FIFO-SRB queue and window (csrc/srb.h) against tests/models/srb_model.py."""
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from models.srb_model import OLD, QUEUED, QueueFull, SRBQueueModel, SRBWindowModel
from rpbcast.core import srb
from rpbcast.core.srb import SRBQueue, SRBWindow

LABELS = st.sampled_from([None, None, 0, 1, 2, 7, 2**64 - 2])


def test_codes_match_model():
    assert (srb.QUEUED, srb.OLD) == (QUEUED, OLD)
    assert srb.NOLABEL == 2**64 - 1


# ---------------------------------------------------------------------------
# receiver queue

class QueueMachine(RuleBasedStateMachine):
    @initialize(base=st.sampled_from([0, 5, 2**40]), w=st.sampled_from([0, 1, 3, 8]),
                caps=st.sampled_from([(16, 0), (64, 0), (16, 16), (16, 32), (16, 40)]))
    def init(self, base, w, caps):
        cap, max_cap = caps
        self.q = SRBQueue(base, w, cap, max_cap)
        self.m = SRBQueueModel(base, w, max_cap or 1 << 26)
        self.next_handle = 1000
        self.accepted = {}        # handle -> (seq, label) for every QUEUED insert
        self.delivered = []       # (handle, seq) in delivery order
        self.purged = {}          # handle -> seq it had when purged

    def handle(self):
        self.next_handle += 1
        return self.next_handle

    def do_insert(self, seq, label):
        h = self.handle()
        try:
            expect = self.m.insert(seq, label, h)
        except QueueFull:
            with pytest.raises(OverflowError):
                self.q.insert(seq, label, h)
            return
        got = self.q.insert(seq, label, h)
        assert got == expect
        if got == QUEUED:
            self.accepted[h] = (seq, label)
        self.take_purged()

    def take_purged(self):
        got = self.q.take_purged()
        assert got == self.m.take_purged()
        for ps, ph in got:
            assert ph in self.accepted and ph not in self.purged
            ps_, label = self.accepted[ph]
            assert ps_ == ps and label is not None
            # TP4: purged only by a newer message with its label that is in
            # the deliverable prefix [head, ready), hence sure to be delivered
            assert any(lab == label and ps < s < self.q.ready and h not in self.purged
                       for h, (s, lab) in self.accepted.items()), \
                f"{ps} purged without a newer value of label {label} in the prefix"
            self.purged[ph] = ps

    @rule(off=st.one_of(st.integers(-3, 8), st.integers(-3, 40)), label=LABELS)
    def insert(self, off, label):
        self.do_insert(max(0, self.m.head + off), label)

    @precondition(lambda self: self.m.slots)
    @rule(data=st.data(), label=LABELS)
    def insert_duplicate(self, data, label):
        self.do_insert(data.draw(st.sampled_from(sorted(self.m.slots))), label)

    @rule(off=st.one_of(st.integers(-3, 6), st.integers(0, 50)))
    def infer(self, off):
        t = max(0, self.m.head + self.m.w + off)
        try:
            expect = self.m.infer(t)
        except QueueFull:
            with pytest.raises(OverflowError):
                self.q.infer(t)
            return
        assert self.q.infer(t) == expect
        self.take_purged()

    @rule(off=st.integers(-3, 40))
    def mark_purged(self, off):
        seq = max(0, self.m.head + off)
        assert self.q.mark_purged(seq) == self.m.mark_purged(seq)
        self.take_purged()

    @rule(off=st.integers(-3, 40), n=st.integers(0, 12))
    def mark_purged_range(self, off, n):
        lo = max(0, self.m.head + off)
        assert self.q.mark_purged_range(lo, lo + n) == self.m.mark_purged_range(lo, lo + n)
        self.take_purged()

    @rule(max_n=st.one_of(st.integers(1, 4), st.just(1 << 30)))
    def pop(self, max_n):
        assert self.q.peek() == self.m.peek()
        ready = self.q.ready
        got = self.q.pop(max_n)
        assert got == self.m.pop(max_n)
        for h, seq in got:
            # FIFO: strictly increasing seqs
            if self.delivered:
                assert seq > self.delivered[-1][1]
            assert h in self.accepted and h not in self.purged
            assert self.accepted[h][0] == seq
            label = self.accepted[h][1]
            # TP4: never delivered while a newer value of its label is in
            # the deliverable prefix (it would have been purged)
            if label is not None:
                assert not any(lab == label and seq < s < ready for s, lab in self.accepted.values())
            assert seq < ready
            self.delivered.append((h, seq))

    @invariant()
    def agree(self):
        if not hasattr(self, "q"):
            return
        q, m = self.q, self.m
        assert (q.head, q.ready, q.tail, q.pending) == (m.head, m.ready, m.tail, m.pending)
        assert q.counters() == m.counters
        # every accepted message: delivered, purged by a newer one, or pending
        delivered = {h for h, _ in self.delivered}
        pending = set(m.queued().values())
        assert len(delivered) == len(self.delivered)
        assert not (delivered & set(self.purged)) and not (delivered & pending)
        assert not (pending & set(self.purged))
        assert delivered | set(self.purged) | pending == set(self.accepted)


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(stateful_step_count=40)


JUMPS = st.sampled_from([2**16, 2**22, 2**32, 2**40, 2**60])
FAR_END = 2**63            # seqs stay below (the 2^64 wrap is not a case)


class HugeJumpQueueMachine(QueueMachine):
    """The queue with jumps of up to 2^62 ids (a DATA far ahead, a purge
    notice or inference over a huge range) against the same model: it must
    agree, and each step must cost what is held, not the span (a step over
    2^40 ids with work or memory per id would never finish)."""

    @rule(jump=JUMPS, off=st.integers(-2, 2), label=LABELS)
    def insert_far(self, jump, off, label):
        if self.m.head + jump + off < FAR_END:
            self.do_insert(self.m.head + jump + off, label)

    @rule(jump=JUMPS, off=st.integers(-2, 2), upto=st.sampled_from([0, 1, 5]))
    def mark_far_range(self, jump, off, upto):
        # from somewhere near head to far ahead (a GAPNOTE over the gap)
        lo = self.m.head + upto
        hi = max(lo, self.m.head + jump + off)
        if hi >= FAR_END:
            return
        assert self.q.mark_purged_range(lo, hi) == self.m.mark_purged_range(lo, hi)
        self.take_purged()

    @rule(jump=JUMPS, off=st.integers(-2, 2))
    def infer_far(self, jump, off):
        t = self.m.head + self.m.w + jump + off
        if t >= FAR_END:
            return
        try:
            expect = self.m.infer(t)
        except QueueFull:
            with pytest.raises(OverflowError):
                self.q.infer(t)
            return
        assert self.q.infer(t) == expect
        self.take_purged()


TestHugeJumpQueueMachine = HugeJumpQueueMachine.TestCase
TestHugeJumpQueueMachine.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)


def test_queue_fifo_and_gaps():
    q = SRBQueue()
    assert q.insert(1, None, 11) == QUEUED
    assert q.pop() == []                               # 0 missing: FIFO waits
    assert q.insert(0, None, 10) == QUEUED
    assert q.pop() == [(10, 0), (11, 1)]
    assert q.insert(1, None, 99) == OLD                # below head
    assert q.head == 2 and q.pending == 0


def test_queue_tp4_purge_queued():
    q = SRBQueue()
    q.insert(0, None, 10)
    assert q.insert(1, 5, 11) == QUEUED
    assert q.insert(2, 5, 12) == QUEUED                # enters the prefix: 1 obsoleted by 2
    assert q.take_purged() == [(1, 11)]
    assert q.insert(3, 6, 13) == QUEUED                # other label untouched
    assert q.take_purged() == []
    assert q.pop() == [(10, 0), (12, 2), (13, 3)]
    assert q.counters()["purged_queue"] == 1


def test_queue_tp4_waits_for_the_prefix():
    """A newer value queued beyond a gap purges nothing until the gap is
    settled: the gap may never fill (its message reached nobody and the
    sender crashed), and then the newer value is never delivered either."""
    q = SRBQueue()
    q.insert(0, 5, 10)
    q.insert(1, None, 11)
    assert q.insert(3, 5, 13) == QUEUED                # 2 missing
    assert q.take_purged() == [] and q.ready == 2
    assert q.pop() == [(10, 0), (11, 1)]               # the old value is delivered
    # ... and when the gap fills, TP4 applies to what is still queued
    q = SRBQueue()
    q.insert(1, None, 11)                              # 0 missing: hold delivery back
    q.insert(2, 5, 12)
    q.insert(3, 5, 13)
    q.insert(5, 5, 15)
    q.insert(4, 6, 14)
    assert q.take_purged() == [] and q.ready == 0
    assert q.insert(3, 5, 99) == OLD                   # its slot is settled
    q.insert(0, None, 10)
    assert q.ready == 6
    assert q.take_purged() == [(2, 12), (3, 13)]       # 2 by 3, then 3 by 5
    assert [s for _, s in q.pop()] == [0, 1, 4, 5]
    assert q.counters()["purged_queue"] == 2


def test_queue_inference_settles_the_prefix():
    """A gap inferred purged (or marked purged) lets what follows into the
    prefix, where TP4 applies."""
    q = SRBQueue(w=4)
    q.insert(0, 5, 10)
    q.insert(2, 5, 12)
    assert q.take_purged() == []
    assert q.infer(5) == (1, 1, 1)                     # 1 left the window unseen
    assert q.take_purged() == [(0, 10)]
    assert q.pop() == [(12, 2)]
    q = SRBQueue()
    q.insert(0, 5, 10)
    q.insert(2, 5, 12)
    assert q.mark_purged(1) is True
    assert q.take_purged() == [(0, 10)]


def test_queue_label_forgotten_after_delivery():
    q = SRBQueue()
    q.insert(0, 1, 10)
    assert q.pop() == [(10, 0)]
    assert q.insert(1, 1, 11) == QUEUED                # nothing left to purge
    assert q.take_purged() == []
    assert q.pop() == [(11, 1)]


def test_queue_purge_inference():
    q = SRBQueue(w=4)
    q.insert(1, None, 11)
    assert q.infer(3) == (0, None, None)               # t < w
    assert q.infer(6) == (2, 0, 2)                     # 0 and 2 purged, 1 received
    assert q.pop() == [(11, 1)]
    assert q.head == 3
    assert q.insert(2, None, 12) == OLD
    assert q.infer(6) == (0, None, None)
    assert q.infer(9) == (3, 3, 5)                     # extends the tail
    assert q.tail == 6 and q.pop() == []
    assert q.head == 6
    assert SRBQueue(w=0).infer(100) == (0, None, None)  # w = 0: no inference


def test_queue_mark_purged():
    q = SRBQueue()
    q.insert(1, None, 11)
    assert q.mark_purged(1) is False                   # received: not purged
    assert q.mark_purged(0) is True
    assert q.mark_purged(0) is False
    assert q.mark_purged(3) is True                    # above the tail
    assert q.pop() == [(11, 1)] and q.head == 2
    q.insert(2, None, 12)
    assert q.pop() == [(12, 2)] and q.head == 4


def test_queue_bounded_by_what_it_holds_not_by_span():
    q = SRBQueue(cap=16, max_cap=16)
    for i in range(16):
        assert q.insert(2 * i + 1, None, i) == QUEUED      # 16 messages, 16 runs
    with pytest.raises(OverflowError):
        q.insert(100, None, 99)                          # a 17th message
    assert q.mark_purged(2**40) is False                 # a 17th run
    assert q.mark_purged(0) is True                      # joins two runs: room
    assert [s for _, s in q.pop()] == [1]
    q = SRBQueue(cap=16, max_cap=16)
    assert q.insert(2**40, None, 1) == QUEUED            # far ahead: one entry
    assert q.mark_purged_range(0, 2**40 - 1) == 2**40    # one interval
    assert q.pop() == [(1, 2**40)] and q.head == q.tail == 2**40 + 1
    with pytest.raises(ValueError):
        SRBQueue(cap=64, max_cap=16)
    with pytest.raises(ValueError):
        q.insert(0, 2**64 - 1, 3)                      # reserved label


def test_queue_ring_growth_keeps_entries():
    q = SRBQueue(cap=16)
    for s in range(1, 100, 3):
        q.insert(s, s % 5, s)
    q.insert(0, None, 0)
    got = q.pop()
    assert got[0] == (0, 0)
    seqs = [s for _, s in got]
    assert seqs == sorted(seqs)


# ---------------------------------------------------------------------------
# sender window

class WindowMachine(RuleBasedStateMachine):
    @initialize(base=st.sampled_from([0, 3, 2**40]), w=st.sampled_from([1, 2, 3, 8, 16, 17]))
    def init(self, base, w):
        self.s = SRBWindow(base, w)
        self.m = SRBWindowModel(base, w)
        self.next_handle = 0
        self.sent_handles = {}     # handle -> seq
        self.returned = {}         # handle -> "purged" | "stable"

    @rule(label=st.sampled_from([None, 0, 1, 1, 2]))
    def send(self, label):
        self.next_handle += 1
        h = self.next_handle
        assert self.s.can_send == self.m.can_send
        seq = self.m.sent(label, h)
        if seq is None:
            with pytest.raises(BlockingIOError):
                self.s.sent(label, h)
        else:
            assert self.s.sent(label, h) == seq
            self.sent_handles[h] = seq

    def note_returned(self, handles, how):
        for h in handles:
            assert h in self.sent_handles
            assert h not in self.returned, "handle returned twice"
            self.returned[h] = how

    @rule(off=st.integers(-2, 20))
    def set_safe(self, off):
        upto = max(0, self.m.low + off)
        got = self.s.set_safe(upto)
        assert got == self.m.set_safe(upto)
        for seq, sup, h in got:
            # TP5: purged only once its (same-label, newer) successor is safe
            assert sup < upto and seq < sup
            assert self.m.msgs[seq]["label"] is not None
            assert self.m.msgs[seq]["label"] == self.m.msgs[sup]["label"]
        self.note_returned([h for _, _, h in got], "purged")

    @rule(off=st.integers(-2, 20))
    def set_stable(self, off):
        upto = max(0, self.m.low + off)
        got = self.s.set_stable(upto)
        assert got == self.m.set_stable(upto)
        self.note_returned(got, "stable")

    @rule(off=st.integers(-40, 2))
    def purged_by(self, off):
        seq = max(0, self.m.next + off)
        assert self.s.purged_by(seq) == self.m.purged_by(seq)

    @invariant()
    def agree(self):
        if not hasattr(self, "s"):
            return
        s, m = self.s, self.m
        assert (s.next, s.low, s.w, s.safe, s.stable) == (m.next, m.low, m.w, m.safe, m.stable)
        assert s.can_send == m.can_send
        # `stable` is exactly the highest upto the caller declared (capped at
        # next, compared above); below it nothing is still outstanding
        assert all(m.msgs[q]["state"] in (m.STABLE, m.PURGED) for q in range(m.base, s.stable))
        assert s.safe >= s.stable
        # window: never more than w outstanding
        assert m.next - m.low <= m.w
        # every handle is either still outstanding or returned exactly once
        out = m.outstanding()
        assert not (out & set(self.returned))
        assert out | set(self.returned) == set(self.sent_handles)


TestWindowMachine = WindowMachine.TestCase
TestWindowMachine.settings = settings(stateful_step_count=50)


def test_window_blocks_and_reopens():
    w = SRBWindow(w=2)
    assert w.sent(None, 1) == 0
    assert w.sent(None, 2) == 1
    assert not w.can_send
    with pytest.raises(BlockingIOError):
        w.sent(None, 3)
    assert w.set_stable(1) == [1]
    assert w.low == 1 and w.can_send
    assert w.sent(None, 3) == 2


def test_window_tp5_purge_waits_for_safe_successor():
    w = SRBWindow(w=4)
    w.sent(7, 10)                    # 0
    w.sent(7, 11)                    # 1 obsoletes 0
    w.sent(None, 12)                 # 2
    w.sent(7, 13)                    # 3 obsoletes 1
    assert not w.can_send
    assert w.set_safe(1) == []       # successor of 0 (seq 1) not safe yet
    assert w.purged_by(0) is None
    assert w.set_safe(2) == [(0, 1, 10)]
    assert w.low == 1 and w.purged_by(0) == 1
    assert w.set_safe(4) == [(1, 3, 11)]
    assert w.low == 2                # 2 is still outstanding
    assert w.set_stable(4) == [12, 13]
    assert w.low == 4 and w.stable == 4


def test_window_stable_before_safe_releases_once():
    w = SRBWindow(w=8)
    w.sent(1, 100)
    w.sent(1, 101)                   # 0 obsolete
    assert w.set_stable(2) == [100, 101]
    assert w.set_safe(2) == []       # already handed back as stable
    assert w.purged_by(0) is None


def test_window_label_after_stable_predecessor():
    w = SRBWindow(w=8)
    w.sent(1, 100)
    assert w.set_stable(1) == [100]
    w.sent(1, 101)                   # predecessor is gone: nothing to obsolete
    assert w.set_safe(2) == []
    assert w.set_stable(2) == [101]


def test_window_purged_by_until_slot_reused():
    w = SRBWindow(w=16)              # ring of 16
    w.sent(1, 0)
    w.sent(1, 1)                     # seq 0 superseded by 1
    assert w.set_safe(2) == [(0, 1, 0)]
    w.set_stable(2)
    for h in range(2, 16):
        w.sent(None, h)
        w.set_stable(w.next)
    assert w.next == 16 and w.purged_by(0) == 1    # slot 0 not reused yet
    w.sent(None, 16)                                # seq 16 reuses slot 0
    assert w.purged_by(0) is None


def test_window_stable_not_moved_over_purged_seqs():
    """Regression: set_stable() set `stable` to the window's low end even
    when upto was below it, so seqs that were purged (never acknowledged)
    counted as stable ("every seq < stable is stable", srb.h)."""
    w = SRBWindow(w=8)
    w.sent(1, 10)
    w.sent(1, 11)                    # 0 obsoleted by 1
    assert w.set_safe(2) == [(0, 1, 10)]
    assert w.low == 1 and w.stable == 0
    assert w.set_stable(0) == []
    assert w.stable == 0             # seq 0 was purged, not stable
    assert w.set_stable(2) == [11]
    assert w.stable == 2


def test_window_argument_checks():
    with pytest.raises(ValueError):
        SRBWindow(w=0)
    with pytest.raises(ValueError):
        SRBWindow(w=(1 << 24) + 1)
    with pytest.raises(ValueError):
        SRBWindow().sent(2**64 - 1, 1)


def test_window_many_purges_in_one_call():
    """More than one C batch (256) of purges from one set_safe call."""
    w = SRBWindow(w=2048)
    for i in range(600):
        w.sent(i % 2, i)
    got = w.set_safe(600)
    assert [s for s, _, _ in got] == list(range(598))
    assert all(sup == s + 2 for s, sup, _ in got)
    assert w.set_stable(600) == [598, 599]
    assert w.low == 600


def test_many_labels_queue_and_window():
    """More labels than the label index's initial size (rehashing in
    csrc/hmap.c), each label used several times."""
    q = SRBQueue(cap=16)
    qm = SRBQueueModel()
    w = SRBWindow(w=4096)
    wm = SRBWindowModel(w=4096)
    seq = 1
    for rep in range(3):
        for label in range(300):
            h = rep * 1000 + label
            assert q.insert(seq, label, h) == qm.insert(seq, label, h)
            assert w.sent(label, h) == wm.sent(label, h)
            seq += 1
    assert q.insert(0, None, -1 % 2**64) == qm.insert(0, None, -1 % 2**64)
    got = q.pop()
    assert got == qm.pop()
    assert [h for h, _ in got][1:] == [2000 + label for label in range(300)]
    assert w.set_safe(w.next) == wm.set_safe(wm.next)
    assert w.set_stable(w.next) == wm.set_stable(wm.next)
    assert w.low == w.next
