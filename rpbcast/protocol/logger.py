"""The logger role (thesis §3.2, §5.2, §6.2).

A logger is a member that also
  * appends every message it receives to its log on stable storage (the C
    data plane does the append; this module decides when to fsync),
  * acknowledges senders (LOGACK) with what a completed sync covers, so a
    sender's buffer only lets go of durable messages,
  * serves repairs from the log (again in the data plane) and answers for
    what it cannot serve: GAPNOTE for ids collected or lost for good,
  * collects its log by stability: a message goes once every current member
    has acknowledged it, the acknowledgment derived from the frontiers members
    report in their gossip (LoggerGC, §5.2), with a retention timeout as the
    failsafe for members that never come back,
  * recovers after a restart: the log is scanned (torn tail cut off) and the
    per-sender trackers are rebuilt from it, so nothing acknowledged is lost,
  * runs its own logger phase against the original sender, and declares ids
    of a dead incarnation lost once nobody can supply them.

It is an engine extension like the others (rpbcast.protocol.extension): the
engine adds it when Config.role is "logger", and it declares what makes a
member a logger -- it serves from its log, ends the logger phase, and its
gossip always carries its frontiers, capped at what is durable.
"""
from __future__ import annotations

import collections

from rpbcast.core import wire
from rpbcast.core.logstore import LogStore
from rpbcast.core.node import DEST_MCAST, PHASE_ALL, PHASE_LOGGER
from rpbcast.protocol.extension import Extension
from rpbcast.protocol.membership import ROLE_LOGGER

NS = 1_000_000_000
T = wire.MsgType
ACK_REFRESH_NS = 250_000_000     # re-send the latest LOGACK this often (ACKs get lost)
GC_EVERY_NS = 1_000_000_000


class LoggerRole(Extension):
    serves_from_log = True
    ends_logger_phase = True
    gossip_frontiers = True      # every gossip carries the durable frontiers (ACKs, §5.2)

    def __init__(self, log=None):
        self.log = log           # a LogStore, or None: open Config.log_dir on attach

    def attach(self, ctx):
        super().attach(ctx)
        cfg = ctx.cfg
        now = ctx.now
        if self.log is None:
            self.log = LogStore(cfg.log_dir)
        node = ctx.node
        node.attach_log(self.log)
        self.recovered = {}
        # Rebuild trackers: what is on disk counts as received.  Start each
        # stream at its oldest record: older ones were collected.
        for sender, inc, count, lo, hi in self.log.streams():
            if not count:
                continue
            slot = node.peer(sender, inc, lo)
            node.mark_received(slot, self.log.seqs(sender, inc))
            self.recovered[(sender, inc)] = count
        self.durable = {}          # slot -> frontier covered by a sync
        self.sent = {}             # slot -> (frontier, time) of the last LOGACK
        self.reports = {}          # member id -> {(sender, inc): frontier}
        self.report_inc = {}       # member id -> incarnation its reports come from
        self.stable_hist = collections.deque()   # (time, {(sender, inc): stable frontier})
        self.gc_below = {}         # (sender, inc) -> collected below
        self.history = collections.deque()   # (time, {(s, i): frontier}) for the failsafe
        self.synced_count = -1
        self.next_sync = now
        self.next_ack = now
        self.next_gc = now + GC_EVERY_NS
        self.dead_since = {}       # slot -> time first seen dead
        self.lost = {}             # (sender, inc) -> [(lo, hi)] declared lost
        self._rtx_turn = 0
        self._snapshot()

    @property
    def needs_every_rx(self):
        # fsync "always": sync and acknowledge after every batch that logged
        return self.ctx.cfg.fsync == "always"

    def frontier_caps(self):
        # A logger's frontier is an acknowledgment (§5.2: senders derive
        # ACKs from it): it reports only what a completed sync covers.
        return self.durable

    # ------------------------------------------------------------------ timers
    def get_timer(self):
        return min(self.next_sync, self.next_ack, self.next_gc)

    def _sync(self):
        cfg = self.ctx.cfg
        if cfg.fsync == "never":
            self.log.flush()
        else:
            self.log.sync()
        self._snapshot()

    def _snapshot(self):
        node = self.ctx.node
        for slot, pid, pinc in node.peer_ids():
            self.durable[slot] = node.peer_contiguous(slot)

    def after_rx(self, now):
        logged = self.ctx.node.logged
        if self.ctx.cfg.fsync == "always" and logged != self.synced_count:
            self.synced_count = logged
            self._sync()
            self._send_acks(now, force=False)

    def on_timer(self, now):
        cfg = self.ctx.cfg
        if now >= self.next_sync:
            if cfg.fsync != "always":
                self._sync()
            self.next_sync = now + int(cfg.fsync_interval * NS)
        if now >= self.next_ack:
            self._send_acks(now, force=False)
            self.next_ack = now + int(cfg.logger_ack_interval * NS)
        if now >= self.next_gc:
            self._gc(now)
            self.next_gc = now + GC_EVERY_NS

    def _stream_addr(self, slot, pid):
        a = self.ctx.node.peer_info(slot)["addr"]
        if a:
            return a
        m = self.ctx.members.get(pid)
        return m.addr if m is not None else None

    def _send_acks(self, now, force):
        """LOGACK every sender whose durable frontier moved; repeat the last
        one now and then for a while, since ACKs get lost too."""
        node = self.ctx.node
        for slot, pid, pinc in node.peer_ids():
            if node.peer_dead(slot):
                continue
            d = self.durable.get(slot, 0)
            if not d:
                continue
            last, t_adv, t_sent = self.sent.get(slot, (0, 0, 0))
            refresh = now - t_sent >= ACK_REFRESH_NS and now - t_adv < 10 * NS
            if d > last or refresh or force:
                addr = self._stream_addr(slot, pid)
                if addr is None:
                    continue
                self.ctx.emit(addr, T.LOGACK, sender=pid, inc=pinc, seq=d)
                self.sent[slot] = (d, now if d > last else t_adv, now)

    # ------------------------------------------------------------------ GC
    def on_lastseen(self, source, source_inc, entries, now):
        # A report belongs to one incarnation: a restarted member starts
        # from its own checkpoint, so what its predecessor acknowledged
        # does not count for it.
        if self.report_inc.get(source) != source_inc:
            self.report_inc[source] = source_inc
            self.reports[source] = {}
        r = self.reports.setdefault(source, {})
        for s, i, frontier in entries:
            if frontier > r.get((s, i), 0):
                r[(s, i)] = frontier

    def _gc(self, now):
        """Collect below the frontier every current member reported (§5.2);
        the retention timeout is the failsafe for members that stay away."""
        ctx = self.ctx
        node = ctx.node
        current = [m for m in ctx.members.current() if m.role != ROLE_LOGGER]
        snap = {}
        for slot, pid, pinc in node.peer_ids():
            snap[(pid, pinc)] = node.peer_contiguous(slot)
        self.history.append((now, snap))
        horizon = now - int(ctx.cfg.log_retention * NS)
        failsafe = {}
        while self.history and self.history[0][0] <= horizon:
            failsafe = self.history.popleft()[1]
        stable = {}
        for (pid, pinc), contig in snap.items():
            acks = [contig]
            for m in current:
                if m.node_id == pid:
                    continue            # a sender has its own messages
                if self.report_inc.get(m.node_id, m.inc) != m.inc:
                    acks.append(0)      # reports of an older incarnation
                    continue
                acks.append(self.reports.get(m.node_id, {}).get((pid, pinc), 0))
            stable[(pid, pinc)] = min(acks)
        # Collect only what has been stable for log_min_keep: a member that
        # crashes between receiving and checkpointing asks again.
        self.stable_hist.append((now, stable))
        keep = now - int(ctx.cfg.log_min_keep * NS)
        old_stable = {}
        while self.stable_hist and self.stable_hist[0][0] <= keep:
            old_stable = self.stable_hist.popleft()[1]
        if old_stable:
            self.stable_hist.appendleft((keep, old_stable))
        for (pid, pinc), contig in snap.items():
            below = min(old_stable.get((pid, pinc), 0), stable.get((pid, pinc), 0))
            below = max(below, min(failsafe.get((pid, pinc), 0), contig))
            if below > self.gc_below.get((pid, pinc), 0):
                self.log.gc(pid, pinc, below)
                self.gc_below[(pid, pinc)] = below

    # ------------------------------------------------------------------ requests
    def on_request(self, sender, inc, intervals, src, now):
        """After serving what the log holds: answer for the rest."""
        node = self.ctx.node
        if sender == node.node_id and inc == node.inc:
            # Our own stream: the log has all of it (publish logs first), so
            # a request for it is never news of a stream to pull.
            return
        slot = node.find_peer(sender, inc)
        below = self.gc_below.get((sender, inc), 0)
        collected = []
        top = None
        for lo, hi in intervals:
            lo, hi = int(lo), int(hi)
            if lo < below:
                c_hi = min(hi, below - 1)
                collected.append((lo, c_hi))
            if slot is not None and hi >= node.peer_next(slot):
                top = hi if top is None else max(top, hi)
        if collected:
            self.ctx.send_gapnote(src, sender, inc, collected, lost=False)
        lost = self.lost.get((sender, inc))
        if lost:
            hit = [(max(a, int(lo)), min(b, int(hi))) for a, b in lost for lo, hi in intervals
                   if a <= int(hi) and int(lo) <= b]
            if hit:
                self.ctx.send_gapnote(src, sender, inc, sorted(hit), lost=True)
        if slot is not None and top is not None and top < node.peer_next(slot) + (1 << 20):
            # Someone saw more of this stream than we did: start pulling it.
            node.heartbeat(slot, top, False, now)
        elif slot is None and top is None and intervals is not None and len(intervals):
            hi = int(max(int(h) for _, h in intervals))
            s2 = node.peer(sender, inc, 0)
            node.heartbeat(s2, hi, False, now)

    # ------------------------------------------------------------------ logger phase
    def logger_phase(self, now):
        """The logger's own logger phase: ask the original sender; when the
        sender's incarnation is dead (a newer one exists, or it has not been
        heard from for member_timeout), what nobody supplied is lost."""
        ctx = self.ctx
        node = ctx.node
        cfg = ctx.cfg
        grace = int(cfg.member_timeout * NS)
        budget = cfg.mtu - wire.DG_HDR - wire.MSG_HDR - 32
        others = [m for m in ctx.members.loggers()]
        for slot, pid, pinc in node.peer_ids():
            if not node.peer_missing_count(slot, PHASE_ALL):
                continue
            m = ctx.members.get(pid)
            dead = node.peer_dead(slot) or (m is not None and m.inc > pinc)
            info = node.peer_info(slot)
            silent = info["last_heard"] > 0 and now - info["last_heard"] > grace and (
                m is None or (m.last_heard and now - m.last_heard > grace))
            if dead or silent:
                t0 = self.dead_since.setdefault(slot, now)
                if now - t0 >= min(grace, int(cfg.logger_rtx_interval * NS) * 4):
                    self._declare_lost(slot, pid, pinc, now)
                    continue
            if not node.peer_missing_count(slot, PHASE_LOGGER):
                continue
            d, cov, k = node.missing_digest(slot, PHASE_LOGGER, budget, 0)
            if not d:
                continue
            body = wire.missing_section(pid, pinc, d)
            self._rtx_turn += 1
            addr = self._stream_addr(slot, pid)
            if others and (self._rtx_turn % 2 == 0 or addr is None):
                addr = others[self._rtx_turn % len(others)].addr
            if addr is not None:
                ctx.emit(addr, T.RTX, body)

    def _declare_lost(self, slot, pid, pinc, now):
        node = self.ctx.node
        iv = node.missing(slot, PHASE_ALL, 0)
        if not len(iv):
            return
        runs = [(int(a), int(b)) for a, b in iv]
        self.ctx.send_gapnote(DEST_MCAST, pid, pinc, runs, lost=True)
        for a, b in runs:
            node.forget(slot, a, b)
            self.ctx.post_event("lost", pid, pinc, a, b)
        self.lost.setdefault((pid, pinc), []).extend(runs)
