"""The receiver's loop: an application taking what its node delivers (at
most --slow-receiver messages/s if throttled), counted by a ``Tally`` that
is checkpointed so a restarted receiver resumes; it says when everything the
orchestrator told it to expect has arrived, and reports the check at the end."""
from __future__ import annotations

import time

import numpy as np

from rpbcast.tools.stress.tally import Tally
from rpbcast.tools.stress.worker.channel import emit
from rpbcast.tools.stress.worker.node import (ProtocolEvents, buffers, drain_trace, extensions, final_event,
                                              make_config)

REPORT_EVERY_NS = 250_000_000          # progress, and the checkpoint
COMMIT_EVERY_NS = 100_000_000          # the checkpoint, when it is what the node may report (flow_commit)
FAULT_REPORT_EVERY_NS = 100_000_000    # progress in a run with faults (catch-up times)
BATCH = 65536
# The counting (Tally.add: 20-120 us of NumPy per call, whatever the batch)
# is deferred and done for many takes at once: while it runs, messages wait
# in the socket, and at 100 k msgs/s a count per take was most of the
# receiver's cycle and so of the latency it reports (docs/performance.md).
# At line rate the age bound (DEFER_NS) is what counts; the count bound is
# high so that NumPy's per-call cost is paid per ~10,000 messages, not per
# 4,096 (the count was ~20 ns a message of the receiving process's
# ~160 with a flow window, 12 ns this way: "The receiving process at line
# rate").
DEFER_MESSAGES = 16384
DEFER_NS = 2_000_000
TRICKLE = 64                    # a take of fewer messages: a trickle (next_take)
BUF_BYTES = 64 << 20
BUF_RESERVE = 8 << 20           # count before a take could find less room than this
LOST_CHECK_EVERY_NS = 50_000_000       # pbcast: are all ids delivered or given up?


def run_receiver(spec, cmds, tw_factory):
    """The receiver's whole life; returns its node, still open."""
    ckpt = checkpoint_path(spec)
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
        b = app.next_take()
        now = time.monotonic_ns()
        if b.count:
            app.hold(b, now, tally)
        if orders.read(cmds):
            completed = False               # new orders: say so again once they are met
            tally.strides = orders.strides
        # what the checks and reports below read must be counted first
        app.settle(tally, now, force=(orders.expect is not None and not completed) or now >= next_report
                   or bool(ckpt and now >= next_save))
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


def checkpoint_path(spec):
    """Where the counts are checkpointed, or None: only in a run with
    faults (one may kill this receiver and restart it) or in a restarted
    life.  A plain run never restarts a receiver, and the checkpoint --
    the whole counts array, a byte per message sent, zipped with a CRC
    every 250 ms -- was 17 % of its application thread's CPU at line rate
    (docs/performance.md, "The receiving process at line rate")."""
    if spec.get("faults") or spec.get("restarted"):
        return spec.get("checkpoint")
    return None


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
        self.buf = bytearray(BUF_BYTES)
        self.view = memoryview(self.buf)
        self.pos = 0                    # where the next take writes its payloads
        self.held = []                  # (batch, its offset in buf, when taken): not counted yet
        self.n_held = 0
        self.consumed = 0
        self.t_slow = time.monotonic_ns()
        self.trickle = False            # the last take was a few messages: wait before taking again

    def take(self):
        want = BATCH
        if self.slow:
            # a throttled application: take at most `slow` messages per second
            allowed = int((time.monotonic_ns() - self.t_slow) * self.slow / 1e9) - self.consumed
            want = max(0, min(want, allowed))
            if not want:
                time.sleep(0.001)
        # each take writes behind the ones held, so they stay readable until counted
        room = self.view[self.pos:]
        if self.inline:
            b = self.node.poll(0.01 if want else 0.0, want, room)   # waits in the loop itself
        else:
            b = self.node.recv_batch(want, room)
        self.consumed += b.count
        self.trickle = b.count < TRICKLE
        return b

    def next_take(self):
        """The next take.  After a take of a few messages (a trickle: a
        paced feed) wait first -- a wait returns at once when deliveries
        are pending -- instead of a take that finds nothing and then a
        wait: the empty take's ~2-3 us of Python came before every message
        (docs/performance.md, "The one-way tail").  After a larger take
        (a stream) take again first, as before: a wait between two takes
        of a stream hands the sockets to this thread and leaves the loop
        thread's receive pipeline idle."""
        if self.inline or self.slow or not self.trickle:
            return self.take()
        return self.wait_take() or self.take()

    def wait_take(self):
        """Nothing was there: wait for the node (at most 10 ms) and take
        what the wait saw at once, not after a turn of the orders, checks
        and reports below (the message would wait for them); None if the
        wait saw nothing."""
        if self.node.wait(0.01):
            return self.take()
        return None

    def hold(self, b, now, tally):
        """Keep a take for counting later (a large message the node put in
        a buffer of its own is counted now, with what is held)."""
        k = b.count
        if b.buf is not self.view and not (isinstance(b.buf, memoryview) and b.buf.obj is self.buf):
            self.settle(tally, now, force=True)
            tally.add(b, now)
            return
        self.held.append((b, self.pos, now))
        self.n_held += k
        self.pos += int(b.offs[k - 1]) + int(b.lens[k - 1])

    def settle(self, tally, now, force=False):
        """Count what is held when it is much, old, near the buffer's end,
        or when `force`d (a check or report reads the tally)."""
        if not self.held or not (force or self.n_held >= DEFER_MESSAGES or now - self.held[0][2] >= DEFER_NS
                                 or self.pos > BUF_BYTES - BUF_RESERVE):
            return
        if len(self.held) == 1:
            b, _, t = self.held[0]
            tally.add(b, t)
        else:
            tally.add(_merged(self.held, self.buf, tally.semantic), np.repeat(
                np.array([t for _, _, t in self.held], np.int64), [b.count for b, _, _ in self.held]))
        self.held.clear()
        self.n_held = 0
        self.pos = 0

    def drain(self, tally):
        """Count what is left in the delivery queue, unthrottled."""
        self.settle(tally, time.monotonic_ns(), force=True)
        while True:
            b = self.node.poll(0.0, BATCH, self.buf) if self.inline else self.node.recv_batch(BATCH, self.buf)
            if not b.count:
                break
            tally.add(b, time.monotonic_ns())


def _merged(held, buf, labels=True):
    """Several takes as one batch over the whole buffer (their payloads lie
    back to back in it, each take's offsets relative to where it wrote).
    Only the columns a Tally reads are joined (labels only when it tracks
    them: FIFO-SRB): at line rate the joins were a quarter of the count."""
    from rpbcast.api import Batch

    def cat(i):
        return np.concatenate([b[i][:b.count] for b, _, _ in held])
    offs = np.concatenate([b.offs[:b.count].astype(np.int64) + pos for b, pos, _ in held])
    return Batch(sum(b.count for b, _, _ in held), cat(1), cat(2), cat(3), cat(4) if labels else None, None,
                 offs, cat(7), buf, None)


class _Orders:
    """What the orchestrator said: the counts to expect per (sender, inc),
    for FIFO-SRB each label's latest seq, and the streams of killed senders
    whose count nobody knows (every receiver must agree on them); and
    whether to stop."""

    def __init__(self):
        self.expect = None
        self.latest = None
        self.agree = []
        self.strides = {}         # (sender, inc) -> seqs per message (Tally.strides)
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
                self.strides = {tuple(map(int, k.split("/"))): int(v) for k, v in c.get("strides", {}).items()}
                self.agree = [tuple(map(int, k.split("/"))) for k in c.get("agree", [])]
            elif c["cmd"] == "stop":
                self.stop = True
        return changed
