"""The receiver's loop: an application taking what its node delivers (at
most --slow-receiver messages/s if throttled), counted by a ``Tally`` that
is checkpointed so a restarted receiver resumes; it says when everything the
orchestrator told it to expect has arrived, and reports the check at the end."""
from __future__ import annotations

import time

from rpbcast.tools.stress.tally import Tally
from rpbcast.tools.stress.worker.channel import emit
from rpbcast.tools.stress.worker.node import (ProtocolEvents, buffers, drain_trace, extensions, final_event,
                                              make_config)

REPORT_EVERY_NS = 250_000_000          # progress, and the checkpoint
COMMIT_EVERY_NS = 100_000_000          # the checkpoint, when it is what the node may report (flow_commit)
FAULT_REPORT_EVERY_NS = 100_000_000    # progress in a run with faults (catch-up times)
BATCH = 65536
LOST_CHECK_EVERY_NS = 50_000_000       # pbcast: are all ids delivered or given up?


def run_receiver(spec, cmds, tw_factory):
    """The receiver's whole life; returns its node, still open."""
    ckpt = spec.get("checkpoint")
    tally = Tally.load(ckpt)
    tally.semantic = bool(spec.get("semantic"))
    from rpbcast.api import Node
    inline = bool(spec.get("inline"))          # drive the loop from this thread (Node.poll)
    node = Node(make_config(spec), resume=tally.delivered_seqs() or None, trace=spec.get("trace_cap", 0),
                extensions=extensions(spec), start=not inline)
    tw = tw_factory(node)
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr, resumed=len(tally.counts))
    app = _Application(node, inline, spec.get("slow", 0))
    orders = _Orders()
    events = ProtocolEvents()
    completed = False
    next_report = next_save = next_lost_check = 0
    watched = bool(spec.get("faults"))        # report what it has often: the run measures catch-up
    # a probabilistic protocol (pbcast) gives ids up: its receiver is done
    # when every id was delivered or given up (the summary reports the
    # delivered fraction, not exactly once)
    gives_up = spec["config"].get("protocol", "rpbcast") == "pbcast"
    every = FAULT_REPORT_EVERY_NS if watched else REPORT_EVERY_NS
    commits = bool(spec["config"].get("flow_commit"))
    save_every = COMMIT_EVERY_NS if commits else REPORT_EVERY_NS
    while not orders.stop:
        b = app.take()
        now = time.monotonic_ns()
        if b.count:
            tally.add(b, now)
        elif not inline:
            node.wait(0.01)
        if orders.read(cmds):
            completed = False               # new orders: say so again once they are met
        given_up = False
        if gives_up and orders.expect is not None and not completed and now >= next_lost_check:
            events.poll(node)
            given_up = bool(events.lost) and tally.accounted(orders.expect, events.lost)
            next_lost_check = now + LOST_CHECK_EVERY_NS
        if orders.expect is not None and not completed and (
                given_up or tally.complete(orders.expect, orders.latest)):
            completed = True
            emit(event="complete", id=node.node_id, t=now)
        if now >= next_report:
            # have: every distinct message delivered, checkpointed lives included
            # prefix: per stream, how many from seq 0 on it has them all (catch-up)
            more = {"have": tally.have(), "prefix": tally.prefixes(), "t": now,
                    "agree": tally.digests(orders.agree)} if watched else {}
            emit(event="progress", id=node.node_id, delivered=tally.delivered, buffers=buffers(node), **more)
            drain_trace(node, tw)
            events.poll(node)
            next_report = now + every
        if ckpt and now >= next_save:
            _checkpoint(node, tally, ckpt, commits)
            next_save = now + save_every
    app.drain(tally)
    if ckpt:
        _checkpoint(node, tally, ckpt, commits)
    drain_trace(node, tw)
    rate = tally.delivered / ((tally.last - tally.first) / 1e9) if tally.first and tally.last > tally.first else 0
    emit(**final_event(spec, node, "receiver", events, delivered=tally.delivered, rate=rate,
                       first=tally.first, last=tally.last,
                       check=tally.check(orders.expect or {}, orders.latest, orders.agree),
                       hist=tally.hist.tolist()))
    return node


def _checkpoint(node, tally, path, commits):
    """Save the counts; with flow_commit, then tell the node that what they
    hold from seq 0 on is durable (its flow reports may now say so)."""
    tally.save(path)
    if commits:
        node.commit({tuple(map(int, k.split("/"))): p for k, p in tally.prefixes().items()})


class _Application:
    """The receiving application: takes batches from the node's delivery
    queue, from the application thread of the node's loop or driving the
    loop itself (inline, Node.poll), at most `slow` messages per second when
    throttled."""

    def __init__(self, node, inline, slow):
        self.node = node
        self.inline = inline
        self.slow = slow
        self.buf = bytearray(64 << 20)
        self.consumed = 0
        self.t_slow = time.monotonic_ns()

    def take(self):
        want = BATCH
        if self.slow:
            # a throttled application: take at most `slow` messages per second
            allowed = int((time.monotonic_ns() - self.t_slow) * self.slow / 1e9) - self.consumed
            want = max(0, min(want, allowed))
            if not want:
                time.sleep(0.001)
        if self.inline:
            b = self.node.poll(0.01 if want else 0.0, want, self.buf)   # waits in the loop itself
        else:
            b = self.node.recv_batch(want, self.buf)
        self.consumed += b.count
        return b

    def drain(self, tally):
        """Count what is left in the delivery queue, unthrottled."""
        while True:
            b = self.node.poll(0.0, BATCH, self.buf) if self.inline else self.node.recv_batch(BATCH, self.buf)
            if not b.count:
                break
            tally.add(b, time.monotonic_ns())


class _Orders:
    """What the orchestrator said: the counts to expect per (sender, inc),
    for FIFO-SRB each label's latest seq, and the streams of killed senders
    whose count nobody knows (every receiver must agree on them); and
    whether to stop."""

    def __init__(self):
        self.expect = None
        self.latest = None
        self.agree = []
        self.stop = False
        self._counts = self._agree = None

    def read(self, cmds) -> bool:
        """Take the waiting commands; whether the expectation changed."""
        changed = False
        while not cmds.empty():
            c = cmds.get()
            if c["cmd"] == "expect":
                changed = changed or c["counts"] != self._counts or c.get("agree", []) != self._agree
                self._counts, self._agree = c["counts"], c.get("agree", [])
                self.expect = {tuple(map(int, k.split("/"))): v for k, v in c["counts"].items()}
                self.latest = c.get("latest")
                self.agree = [tuple(map(int, k.split("/"))) for k in c.get("agree", [])]
            elif c["cmd"] == "stop":
                self.stop = True
        return changed
