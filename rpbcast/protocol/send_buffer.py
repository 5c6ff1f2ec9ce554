"""The sender's send buffer: what a published message waits for before it may
leave (and what publish() blocks on when the buffer is full).

``LoggerAcks`` is the sender's side of logging (thesis §3.1): which of our
messages each logger holds -- LOGACK, or a logger's frontiers in its gossip
(§5.2: senders derive ACKs from them) -- and, after logger_retx_timeout
without progress, resending to the loggers what none acknowledged.

A release strategy, chosen once from Config.flow_control, decides when
messages leave:

* ``HoldForLoggers`` ("loggers"): once ack_loggers loggers hold them.
  Without loggers nothing is held: messages live as long as the gossip
  buffer keeps them;
* ``HoldForReceivers`` ("receivers"): also once every receiver reported
  it has them (receivers report every flow_report_interval), so a sender
  never runs further ahead of its slowest receiver than its store holds.
  A stall is not a failure: a receiver stops counting only when a failure
  detector declares it failed -- GSGC's, or the membership's
  (group.FailureDetector: silent for flow_timeout of the sender's own
  running time) -- and the application is told: ("released", id, reason);
  heard from again it counts again: ("restored", id, reason);
* ``NoHold``: nothing is ever held (pbcast, SRM: the gossip buffer is the
  only buffer).
"""
from __future__ import annotations

from rpbcast.core import wire
from rpbcast.protocol.group import FailureDetector
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE

T = wire.MsgType
NS = 1_000_000_000
NEVER = 1 << 62


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class LoggerAcks:
    """Our own messages as the loggers acknowledge them."""

    def __init__(self, engine, now):
        cfg = engine.cfg
        self.node = engine.node
        self.members = engine.members
        self.id = engine.id
        self.inc = engine.inc
        self.acks = {}                # logger id -> own frontier it holds
        self.progress_t = now         # when the resend clock last started
        self.release = None           # the strategy's release(now), set by the engine
        self._ack_loggers = cfg.ack_loggers
        self._retx_ns = _ns(cfg.logger_retx_timeout)
        self._loggers_v = -1
        self._have_loggers = False

    def handlers(self):
        return {T.LOGACK: self.on_logack}

    def have_loggers(self):
        # cached per member-table version: get_timer asks after every event
        v = self.members.version
        if v != self._loggers_v:
            self._loggers_v = v
            self._have_loggers = bool(self.members.loggers())
        return self._have_loggers

    def on_publish(self, now):
        # The logger-resend clock starts with the first unacknowledged
        # message, not at the last timer tick: a sender idle for longer than
        # logger_retx_timeout must not resend its next message at once.
        node = self.node
        if node.acked >= node.next_seq:
            self.progress_t = now

    def on_logack(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if sender == self.id and inc == self.inc:
            self.on_ack(source, seq, now)

    def on_frontiers(self, logger_id, entries, now):
        """A logger's gossip frontiers [(sender, inc, frontier)]: ours is an ACK."""
        for s, i, frontier in entries:
            if s == self.id and i == self.inc:
                self.on_ack(logger_id, frontier, now)

    def on_ack(self, logger_id, frontier, now):
        # Only a logger acknowledges (rpbcast.protocol.authority checks the
        # LOGACK; a logger's gossip frontiers come from a member-table
        # logger), and never more than we sent: a frontier beyond it would
        # release what is sent later, unlogged, the moment it is published.
        frontier = min(frontier, self.node.next_seq)
        if frontier <= self.acks.get(logger_id, 0):
            return
        self.acks[logger_id] = frontier
        self.release(now)

    def frontier(self):
        """Own seqs below this are held by ack_loggers loggers (0: not yet)."""
        vals = sorted(self.acks.values(), reverse=True)
        k = self._ack_loggers
        return vals[k - 1] if len(vals) >= k else 0

    def get_timer(self):
        node = self.node
        if node.acked < node.next_seq and self.have_loggers():
            return self.progress_t + self._retx_ns
        return NEVER

    def on_timer(self, now):
        # resend to a logger what no logger acknowledged (§3.1); the clock
        # for that starts when everything was last acknowledged
        node = self.node
        if node.acked >= node.next_seq:
            self.progress_t = now
        if (node.acked < node.next_seq and self.have_loggers()
                and now - self.progress_t >= self._retx_ns):
            self.resend(now)

    def resend(self, now):
        node = self.node
        lo, hi = node.acked, node.next_seq - 1
        hi = min(hi, lo + 4095)
        for lg in self.members.loggers():
            if self.acks.get(lg.node_id, 0) <= hi:
                node.serve(self.id, self.inc, [(max(lo, self.acks.get(lg.node_id, 0)), hi)],
                           lg.addr, False, now, False)
        self.progress_t = now


class FlowWindow:
    """The data plane's flow acknowledgments (csrc/flowack.h), set up from
    the configuration and kept in step with the membership: where each
    sender's stream is acknowledged to, and whose acknowledgments hold our
    flow window (every receiver in the group but those the release strategy
    no longer waits for; not the loggers).  The acknowledgments themselves never come here."""

    def __init__(self, engine, released=None):
        cfg = engine.cfg
        self.node = engine.node
        self.members = engine.members
        self.released = released if released is not None else {}
        # (a logger does not hold the window: it need not acknowledge)
        self.on = (bool(cfg.flow_window) and hasattr(self.node, "flow_configure")
                   and not getattr(engine, "is_logger", False))
        self._key = None
        if self.on:
            every = cfg.flow_ack_every or max(1, cfg.flow_window // 8)
            self.node.flow_configure(cfg.flow_window, every, _ns(cfg.flow_ack_timeout),
                                     _ns(min(cfg.flow_report_interval, 0.001)), cfg.flow_window_bytes)

    def sync(self, now):
        # only under a data-plane loop (udp): the simulator's thousands of
        # engines and the in-memory network have no FLOWACKs to wait for
        if not self.on or not self.node.flow_driven:
            return
        key = (self.members.version, len(self.released))
        if key != self._key:
            self._key = key
            released = self.released
            # A logger acknowledges (FLOWACK) like anyone, but does not hold
            # the flow window: what it has not logged send_window bounds
            # (LOGACK); the flow window is the receivers' queueing.
            self.node.flow_set_members([(m.node_id, m.inc, m.addr, not m.is_logger and m.node_id not in released)
                                        for m in self.members.active() if m.addr], now)
        else:
            self.node.flow_refresh(now)     # a silent member may have gone stale


class NoHold:
    """Nothing is held: the gossip buffer is the only buffer."""

    next_report = NEVER        # receivers' reports (HoldForReceivers only)

    def __init__(self, engine):
        self.node = engine.node
        self.flow = FlowWindow(engine, getattr(self, "released", None))

    def forget_slots(self, slots):
        """Retired streams (Engine._forget_retired): what we reported of
        them (HoldForReceivers keeps it by slot)."""
        for kept in (getattr(self, "_sent", None), getattr(self, "_tick", None)):
            if kept:
                for s in slots:
                    kept.pop(s, None)

    def update_hold(self):
        self.node.hold_send = False

    def on_timer(self, now):
        self.flow.sync(now)

    def release(self, now):
        pass

    def on_receiver_report(self, source, source_inc, entries, now):
        pass

    def on_member_event(self, event, now):
        """("member", id, what[, reason]) from the membership or an
        extension (GSGC's failure detector): "failed", "recovered", ..."""


class HoldForLoggers(NoHold):
    """Held until ack_loggers loggers hold it (§3.1)."""

    def __init__(self, engine, acks: LoggerAcks):
        super().__init__(engine)
        self.members = engine.members
        self.acks = acks
        acks.release = self.release

    def update_hold(self):
        # Without loggers nothing acknowledges; the send buffer then lives
        # only as long as the gossip buffer keeps it.
        self.node.hold_send = bool(self.members.loggers())

    def release(self, now):
        node = self.node
        eff = self.acks.frontier()
        if eff > node.acked:
            node.logger_ack(eff)
            self.acks.progress_t = now


class HoldForReceivers(HoldForLoggers):
    """Held until every receiver not declared failed (and ack_loggers
    loggers) has it."""

    def __init__(self, engine, acks: LoggerAcks, now):
        self.released = {}              # receiver id -> why it no longer holds us back
        super().__init__(engine, acks)
        cfg = engine.cfg
        self.e = engine
        self.id = engine.id
        self.inc = engine.inc
        self.is_logger = engine.is_logger
        self.reports = {}               # receiver id -> (its inc, our frontier it reported)
        self._sent = {}                 # slot -> (frontier we reported, when)
        self._tick = {}                 # slot -> its frontier at the previous report tick
        self._report_ns = _ns(cfg.flow_report_interval)
        # A stream still flowing is reported once it moved this far (or every
        # 16 intervals; at the first tick after it pauses): its sender needs the report
        # to release its send buffer before send_window fills, not every 2 ms
        # -- a report is a control turn on both ends, tens of microseconds
        # in a spinning receiver's path (docs/performance.md, "The spinning
        # receiver keeps the node's time").
        self._min_move = max(64, cfg.send_window // 64) if cfg.send_window else 2048
        # A check late by more than a few report intervals means this
        # member did not run (stopped, descheduled, draining a backlog):
        # that time is not the others' silence.
        self.detector = FailureDetector(_ns(cfg.flow_timeout), max(8 * self._report_ns, _ns(0.05)))
        self.next_report = now + self._report_ns

    def update_hold(self):
        self.node.hold_send = True

    def get_timer(self):
        return self.next_report

    def on_timer(self, now):
        self.flow.sync(now)
        if now >= self.next_report:
            moved = self._report(now)
            self._detect(now)
            self.next_report = now + self._report_ns * self._stretch(moved)

    def _stretch(self, moved):
        """Report intervals to the next tick: one while a stream moves fast
        (its sender's window needs the reports), up to 4 while the fastest
        moved less: the next tick then finds at most about _min_move / 2
        new messages.  Each tick is a control turn -- in a spinning
        receiver, tens of microseconds inline; one every 2 ms was a round
        trip in a hundred.  (Not more than 4: a stream that jumps from a
        trickle to line rate is seen within 8 ms, before it can fill a
        send window of 131,072 at 8 M msgs/s.)"""
        return max(1, min(4, self._min_move // (2 * moved + 1)))

    def receivers(self):
        """The members whose reports hold our messages back (declared failed
        or not): not loggers, in the group."""
        return [m for m in self.members.active() if not m.is_logger]

    def _detect(self, now):
        """As a sender, watch the receivers for failure (a member that
        never sent need not judge anyone)."""
        if not self.node.next_seq:
            return
        for node_id, what, reason in self.detector.check(now, self.receivers()):
            self.e.post_event("member", node_id, what, reason)

    def on_member_event(self, event, now):
        node_id, what = event[1], event[2]
        reason = event[3] if len(event) > 3 else "declared by an extension's failure detector"
        if what == "failed" and node_id not in self.released:
            self.released[node_id] = reason
            self.e.stats["flow_released"] = self.e.stats.get("flow_released", 0) + 1
            self.e.post_event("released", node_id, f"declared failed: {reason}")
            self.release(now)
        elif what == "recovered" and node_id in self.released:
            del self.released[node_id]
            self.e.stats["flow_restored"] = self.e.stats.get("flow_restored", 0) + 1
            self.e.post_event("restored", node_id, reason)

    def report_final(self, now):
        """A receiver's last word before it closes: its frontier of every
        stream that moved since it last reported, now -- a flowing stream's
        report may be waiting for the stream's pause, which a node that is
        going away will not see, and its senders would hold those messages
        until they declare it failed."""
        self._report(now, final=True)

    def _report(self, now, final=False):
        """Report our receive frontier to each sender whose stream moved (and
        again now and then, in case a report was lost); as a sender,
        re-evaluate what may leave the send buffer."""
        node = self.node
        moved = 0                       # the most a stream moved since the previous tick
        # (a logger is not a receiver senders wait for)
        if not self.is_logger and self.e.group.status in (MEMBER, PENDING_LEAVE):
            every = 16 * self._report_ns
            send_gossip = self.e.repair.send_gossip
            committed = self.e.committed       # Config.flow_commit
            for slot, pid, pinc in node.peer_ids():
                m = self.members.get(pid)
                if m is None or pid == self.id or m.status not in (MEMBER, PENDING_LEAVE):
                    continue
                f = node.peer_contiguous(slot)
                if committed is not None:
                    f = min(f, committed.get((pid, pinc), 0))
                last = self._sent.get(slot)
                prev = self._tick.get(slot)
                flowing = prev != f
                if prev is not None and f - prev > moved:
                    moved = f - prev
                self._tick[slot] = f
                if last is not None and (last[0] == f or not final) and now - last[1] < every and (
                        last[0] == f or (flowing and f - last[0] < self._min_move)):
                    continue
                self._sent[slot] = (f, now)
                send_gossip(m, [wire.lastseen_section([(pid, pinc, f)])], now)
        self.release(now)
        return moved

    def on_receiver_report(self, source, source_inc, entries, now):
        for s, i, frontier in entries:
            if s == self.id and i == self.inc:
                old = self.reports.get(source)
                if old is None or old[0] != source_inc or frontier > old[1]:
                    # a restarted receiver's new incarnation starts over
                    self.reports[source] = (source_inc, frontier)
                    self.release(now)

    def release(self, now):
        """Release the send buffer below the least frontier reported by the
        receivers not declared failed (and, with loggers, below what
        ack_loggers loggers hold).  How long a receiver has been silent does
        not matter here: only the failure detectors decide that."""
        node = self.node
        if not node.next_seq or node.acked >= node.next_seq:
            return
        eff = node.next_seq
        released, reports = self.released, self.reports
        for m in self.receivers():
            if m.node_id not in released:
                eff = min(eff, reports.get(m.node_id, (0, 0))[1])
        if self.members.loggers():
            eff = min(eff, self.acks.frontier())
        if eff > node.acked:
            node.logger_ack(eff)
            self.acks.progress_t = now


def for_config(engine, acks: LoggerAcks, now):
    """The release strategy Config.flow_control names."""
    if engine.cfg.flow_control == "receivers":
        return HoldForReceivers(engine, acks, now)
    return HoldForLoggers(engine, acks)
