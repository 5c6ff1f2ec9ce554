"""The sender's loop: wait for the common start, publish for the run's
duration (paced to a rate or as fast as the group takes them), say how many
it sent, then stay up serving repairs until told to stop."""
from __future__ import annotations

import queue
import struct
import time

import numpy as np

from rpbcast.tools.stress.worker.channel import emit
from rpbcast.tools.stress.worker.node import (ProtocolEvents, buffers, drain_trace, extensions, final_event,
                                              make_config)

REPORT_EVERY_NS = 250_000_000
_STAMP = struct.Struct("<Q")           # a message's first 8 bytes: its stamp (ns)
FAULT_REPORT_EVERY_NS = 100_000_000    # in a run with faults (catch-up times)
STOP_FLUSH_S = 2.0                     # at most this long for the last acknowledgments


def run_sender(spec, cmds, tw_factory):
    """The sender's whole life; returns its node, still open."""
    from rpbcast.api import Node
    node = Node(make_config(spec), trace=spec.get("trace_cap", 0), extensions=extensions(spec))
    tw = tw_factory(node)
    events = ProtocolEvents()
    _send(spec, node, cmds, tw, events)
    emit(**final_event(spec, node, "sender", events))
    return node


def _send(spec, node, cmds, tw, events):
    size, rate, duration = spec["size"], spec["rate"], spec["duration"]     # (a restart sends for the rest)
    batch = spec.get("batch", 1024)
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr)
    start = _wait_for_start(cmds)
    if start is None:
        return
    while time.monotonic_ns() < start:
        time.sleep(0.0005)
    batches = _Batches(size, batch, spec.get("labels", "none") == "stock", node.node_id)
    sent = 0
    t0 = time.monotonic_ns()
    pacer = Pacer(t0, rate, spec.get("stamp", "due") == "due") if rate else None
    end = t0 + int(duration * 1e9)
    next_report = t0
    every = FAULT_REPORT_EVERY_NS if spec.get("faults") else REPORT_EVERY_NS
    blocked = 0
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        k = pacer.due(now, sent, batch) if pacer else batch
        if not k:
            pacer.wait(now, sent)
            continue
        n = batches.publish(node, k, sent, pacer)
        sent += n
        if n < k:
            blocked += 1
            if node.transport.window_room() == 0:
                node.wait_writable(0.005)   # back-pressure: until acknowledgments reopen the window
            else:
                time.sleep(0.0002)          # the store is full: let loggers catch up
        if now >= next_report:
            emit(event="progress", id=node.node_id, inc=node.incarnation, sent=sent, t=now,
                 buffers=buffers(node))
            drain_trace(node, tw)
            events.poll(node)
            next_report = now + every
    # seqs: what the messages used -- a message larger than a datagram takes
    # a seq per fragment (the receivers' check needs it: Tally.strides)
    emit(event="sent", id=node.node_id, inc=node.incarnation, count=sent, seqs=int(node.stats()["sent"]),
         blocked=blocked, seconds=(time.monotonic_ns() - t0) / 1e9, latest=batches.latest_by_label())
    while True:
        try:
            c = cmds.get(timeout=0.1)
        except queue.Empty:
            events.poll(node)
            continue
        drain_trace(node, tw)
        if c["cmd"] == "stop":
            # The receivers are complete, but the loggers' last ACK (a
            # fsync + an ack interval behind) may still be on its way: give
            # it a moment so the final stats show the send buffer at its end.
            node.flush(timeout=STOP_FLUSH_S)
            break


def _wait_for_start(cmds):
    """The common start time (monotonic ns), or None if told to stop first."""
    while True:
        c = cmds.get()
        if c["cmd"] == "start":
            return c["at"]
        if c["cmd"] == "stop":
            return None


class Pacer:
    """The schedule of a sender paced to `rate` messages/s from t0 (ns):
    message i (from 0) is due at t0 + (i + 1) / rate.  Each message is
    stamped with its due time, not with when it went out: a sender that
    fell behind (descheduled, back-pressured) sends its late messages in a
    catch-up batch, and their latency counts from when they should have
    left -- measured from the publish call, the wait would vanish from the
    figures (coordinated omission)."""

    SPIN_NS = 50_000            # the last stretch before a due time is spun, not slept

    def __init__(self, t0: int, rate: float, from_due: bool = True):
        self.t0 = int(t0)
        self.rate = float(rate)
        self.period = 1e9 / self.rate
        self.from_due = from_due    # False (--stamp publish): stamp the publish call instead

    def due_at(self, i: int) -> int:
        """When message i is due (ns)."""
        return self.t0 + int((i + 1) * self.period)

    def due_times(self, first: int, k: int) -> np.ndarray:
        """When messages first..first+k-1 are due (ns)."""
        return self.t0 + ((np.arange(first, first + k) + 1) * self.period).astype(np.int64)

    def due(self, now: int, sent: int, batch: int) -> int:
        """How many messages are due at `now` beyond the `sent` first, at
        most a batch: 1 when the sender keeps up (a lone message goes out
        at once), more when it fell behind."""
        return max(0, min(int((now - self.t0) * self.rate / 1e9) - sent, batch))

    def wait(self, now: int, sent: int) -> None:
        """Until message `sent` is due: sleep, spinning the last SPIN_NS (a
        sleep overshoots by tens of microseconds)."""
        wait = self.t0 + (sent + 1) * self.period - now
        if wait > 2 * self.SPIN_NS:
            time.sleep((wait - self.SPIN_NS) / 1e9)


class _Batches:
    """The payloads of one publish_batch call: `batch` messages of `size`
    bytes, each stamped with its due time (paced) or its send time;
    labelled, they carry the stock workload's labels and the sender
    remembers each label's last seq."""

    def __init__(self, size, batch, labelled, seed):
        self.size = size
        self.buf = np.zeros(batch * size, np.uint8)
        self.stamps = self.buf.reshape(batch, size)[:, :8].view(np.uint64)   # send time per message
        self.lens = np.full(batch, size, np.uint32)
        self.one = memoryview(self.buf.data).cast("B")[:size]     # the first message (its stamp: struct)
        self.labelled = labelled
        if labelled:
            from rpbcast.sim.stock import StockWorkload
            self.workload = StockWorkload(seed=seed)
            self.pending = self.workload.labels(batch)
            self.latest = {}            # label -> last seq sent with it

    def publish(self, node, k, sent, pacer=None) -> int:
        """Publish the first k messages (seqs from `sent` on), stamped with
        their due times (`pacer`) or, unpaced, with the publish call; how
        many the node took.  A lone message too goes out through
        publish_batch: publish() is ~3 us cheaper per call, yet the paced
        sender's p50 at 100 k msgs/s was worse with it in the runs tried,
        for a reason not yet known (docs/performance.md, "The one-way
        tail")."""
        size = self.size
        if pacer is None or not pacer.from_due:
            self.stamps[:k, 0] = time.monotonic_ns()
        elif k == 1:
            _STAMP.pack_into(self.one, 0, pacer.due_at(sent))
        else:
            self.stamps[:k, 0] = pacer.due_times(sent, k)
        if not self.labelled:
            return node.publish_batch(self.buf[:k * size], self.lens[:k])
        pending = self.pending
        n = node.publish_batch(self.buf[:k * size], self.lens[:k], pending[:k])
        for j, label in enumerate(pending[:n].tolist()):
            self.latest[label] = sent + j
        self.pending = np.concatenate([pending[n:], self.workload.labels(n)]) if n else pending
        return n

    def latest_by_label(self):
        """{label: last seq} for the receivers' FIFO-SRB check (None unlabelled)."""
        return {str(k): v for k, v in self.latest.items()} if self.labelled else None
