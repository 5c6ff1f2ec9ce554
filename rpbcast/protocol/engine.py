"""The rpbcast protocol engine: sans-IO, driven by events.

    engine = Engine(config, now)
    engine.receive_datagram(data, addr, now)     # a datagram arrived
    engine.handle_timer(now)                     # engine.get_timer() is due
    engine.publish(payload, label=None, now=now) # the application sends
    for dest, data in engine.datagrams_to_send(): ...   # DEST_MCAST or a unicast address
    engine.recv() / engine.recv_batch(...)       # deliveries

No sockets, clocks or threads.  Times are integer nanoseconds; addresses are
opaque integers chosen by the driver.  The per-message work (gap detection,
storing, serving repairs) runs in the C data plane (``rpbcast.core.node.Node``);
this module is the control plane: gossip rounds, GcNOTE hand-off to the
logger phase (§4.3), heartbeat and membership signatures (§5.1, §5.3),
logger acknowledgments and GC (§3.2, §5.2), joins, crashes (ch. 6).
"""
from __future__ import annotations

import collections
import random
import struct
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from rpbcast.core import wire
from rpbcast.config import Config
from rpbcast.core.digest import DigestError, decode as digest_decode
from rpbcast.protocol.membership import (
    DISCONNECTED, MEMBER, NOT_MEMBER, PENDING_JOIN, PENDING_LEAVE, ROLE_LOGGER, ROLE_MEMBER,
    Member, MemberTable, addr_to_wire, wire_to_addr)
from rpbcast.core.node import (DEST_MCAST, NO_SLOT, NOLABEL, PHASE_ALL, PHASE_GOSSIP, PHASE_LOGGER,
                          PHASE_NEW, Node)
from rpbcast.protocol.selection import choose

NS = 1_000_000_000
T = wire.MsgType

# trace event codes (csrc/trace.h, docs/traces.md)
EV_GOSSIP_OUT, EV_GOSSIP_IN, EV_RTX_REQ, EV_GCNOTE, EV_HEARTBEAT, EV_MEMBER = 6, 7, 8, 10, 11, 12

# HBLIST kinds: the idle list the heartbeat signature covers, or (flag
# VECTOR) a sponsor's vector of every stream's latest seq (t_join).
HB_IDLE = 0
HB_VECTOR = wire.F_VECTOR

SEC_BUDGET_SLACK = 16


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class DriverNeeds(NamedTuple):
    """The driver contract's declared capabilities.

    data_plane_rx: a driver may receive straight into the C data plane
        (engine.node) and call engine.on_data_plane when it reports work --
        exactly equivalent to receive_datagram.  False: every datagram must
        go through receive_datagram(s).
    every_rx: on_data_plane must also run after every received batch (some
        part acts on data alone, e.g. a logger that syncs before it
        acknowledges), not only on control messages, gaps and timers."""
    data_plane_rx: bool
    every_rx: bool


class Delivery(NamedTuple):
    sender: int
    inc: int
    seq: int
    label: Optional[int]
    payload: bytes


class Engine:
    """One rpbcast node's protocol state machine."""

    def __init__(self, config: Config, now: int, rng: Optional[random.Random] = None, log=None):
        cfg = config.validate()
        self.cfg = cfg
        self.rng = rng or random.Random()
        self.id = cfg.node_id
        self.inc = cfg.incarnation if cfg.incarnation is not None else (now // 1_000_000) & 0xFFFFFFFF
        self.is_logger = cfg.role == "logger"
        self.node = Node(cfg.group, self.id, self.inc, mtu=cfg.mtu, store_bytes=cfg.store_bytes,
                         store_entries=cfg.store_entries, max_gap=cfg.max_gap,
                         srb_w=cfg.srb_window, max_scan=cfg.max_scan,
                         deliver_own=cfg.deliver_own, fifo=cfg.delivery == "fifo",
                         is_logger=self.is_logger, no_deliver=self.is_logger)
        if cfg.repair_rate:
            self.node.set_rate_limit(cfg.repair_rate, cfg.repair_burst)
        self.events = collections.deque()

        # membership
        self.members = MemberTable(self.id)
        self.status = PENDING_JOIN if cfg.join else MEMBER
        self.freshness = 1
        self.sponsors = set()
        self.t_join_taken = False
        for rank, m in enumerate(cfg.members):
            self.members.upsert(Member(m.node_id, 0, MEMBER, ROLE_LOGGER if m.role == "logger" else ROLE_MEMBER,
                                       m.addr, m.rank if m.rank >= 0 else rank, 0))
        self.members.upsert(self._self_entry())
        self.members.on_status = self._member_event

        # timers (absolute ns)
        gi = _ns(cfg.gossip_interval)
        self._gossip_ns = gi
        self._idle_infer_ns = max(4 * _ns(cfg.idle_after), gi)
        self.next_gossip = now + self.rng.randrange(max(gi, 1))
        self.last_nack = -(1 << 62)
        self.next_nack: Optional[int] = None
        self.next_nack_retry: Optional[int] = None
        # Outstanding immediate pulls: [due, backoff, [(slot, lo, hi)]].
        # Each is retried on its own clock, only for what is still missing.
        self._retries = collections.deque()
        self._rtt_hint: Optional[float] = None     # the latest RTT estimate to anyone
        self.next_logger_rtx = now + _ns(cfg.logger_rtx_interval)
        self.next_ping = now + self.rng.randrange(max(_ns(cfg.ping_interval), 1))
        self.next_join = now if cfg.join else None
        self.next_report = now + _ns(cfg.logger_report_interval)
        self.idle_announced = -1          # next_seq value the idle heartbeat covered
        self.gossip_seq = 0
        self._reply_parts = {}      # source -> [list size, {id: key} seen so far, time]
        self._now = now
        self._start_slot = 0
        self._next_hist = {}
        self.pings = {}

        # sender <-> logger
        self.logger_acks = {}             # logger id -> own frontier it holds
        self._ack_progress_t = now
        # receiver-driven flow control (cfg.flow_control == "receivers")
        self._flow = cfg.flow_control == "receivers"
        self.flow_acks = {}               # receiver id -> (its inc, our frontier it reported)
        self._flow_sent = {}              # slot -> (frontier we reported, when)
        self.next_flow = now + _ns(cfg.flow_report_interval) if self._flow else None
        self._update_hold_send()

        self.extensions = []
        self.always_lastseen = False       # every gossip carries our receive frontiers

        self.logger = None
        if self.is_logger:
            from rpbcast.protocol.logger import LoggerRole
            self.logger = LoggerRole(self, log, now)
        if cfg.srb_window:
            from rpbcast.protocol.fifo_srb import FifoSrb
            self.add_extension(FifoSrb())

    # ------------------------------------------------------------------ utils
    def _member_event(self, m: Member):
        # trace: a member appeared or changed status (docs/traces.md `member`)
        self.node.trace_event(self._now, EV_MEMBER, m.node_id, m.inc, m.freshness, 0, 0, m.status)

    def _self_entry(self) -> Member:
        return Member(self.id, self.inc, self.status, ROLE_LOGGER if self.is_logger else ROLE_MEMBER,
                      self.cfg.addr, -1, self.freshness, max(self.node.next_seq - 1, 0))

    def _member_bytes(self, m: Member) -> bytes:
        ip, port = addr_to_wire(m.addr)
        return wire.member_entry(wire.Member(m.node_id, m.inc, m.status, m.role, port, ip,
                                             max(m.rank, 0) if m.rank >= 0 else 0xFFFFFFFF,
                                             m.freshness, m.lastseq))

    def _emit(self, dest, type_, body=b"", flags=0, sender=None, inc=None, aux=0, seq=0):
        self.node.emit(dest, type_, flags, self.id if sender is None else sender,
                       self.inc if inc is None else inc, aux, seq, body)

    def _addr_of(self, node_id) -> Optional[int]:
        m = self.members.get(node_id)
        return m.addr if m is not None else None

    def _update_hold_send(self):
        # Without loggers (and without receiver flow control) nothing
        # acknowledges; the send buffer then lives only as long as the
        # gossip buffer keeps it.
        self.node.hold_send = bool(self.members.loggers()) or self._flow

    # ------------------------------------------------------------------ API
    def resume(self, bases):
        """A restarted receiver: {(sender, inc): first seq still wanted}.
        Earlier ids are not asked for; later ones are recovered from peers
        and loggers like any gap."""
        for (s, i), base in bases.items():
            if (s, i) != (self.id, self.inc):
                self.node.peer(s, i, base)

    def add_extension(self, ext):
        self.extensions.append(ext)
        ext.attach(self)
        return ext

    def _event(self, *ev):
        self.events.append(ev)
        if ev[0] == "member":
            for x in self.extensions:
                x.on_member(ev[1], ev[2], self._now)

    def set_addr(self, addr: int):
        """The transport bound our unicast socket: this is where peers reach us."""
        self.cfg = self.cfg.replace(addr=addr)
        self.members.upsert(Member(self.id, self.inc, self.status,
                                   ROLE_LOGGER if self.is_logger else ROLE_MEMBER, addr, -1,
                                   self.freshness + 0, max(self.node.next_seq - 1, 0)))
        m = self.members.get(self.id)
        if m is not None and m.addr != addr:
            m.addr = addr
            self.members.version += 1

    def publish(self, payload, label: Optional[int] = None, now: int = 0) -> int:
        self._unacked_from(now)
        return self.node.publish(payload, label, now)

    def publish_batch(self, payloads, lens, labels=None, now: int = 0) -> int:
        self._unacked_from(now)
        return self.node.publish_batch(payloads, lens, labels, now)

    def _unacked_from(self, now):
        # The logger-resend clock starts with the first unacknowledged
        # message, not at the last timer tick: a sender idle for longer than
        # logger_retx_timeout must not resend its next message at once.
        node = self.node
        if node.acked >= node.next_seq:
            self._ack_progress_t = now

    # ------------------------------------------------------------ driver contract
    # A driver either hands datagrams to receive_datagram(s), or -- when
    # driver_needs.data_plane_rx -- runs them through the C data plane
    # (self.node) itself and then calls on_data_plane.  Both routes run the
    # same code: receive_datagram is node.rx followed by on_data_plane.

    @property
    def driver_needs(self) -> DriverNeeds:
        """What a driver that receives through the C data plane must do for
        this engine (docs/architecture.md, "The driver contract")."""
        every = any(p.needs_every_rx for p in self._parts())
        return DriverNeeds(data_plane_rx=True, every_rx=every)

    def _parts(self):
        return ([self.logger] if self.logger is not None else []) + list(self.extensions)

    def on_data_plane(self, now: int, control: bool = False, gap: bool = False, timer: bool = False,
                      rx: bool = False) -> int:
        """The data plane has work for the control plane: control messages
        queued (control), a gap flagged for an immediate pull (gap), a timer
        due (timer), or simply a batch received (rx; only needed when
        driver_needs.every_rx).  Returns the next timer (ns)."""
        if control:
            self._control(now)
        if control or gap or rx:
            self._after_rx(now)
        if timer:
            self.handle_timer(now)
        return self.get_timer()

    def receive_datagram(self, data, addr: int, now: int) -> int:
        r = self.node.rx(data, addr, now)
        self.on_data_plane(now, control=self.node.nctl > 0, rx=True)
        return r

    def receive_datagrams(self, buf, offs, lens, addrs, now: int) -> int:
        bad = self.node.rx_batch(buf, offs, lens, addrs, now)
        self.on_data_plane(now, control=self.node.nctl > 0, rx=True)
        return bad

    def datagrams_to_send(self) -> List[Tuple[int, bytes]]:
        return self.node.datagrams()

    def recv(self, max_n: int = 1 << 16, now: int = 0) -> List[Delivery]:
        """Deliveries as objects (convenient, not for high rates: use
        recv_batch)."""
        buf = bytearray(max(self.cfg.mtu, 1 << 16) * 4)
        out = []
        while len(out) < max_n:
            k, snd, inc, seq, lab, _, off, ln = self.node.recv_batch(min(max_n - len(out), 4096), buf, now)
            if not k:
                break
            mv = memoryview(buf)
            for i in range(k):
                o = int(off[i])
                out.append(Delivery(int(snd[i]), int(inc[i]), int(seq[i]),
                                    None if lab[i] == NOLABEL else int(lab[i]), bytes(mv[o:o + int(ln[i])])))
        return out

    def recv_batch(self, max_n: int, buf, now: int = 0):
        return self.node.recv_batch(max_n, buf, now)

    def next_event(self):
        return self.events.popleft() if self.events else None

    def get_timer(self) -> int:
        t = [self.next_gossip, self.next_logger_rtx, self.next_ping, self.next_report]
        if self.next_nack is not None:
            t.append(self.next_nack)
        if self.next_nack_retry is not None:
            t.append(self.next_nack_retry)
        if self.next_join is not None:
            t.append(self.next_join)
        if self.next_flow is not None:
            t.append(self.next_flow)
        if self.node.next_seq and self.idle_announced != self.node.next_seq:
            t.append(self.node.last_publish + _ns(self.cfg.idle_after))
        if self.members.loggers() and self.node.acked < self.node.next_seq:
            t.append(self._ack_progress_t + _ns(self.cfg.logger_retx_timeout))
        if self.logger is not None:
            t.append(self.logger.get_timer())
        for x in self.extensions:
            xt = x.get_timer()
            if xt is not None:
                t.append(xt)
        return min(t)

    def handle_timer(self, now: int):
        cfg = self.cfg
        self._now = now
        if now >= self.next_gossip:
            self._gossip_round(now)
            jitter = self._gossip_ns // 10
            self.next_gossip = max(self.next_gossip + self._gossip_ns + self.rng.randint(-jitter, jitter), now + 1)
        if self.next_nack is not None and now >= self.next_nack:
            self.next_nack = None
            self._nack(now)
        if self.next_nack_retry is not None and now >= self.next_nack_retry:
            self._nack_retry(now)
        if now >= self.next_logger_rtx:
            self._logger_phase_rtx(now)
            self.next_logger_rtx = now + _ns(cfg.logger_rtx_interval)
        if now >= self.next_ping:
            self._ping(now)
            self.next_ping = now + _ns(cfg.ping_interval)
        if now >= self.next_report:
            self._report_to_logger(now)
            self.next_report = now + _ns(cfg.logger_report_interval)
        if self.next_join is not None and now >= self.next_join:
            self._join_tick(now)
        if self.next_flow is not None and now >= self.next_flow:
            self._flow_tick(now)
            self.next_flow = now + _ns(cfg.flow_report_interval)
        # idle heartbeat: one multicast when the sender falls silent (§5.1)
        if (self.node.next_seq and self.idle_announced != self.node.next_seq
                and now - self.node.last_publish >= _ns(cfg.idle_after)):
            self.node.send_heartbeat(True)
            self.idle_announced = self.node.next_seq
            self.node.trace_event(now, EV_HEARTBEAT, self.id, self.inc, self.node.next_seq - 1, 0, 0, 0)
        # resend to a logger what no logger acknowledged (§3.1); the clock
        # for that starts when everything was last acknowledged
        if self.node.acked >= self.node.next_seq:
            self._ack_progress_t = now
        if (self.members.loggers() and self.node.acked < self.node.next_seq
                and now - self._ack_progress_t >= _ns(cfg.logger_retx_timeout)):
            self._resend_to_loggers(now)
        if self.logger is not None:
            self.logger.on_timer(now)
        for x in self.extensions:
            xt = x.get_timer()
            if xt is not None and now >= xt:
                x.on_timer(now)

    # ------------------------------------------------------------------ gossip
    def _targets(self, now):
        return self.members.active(now, _ns(self.cfg.member_timeout))

    def _pick_target(self, now) -> Optional[Member]:
        c = self._targets(now)
        if not c:
            # Nobody we believe is up and reachable.  Our view may be stale:
            # two members that each missed the other's reconnect (both
            # DISCONNECTED in the other's table), with every third member
            # crashed, would otherwise never talk again and never repair
            # each other.  Probe a member we think is away: a gossip carries
            # the membership signature, which sets both views right.
            c = [m for m in self.members.entries()
                 if m.node_id != self.id and m.status in (MEMBER, PENDING_LEAVE, DISCONNECTED)]
            if not c:
                return None
            return c[self.rng.randrange(len(c))]
        return choose(c, [m.rtt for m in c], self.cfg.selection, self.rng)

    def _missing_sections(self, phase, budget, mark=True, rotate=True, from_start=False, spans=None):
        """MISSING sections of this phase within budget bytes.  Returns
        (sections, ids asked); with ``spans`` (a list) it also collects the
        (slot, first, last) id range each section asks about."""
        node = self.node
        secs, used, nids = [], 0, 0
        n = node.npeers
        if not n:
            return secs, 0
        start = self._start_slot % n if rotate else 0
        for k in range(n):
            slot = (start + k) % n
            if node.peer_missing_count(slot, PHASE_ALL) == 0:
                continue
            room = budget - used - 12          # section header + (sender, inc)
            if room < 8:
                break
            cursor = 0 if from_start else node.gossip_cursor(slot)
            d, cov, k_ids = node.missing_digest(slot, phase, room, cursor)
            if not d and cursor:
                cursor = 0
                d, cov, k_ids = node.missing_digest(slot, phase, room, 0)
            if not d:
                continue
            pid, pinc = node.peer_key(slot)
            if self.cfg.want is not None and not self.cfg.want(pid, pinc, cursor, cov):
                node.forget(slot, cursor, cov)
                self.events.append(("unwanted", pid, pinc, cursor, cov))
                continue
            secs.append(wire.missing_section(pid, pinc, d))
            used += 4 + 8 + len(d)
            nids += k_ids
            if spans is not None:
                spans.append((slot, int(digest_decode(d)[0][0][0]), int(cov)))
            if mark:
                node.mark_inflight(slot, cursor, cov)
            if not from_start:
                nxt = cov + 1
                node.set_gossip_cursor(slot, nxt if nxt < node.peer_next(slot) else 0)
        if rotate:
            self._start_slot += 1
        return secs, nids

    def _lastseen_section(self):
        node = self.node
        entries = []
        # A logger's frontier is an acknowledgment (§5.2: senders derive
        # ACKs from it), so it reports only what a completed sync covers,
        # never records still in its write buffer.
        durable = self.logger.durable if self.logger is not None else None
        for slot, pid, pinc in node.peer_ids():
            f = node.peer_contiguous(slot)
            if durable is not None:
                f = min(f, durable.get(slot, 0))
            entries.append((pid, pinc, f))
        if node.next_seq:
            entries.append((self.id, self.inc, node.next_seq))
        return wire.lastseen_section(entries) if entries else b""

    def _gossip_to(self, target: Member, now, phase, with_lastseen=False, with_missing=True):
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - wire.GOSSIP_FIXED - SEC_BUDGET_SLACK
        extra = []
        if with_lastseen or target.is_logger or self.is_logger or self.always_lastseen:
            ls = self._lastseen_section()
            if ls and len(ls) < budget // 2:
                extra.append(ls)
                budget -= len(ls)
        secs, nids = self._missing_sections(phase, budget) if with_missing else ([], 0)
        if self.logger is not None:
            extra += self.logger.gossip_sections(budget - sum(len(s) for s in secs))
        for x in self.extensions:
            extra += x.gossip_sections(target, budget - sum(len(s) for s in secs + extra), now)
        self._send_gossip(target, secs + extra, now, nids)
        return nids

    def _send_gossip(self, target: Member, sections, now, nids=0):
        """One GOSSIP message: our heartbeat and membership signatures, then
        the sections (nids: missing ids it asks for, for the trace)."""
        body = wire.gossip_body(self.node.hb_signature, self.members.signature, now & (2**64 - 1), sections)
        self.gossip_seq += 1
        self._emit(target.addr, T.GOSSIP, body, seq=self.gossip_seq)
        self.node.trace_event(now, EV_GOSSIP_OUT, 0, 0, self.gossip_seq, len(body), target.node_id, nids)

    def _gossip_round(self, now):
        node = self.node
        node.round(self.cfg.gc_limit, self.cfg.gossip_buffer_bytes)
        # A stream silent here for a while is idle as far as we know, even
        # without its idle heartbeat (its sender may have crashed right after
        # its last message): its latest seq joins our signature, so a member
        # that lacks it sees the signatures differ and pulls it (§5.1).
        node.infer_idle(now, self._idle_infer_ns)
        node.clear_inflight()
        self._gossip_phase_timeout()
        for x in self.extensions:
            x.on_round(now)
        if self.status not in (MEMBER, PENDING_LEAVE):
            return
        target = self._pick_target(now)
        if target is not None:
            self._gossip_to(target, now, PHASE_GOSSIP)

    def _gossip_phase_timeout(self):
        """Ids missing for 2 x GCLIMIT rounds go to the logger phase even
        without a GcNOTE (the thesis's first hand-off, §4.3): when no peer
        ever received a message, no peer can say it collected it.  Without
        loggers that phase asks the original sender (_loggerless_rtx)."""
        node = self.node
        k = 2 * self.cfg.gc_limit
        hist = self._next_hist
        for slot, pid, pinc in node.peer_ids():
            h = hist.setdefault(slot, collections.deque())
            h.append(node.peer_next(slot))
            if len(h) > k:
                old = h.popleft()
                if old and node.peer_missing_count(slot, PHASE_GOSSIP):
                    node.to_logger_phase(slot, 0, old - 1)

    def _nack(self, now):
        """Immediate pull for gaps just seen (§4.1: request on detection).
        A NACK or its repair can be lost too: until its ids arrive, each
        pull is asked again on its own clock (_nack_retry) instead of
        waiting for the next gossip round -- that wait is what sets the
        tail latency under loss."""
        node = self.node
        node.clear_nack()
        if self.status not in (MEMBER, PENDING_LEAVE):
            return
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - wire.GOSSIP_FIXED - SEC_BUDGET_SLACK
        spans = []
        secs, nids = self._missing_sections(PHASE_NEW, budget, rotate=False, from_start=True, spans=spans)
        if not secs:
            return
        target = self._nack_target(secs[0], now)
        if target is None:
            return
        self._send_pull(target, secs, nids, now)
        self.last_nack = now
        rto = self._rto(target)
        self._retries.append([now + rto, rto, spans])
        if self.next_nack_retry is None or now + rto < self.next_nack_retry:
            self.next_nack_retry = now + rto

    def _nack_target(self, first_section, now):
        # In a small group ask the sender of the first section: it holds
        # every message it sent until a logger has it, so one round trip
        # repairs.  In a large group that is an implosion (every receiver
        # behind a shared loss asks at once): pull from a random peer, as
        # the thesis does.
        mode = self.cfg.nack_target
        if mode == "auto":
            mode = "sender" if len(self.members) <= self.cfg.nack_sender_max else "random"
        if mode == "sender":
            pid = struct.unpack_from("<I", first_section, 4)[0]
            m = self.members.get(pid)
            if m is not None and m.status in (MEMBER, PENDING_LEAVE):
                return m
        return self._pick_target(now)

    def _rto(self, target):
        # Wait at least nack_retry, and twice the measured round trip to the
        # target: asking again before a repair could be back only
        # duplicates it (every retry of an id costs a repair).
        rto = _ns(self.cfg.nack_retry)
        rtt = target.rtt if target.rtt is not None else self._rtt_hint   # not probed yet: a neighbour's
        if rtt is not None:
            rto = max(rto, int(2 * rtt * NS))
        return min(rto, self._gossip_ns)

    def _send_pull(self, target, secs, nids, now):
        body = wire.gossip_body(self.node.hb_signature, self.members.signature, now & (2**64 - 1), secs)
        self.gossip_seq += 1
        self._emit(target.addr, T.GOSSIP, body, seq=self.gossip_seq)
        self.node.trace_event(now, EV_GOSSIP_OUT, 0, 0, self.gossip_seq, len(body), target.node_id, nids)

    def _nack_retry(self, now):
        """Ask again for the ids of due pulls that are still missing (and
        still in the gossip phase), with the wait doubled; a pull whose
        wait reaches the gossip interval is left to the gossip rounds."""
        node = self.node
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - wire.GOSSIP_FIXED - SEC_BUDGET_SLACK
        secs, used, nids, later = [], 0, 0, []
        q = self._retries
        while q and q[0][0] <= now:
            due, backoff, spans = q.popleft()
            left = []
            for slot, lo, hi in spans:
                room = budget - used - 12
                if room < 8:
                    left.append((slot, lo, hi))      # no room: next time
                    continue
                d, cov, k = node.missing_digest(slot, PHASE_GOSSIP, room, lo, hi)
                if not d:
                    continue
                pid, pinc = node.peer_key(slot)
                secs.append(wire.missing_section(pid, pinc, d))
                used += 12 + len(d)
                nids += k
                node.mark_inflight(slot, lo, cov)
                left.append((slot, int(digest_decode(d)[0][0][0]), hi))   # what is still out
            backoff *= 2
            if left and backoff < self._gossip_ns:
                later.append([now + backoff, backoff, left])
        if secs and self.status in (MEMBER, PENDING_LEAVE):
            target = self._nack_target(secs[0], now)
            if target is not None:
                self._send_pull(target, secs, nids, now)
        for e in later:
            # keep the deque ordered by due time
            if not q or e[0] >= q[-1][0]:
                q.append(e)
            else:
                i = next(k for k, x in enumerate(q) if x[0] > e[0])
                q.insert(i, e)
        self.next_nack_retry = q[0][0] if q else None

    def _after_rx(self, now):
        if self.node.nack_pending and self.cfg.immediate_nack:
            due = self.last_nack + _ns(self.cfg.nack_min_interval)
            if now >= due:
                self._nack(now)
            elif self.next_nack is None:
                self.next_nack = due
        if self.logger is not None:
            self.logger.after_rx(now)
        for x in self.extensions:
            x.after_rx(now)

    def _logger_phase_rtx(self, now):
        """Logger phase: ask a logger for everything a GcNOTE moved there
        (§3.3, §4.3).  A logger asks the original sender instead."""
        node = self.node
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - SEC_BUDGET_SLACK
        if self.is_logger:
            self.logger.rtx_to_senders(now)
            return
        loggers = self.members.loggers()
        if not loggers:
            self._loggerless_rtx(now)
            return
        secs, used = [], 0
        for slot, pid, pinc in node.peer_ids():
            if node.peer_missing_count(slot, PHASE_LOGGER) == 0:
                continue
            d, cov, k = node.missing_digest(slot, PHASE_LOGGER, budget - used - 12, 0)
            if not d:
                continue
            secs.append(wire.missing_section(pid, pinc, d))
            used += 12 + len(d)
            if used > budget - 32:
                break
        if secs:
            lg = loggers[self.rng.randrange(len(loggers))]
            self._emit(lg.addr, T.RTX, b"".join(secs))
            node.trace_event(now, EV_RTX_REQ, 0, 0, 0, used, lg.node_id, len(secs))

    def _loggerless_rtx(self, now):
        """Without loggers the last resort is the original sender; what it no
        longer holds is gone, and the application is told (a 'lost' event)."""
        node = self.node
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - SEC_BUDGET_SLACK - 12
        for slot, pid, pinc in node.peer_ids():
            if node.peer_missing_count(slot, PHASE_LOGGER) == 0:
                continue
            m = self.members.get(pid)
            if m is None:
                continue
            d, cov, k = node.missing_digest(slot, PHASE_LOGGER, budget, 0)
            if d:
                self._emit(m.addr, T.RTX, wire.missing_section(pid, pinc, d))

    def _report_to_logger(self, now):
        """Members report their receive frontiers to a logger at least this
        often, for logger GC from derived ACKs (§5.2)."""
        if self.is_logger or self.status not in (MEMBER, PENDING_LEAVE):
            return
        loggers = self.members.loggers()
        if loggers:
            lg = loggers[self.rng.randrange(len(loggers))]
            self._gossip_to(lg, now, PHASE_GOSSIP, with_lastseen=True, with_missing=False)

    def _resend_to_loggers(self, now):
        node = self.node
        lo, hi = node.acked, node.next_seq - 1
        hi = min(hi, lo + 4095)
        for lg in self.members.loggers():
            if self.logger_acks.get(lg.node_id, 0) <= hi:
                node.serve(self.id, self.inc, [(max(lo, self.logger_acks.get(lg.node_id, 0)), hi)],
                           lg.addr, False, now, False)
        self._ack_progress_t = now

    def _ping(self, now):
        c = self._targets(now)
        if not c:
            return
        m = c[self.rng.randrange(len(c))]
        nonce = self.rng.getrandbits(48)
        self.pings[nonce] = (m.node_id, now)
        if len(self.pings) > 64:
            self.pings.pop(next(iter(self.pings)))
        self._emit(m.addr, T.PING, struct.pack("<q", now), seq=nonce)

    # ------------------------------------------------------------------ control
    def _control(self, now):
        self._now = now
        for msg in self.node.take_control():
            type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
            self.members.heard(source, now)
            h = self._handlers.get(type_)
            if h is not None:
                h(self, msg, now)
            else:
                for x in self.extensions:
                    if x.on_message(msg, now):
                        break

    def _sections_intervals(self, body):
        """[(sender, inc, intervals)] of a MISSING-sections body."""
        out = []
        for kind, _, data in wire.sections(body):
            if kind != wire.Section.MISSING:
                continue
            s, i, d = wire.read_missing(data)
            try:
                iv, _, _, _ = digest_decode(d)
            except DigestError:
                continue
            out.append((s, i, iv))
        return out

    def _on_gossip(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        hb, mem, ts, secs = wire.read_gossip(body)
        node = self.node
        node.trace_event(now, EV_GOSSIP_IN, 0, 0, seq, len(body), source, 0)
        gc_secs = []
        for kind, _, data in secs:
            if kind == wire.Section.MISSING:
                s, i, d = wire.read_missing(data)
                try:
                    iv, _, _, _ = digest_decode(d)
                except DigestError:
                    continue
                served, gc = node.serve(s, i, iv, src, self.is_logger, now, not self.is_logger)
                if gc:
                    gc_secs.append((s, i, gc))
                if self.logger is not None:
                    self.logger.on_request(s, i, iv, src, now)
            elif kind == wire.Section.LASTSEEN:
                self._on_lastseen(source, data, now, source_inc)
            else:
                self._on_extra_section(source, kind, data, now)
        for s, i, gc in gc_secs:
            self._send_gcnote(src, s, i, gc)
            node.trace_event(now, EV_GCNOTE, s, i, int(gc[0][0]), sum(int(b) - int(a) + 1 for a, b in gc),
                             source, 0)
        if hb != node.hb_signature:
            entries = node.idle_entries()
            self._send_hblist(src, entries, wire.F_REPLY, HB_IDLE)
        if mem != self.members.signature:
            self._send_members(src, self.members.entries(), wire.F_REPLY)

    def _on_extra_section(self, source, kind, data, now):
        if self.logger is not None:
            self.logger.on_section(source, kind, data, now)
        for x in self.extensions:
            x.on_section(source, kind, data, now)

    def _on_lastseen(self, source, data, now, source_inc=None):
        entries = wire.read_lastseen(data)
        m = self.members.get(source)
        if m is not None and m.is_logger:
            for s, i, frontier in entries:
                if s == self.id and i == self.inc:
                    self._logger_ack(source, frontier, now)
        elif m is not None and self._flow:
            self._flow_report(source, m.inc if source_inc is None else source_inc, entries, now)
        if self.logger is not None:
            self.logger.on_report(source, entries, now, source_inc)
        for x in self.extensions:
            x.on_lastseen(source, entries, now)

    def _logger_ack(self, logger_id, frontier, now):
        if frontier <= self.logger_acks.get(logger_id, 0):
            return
        self.logger_acks[logger_id] = frontier
        if self._flow:
            self._flow_release(now)
            return
        eff = self._logger_frontier()
        if eff > self.node.acked:
            self.node.logger_ack(eff)
            self._ack_progress_t = now

    def _logger_frontier(self):
        """Own seqs below this are held by ack_loggers loggers (0: not yet)."""
        vals = sorted(self.logger_acks.values(), reverse=True)
        k = self.cfg.ack_loggers
        return vals[k - 1] if len(vals) >= k else 0

    # ------------------------------------------------------------------ flow control
    def _flow_tick(self, now):
        """Receiver-driven flow control: report our receive frontier to each
        sender whose stream moved (and again now and then, in case a report
        was lost); as a sender, re-evaluate what may leave the send buffer
        (a receiver that fell silent stops counting)."""
        node = self.node
        if not self.is_logger and self.status in (MEMBER, PENDING_LEAVE):
            every = 16 * _ns(self.cfg.flow_report_interval)
            for slot, pid, pinc in node.peer_ids():
                m = self.members.get(pid)
                if m is None or pid == self.id or m.status not in (MEMBER, PENDING_LEAVE):
                    continue
                f = node.peer_contiguous(slot)
                last = self._flow_sent.get(slot)
                if last is not None and last[0] == f and now - last[1] < every:
                    continue
                self._flow_sent[slot] = (f, now)
                self._send_gossip(m, [wire.lastseen_section([(pid, pinc, f)])], now)
        self._flow_release(now)

    def _flow_release(self, now):
        """Release the send buffer below the least frontier reported by the
        receivers heard from within flow_timeout (and, with loggers, below
        what ack_loggers loggers hold)."""
        node = self.node
        if not node.next_seq or node.acked >= node.next_seq:
            return
        live = [m for m in self.members.active(now, _ns(self.cfg.flow_timeout))
                if not m.is_logger and m.last_heard]
        eff = node.next_seq
        for m in live:
            eff = min(eff, self.flow_acks.get(m.node_id, (0, 0))[1])
        if self.members.loggers():
            eff = min(eff, self._logger_frontier())
        if eff > node.acked:
            node.logger_ack(eff)
            self._ack_progress_t = now

    def _flow_report(self, source, source_inc, entries, now):
        for s, i, frontier in entries:
            if s == self.id and i == self.inc:
                old = self.flow_acks.get(source)
                if old is None or old[0] != source_inc or frontier > old[1]:
                    # a restarted receiver's new incarnation starts over
                    self.flow_acks[source] = (source_inc, frontier)
                    self._flow_release(now)

    def _send_gcnote(self, dest, sender, inc, intervals):
        from rpbcast.core.digest import encode
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - 12
        iv = np.asarray(intervals, dtype=np.uint64)
        frm = int(iv[0, 0])
        while frm <= int(iv[-1, 1]):
            d, cov, k = encode(iv, frm, int(iv[-1, 1]), budget)
            if not d:
                break
            self._emit(dest, T.GCNOTE, wire.missing_section(sender, inc, d))
            if cov >= int(iv[-1, 1]):
                break
            frm = cov + 1

    def _send_hblist(self, dest, entries, flags, kind):
        per = (self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR) // 16
        flags |= kind
        if not entries:
            self._emit(dest, T.HBLIST, b"", flags=flags)
            return
        for k in range(0, len(entries), per):
            self._emit(dest, T.HBLIST, wire.hb_entries(entries[k:k + per]), flags=flags)

    def _send_members(self, dest, members, flags):
        """A list over as many MEMBERS messages as it takes; aux = the size
        of the whole list, so the receiver knows when it has every part."""
        per = (self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR) // wire.MEMBER_ENTRY
        for k in range(0, len(members), per):
            body = b"".join(self._member_bytes(m) for m in members[k:k + per])
            self._emit(dest, T.MEMBERS, body, flags=flags, aux=len(members))

    def _on_hblist(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        entries = wire.read_hb_entries(body)
        node = self.node
        vector = bool(flags & wire.F_VECTOR)
        theirs = {}
        for s, i, q in entries:
            theirs[(s, i)] = q
            if s == self.id and i == self.inc:
                continue
            if vector and self.status == PENDING_JOIN and not self.t_join_taken:
                # A sponsor's vector: t_join.  We answer for what comes after.
                base = 0 if self.cfg.catch_up else q + 1
                node.peer(s, i, base)
                continue
            slot = node.peer(s, i, 0)
            node.heartbeat(slot, q, not vector, now)
        if vector and self.status == PENDING_JOIN:
            self.t_join_taken = True
        if flags & wire.F_REPLY and not vector:
            push = [e for e in node.idle_entries() if theirs.get((e[0], e[1]), -1) < e[2]]
            if push:
                self._send_hblist(src, push, wire.F_PUSH, HB_IDLE)
        self._after_rx(now)

    def _on_gcnote(self, msg, now):
        node = self.node
        moved = 0
        node.trace_event(now, EV_GCNOTE, msg[2], msg[3], 0, len(msg[6]), msg[7], 1)
        source = msg[7]
        loggerless = not self.is_logger and not self.members.loggers()
        for s, i, iv in self._sections_intervals(msg[6]):
            slot = node.find_peer(s, i)
            if slot is None:
                continue
            if loggerless and source != s:
                # Only a logger phase could take these over, and there is
                # none: another peer may still hold them, so keep gossiping.
                # After 2 x GCLIMIT rounds the gossip-phase timeout asks the
                # sender, whose GcNOTE is final.
                continue
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
        if moved and not self.is_logger:
            # Go to a logger now rather than at the next logger round.
            self._logger_phase_rtx(now)

    def _on_rtx(self, msg, now):
        src = msg[9]
        for s, i, iv in self._sections_intervals(msg[6]):
            if s == self.id and i == self.inc:
                # Own messages no longer held were logged somewhere (the send
                # buffer keeps them until a logger acknowledges): say so.
                served, gc = self.node.serve(s, i, iv, src, False, now, True)
                if gc:
                    self._send_gcnote(src, s, i, gc)
            elif self.logger is not None:
                self.node.serve(s, i, iv, src, True, now, False)
                self.logger.on_request(s, i, iv, src, now)
            else:
                self.node.serve(s, i, iv, src, False, now, False)

    def _send_gapnote(self, dest, sender, inc, intervals, lost=True):
        from rpbcast.core.digest import encode
        iv = np.asarray(intervals, dtype=np.uint64).reshape(-1, 2)
        if not len(iv):
            return
        budget = self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - 12
        frm = int(iv[0, 0])
        while frm <= int(iv[-1, 1]):
            d, cov, k = encode(iv, frm, int(iv[-1, 1]), budget)
            if not d:
                break
            self._emit(dest, T.GAPNOTE, wire.missing_section(sender, inc, d),
                       flags=wire.F_LOST if lost else 0)
            if cov >= int(iv[-1, 1]):
                break
            frm = cov + 1

    def _on_gapnote(self, msg, now):
        node = self.node
        for s, i, iv in self._sections_intervals(msg[6]):
            slot = node.find_peer(s, i)
            if slot is None:
                continue
            for lo, hi in iv:
                k = node.forget(slot, int(lo), int(hi))
                if k:
                    self.events.append(("lost", s, i, int(lo), int(hi)))
            if self.logger is not None:
                self.logger.on_gapnote(s, i, iv, now)

    def _on_logack(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if sender == self.id and inc == self.inc:
            self._logger_ack(source, seq, now)

    def _on_ping(self, msg, now):
        self._emit(msg[9], T.PONG, msg[6], seq=msg[5])

    def _on_pong(self, msg, now):
        p = self.pings.pop(msg[5], None)
        if p is None:
            return
        node_id, sent = p
        m = self.members.get(node_id)
        if m is not None:
            rtt = (now - sent) / NS
            m.rtt = rtt if m.rtt is None else 0.8 * m.rtt + 0.2 * rtt
            self._rtt_hint = m.rtt

    # ------------------------------------------------------------------ membership
    def _read_members(self, body):
        out = []
        for e in wire.read_members(body):
            rank = -1 if e.rank == 0xFFFFFFFF else e.rank
            out.append(Member(e.id, e.inc, e.status, e.role, wire_to_addr(e.ipv4, e.port), rank,
                              e.freshness, e.lastseq))
        return out

    def _on_join(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if self.status != MEMBER:
            return
        (m,) = self._read_members(body)
        if m.node_id != sender or m.inc != inc or m.freshness != seq:
            return                  # header and entry disagree: not a JOIN we can trust
        if m.addr == 0:
            m.addr = src
        m.status = MEMBER
        m.last_heard = now
        if self.members.upsert(m):
            self._event("member", m.node_id, "joined")
            if m.is_logger:
                self._update_hold_send()
        # Sponsor: our list (with the joiner in it) and our t_join vector.
        self._send_members(src, self.members.entries(), wire.F_REPLY)
        vec = [(pid, pinc, self.node.peer_next(slot) - 1) for slot, pid, pinc in self.node.peer_ids()
               if self.node.peer_next(slot) > 0]
        if self.node.next_seq:
            vec.append((self.id, self.inc, self.node.next_seq - 1))
        self._send_hblist(src, vec, wire.F_REPLY, HB_VECTOR)

    def _on_leave(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if self.status != MEMBER:
            return
        cur = self.members.get(sender)
        if cur is None:
            return
        m = Member(sender, inc, NOT_MEMBER, cur.role, cur.addr, cur.rank, seq, cur.lastseq)
        if self.members.upsert(m):
            self._event("member", sender, "left")
        self._send_members(src, self.members.entries(), wire.F_REPLY)

    def _on_members(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        entries = self._read_members(body)
        theirs = {}
        changed = False
        for m in entries:
            theirs[m.node_id] = m.key()
            if m.node_id == self.id:
                continue
            before = self.members.get(m.node_id)
            was = before.status if before is not None else None
            if self.members.upsert(m):
                changed = True
                if m.status != was:
                    self._event("member", m.node_id,
                                {MEMBER: "joined", NOT_MEMBER: "left"}.get(m.status, "changed"))
        me = next((m for m in entries if m.node_id == self.id and m.inc == self.inc), None)
        if me is not None and me.freshness == self.freshness:
            sm = self.members.get(source)
            if self.status == PENDING_JOIN and me.status == MEMBER:
                self.sponsors.add(source)
                if len(self.sponsors) >= self.cfg.sponsors or (sm is not None and sm.is_logger):
                    self._become(MEMBER, now)
            elif self.status == PENDING_LEAVE and me.status == NOT_MEMBER:
                self.sponsors.add(source)
                if len(self.sponsors) >= self.cfg.sponsors or (sm is not None and sm.is_logger):
                    self._become(NOT_MEMBER, now)
        if changed:
            self._update_hold_send()
        if flags & wire.F_REPLY:
            # Push back what the replier is behind on.  Entries it holds in
            # an older version: at once.  Entries it lacks: only once every
            # part of its list has arrived (a part lacks most entries; pushing
            # on each part multiplied the traffic by the number of parts).
            stale = [m for m in self.members.members.values()
                     if m.node_id in theirs and theirs[m.node_id] < m.key()]
            acc = self._reply_parts.get(source)
            if acc is None or acc[0] != aux or now - acc[2] > self._gossip_ns:
                acc = self._reply_parts[source] = [aux, {}, now]
            acc[1].update(theirs)
            push = stale
            if len(acc[1]) >= aux:
                push = self.members.behind(acc[1])
                del self._reply_parts[source]
            if push:
                self._send_members(src, push, wire.F_PUSH)

    def _become(self, status, now):
        self.status = status
        self.sponsors = set()
        self.next_join = None
        # Same (inc, freshness) as the sponsors already hold: upsert would
        # keep the old entry, so set the status in place (and re-sign).
        if self.members.get(self.id) is None:
            self.members.upsert(self._self_entry())
        else:
            self.members.set_status(self.id, status)
        self.events.append(("status", {MEMBER: "member", NOT_MEMBER: "not_member"}[status]))

    def join(self, now: int):
        """Start (or restart) the join protocol."""
        self.freshness += 1
        self.status = PENDING_JOIN
        self.sponsors = set()
        self.t_join_taken = False
        self.members.upsert(self._self_entry())
        self.next_join = now

    def disconnect(self, now: int):
        """An intermittently connected subscriber goes away for a while: the
        group marks it DISCONNECTED (not failed, not gone), loggers keep what
        it has not acknowledged (within their retention), and on
        reconnect() it catches up from peers and loggers (thesis §1.1, §5.3)."""
        self.freshness += 1
        self.status = DISCONNECTED
        self.members.upsert(self._self_entry())
        entries = [self.members.get(self.id)]
        for m in self._targets(now):
            self._send_members(m.addr, entries, wire.F_PUSH)

    def reconnect(self, now: int):
        self.freshness += 1
        self.status = MEMBER
        self.members.upsert(self._self_entry())
        entries = [self.members.get(self.id)]
        for m in self._targets(now):
            self._send_members(m.addr, entries, wire.F_PUSH)
        self.next_gossip = now

    def leave(self, now: int):
        self.freshness += 1
        self.status = PENDING_LEAVE
        self.sponsors = set()
        self.members.upsert(self._self_entry())
        self.next_join = now

    def _join_tick(self, now):
        if self.status == PENDING_JOIN:
            self._emit(DEST_MCAST, T.JOIN, self._member_bytes(self._self_entry()), seq=self.freshness)
        elif self.status == PENDING_LEAVE:
            self._emit(DEST_MCAST, T.LEAVE, seq=self.freshness)
        else:
            self.next_join = None
            return
        self.next_join = now + _ns(self.cfg.join_interval)

    # ------------------------------------------------------------------ stats
    def counters(self):
        c = self.node.counters()
        c["members"] = len(self.members.active())
        # own messages not yet released by loggers / receivers (the window in use)
        c["unacked"] = max(self.node.next_seq - self.node.acked, 0) if self.node.hold_send else 0
        return c

    def traffic(self):
        return self.node.traffic()


def _runs(values):
    """Sorted ints -> [(lo, hi)] runs."""
    out = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return [tuple(r) for r in out]


Engine._handlers = {
    T.GOSSIP: Engine._on_gossip,
    T.HBLIST: Engine._on_hblist,
    T.GCNOTE: Engine._on_gcnote,
    T.RTX: Engine._on_rtx,
    T.GAPNOTE: Engine._on_gapnote,
    T.LOGACK: Engine._on_logack,
    T.JOIN: Engine._on_join,
    T.LEAVE: Engine._on_leave,
    T.MEMBERS: Engine._on_members,
    T.PING: Engine._on_ping,
    T.PONG: Engine._on_pong,
}
