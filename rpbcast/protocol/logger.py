"""The logger role (thesis §3.2, §5.2, §6.2).

A logger is a member that also
  * appends every message it receives to its log on stable storage (the C
    data plane does the append; this module decides when to fsync),
  * acknowledges senders (LOGACK) with what a completed sync covers, so a
    sender's buffer only lets go of durable messages.  With fsync =
    "interval" the sync is a group commit: the log's own thread fdatasyncs
    while the loop goes on receiving, and a frontier becomes an ACK as soon
    as the sync that covers it completed (checked every SYNC_POLL_NS, not at
    the next fsync_interval tick: the sender's window divides by this
    cycle);
  * serves repairs from the log (again in the data plane): requests join
    per-requester queues streamed a little at every timer tick, paced
    (Config.catchup_rate), so a member catching up gets each id about once
    and the live stream keeps being logged; answers for what it cannot
    serve: GAPNOTE for ids collected, lost for good, or damaged on disk,
  * collects its log by stability: a message goes once every current member
    has acknowledged it, the acknowledgment derived from the frontiers members
    report in their gossip (LoggerGC, §5.2), with a retention timeout as the
    failsafe for members that never come back,
  * recovers after a restart: the log is scanned (a torn tail cut off,
    damage reported and its ids answered as lost) and the per-sender
    trackers are rebuilt from it, so nothing acknowledged is lost silently,
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
from rpbcast.core.node import DEST_MCAST, PHASE_ALL, PHASE_LOGGER, SEQ_LIMIT, StreamLimit
from rpbcast.protocol.extension import Extension
from rpbcast.protocol.membership import ROLE_LOGGER

NS = 1_000_000_000
T = wire.MsgType
ACK_REFRESH_NS = 250_000_000     # re-send the latest LOGACK this often (ACKs get lost)
GC_EVERY_NS = 1_000_000_000
CATCHUP_TICK_NS = 1_000_000      # drain the catch-up queues this often while they hold ids
SYNC_POLL_NS = 1_000_000         # look this often whether the group commit under way completed
NEVER = 1 << 62


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
            # fsync "never" acknowledges at a flush: a direct write would
            # make every flush wait for the device
            self.log = LogStore(cfg.log_dir, direct=cfg.fsync != "never")
        node = ctx.node
        node.attach_log(self.log)
        node.enable_catchup(cfg.catchup_rate)
        self.recovered = {}
        self._recover(now)
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
        self.next_drain = NEVER
        self.next_poll = NEVER     # when to look whether the group commit under way completed
        self.committing = None     # (epoch, frontiers) of the group commit under way
        self.dead_since = {}       # slot -> time first seen dead
        self.lost = {}             # (sender, inc) -> [(lo, hi)] declared lost
        self._rtx_turn = 0
        self._snapshot_into(self.durable)     # recovered records were synced at open

    def on_slots_retired(self, slots, now):
        """Retired streams: what is kept by slot goes.  Their records stay
        in the log (keyed by (sender, inc)); a stream that comes back gets a
        new slot and is served and acknowledged from there."""
        for s in slots:
            self.durable.pop(s, None)
            self.sent.pop(s, None)
            self.dead_since.pop(s, None)

    def _recover(self, now):
        """Rebuild trackers: what is on disk counts as received.  Each
        stream starts at its oldest record (older ones were collected);
        ids whose record is damaged are known, and lost (never asked
        for, answered with GAPNOTE lost)."""
        node = self.ctx.node
        for sender, inc, count, lo, hi in self.log.streams():
            damaged = self.log.damaged(sender, inc)
            if not count and not len(damaged):
                continue
            iv = self.log.intervals(sender, inc)
            firsts = [int(iv[0, 0])] if len(iv) else []
            if len(damaged):
                firsts.append(int(damaged[0, 0]))
            base = min(firsts)
            if base >= SEQ_LIMIT:
                continue               # nothing a tracker can hold (a forged seq)
            try:
                slot = node.peer(sender, inc, base)
            except StreamLimit:
                continue               # more streams in the log than max_streams (counted)
            node.mark_received_intervals(slot, iv)
            if len(damaged):
                top = int(damaged[-1, 1])
                if top < SEQ_LIMIT and top >= node.peer_next(slot):
                    node.heartbeat(slot, top, False, now)
                for a, b in damaged.tolist():
                    node.forget(slot, a, b)
            self.recovered[(sender, inc)] = count

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
        return min(self.next_sync, self.next_ack, self.next_gc, self.next_drain, self.next_poll)

    def _sync(self):
        """Make everything logged durable now, and its frontiers ACKs:
        flush only for fsync "never", else flush and fdatasync, waiting."""
        if self.ctx.cfg.fsync == "never":
            self.log.flush()
        else:
            self.log.sync()
        self.committing = None        # that covered it too
        self.next_poll = NEVER
        self._snapshot_into(self.durable)

    def _commit(self, now):
        """Group commit (fsync "interval"), one per fsync_interval: the
        sync started at the previous tick, if it has not been seen to
        complete yet, is waited for (the disk took longer than an
        interval) and its frontiers become ACKs; the next sync starts with
        the frontiers of now and the loop goes on receiving while the
        log's thread syncs."""
        if self.committing is not None:
            epoch, frontiers = self.committing
            self.log.wait_synced(epoch)
            self._committed(frontiers, now)
        frontiers = {}
        # taken with the flush: every id below them is in what this sync
        # covers (a received id is logged before it counts as received)
        self._snapshot_into(frontiers)
        self.committing = (self.log.sync_start(), frontiers)
        self.next_poll = now + min(SYNC_POLL_NS, int(self.ctx.cfg.fsync_interval * NS) // 4)

    def _poll_commit(self, now):
        """The group commit under way completed: its frontiers are ACKs
        now, not at the next fsync_interval tick."""
        epoch, frontiers = self.committing
        if self.log.synced_epoch() >= epoch:
            self._committed(frontiers, now)
        else:
            self.next_poll = now + min(SYNC_POLL_NS, int(self.ctx.cfg.fsync_interval * NS) // 4)

    def _committed(self, frontiers, now):
        self.durable.update(frontiers)
        self.committing = None
        self.next_poll = NEVER
        self._send_acks(now, force=False)

    def _snapshot_into(self, out):
        node = self.ctx.node
        for slot, pid, pinc in node.peer_ids():
            out[slot] = node.peer_contiguous(slot)

    def after_rx(self, now):
        logged = self.ctx.node.logged
        if self.ctx.cfg.fsync == "always" and logged != self.synced_count:
            self.synced_count = logged
            self._sync()
            self._send_acks(now, force=False)

    def on_timer(self, now):
        cfg = self.ctx.cfg
        node = self.ctx.node
        if now >= self.next_drain:
            node.catchup_drain(now)
        self.next_drain = now + CATCHUP_TICK_NS if node.catchup_pending else NEVER
        if now >= self.next_poll:
            if self.committing is not None:
                self._poll_commit(now)
            else:
                self.next_poll = NEVER
        if now >= self.next_sync:
            if cfg.fsync == "interval":
                self._commit(now)
            elif cfg.fsync == "never":
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
        """After serving what the log holds (or queueing it): answer for
        the rest."""
        node = self.ctx.node
        if node.catchup_pending and self.next_drain == NEVER:
            self.next_drain = now + CATCHUP_TICK_NS
        damaged = self.log.damaged(sender, inc)
        if len(damaged) and len(intervals):
            hit = _overlap(damaged, intervals)
            if hit:
                self.ctx.send_gapnote(src, sender, inc, hit, lost=True)
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
        elif (slot is None and top is None and intervals is not None and len(intervals)
              and sender in self.ctx.members):
            # A stream we never saw, of a member we know (a request naming a
            # stranger's stream must not make us pull it: issue 14).
            hi = int(max(int(h) for _, h in intervals))
            try:
                s2 = node.peer(sender, inc, 0)
            except StreamLimit:
                return                  # counted (streams_refused)
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


def _overlap(a, b):
    """[(lo, hi)] where two sorted interval lists ((n, 2) arrays) meet."""
    out = []
    i = j = 0
    a = a.tolist() if hasattr(a, "tolist") else a
    b = sorted((int(x), int(y)) for x, y in (b.tolist() if hasattr(b, "tolist") else b))
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out
