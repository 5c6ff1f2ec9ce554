"""SRM (Scalable Reliable Multicast, Floyd, Jacobson, Liu, McCanne and Zhang
1997, thesis ref. [13]; summarised in ../shared/papers/004_07fbea9036585db3.txt) on the
rpbcast data plane.

* Data goes out once by unreliable multicast (the shared data plane); every
  member keeps what it receives for ``buffer_time`` so it can repair it.
* *Session messages*: every member multicasts, every ``session_interval``
  (scaled up with the group size, as SRM scales session traffic), the latest
  seq it has of every stream (its own: the last it sent).  Members detect
  losses from DATA and from session messages.
* *Requests*: on detecting a loss a member schedules a NACK after a random
  delay in 2^i [C1 d, (C1 + C2) d], d its distance to the source, i its
  back-off count (0 at first).  When the timer fires it multicasts the NACK
  and backs off (i + 1) to wait for the repair.  Hearing someone else's NACK
  for the id first also backs off (suppression), after which it ignores
  further NACKs for the id for half the new timer ("ignore-backoff").
* *Repairs*: a member that holds a requested message schedules a repair
  after a random delay in [D1 d', (D1 + D2) d'], d' its distance to the
  requester; it cancels it if it hears someone else's repair first.  Repairs
  are multicast.  After sending or hearing a repair it ignores NACKs for the
  id for 3 d' (hold-down).

Distances: ``distance(a, b)`` (seconds, one way) if given, else half the RTT
the member table has for the peer, else ``default_distance``.

Wire: session message = HBLIST with flag VECTOR only (every stream's latest
seq, the sponsor-vector layout), multicast; NACK = RTX with MISSING
sections, multicast; repair = REPAIR, multicast (``Node.serve`` to
DEST_MCAST).  A repair is "heard" when a datagram whose first message is a
REPAIR arrives: this engine flushes its outbox before serving repairs so
its repair datagrams start with one, and looks into those datagrams (only,
and only while it has request or repair timers pending) for the ids
repaired.  That parse is the one piece of per-message Python work, paid
per repair datagram.

Not implemented from the paper: the adaptive adjustment of C1, C2, D1, D2
(the constants are parameters), distance estimation from session-message
timestamps (distances are given or default), local recovery scoping.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Optional

from rpbcast.core import wire
from rpbcast.config import ConfigError
from rpbcast.core.node import DEST_MCAST, PHASE_ALL, PHASE_NEW, SELF_SLOT
from rpbcast.protocol.engine import DriverNeeds
from rpbcast.protocol.heartbeats import HB_VECTOR, send_hblist
from rpbcast.protocol.pings import PingReplies
from rpbcast.protocol.send_buffer import NoHold
from rpbcast.protocol.serving import missing_intervals
from rpbcast.protocol.trace_events import EV_HEARTBEAT, EV_RTX_REQ

from rpbcast.baselines.common import NS, T, BaselineEngine, ProtocolPart, iv_count, ns, runs

_REQ, _REP = 0, 1


@dataclass
class SrmParams:
    C1: float = 2.0
    C2: float = 2.0
    D1: float = 1.0
    D2: float = 1.0
    distance: Optional[Callable] = None     # (my id, other id) -> one-way seconds
    default_distance: float = 0.01          # when neither distance nor an RTT is known
    session_interval: float = 1.0           # per member, for groups up to session_members
    session_members: int = 25               # beyond that the interval grows with the group
    max_backoff: int = 6                    # request timers back off at most 2**max_backoff
    hold_down: float = 3.0                  # ignore NACKs for an id this many d' after its repair
    buffer_time: float = 30.0               # how long members keep messages for repairs (s)
    suppress: bool = True                   # False: no suppression (for comparison)


class SrmEngine(BaselineEngine):
    """SRM: session messages, multicast NACKs and repairs on randomized,
    suppressed timers; nothing held beyond the repair buffer, no loggers.
    It looks into repair datagrams, so every datagram goes through
    receive_datagram(s)."""

    protocol = "srm"
    Params = SrmParams
    driver_needs = DriverNeeds(data_plane_rx=False, every_rx=False)
    STATS = ("nacks_sent", "nack_ids", "nacks_suppressed", "repairs_sent", "repairs_suppressed",
             "session_sent")

    def _check_config(self, cfg):
        if cfg.role == "logger":
            raise ConfigError("srm has no loggers (role must be 'member')")
        super()._check_config(cfg)

    def _protocol_parts(self, now):
        p = self.params
        if min(p.C1, p.C2, p.D1, p.D2) < 0 or p.default_distance <= 0:
            raise ConfigError("srm timer constants must be >= 0 and default_distance > 0")
        self.send_buffer = NoHold(self)
        self.send_buffer.update_hold()
        self.srm = Srm(self, now)
        self.pings = PingReplies(self)
        return [self.srm, self.pings]

    # ------------------------------------------------------------ driver contract
    def datagrams_to_send(self):
        return self.srm.take_flushed() + self.node.datagrams()

    def receive_datagram(self, data, addr: int, now: int) -> int:
        r = self.node.rx(data, addr, now)
        if r == 0 and self.srm.listening():
            self.srm.heard(data, now)
        if self.node.nctl:
            self._control(now)
        self._after_rx(now)
        return r

    def receive_datagrams(self, buf, offs, lens, addrs, now: int) -> int:
        bad = 0
        mv = memoryview(buf)
        for k in range(len(offs)):
            o, n = int(offs[k]), int(lens[k])
            if self.node.rx(mv[o:o + n], int(addrs[k]), now) != 0:
                bad += 1
            elif self.srm.listening():
                self.srm.heard(mv[o:o + n], now)
            if self.node.nctl:
                self._control(now)
        self._after_rx(now)
        return bad


class Srm(ProtocolPart):
    """Session messages, request and repair timers."""

    def __init__(self, engine, now):
        super().__init__(engine)
        p = self.params
        self.req = {}        # (slot, seq) -> [deadline, backoff i, ignore_until, d]
        self.rep = {}        # (slot, seq) -> [deadline, d']
        self.hold = {}       # (slot, seq) -> NACKs ignored until
        self._heap = []
        self._hseq = 0
        self._out = []       # datagrams flushed ahead of repairs
        self._keys = {}      # slot -> (sender, inc)
        self._sess_ns = ns(p.session_interval)
        self._dcache = {}
        self.next_session = now + self.rng.randrange(max(self._session_ival(), 1))
        self._house_ns = NS
        self._buffer_rounds = max(1, int(round(p.buffer_time)))
        self._next_house = now + self._house_ns

    def handlers(self):
        return {T.RTX: self.on_nack, T.HBLIST: self.on_session}

    def forget_slots(self, slots):
        """Retired streams (Engine._forget_retired): their requests, repairs
        and timers go; a slot may name another stream from now on."""
        gone = set(slots)
        for table in (self.req, self.rep, self.hold):
            for key in [k for k in table if k[0] in gone]:
                del table[key]
        for s in gone:
            self._keys.pop(s, None)
        heap = [e for e in self._heap if e[3] not in gone]
        if len(heap) != len(self._heap):
            heapq.heapify(heap)
            self._heap = heap

    def take_flushed(self):
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ utils
    def _session_ival(self) -> int:
        """Session period: session_interval up to session_members members,
        then growing with the group so the group's session traffic stays
        constant (SRM's bandwidth-scaled session messages)."""
        n = max(1, len(self.members))
        return int(self._sess_ns * max(1.0, n / self.params.session_members))

    def _dist(self, node_id) -> float:
        p = self.params
        if p.distance is not None:
            d = self._dcache.get(node_id)
            if d is None:
                d = self._dcache[node_id] = float(p.distance(self.id, node_id))
            return d
        m = self.members.get(node_id)
        if m is not None and m.rtt:
            return m.rtt / 2
        return p.default_distance

    def _delay(self, a, b, d, i=0) -> int:
        return ns((1 << i) * self.rng.uniform(a * d, (a + b) * d))

    def _push(self, t, kind, slot, seq):
        self._hseq += 1
        heapq.heappush(self._heap, (t, self._hseq, kind, slot, seq))

    def _key(self, slot):
        k = self._keys.get(slot)
        if k is None:
            k = (self.id, self.inc) if slot == SELF_SLOT else self.node.peer_key(slot)
            self._keys[slot] = k
        return k

    def _slot_of(self, s, i, create=False):
        if s == self.id and i == self.inc:
            return SELF_SLOT
        slot = self.node.find_peer(s, i)
        if slot is None and create:
            slot = self.node.peer(s, i, 0)
        return slot

    # ------------------------------------------------------------------ timers
    def get_timer(self):
        t = self.next_session
        if self._heap and self._heap[0][0] < t:
            t = self._heap[0][0]
        return t

    def on_timer(self, now):
        if self._heap and self._heap[0][0] <= now:
            self._fire(now)
        if now >= self.next_session:
            self._session(now)
            self.next_session = now + int(self._session_ival() * self.rng.uniform(0.5, 1.5))
        self._housekeeping(now)

    def _housekeeping(self, now):
        if now < self._next_house:
            return
        self._next_house = now + self._house_ns
        self.node.round(self._buffer_rounds, self.cfg.gossip_buffer_bytes)
        if self.hold:
            self.hold = {k: t for k, t in self.hold.items() if t > now}

    def _fire(self, now):
        node = self.node
        p = self.params
        nack, repair = {}, {}
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, _, kind, slot, seq = heapq.heappop(heap)
            key = (slot, seq)
            if kind == _REQ:
                st = self.req.get(key)
                if st is None or st[0] != t:
                    continue                            # superseded
                if node.peer_received(slot, seq):
                    del self.req[key]                   # repaired meanwhile
                    continue
                nack.setdefault(slot, []).append(seq)
            else:
                st = self.rep.get(key)
                if st is None or st[0] != t:
                    continue
                del self.rep[key]
                repair.setdefault(slot, []).append(seq)
                if p.suppress:
                    self.hold[key] = now + ns(p.hold_down * st[1])
        if nack:
            streams = []
            for slot, seqs in nack.items():
                s, i = self._key(slot)
                iv = runs(seqs)
                streams.append((s, i, iv, iv[0][0], iv[-1][1]))
                # Back off to wait for the repair: one draw for the batch.
                d = self._dist(s)
                u = self.rng.uniform(p.C1 * d, (p.C1 + p.C2) * d)
                for q in seqs:
                    st = self.req[(slot, q)]
                    st[1] = min(st[1] + 1, p.max_backoff)
                    st[0] = now + ns((1 << st[1]) * u)
                    st[2] = now + (st[0] - now) // 2
                    self._push(st[0], _REQ, slot, q)
            nmsg, nbytes = self.send_sections(DEST_MCAST, T.RTX, wire.Section.MISSING, streams)
            k = sum(iv_count(s[2]) for s in streams)
            self.bump("nacks_sent", nmsg)
            self.bump("nack_ids", k)
            node.trace_event(now, EV_RTX_REQ, 0, 0, 0, k, 0, len(streams))
        if repair:
            # Repairs start datagrams of their own, so that receivers see them.
            self._out.extend(node.datagrams())
            for slot, seqs in repair.items():
                s, i = self._key(slot)
                served, _ = node.serve(s, i, runs(seqs), DEST_MCAST, False, now, False)
                self.bump("repairs_sent", served)

    # ------------------------------------------------------------------ loss detection
    def after_rx(self, now):
        node = self.node
        if node.nack_pending:
            node.clear_nack()
            self._schedule_gaps(now)
        self._housekeeping(now)

    def _schedule_gaps(self, now):
        """Request timers for ids newly missing (not yet marked in flight)."""
        node = self.node
        p = self.params
        for slot, pid, pinc in node.peer_ids():
            if not node.peer_missing_count(slot, PHASE_ALL):
                continue
            miss = self.missing(slot, PHASE_NEW)
            if not miss:
                continue
            d = self._dist(pid)
            for lo, hi in miss:
                t = now + self._delay(p.C1, p.C2, d)       # one draw per gap seen
                for q in range(lo, hi + 1):
                    self.req[(slot, q)] = [t, 0, 0, d]
                    self._push(t, _REQ, slot, q)
                node.mark_inflight(slot, lo, hi)

    def _session(self, now):
        node = self.node
        entries = [(pid, pinc, node.peer_next(slot) - 1) for slot, pid, pinc in node.peer_ids()
                   if node.peer_next(slot) > 0]
        if node.next_seq:
            entries.append((self.id, self.inc, node.next_seq - 1))
        if not entries:
            return
        send_hblist(self.emit, self.cfg.mtu, DEST_MCAST, entries, 0, HB_VECTOR)
        self.bump("session_sent")
        node.trace_event(now, EV_HEARTBEAT, self.id, self.inc, max(node.next_seq, 1) - 1, 0, 0, 0)

    def on_session(self, msg, now):
        node = self.node
        for s, i, q in wire.read_hb_entries(msg[6]):
            if s == self.id and i == self.inc:
                continue
            slot = node.find_peer(s, i)
            if slot is None:
                slot = node.peer(s, i, 0)
            if q >= node.peer_next(slot):
                node.heartbeat(slot, q, False, now)

    # ------------------------------------------------------------------ requests and repairs
    def on_nack(self, msg, now):
        node = self.node
        p = self.params
        requester = msg[7]
        d_req = None
        for s, i, iv in missing_intervals(msg[6]):
            own = s == self.id and i == self.inc
            slot = self._slot_of(s, i, create=not own)
            if slot is None:
                continue
            if not own:
                top = int(iv[-1][1])
                if top >= node.peer_next(slot):
                    node.heartbeat(slot, top, False, now)   # ids we had not seen yet
                d_src = self._dist(s)
            for lo, hi in iv.tolist():
                for q in range(lo, hi + 1):
                    key = (slot, q)
                    st = self.req.get(key)
                    if st is not None:
                        # Someone asked first: back off (suppression).
                        if p.suppress and now >= st[2]:
                            st[1] = min(st[1] + 1, p.max_backoff)
                            st[0] = now + self._delay(p.C1, p.C2, st[3], st[1])
                            st[2] = now + (st[0] - now) // 2
                            self._push(st[0], _REQ, slot, q)
                            self.bump("nacks_suppressed")
                        continue
                    if node.holds(s, i, q):
                        if key in self.rep or self.hold.get(key, 0) > now:
                            continue
                        if d_req is None:
                            d_req = self._dist(requester)
                        t = now + self._delay(p.D1, p.D2, d_req)
                        self.rep[key] = [t, d_req]
                        self._push(t, _REP, slot, q)
                    elif not own and not node.peer_received(slot, q):
                        # Missing here too, before we noticed: as if suppressed once.
                        i1 = 1 if p.suppress else 0
                        t = now + self._delay(p.C1, p.C2, d_src, i1)
                        self.req[key] = [t, i1, now + (t - now) // 2, d_src]
                        self._push(t, _REQ, slot, q)
                        node.mark_inflight(slot, q, q)

    # ------------------------------------------------------------------ repairs heard
    def listening(self):
        """Someone else's repair matters now: timers pending, suppression on."""
        return bool(self.rep or self.req) and self.params.suppress

    def heard(self, data, now):
        """A datagram received while listening: if it carries repairs
        (datagrams with repairs start with one), cancel ours for the same
        ids."""
        if wire.first_type(data) != T.REPAIR:
            return
        p = self.params
        for m in wire.parse(bytes(data))[1]:
            if m.type != T.REPAIR:
                continue
            slot = self._slot_of(m.sender, m.inc)
            if slot is None:
                continue
            key = (slot, m.seq)
            st = self.rep.pop(key, None)
            if st is not None:
                self.bump("repairs_suppressed")
            self.hold[key] = now + ns(p.hold_down * (st[1] if st else self._dist(m.sender)))


# For rpbcast.sim (rpbcast/sim/protocols.py): engine factory and whether the
# protocol has a logger.  Bind parameters with rpbcast.baselines.factory.
SIM_PROTOCOL = {"factory": lambda config, now, rng, log=None: SrmEngine(config, now, rng, log),
                "uses_logger": False}
