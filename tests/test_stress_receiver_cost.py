"""What the stress receiver does per message at line rate, cut down (issue
15, the maximum-rate goal: with a flow window the receiving process's core
is full, docs/performance.md "The receiving process at line rate"): a plain
run does not checkpoint its counts (only a run that may kill and restart a
receiver does), and counting many takes at once joins only the columns the
tally reads -- with FIFO-SRB's labels, whose order checks and latest
values must come out as if every take were counted at once."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rpbcast.tools.stress.tally import Tally
from rpbcast.tools.stress.worker import receiver as rw
from test_stress_receiver_defer import T0, FakeNode, payload, tallies_equal


def test_only_a_receiver_that_may_be_restarted_checkpoints():
    path = "recv2.npz"
    assert rw.checkpoint_path({"checkpoint": path}) is None                       # plain run
    assert rw.checkpoint_path({"checkpoint": path, "faults": False}) is None
    assert rw.checkpoint_path({"checkpoint": path, "faults": True}) == path        # a kill may come
    assert rw.checkpoint_path({"checkpoint": path, "restarted": True}) == path     # a later life
    assert rw.checkpoint_path({"faults": True}) is None                            # nowhere to write


class LabelledNode(FakeNode):
    """FakeNode's takes, with each message's label."""

    def __init__(self, takes, labels):
        super().__init__(takes)
        self.labels = list(labels)

    def recv_batch(self, want, buf):
        b = super().recv_batch(want, buf)
        if b.count:
            b = b._replace(labels=np.array(self.labels.pop(0), np.uint64))
        return b


MSG = st.tuples(st.sampled_from([(1, 1), (7, 2)]), st.integers(0, 300), st.sampled_from([8, 64]),
                st.integers(1, 10 ** 8), st.integers(0, 5))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(MSG, min_size=1, max_size=20), st.integers(0, 3_000_000)),
                min_size=1, max_size=20), st.sampled_from([1, 16, 16384]))
def test_deferred_counting_with_labels_equals_counting_every_take(takes, defer_messages):
    now, timed = T0, []
    for msgs, gap in takes:
        now += gap
        timed.append(([(s, i, q, payload(now - lat, size)) for (s, i), q, size, lat, _ in msgs],
                      [lab for *_, lab in msgs], now))
    ref = Tally()
    ref.semantic = True
    for msgs, labs, t in timed:
        ref.add(LabelledNode([msgs], [labs]).recv_batch(1 << 16, bytearray(1 << 16)), t)

    old = rw.DEFER_MESSAGES
    rw.DEFER_MESSAGES = defer_messages
    try:
        app = rw._Application(LabelledNode([m for m, _, _ in timed], [lb for _, lb, _ in timed]),
                              inline=False, slow=0)
        tally = Tally()
        tally.semantic = True
        for *_, t in timed:
            app.hold(app.take(), t, tally)
            app.settle(tally, t)
        app.drain(tally)
    finally:
        rw.DEFER_MESSAGES = old
    tallies_equal(tally, ref)
    assert tally.fifo_violations == ref.fifo_violations
    assert tally.label_last == ref.label_last and tally.last_seq == ref.last_seq
