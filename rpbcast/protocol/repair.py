"""Gossip repair (thesis §4): how a member asks for what it lacks.

* Gossip rounds: every gossip_interval (jittered by a tenth) the gossip
  buffer ages (GC after gc_limit rounds), streams silent for a while count
  as idle, and one target drawn with the selection distribution (§4.2) gets
  a GOSSIP: our heartbeat and membership signatures, a MISSING section per
  stream we lack ids of (digests, rotating over the streams within the
  MTU), our receive frontiers (LASTSEEN) where they are wanted, and the
  extensions' sections.
* The target serves what it holds (rpbcast.protocol.serving) and answers
  for ids it collected with a GcNOTE; those, and ids missing for
  2 x gc_limit rounds, go to the logger phase (§4.3).
* The logger phase: an RTX to a logger for what a GcNOTE or the timeout
  moved there -- at most CATCHUP_WINDOW ids in flight per stream, asked
  again only once they could have arrived (no progress for a while), the
  next ids as soon as half the window arrived -- so a member hundreds of
  thousands of ids behind gets each about once, at the pace the logger
  streams and this member absorbs.  Without loggers the original sender is
  asked, whose GcNOTE is final (a 'lost' event).  A logger runs its own
  (rpbcast.protocol.logger).
* A received GOSSIP: serving, LASTSEEN (ACKs from loggers, reports from
  receivers, §5.2), the extensions' sections, and the answers to signatures
  that differ (rpbcast.protocol.heartbeats, rpbcast.protocol.group).
* Immediate pulls on gap detection and their retries: rpbcast.protocol.pulls.
"""
from __future__ import annotations

import collections

from rpbcast.core import wire
from rpbcast.core.digest import decode as digest_decode
from rpbcast.core.node import PHASE_ALL, PHASE_GOSSIP, PHASE_LOGGER, PHASE_LOGGER_NEW, PHASE_NEW
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE
from rpbcast.protocol.pulls import Pulls
from rpbcast.protocol.serving import missing_intervals
from rpbcast.protocol.trace_events import EV_GCNOTE, EV_GOSSIP_IN, EV_GOSSIP_OUT, EV_RTX_REQ

T = wire.MsgType
MISSING = wire.Section.MISSING
LASTSEEN = wire.Section.LASTSEEN
NS = 1_000_000_000
ACTIVE = (MEMBER, PENDING_LEAVE)
SEC_BUDGET_SLACK = 16
_TS_MASK = 2 ** 64 - 1
# Catch-up from a logger (the logger phase): ids in flight per stream, how
# often the window is looked at while ids wait in the logger phase, and how
# long without a single arrival before what is in flight is asked again.
CATCHUP_WINDOW = 32768
CATCHUP_TICK_NS = 5_000_000
CATCHUP_STALL_NS = 60_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


_SEC_HDR = 4               # u8 kind, u8 flags, u16 length (csrc/wire.h RP_SEC_HDR)
_LASTSEEN_ENTRY = 16       # u32 sender, u32 inc, u64 next


class Repair:
    def __init__(self, engine, now):
        cfg = engine.cfg
        self.e = engine
        self.node = engine.node
        self.members = engine.members
        self.rng = engine.rng
        self.events = engine.events
        self.emit = engine.emit
        self.id = engine.id
        self.inc = engine.inc
        self.group = engine.group
        self.serving = engine.serving
        self.heartbeats = engine.heartbeats
        self.logger_acks = engine.logger_acks
        self.send_buffer = engine.send_buffer
        hooks = engine.hooks
        self.hooks = hooks
        self._on_round = hooks.on_round
        self._on_section = hooks.on_section
        self._on_lastseen = hooks.on_lastseen
        self._gossip_sections = hooks.gossip_sections
        self._frontier_caps = hooks.frontier_caps
        gi = _ns(cfg.gossip_interval)
        self._gossip_ns = gi
        self._idle_infer_ns = max(4 * _ns(cfg.idle_after), gi)
        self.next_gossip = now + self.rng.randrange(max(gi, 1))
        self._logger_rtx_ns = _ns(cfg.logger_rtx_interval)
        self._catchup_tick_ns = min(self._logger_rtx_ns, CATCHUP_TICK_NS)
        self.next_logger_rtx = now + self._logger_rtx_ns
        self._lwait = {}           # slot -> [ids in flight to loggers, time of the last arrival]
        self._buffer_bytes = cfg.gossip_buffer_bytes
        self._want = cfg.want
        self.gossip_budget = cfg.mtu - wire.DG_HDR - wire.MSG_HDR - wire.GOSSIP_FIXED - SEC_BUDGET_SLACK
        self._rtx_budget = cfg.mtu - wire.DG_HDR - wire.MSG_HDR - SEC_BUDGET_SLACK
        self.gossip_seq = 0
        self._start_slot = 0
        self._lastseen_start = 0          # where the next LASTSEEN section starts when not all fit
        self._next_hist = {}
        # The pulls run inside the repair timers (between the round and the
        # logger phase) and are what a received batch may start.
        self.pulls = Pulls(engine, self)
        self.after_rx = self.pulls.after_rx

    def handlers(self):
        return {T.GOSSIP: self.on_gossip, T.GCNOTE: self.on_gcnote}

    def forget_slots(self, slots):
        """Retired streams (Engine._forget_retired): their frontier history
        and logger waits go, and the pulls' state."""
        for s in slots:
            self._lwait.pop(s, None)
            self._next_hist.pop(s, None)
        self.pulls.forget_slots(slots)

    def get_timer(self):
        p = self.pulls
        return min(self.next_gossip, self.next_logger_rtx, p.next_nack, p.next_retry)

    def on_timer(self, now):
        if now >= self.next_gossip:
            self.gossip_round(now)
            jitter = self._gossip_ns // 10
            self.next_gossip = max(self.next_gossip + self._gossip_ns + self.rng.randint(-jitter, jitter), now + 1)
        self.pulls.on_timer(now)
        if now >= self.next_logger_rtx:
            busy = self.logger_phase(now)
            self.next_logger_rtx = now + (self._catchup_tick_ns if busy else self._logger_rtx_ns)

    # ------------------------------------------------------------------ gossip rounds
    def gossip_round(self, now):
        node = self.node
        gc_limit = self.e.cfg.gc_limit          # an extension may change it (Context.set_gc_limit)
        node.round(gc_limit, self._buffer_bytes)
        # A stream silent here for a while is idle as far as we know, even
        # without its idle heartbeat (its sender may have crashed right after
        # its last message): its latest seq joins our signature, so a member
        # that lacks it sees the signatures differ and pulls it (§5.1).
        node.infer_idle(now, self._idle_infer_ns)
        self._gossip_phase_timeout(gc_limit)
        for on_round in self._on_round:
            on_round(now)
        if self.group.status not in ACTIVE:
            return
        target = self.group.pick_target(now)
        if target is not None:
            # ids in flight (asked, not yet arrived) are not asked again
            self.gossip_to(target, now, PHASE_NEW)

    def _gossip_phase_timeout(self, gc_limit):
        """Ids missing for 2 x GCLIMIT rounds go to the logger phase even
        without a GcNOTE (the thesis's first hand-off, §4.3): when no peer
        ever received a message, no peer can say it collected it.  Without
        loggers that phase asks the original sender (_loggerless_rtx)."""
        node = self.node
        k = 2 * gc_limit
        hist = self._next_hist
        for slot, pid, pinc in node.peer_ids():
            h = hist.setdefault(slot, collections.deque())
            h.append(node.peer_next(slot))
            if len(h) > k:
                old = h.popleft()
                if old and node.peer_missing_count(slot, PHASE_GOSSIP):
                    node.to_logger_phase(slot, 0, old - 1)

    def missing_sections(self, phase, budget, mark=True, rotate=True, from_start=False, spans=None,
                         room=None):
        """MISSING sections of this phase within budget bytes.  Returns
        (sections, ids asked); with ``spans`` (a list) it also collects the
        (slot, first, last) id range each section asks about; ``room(slot)``,
        if given, is how many ids of a stream may be asked (its window)."""
        node = self.node
        secs, used, nids = [], 0, 0
        n = node.nslots                         # (a retired slot has nothing missing)
        if not n:
            return secs, 0
        start = self._start_slot % n if rotate else 0
        for k in range(n):
            slot = (start + k) % n
            if node.peer_missing_count(slot, PHASE_ALL) == 0:
                continue
            space = budget - used - 12          # section header + (sender, inc)
            if space < 8:
                break
            ids = room(slot) if room is not None else None
            if ids == 0:
                continue
            cursor = 0 if from_start else node.gossip_cursor(slot)
            d, cov, k_ids = self._digest(slot, phase, space, cursor, ids)
            if not d and cursor:
                cursor = 0
                d, cov, k_ids = self._digest(slot, phase, space, 0, ids)
            if not d:
                continue
            pid, pinc = node.peer_key(slot)
            if self._want is not None and not self._want(pid, pinc, cursor, cov):
                node.forget(slot, cursor, cov)
                self.events.append(("unwanted", pid, pinc, cursor, cov))
                continue
            secs.append(wire.missing_section(pid, pinc, d))
            used += 4 + 8 + len(d)
            nids += k_ids
            first = int(digest_decode(d)[0][0][0])
            if spans is not None:
                spans.append((slot, first, int(cov)))
            if mark:
                node.mark_inflight(slot, first, cov)
            if not from_start:
                nxt = cov + 1
                node.set_gossip_cursor(slot, nxt if nxt < node.peer_next(slot) else 0)
        if rotate:
            self._start_slot += 1
        return secs, nids

    def _digest(self, slot, phase, space, frm, ids):
        """A digest of the missing ids of a phase from frm on, of at most
        `ids` ids (None: as many as fit)."""
        node = self.node
        upto = 2 ** 64 - 1
        if ids is not None:
            iv = node.missing(slot, phase, frm, upto, 256)
            left = ids
            for lo, hi in iv.tolist():
                if hi - lo + 1 >= left:
                    upto = lo + left - 1
                    break
                left -= hi - lo + 1
        return node.missing_digest(slot, phase, space, frm, upto)

    def lastseen_section(self, max_bytes: int = 65535):
        """Our receive frontiers in at most max_bytes; extensions may cap
        them (a logger's frontier is an acknowledgment, §5.2: it reports
        only what a completed sync covers, never records still in its write
        buffer).  Our own stream always has room; when the streams do not all fit,
        successive calls take turns through them, so every frontier is
        reported in time and a peer that taught us thousands of streams
        cannot make the section too long to build (issue 14)."""
        per = (min(max_bytes, 65535) - _SEC_HDR) // _LASTSEEN_ENTRY
        if per <= 0:
            return b""
        node = self.node
        entries = []
        own = 1 if node.next_seq else 0
        ids = list(node.peer_ids())
        n = len(ids)
        take = min(n, per - own)
        start = self._lastseen_start % n if n else 0
        caps = [f() for f in self._frontier_caps]
        for k in range(max(take, 0)):
            slot, pid, pinc = ids[(start + k) % n]
            f = node.peer_contiguous(slot)
            for cap in caps:
                if cap is not None:
                    f = min(f, cap.get(slot, 0))
            entries.append((pid, pinc, f))
        if 0 < take < n:
            self._lastseen_start = start + take
        if own:
            entries.append((self.id, self.inc, node.next_seq))
        return wire.lastseen_section(entries) if entries else b""

    def gossip_to(self, target, now, phase, with_lastseen=False, with_missing=True):
        budget = self.gossip_budget
        extra = []
        if with_lastseen or target.is_logger or self.hooks.gossip_frontiers:
            ls = self.lastseen_section(budget // 2 - 1)
            if ls and len(ls) < budget // 2:
                extra.append(ls)
                budget -= len(ls)
        spans = []
        if with_missing:
            room = self.pulls.room if phase == PHASE_NEW else None
            secs, nids = self.missing_sections(phase, budget, spans=spans, room=room)
        else:
            secs, nids = [], 0
        for sections in self._gossip_sections:
            extra += sections(target, budget - sum(len(s) for s in secs + extra), now)
        self.send_gossip(target, secs + extra, now, nids)
        if spans:
            self.pulls.asked(spans, now, target)
        return nids

    def report_frontiers(self, member, now):
        """A gossip carrying our receive frontiers, asking for nothing."""
        self.gossip_to(member, now, PHASE_GOSSIP, with_lastseen=True, with_missing=False)

    def send_gossip(self, target, sections, now, nids=0):
        """One GOSSIP message: our heartbeat and membership signatures, then
        the sections (nids: missing ids it asks for, for the trace)."""
        body = wire.gossip_body(self.node.hb_signature, self.members.signature, now & _TS_MASK, sections)
        self.gossip_seq += 1
        self.emit(target.addr, T.GOSSIP, body, seq=self.gossip_seq)
        self.node.trace_event(now, EV_GOSSIP_OUT, 0, 0, self.gossip_seq, len(body), target.node_id, nids)

    # ------------------------------------------------------------------ a gossip received
    def on_gossip(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        hb, mem, ts, secs = wire.read_gossip(body)
        node = self.node
        node.trace_event(now, EV_GOSSIP_IN, 0, 0, seq, len(body), source, 0)
        # MISSING sections come first in every gossip: served first, in one
        # call into the data plane (REPAIRs, then the GcNOTEs).
        served = self.serving.serve_missing(memoryview(body)[wire.GOSSIP_FIXED:], src, now, False)
        for kind, _, data in secs:
            if kind == MISSING:
                continue
            if kind == LASTSEEN:
                self.on_lastseen(source, source_inc, data, now)
            else:
                for on_section in self._on_section:
                    on_section(source, kind, data, now)
        for sec in served:
            if sec.gcnote_ids:
                node.trace_event(now, EV_GCNOTE, sec.sender, sec.inc, sec.gcnote_first, sec.gcnote_ids,
                                 source, 0)
        if hb != node.hb_signature:
            self.heartbeats.reply_idle_list(src)
        if mem != self.members.signature:
            self.group.reply_members(src)

    def on_lastseen(self, source, source_inc, data, now):
        entries = wire.read_lastseen(data)
        m = self.members.get(source)
        if m is not None:
            if m.is_logger:
                self.logger_acks.on_frontiers(source, entries, now)
            else:
                self.send_buffer.on_receiver_report(source, source_inc, entries, now)
        for on_lastseen in self._on_lastseen:
            on_lastseen(source, source_inc, entries, now)

    # ------------------------------------------------------------------ logger phase
    def on_gcnote(self, msg, now):
        node = self.node
        moved = 0
        node.trace_event(now, EV_GCNOTE, msg[2], msg[3], 0, len(msg[6]), msg[7], 1)
        source = msg[7]
        own_phase = self.hooks.logger_phase is not None
        loggerless = not own_phase and not self.members.loggers()
        for s, i, iv in missing_intervals(msg[6]):
            slot = node.find_peer(s, i)
            if slot is None:
                continue
            if loggerless and source != s:
                # Only a logger phase could take these over, and there is
                # none: another peer may still hold them, so keep gossiping.
                # After 2 x GCLIMIT rounds the gossip-phase timeout asks the
                # sender, whose GcNOTE is final.
                continue
            if source == s and not loggerless and len(iv):
                # The sender let these go because a logger acknowledged
                # them, and it lets go in order: everything missing below
                # them is with the loggers too.
                iv = [(0, int(iv[-1][1]))]
            for lo, hi in iv:
                lo, hi = int(lo), int(hi)
                if loggerless and source == s:
                    # The sender itself no longer holds them and there is no
                    # logger: they cannot be recovered.
                    miss = node.missing(slot, PHASE_LOGGER, lo, hi)
                    for a, b in miss:
                        node.forget(slot, int(a), int(b))
                        self.events.append(("lost", s, i, int(a), int(b)))
                    continue
                moved += node.to_logger_phase(slot, lo, hi)
        if moved and not own_phase:
            # Go to a logger now rather than at the next logger round.
            self.logger_phase(now)

    def logger_phase(self, now):
        """Logger phase: ask a logger for what a GcNOTE (or the timeout)
        moved there (§3.3, §4.3), as a window per stream: at most
        CATCHUP_WINDOW ids in flight, the next ones once half arrived, and
        what is in flight asked again only after CATCHUP_STALL_NS without
        an arrival (the logger streams a request in order, paced: until
        then it may still be coming, and asking again would only have it
        served twice).  A logger runs its own phase (it asks the sender).
        Returns True while ids wait in the logger phase (tick faster)."""
        own = self.hooks.logger_phase
        if own is not None:
            own(now)
            return False
        node = self.node
        loggers = self.members.loggers()
        if not loggers:
            self._loggerless_rtx(now)
            return False
        budget = self._rtx_budget
        lwait = self._lwait
        stall = max(CATCHUP_STALL_NS, 4 * self._logger_rtt_ns(loggers))
        secs, used, busy = [], 0, False
        for slot, pid, pinc in node.peer_ids():
            if node.peer_missing_count(slot, PHASE_LOGGER) == 0:
                if slot in lwait:
                    del lwait[slot]
                    node.logger_inflight_clear(slot)
                continue
            busy = True
            out = node.logger_inflight(slot)        # what arrived leaves it first
            w = lwait.get(slot)
            if w is None:
                w = lwait[slot] = [out, now]
            if out < w[0]:
                w[1] = now                           # an arrival: the logger is streaming
            if out and now - w[1] >= stall:
                node.logger_inflight_clear(slot)     # could have arrived by now: ask again
                out = 0
                w[1] = now
            w[0] = out
            if out > CATCHUP_WINDOW // 2 or budget - used - 12 < 16:
                continue
            upto = self._window_end(slot, CATCHUP_WINDOW - out)
            if upto is None:
                continue
            d, cov, k = node.missing_digest(slot, PHASE_LOGGER_NEW, budget - used - 12, 0, upto)
            if not d:
                continue
            secs.append(wire.missing_section(pid, pinc, d))
            used += 12 + len(d)
            first = int(digest_decode(d)[0][0][0])
            node.logger_inflight_mark(slot, first, int(cov))
            w[0] = node.logger_inflight(slot)
            if not out:
                w[1] = now                           # the wait starts with the ask
        if secs:
            lg = loggers[self.rng.randrange(len(loggers))]
            self.emit(lg.addr, T.RTX, b"".join(secs))
            node.trace_event(now, EV_RTX_REQ, 0, 0, 0, used, lg.node_id, len(secs))
        return busy

    def _window_end(self, slot, room):
        """The last id of the first `room` logger-phase ids not in flight."""
        iv = self.node.missing(slot, PHASE_LOGGER_NEW, 0, 2 ** 64 - 1, 256)
        if not len(iv):
            return None
        left = room
        for lo, hi in iv.tolist():
            n = hi - lo + 1
            if n >= left:
                return lo + left - 1
            left -= n
        return int(iv[-1][1])

    def _logger_rtt_ns(self, loggers):
        rtts = [m.rtt for m in loggers if m.rtt is not None]
        return int(max(rtts) * NS) if rtts else 0

    def _loggerless_rtx(self, now):
        """Without loggers the last resort is the original sender; what it no
        longer holds is gone, and the application is told (a 'lost' event)."""
        node = self.node
        budget = self._rtx_budget - 12
        for slot, pid, pinc in node.peer_ids():
            if node.peer_missing_count(slot, PHASE_LOGGER) == 0:
                continue
            m = self.members.get(pid)
            if m is None:
                continue
            d, cov, k = node.missing_digest(slot, PHASE_LOGGER, budget, 0)
            if d:
                self.emit(m.addr, T.RTX, wire.missing_section(pid, pinc, d))
