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
"""
from __future__ import annotations

import collections

import numpy as np

from rpbcast.core import wire
from rpbcast.core.logstore import LogStore
from rpbcast.protocol.membership import ROLE_LOGGER
from rpbcast.core.node import PHASE_ALL, PHASE_LOGGER

NS = 1_000_000_000
T = wire.MsgType
ACK_REFRESH_NS = 250_000_000     # re-send the latest LOGACK this often (ACKs get lost)
GC_EVERY_NS = 1_000_000_000


class LoggerRole:
    def __init__(self, engine, log, now):
        self.e = engine
        cfg = engine.cfg
        self.log = log if log is not None else LogStore(cfg.log_dir)
        node = engine.node
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
        return self.e.cfg.fsync == "always"

    # ------------------------------------------------------------------ timers
    def get_timer(self):
        return min(self.next_sync, self.next_ack, self.next_gc)

    def _sync(self):
        cfg = self.e.cfg
        if cfg.fsync == "never":
            self.log.flush()
        else:
            self.log.sync()
        self._snapshot()

    def _snapshot(self):
        node = self.e.node
        for slot, pid, pinc in node.peer_ids():
            self.durable[slot] = node.peer_contiguous(slot)

    def after_rx(self, now):
        logged = self.e.node.logged
        if self.e.cfg.fsync == "always" and logged != self.synced_count:
            self.synced_count = logged
            self._sync()
            self._send_acks(now, force=False)

    def on_timer(self, now):
        cfg = self.e.cfg
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
        a = self.e.node.peer_info(slot)["addr"]
        if a:
            return a
        return self.e._addr_of(pid)

    def _send_acks(self, now, force):
        """LOGACK every sender whose durable frontier moved; repeat the last
        one now and then for a while, since ACKs get lost too."""
        node = self.e.node
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
                self.e._emit(addr, T.LOGACK, sender=pid, inc=pinc, seq=d)
                self.sent[slot] = (d, now if d > last else t_adv, now)

    # ------------------------------------------------------------------ GC
    def on_report(self, member_id, entries, now, inc=None):
        # A report belongs to one incarnation: a restarted member starts
        # from its own checkpoint, so what its predecessor acknowledged
        # does not count for it.
        if inc is not None and self.report_inc.get(member_id) != inc:
            self.report_inc[member_id] = inc
            self.reports[member_id] = {}
        r = self.reports.setdefault(member_id, {})
        for s, i, frontier in entries:
            if frontier > r.get((s, i), 0):
                r[(s, i)] = frontier

    def _gc(self, now):
        """Collect below the frontier every current member reported (§5.2);
        the retention timeout is the failsafe for members that stay away."""
        e = self.e
        node = e.node
        current = [m for m in e.members.current() if m.role != ROLE_LOGGER]
        snap = {}
        for slot, pid, pinc in node.peer_ids():
            snap[(pid, pinc)] = node.peer_contiguous(slot)
        self.history.append((now, snap))
        horizon = now - int(e.cfg.log_retention * NS)
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
        keep = now - int(e.cfg.log_min_keep * NS)
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
        node = self.e.node
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
            self.e._send_gapnote(src, sender, inc, collected, lost=False)
        lost = self.lost.get((sender, inc))
        if lost:
            hit = [(max(a, int(lo)), min(b, int(hi))) for a, b in lost for lo, hi in intervals
                   if a <= int(hi) and int(lo) <= b]
            if hit:
                self.e._send_gapnote(src, sender, inc, sorted(hit), lost=True)
        if slot is not None and top is not None and top < node.peer_next(slot) + (1 << 20):
            # Someone saw more of this stream than we did: start pulling it.
            node.heartbeat(slot, top, False, now)
        elif slot is None and top is None and intervals is not None and len(intervals):
            hi = int(max(int(h) for _, h in intervals))
            s2 = node.peer(sender, inc, 0)
            node.heartbeat(s2, hi, False, now)

    def on_gapnote(self, sender, inc, intervals, now):
        pass

    def on_section(self, source, kind, data, now):
        pass

    def gossip_sections(self, budget):
        return []

    # ------------------------------------------------------------------ logger phase
    def rtx_to_senders(self, now):
        """The logger's own logger phase: ask the original sender; when the
        sender's incarnation is dead (a newer one exists, or it has not been
        heard from for member_timeout), what nobody supplied is lost."""
        e = self.e
        node = e.node
        grace = int(e.cfg.member_timeout * NS)
        budget = e.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - 32
        others = [m for m in e.members.loggers()]
        for slot, pid, pinc in node.peer_ids():
            if not node.peer_missing_count(slot, PHASE_ALL):
                continue
            m = e.members.get(pid)
            dead = node.peer_dead(slot) or (m is not None and m.inc > pinc)
            info = node.peer_info(slot)
            silent = info["last_heard"] > 0 and now - info["last_heard"] > grace and (
                m is None or (m.last_heard and now - m.last_heard > grace))
            if dead or silent:
                t0 = self.dead_since.setdefault(slot, now)
                if now - t0 >= min(grace, int(e.cfg.logger_rtx_interval * NS) * 4):
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
                e._emit(addr, T.RTX, body)

    def _declare_lost(self, slot, pid, pinc, now):
        node = self.e.node
        iv = node.missing(slot, PHASE_ALL, 0)
        if not len(iv):
            return
        runs = [(int(a), int(b)) for a, b in iv]
        from rpbcast.core.node import DEST_MCAST
        self.e._send_gapnote(DEST_MCAST, pid, pinc, runs, lost=True)
        for a, b in runs:
            node.forget(slot, a, b)
            self.e.events.append(("lost", pid, pinc, a, b))
        self.lost.setdefault((pid, pinc), []).extend(runs)
