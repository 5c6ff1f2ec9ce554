"""The sender's loop: wait for the common start, publish for the run's
duration (paced to a rate or as fast as the group takes them), say how many
it sent, then stay up serving repairs until told to stop."""
from __future__ import annotations

import queue
import time

import numpy as np

from rpbcast.tools.stress.worker.channel import emit
from rpbcast.tools.stress.worker.node import (ProtocolEvents, buffers, drain_trace, extensions, final_event,
                                              make_config)

REPORT_EVERY_NS = 250_000_000
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
    end = t0 + int(duration * 1e9)
    next_report = t0
    every = FAULT_REPORT_EVERY_NS if spec.get("faults") else REPORT_EVERY_NS
    blocked = 0
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        k = _due(now, t0, sent, rate, batch) if rate else batch
        if not k:
            continue
        n = batches.publish(node, k, sent)
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
    emit(event="sent", id=node.node_id, inc=node.incarnation, count=sent, blocked=blocked,
         seconds=(time.monotonic_ns() - t0) / 1e9, latest=batches.latest_by_label())
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


def _due(now, t0, sent, rate, batch) -> int:
    """How many messages the rate allows now (at most a batch); with none
    due, sleeps until the next one is (spinning the last 50 us) and says 0."""
    due = int((now - t0) * rate / 1e9) - sent
    if due <= 0:
        wait = (sent + 1) * 1e9 / rate + t0 - now
        if wait > 100_000:
            time.sleep((wait - 50_000) / 1e9)
        return 0
    return min(due, batch)


class _Batches:
    """The payloads of one publish_batch call: `batch` messages of `size`
    bytes, each stamped with its send time; labelled, they carry the stock
    workload's labels and the sender remembers each label's last seq."""

    def __init__(self, size, batch, labelled, seed):
        self.size = size
        self.buf = np.zeros(batch * size, np.uint8)
        self.stamps = self.buf.reshape(batch, size)[:, :8].view(np.uint64)   # send time per message
        self.lens = np.full(batch, size, np.uint32)
        self.labelled = labelled
        if labelled:
            from rpbcast.sim.stock import StockWorkload
            self.workload = StockWorkload(seed=seed)
            self.pending = self.workload.labels(batch)
            self.latest = {}            # label -> last seq sent with it

    def publish(self, node, k, sent) -> int:
        """Publish the first k messages (seqs from `sent` on); how many the
        node took."""
        size = self.size
        self.stamps[:k, 0] = time.monotonic_ns()
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
