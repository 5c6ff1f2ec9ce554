"""The paced stress sender (issue 15, one way at 100 k msgs/s): each
message is stamped with the time it was due, not with when it went out --
a sender that fell behind and caught up with a batch must show the wait in
the latency it reports (coordinated omission) -- and a lone message due
alone goes out at once.  The
receiver, after a take that emptied its queue, waits before it takes again
(a wait returns at once when something is pending) instead of an empty take
before every message."""
import queue
import struct
import threading
import time

import numpy as np
import pytest

from rpbcast.tools.stress.worker import receiver as rw
from rpbcast.tools.stress.worker import sender as sw

STAMP = struct.Struct("<Q")


class RecordingNode:
    """What a sender hands its node: every message's stamp (its first 8
    bytes) and which call carried it."""

    node_id, incarnation, addr = 1, 1, "127.0.0.1:1"

    def __init__(self, refuse=0):
        self.stamps = []
        self.calls = []
        self.refuse = refuse        # refuse this many publishes (back-pressure)

    def publish_batch(self, payloads, lens, labels=None, stream=0):
        if self.refuse:
            self.refuse -= 1
            return 0
        buf = bytes(payloads)
        k = len(lens)
        self.calls.append(("batch", k))
        size = int(lens[0])
        self.stamps.extend(STAMP.unpack_from(buf, i * size)[0] for i in range(k))
        return k


def test_a_lone_due_message_goes_out_at_once_stamped_with_its_due_time():
    pacer = sw.Pacer(t0=1_000_000_000, rate=100_000)
    b = sw._Batches(64, 16, False, 1)
    node = RecordingNode()
    assert b.publish(node, 1, 7, pacer) == 1
    assert node.calls == [("batch", 1)]
    assert node.stamps == [1_000_000_000 + 8 * 10_000]      # message 7 is due at t0 + 8 periods


def test_a_catch_up_batch_is_stamped_with_each_message_due_time():
    pacer = sw.Pacer(t0=5_000, rate=1_000)                  # 1 ms apart
    b = sw._Batches(64, 16, False, 1)
    node = RecordingNode()
    assert b.publish(node, 5, 10, pacer) == 5
    assert node.calls == [("batch", 5)]
    assert node.stamps == [5_000 + (i + 1) * 1_000_000 for i in range(10, 15)]


def test_unpaced_batches_keep_the_publish_time():
    b = sw._Batches(64, 4, False, 1)
    node = RecordingNode()
    t = time.monotonic_ns()
    assert b.publish(node, 4, 0) == 4
    assert all(t <= s <= time.monotonic_ns() for s in node.stamps)


@pytest.mark.parametrize("now_periods, sent, batch, want", [
    (0.5, 0, 16, 0), (1.0, 0, 16, 1), (3.2, 2, 16, 1), (40, 3, 16, 16), (2, 5, 16, 0)])
def test_how_many_are_due(now_periods, sent, batch, want):
    pacer = sw.Pacer(t0=10 ** 9, rate=100_000)
    assert pacer.due(10 ** 9 + int(now_periods * 10_000), sent, batch) == want


def _run_sender(rate, duration, node):
    """The sender's real loop against a recording node: started at once,
    stopped when it says it sent."""
    cmds = queue.Queue()
    cmds.put({"cmd": "start", "at": time.monotonic_ns()})
    spec = {"size": 64, "rate": rate, "duration": duration, "batch": 64}
    events = sw.ProtocolEvents()
    node.events = lambda: []
    node.transport = type("T", (), {"window_room": staticmethod(lambda: 1)})()
    node.stats = lambda: {"store_entries": 0, "store_bytes": 0, "gossip_buffer_entries": 0,
                          "gossip_buffer_bytes": 0, "sent": len(node.stamps)}   # seqs: one a message
    node.flush = lambda timeout=None: True
    threading.Timer(duration + 1.0, lambda: cmds.put({"cmd": "stop"})).start()
    t0 = time.monotonic_ns()
    sw._send(spec, node, cmds, None, events)
    return t0


def test_the_paced_sender_stamps_its_schedule_whatever_its_lag(capsys):
    """At 20 k msgs/s for 0.2 s: every stamp is the schedule's (one period
    apart exactly, from the start), whatever went out alone or in a
    catch-up batch."""
    node = RecordingNode()
    rate = 20_000
    t0 = _run_sender(rate, 0.2, node)
    stamps = np.array(node.stamps, np.int64)
    assert 0.5 * rate * 0.2 <= len(stamps) <= rate * 0.2 + 1     # (a loaded machine sends fewer)
    gaps = np.diff(stamps)
    assert np.all(np.abs(gaps - 1e9 / rate) <= 1)           # the schedule, not the send times
    assert t0 <= stamps[0] - 1e9 / rate <= t0 + 200_000_000  # message 0 due one period after the start
    assert any(k == 1 for _, k in node.calls)               # a message due alone goes out alone
    assert all(k <= 64 for _, k in node.calls)              # catching up: at most a batch per call


def test_a_sender_held_back_stamps_the_messages_it_sent_late_with_their_due_time(capsys):
    """Refused for a while (back-pressure), the sender catches up with a
    batch: those messages carry their due times, earlier than their send."""
    node = RecordingNode(refuse=200)
    _run_sender(10_000, 0.2, node)
    stamps = np.array(node.stamps, np.int64)
    assert np.all(np.abs(np.diff(stamps) - 100_000) <= 1)
    assert any(c == "batch" and k > 1 for c, k in node.calls)


class CountingNode:
    """Deliveries that arrive while the application waits, counting calls."""

    def __init__(self, arrivals):
        self.arrivals = list(arrivals)     # messages that arrive, one per wait
        self.pending = 0
        self.calls = []

    def recv_batch(self, want, buf):
        from rpbcast.api import Batch
        self.calls.append("take")
        k, self.pending = min(self.pending, want), self.pending - min(self.pending, want)
        buf[:64 * k] = bytes(64 * k)
        return Batch(k, np.ones(k, np.uint32), np.ones(k, np.uint32), np.arange(k, dtype=np.uint64),
                     np.zeros(k, np.uint64), np.zeros(k, np.int64), np.arange(k, dtype=np.uint32) * 64,
                     np.full(k, 64, np.uint32), buf, np.zeros(k, np.uint32))

    def wait(self, timeout):
        self.calls.append("wait")
        if not self.pending and self.arrivals:
            self.pending += self.arrivals.pop(0)
        return self.pending > 0


def test_after_a_take_that_emptied_the_queue_the_receiver_waits_first():
    """Lone messages: each costs a wait and one take, not an empty take, a
    wait and a take."""
    node = CountingNode([1, 1, 1])
    app = rw._Application(node, inline=False, slow=0)
    app.trickle = True
    for _ in range(3):
        assert app.next_take().count == 1
    assert node.calls == ["wait", "take"] * 3


def test_after_a_large_take_the_receiver_takes_again_before_waiting():
    """A stream: after a take of many messages the next take comes first
    (the old order), whether or not the first filled its batch."""
    node = CountingNode([])
    node.pending = rw.BATCH + 5 + rw.TRICKLE
    app = rw._Application(node, inline=False, slow=0)
    assert app.next_take().count == rw.BATCH
    node.pending = rw.TRICKLE
    assert app.next_take().count == rw.TRICKLE
    assert app.next_take().count == 0
    assert node.calls == ["take", "take", "take"]
def test_stamp_publish_stamps_the_publish_call_instead():
    """--stamp publish: the latency counts from the call that sent it."""
    pacer = sw.Pacer(t0=0, rate=1_000, from_due=False)
    b = sw._Batches(64, 16, False, 1)
    node = RecordingNode()
    t = time.monotonic_ns()
    b.publish(node, 1, 3, pacer)
    b.publish(node, 3, 4, pacer)
    assert all(t <= s <= time.monotonic_ns() for s in node.stamps) and len(node.stamps) == 4


def _sender_spec(tmp_path, *argv):
    from stressrun import stress_args

    from rpbcast.tools.stress.plan import make_plan, worker_spec
    args = stress_args(*argv, "--run-dir", str(tmp_path / "run"))
    args.faults_named = False
    plan = make_plan(args, use_ns=False)
    return worker_spec(args, plan, plan.senders[0], "sender")


def test_the_stamp_option_reaches_the_sender(tmp_path):
    assert _sender_spec(tmp_path, "--rate", "1000")["stamp"] == "due"
    assert _sender_spec(tmp_path, "--rate", "1000", "--stamp", "publish")["stamp"] == "publish"
