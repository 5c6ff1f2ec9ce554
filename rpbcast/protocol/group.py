"""This member in the group: the member table and the membership protocol
(thesis §5.3; the table and its signature are rpbcast.protocol.membership).

``StaticGroup``: the members the configuration lists, fixed, and this
member's own entry (the baselines).  ``Group`` is rpbcast's membership
protocol on top of it:

* joining: JOIN multicast every join_interval until k sponsors answer with a
  list (MEMBERS, flag REPLY) that holds us as a member -- a logger's answer
  alone suffices; the first sponsor's heartbeat vector (HBLIST VECTOR) is
  the join time t_join.  Leaving mirrors it (LEAVE);
* the MEMBERS exchange when a gossiper's membership signature differs from
  ours: we answer with our list, it pushes back what we are behind on;
* disconnect / reconnect of intermittently connected subscribers (§1.1);
* gossip target selection among the members (§4.2, rpbcast.protocol.selection);
* each member's periodic frontier report to a logger: a logger collects a
  message once every current member has it (§5.2).

``FailureDetector`` is the membership's own failure detector (GSGC brings
another): a member silent for a timeout of *this* member's running time is
declared failed, and recovers when heard from again.
"""
from __future__ import annotations

from collections import deque

from rpbcast.core import wire
from rpbcast.core.node import DEST_MCAST, PHASE_ALL, StreamLimit
from rpbcast.protocol.authority import NOT_AUTHORITY, OUT_OF_BOUNDS
from rpbcast.protocol.heartbeats import HB_VECTOR
from rpbcast.protocol.membership import (
    DISCONNECTED, MEMBER, NOT_MEMBER, PENDING_JOIN, PENDING_LEAVE, ROLE_LOGGER, ROLE_MEMBER, Member,
    addr_scope, addr_to_entry, entry_addr)
from rpbcast.protocol.selection import choose
from rpbcast.protocol.trace_events import EV_MEMBER

T = wire.MsgType
NS = 1_000_000_000
NEVER = 1 << 62
ACTIVE = (MEMBER, PENDING_LEAVE)
ASK_T_JOIN_FOR = 1.0      # s: a member started late asks this long for t_join
# How far back a sponsor keeps its heartbeat vector (sampled every
# join_interval): a JOIN says how long its joiner has been asking, and the
# answer is the vector as of then, not as of the answer.
VECTOR_HISTORY = ASK_T_JOIN_FOR + 0.5
MAX_ASKING_US = (1 << 32) - 1
# HBLIST VECTOR aux of a sponsor that started after its joiner began asking:
# no entries, "I was not running then" (no list has 2^32-1 entries).
LATE_SPONSOR = (1 << 32) - 1
# How far ahead of the freshness we hold a third party (not the member, not
# a logger) may move a member's entry: a member counts one per join, leave
# or announcement, and a relayed entry is at most a few steps ahead; a key
# holder naming 2^47 would lock the entry against the member's own word.
FRESHNESS_STEP = 16


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class StaticGroup:
    """The member table as the configuration gives it, and our own entry."""

    def __init__(self, engine):
        cfg = engine.cfg
        self.e = engine
        self.members = engine.members
        self.node = engine.node
        self.id = engine.id
        self.inc = engine.inc
        self.role = ROLE_LOGGER if engine.is_logger else ROLE_MEMBER
        self.status = PENDING_JOIN if cfg.join else MEMBER
        self.freshness = 1
        self._timeout_ns = _ns(cfg.member_timeout)
        for rank, m in enumerate(cfg.members):
            self.members.upsert(Member(m.node_id, 0, MEMBER, ROLE_LOGGER if m.role == "logger" else ROLE_MEMBER,
                                       m.addr, m.rank if m.rank >= 0 else rank, 0))
        self.members.upsert(self.self_entry())
        self.members.on_status = self._traced

    def _traced(self, m: Member):
        # trace: a member appeared or changed status (docs/traces.md `member`)
        self.node.trace_event(self.e._now, EV_MEMBER, m.node_id, m.inc, m.freshness, 0, 0, m.status)

    def wants_t_join(self) -> bool:
        """Is a sponsor's vector (HBLIST VECTOR) our t_join?  (Only a
        joining member, or one that asked at start, takes one.)"""
        return False

    def takes_vector(self, source, total) -> bool:
        return False

    def self_entry(self) -> Member:
        return Member(self.id, self.inc, self.status, self.role, self.e.cfg.addr, -1, self.freshness,
                      max(self.node.next_seq - 1, 0))

    def targets(self, now):
        """Members we believe up and reachable: gossip and ping candidates."""
        return self.members.active(now, self._timeout_ns)

    def set_addr(self, addr: int):
        self.members.upsert(Member(self.id, self.inc, self.status, self.role, addr, -1,
                                   self.freshness + 0, max(self.node.next_seq - 1, 0)))
        m = self.members.get(self.id)
        if m is not None and m.addr != addr:
            m.addr = addr
            self.members.version += 1


class Group(StaticGroup):
    """rpbcast's membership protocol."""

    def __init__(self, engine, now):
        super().__init__(engine)
        cfg = engine.cfg
        self.rng = engine.rng
        self.events = engine.events
        self.emit = engine.emit
        self.sponsors = set()
        self.t_join_taken = False
        self._reply_parts = {}      # source -> [list size, {id: key} seen so far, time]
        self.next_join = now if cfg.join else NEVER
        self.next_report = now + _ns(cfg.logger_report_interval)
        self._join_ns = _ns(cfg.join_interval)
        self._report_ns = _ns(cfg.logger_report_interval)
        self._gossip_ns = _ns(cfg.gossip_interval)
        self._mtu = cfg.mtu
        self._selection = cfg.selection
        self._sponsors_needed = cfg.sponsors
        self._catch_up = cfg.catch_up
        # a static member started late: asking for t_join until this time
        self._ask_until = None
        self._asked = 0
        self._asking_since = now        # our first JOIN of this join (its age rides in each JOIN)
        self._vector_from, self._vector_left = None, 0   # the answer's parts still to take
        self._late = set()                  # members that started after we began asking
        # (time, {(id, inc): last seq}) every join_interval, oldest first:
        # t_join for a joiner whose first JOINs were lost or went to a
        # member not up yet (ids published since it began asking are its)
        self._vectors = deque()
        self._vector_keep = _ns(VECTOR_HISTORY)
        self.next_sample = now
        self._started = now
        self._trimmed = False               # samples older than the history dropped

    def handlers(self):
        return {T.JOIN: self.on_join, T.LEAVE: self.on_leave, T.MEMBERS: self.on_members}

    def get_timer(self):
        return min(self.next_report, self.next_join, self.next_sample)

    def on_timer(self, now):
        if now >= self.next_sample:
            self._sample_vector(now)
        if now >= self.next_report:
            self.report_to_logger(now)
            self.next_report = now + self._report_ns
        if now >= self.next_join:
            self._join_tick(now)

    # ------------------------------------------------------------------ gossip targets
    def pick_target(self, now):
        c = self.targets(now)
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
        return choose(c, [m.rtt for m in c], self._selection, self.rng)

    def report_to_logger(self, now):
        """Members report their receive frontiers to a logger at least this
        often, for logger GC from derived ACKs (§5.2)."""
        if self.role == ROLE_LOGGER or self.status not in ACTIVE:
            return              # (a logger's own gossip carries its frontiers)
        loggers = self.members.loggers()
        if loggers:
            lg = loggers[self.rng.randrange(len(loggers))]
            self.e.repair.report_frontiers(lg, now)

    # ------------------------------------------------------------------ MEMBERS
    def _member_bytes(self, m: Member) -> bytes:
        ip, port, ip6 = addr_to_entry(m.addr)
        return wire.member_entry(wire.Member(m.node_id, m.inc, m.status, m.role, port, ip,
                                             max(m.rank, 0) if m.rank >= 0 else 0xFFFFFFFF,
                                             m.freshness, m.lastseq, ip6))

    def _read_members(self, body):
        # a link-local IPv6 entry is on our own interface: our scope
        scope = addr_scope(self.e.cfg.addr)
        out = []
        for e in wire.read_members(body):
            rank = -1 if e.rank == 0xFFFFFFFF else e.rank
            out.append(Member(e.id, e.inc, e.status, e.role, entry_addr(e, scope), rank,
                              e.freshness, e.lastseq))
        return out

    def send_members(self, dest, members, flags):
        """A list over as many MEMBERS messages as it takes; aux = the size
        of the whole list, so the receiver knows when it has every part.
        (Sized for IPv6 entries when any member has one.)"""
        size = wire.MEMBER_ENTRY6 if any(addr_to_entry(m.addr)[2] for m in members) else wire.MEMBER_ENTRY
        per = (self._mtu - wire.DG_HDR - wire.MSG_HDR) // size
        for k in range(0, len(members), per):
            body = b"".join(self._member_bytes(m) for m in members[k:k + per])
            self.emit(dest, T.MEMBERS, body, flags, aux=len(members))

    def reply_members(self, dest):
        """A gossiper's membership signature differs from ours: our list."""
        self.send_members(dest, self.members.entries(), wire.F_REPLY)

    def on_members(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        entries = self._read_members(body)
        theirs = {}
        changed = False
        source_logger = None
        for m in entries:
            theirs[m.node_id] = m.key()
            if m.node_id == self.id:
                continue
            before = self.members.get(m.node_id)
            if before is not None and not m.addr:
                m.addr = before.addr        # an entry that names no address keeps the one we know
            if before is not None and m.node_id != source and (
                    (before.addr and m.addr != before.addr) or (before.inc and m.inc > before.inc)):
                # A known member's address or incarnation changes only
                # on its own word (its JOIN, its own entry) or a logger's:
                # anyone else could redirect its traffic or end its stream
                # (issue 14; docs/security.md, "Authority").
                if source_logger is None:
                    sm = self.members.get(source)
                    source_logger = sm is not None and sm.is_logger
                if not source_logger:
                    self.e.reject("members_" + NOT_AUTHORITY)
                    continue
            if before is not None and m.node_id != source and m.inc == before.inc:
                # A third party's word on a member's status: "left" only
                # from the member itself or a logger (anyone else could
                # remove it), and freshness only a few steps ahead.
                if source_logger is None:
                    sm = self.members.get(source)
                    source_logger = sm is not None and sm.is_logger
                if not source_logger:
                    if m.status == NOT_MEMBER and before.status != NOT_MEMBER:
                        self.e.reject("members_" + NOT_AUTHORITY)
                        continue
                    if m.freshness > before.freshness + FRESHNESS_STEP:
                        self.e.reject("members_" + OUT_OF_BOUNDS)
                        continue
            was = before.status if before is not None else None
            if self.members.upsert(m):
                changed = True
                if m.status != was:
                    self.e.post_event("member", m.node_id,
                                      {MEMBER: "joined", NOT_MEMBER: "left"}.get(m.status, "changed"))
        me = next((m for m in entries if m.node_id == self.id and m.inc == self.inc), None)
        if (me is not None and self.freshness < me.freshness <= self.freshness + FRESHNESS_STEP
                and self.status in (MEMBER, DISCONNECTED)):
            # someone holds a fresher entry of ours than we wrote (a key
            # holder's, a step or a few ahead): our own word, fresher still
            self.freshness = me.freshness
            self._announce(self.status, now)
            me = None
        if me is not None and me.freshness == self.freshness:
            sm = self.members.get(source)
            if self.status == PENDING_JOIN and me.status == MEMBER:
                self.sponsors.add(source)
                if len(self.sponsors) >= self._sponsors_needed or (sm is not None and sm.is_logger):
                    self._become(MEMBER, now)
            elif self.status == PENDING_LEAVE and me.status == NOT_MEMBER:
                self.sponsors.add(source)
                if len(self.sponsors) >= self._sponsors_needed or (sm is not None and sm.is_logger):
                    self._become(NOT_MEMBER, now)
        if changed:
            self.e.send_buffer.update_hold()
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
                self.send_members(src, push, wire.F_PUSH)

    # ------------------------------------------------------------------ join and leave
    def on_join(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if self.status != MEMBER and self._ask_until is None:
            return          # (a static member asking for t_join itself answers: at a cold start all ask)
        (m,) = self._read_members(body)
        if m.node_id != sender or m.inc != inc or m.freshness != seq:
            return                  # header and entry disagree: not a JOIN we can trust
        if m.addr == 0:
            m.addr = src
        m.status = MEMBER
        m.last_heard = now
        if self.members.upsert(m):
            self.e.post_event("member", m.node_id, "joined")
            if m.is_logger:
                self.e.send_buffer.update_hold()
        # Sponsor: our list (with the joiner in it) and our t_join vector
        # as of the joiner's first JOIN (aux: how long it has been asking, us).
        self.send_members(src, self.members.entries(), wire.F_REPLY)
        vec = self.vector_as_of(now, aux * 1000)
        if vec is not None:
            self.e.heartbeats.send_list(src, [(s, i, q) for (s, i), q in vec.items()], wire.F_REPLY, HB_VECTOR)
        else:                       # we started after it began asking: it asks another member
            self.emit(src, T.HBLIST, b"", wire.F_REPLY | HB_VECTOR, aux=LATE_SPONSOR)

    # ------------------------------------------------------------------ t_join vectors
    def _vector_now(self):
        node = self.node
        vec = {(pid, pinc): node.peer_next(slot) - 1 for slot, pid, pinc in node.peer_ids()
               if node.peer_next(slot) > 0}
        if node.next_seq:
            vec[(self.id, self.inc)] = node.next_seq - 1
        return vec

    def _sample_vector(self, now):
        v = self._vectors
        v.append((now, self._vector_now()))
        # keep one sample at or beyond the horizon: it answers the oldest ask
        while len(v) > 2 and now - v[1][0] >= self._vector_keep:
            v.popleft()
            self._trimmed = True
        self.next_sample = now + self._join_ns

    def vector_as_of(self, now, asked_ns):
        """Each stream's last seq as it stood ``asked_ns`` ago -- at a
        joiner's first JOIN -- from the newest sample at or before then
        (never a later one: that would hand the joiner's first ids, lost in
        the network meanwhile, to nobody).  A stream with no id by then is
        left out: the joiner takes it whole.  An ask older than the history
        kept (VECTOR_HISTORY) takes each stream's oldest sample.  What the
        joiner gets in excess is the ids of at most one sampling interval
        before it started.  None when we started (or took our first
        sample) after the joiner began asking: what the streams had then
        is not ours to say -- it asks another member."""
        cur = self._vector_now()
        if asked_ns <= 0:
            return cur
        t = now - asked_ns
        if t < self._started:
            return None
        then = None                          # the newest sample at or before t
        for ts, vec in self._vectors:
            if ts > t:
                break
            then = vec
        if then is None and not self._trimmed:
            return None
        out = {}
        for key, q in cur.items():
            if then is not None:
                v = then.get(key)
            else:
                v = next((vec[key] for _, vec in self._vectors if key in vec), q)
            if v is not None:
                out[key] = min(q, v)
        return out

    def wants_t_join(self) -> bool:
        return (self.status == PENDING_JOIN or self._ask_until is not None) and not self.t_join_taken

    def takes_vector(self, source, total) -> bool:
        """Is this HBLIST VECTOR part t_join?  While we want it, any; then
        the other parts of the same answer (aux: the whole list's size),
        which would otherwise count as heartbeats of streams started at 0."""
        if self.wants_t_join():
            if total == LATE_SPONSOR:
                self._late_sponsor(source)
                return False
            self._vector_from, self._vector_left = source, total
            return True
        return source == self._vector_from and self._vector_left > 0

    def _late_sponsor(self, source):
        """A member that started after we began asking: it cannot say what
        the streams had then.  When every member we could ask says so,
        nobody else was running when we started: every stream is ours,
        whole -- now, not when the asking time runs out (a member
        waiting for t_join does not pull: at a cold start its repairs would
        wait a second)."""
        self._late.add(source)
        if self._ask_until is None:
            return
        if all(m.node_id in self._late for m in self._sponsor_candidates()):
            self.take_t_join([])

    def ask_t_join(self, now: int, ask_for: float = ASK_T_JOIN_FOR):
        """A static member that starts while the group may be running (a
        process start or restart): unless catch_up, it rejoins as a joiner
        does (§5.3) -- pending, so it neither pulls nor gossips for what it
        lacks yet -- and takes t_join from the first member that answers:
        a logger first, the others in turn, one JOIN every join_interval
        for at most ``ask_for`` seconds.  Then it is a member again.
        Nobody answering means nobody runs yet: every stream is then taken
        whole."""
        if self._catch_up or self.role == ROLE_LOGGER or self.status != MEMBER:
            return
        if not self._sponsor_candidates():
            return
        self._ask_until = now + _ns(ask_for)
        self._asking_since = now
        self._late = set()
        self.status = PENDING_JOIN
        self.t_join_taken = False
        self._ask_tick(now)                 # the first JOIN at once

    def _sponsor_candidates(self):
        others = [m for m in self.members.entries() if m.node_id != self.id and m.addr
                  and m.status in (MEMBER, PENDING_LEAVE)]
        return sorted(others, key=lambda m: (not m.is_logger, m.node_id))

    def _ask_tick(self, now):
        if self.t_join_taken or now >= self._ask_until:
            self._ask_until = None          # nobody answered: streams are taken whole
            self._become(MEMBER, now)
            return
        c = self._sponsor_candidates()
        if c:
            m = c[self._asked % len(c)]
            self._asked += 1
            self.emit(m.addr, T.JOIN, self._member_bytes(self.self_entry()), seq=self.freshness,
                      aux=self._asking_us(now))
        self.next_join = now + self._join_ns

    def _asking_us(self, now):
        return min(MAX_ASKING_US, max(0, now - self._asking_since) // 1000)

    def take_t_join(self, entries):
        """A sponsor's vector: t_join.  We answer for what comes after it
        (catch_up: for everything).  A stream already heard from before the
        vector came started at 0 here; what it lacks at or below t_join and
        below the first id it got is not ours to ask for (§5.3)."""
        node = self.node
        skipped = 0
        resumed = self.e.resumed
        self._vector_left -= len(entries)
        for s, i, q in entries:
            if (s == self.id and i == self.inc) or (s, i) in resumed:
                continue            # (a resumed stream: the receiver said what it has)
            slot = node.find_peer(s, i)
            if slot is None or self._catch_up:
                try:
                    node.peer(s, i, 0 if self._catch_up else q + 1)
                except StreamLimit:
                    pass                # counted (streams_refused)
                continue
            info = node.peer_info(slot)
            base, nxt = info["base"], info["next"]
            head = node.missing(slot, PHASE_ALL, base, q, 1)
            if len(head) and int(head[0][0]) == base:
                # ids [base, first received) were never here: skip those up to t_join
                hi = min(q, int(head[0][1]), nxt - 1)
                if hi >= base:
                    skipped += max(0, node.forget(slot, base, hi))
        if skipped:
            self.e.stats["t_join_skipped"] = self.e.stats.get("t_join_skipped", 0) + skipped
        self.t_join_taken = True
        if self._ask_until is not None:     # a static member: a member again at once
            self._ask_until = None
            if self.status == PENDING_JOIN:
                self._become(MEMBER, self.e._now)
            self.next_join = NEVER

    def on_leave(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if self.status != MEMBER:
            return
        cur = self.members.get(sender)
        if cur is None:
            return
        m = Member(sender, inc, NOT_MEMBER, cur.role, cur.addr, cur.rank, seq, cur.lastseq)
        if self.members.upsert(m):
            self.e.post_event("member", sender, "left")
        self.send_members(src, self.members.entries(), wire.F_REPLY)

    def _become(self, status, now):
        self.status = status
        self.sponsors = set()
        self.next_join = NEVER
        # Same (inc, freshness) as the sponsors already hold: upsert would
        # keep the old entry, so set the status in place (and re-sign).
        if self.members.get(self.id) is None:
            self.members.upsert(self.self_entry())
        else:
            self.members.set_status(self.id, status)
        self.events.append(("status", {MEMBER: "member", NOT_MEMBER: "not_member"}[status]))

    def join(self, now: int):
        self.freshness += 1
        self.status = PENDING_JOIN
        self.sponsors = set()
        self.t_join_taken = False
        self._asking_since = now
        self.members.upsert(self.self_entry())
        self.next_join = now

    def leave(self, now: int):
        self.freshness += 1
        self.status = PENDING_LEAVE
        self.sponsors = set()
        self.members.upsert(self.self_entry())
        self.next_join = now

    def _join_tick(self, now):
        if self._ask_until is not None:
            self._ask_tick(now)
            return
        if self.status == PENDING_JOIN:
            self.emit(DEST_MCAST, T.JOIN, self._member_bytes(self.self_entry()), seq=self.freshness,
                      aux=self._asking_us(now))
        elif self.status == PENDING_LEAVE:
            self.emit(DEST_MCAST, T.LEAVE, seq=self.freshness)
        else:
            self.next_join = NEVER
            return
        self.next_join = now + self._join_ns

    # ------------------------------------------------------------------ disconnected subscribers
    def disconnect(self, now: int):
        self._announce(DISCONNECTED, now)

    def reconnect(self, now: int):
        self._announce(MEMBER, now)

    def _announce(self, status, now):
        """Our new status, pushed to every member we believe up."""
        self.freshness += 1
        self.status = status
        self.members.upsert(self.self_entry())
        entries = [self.members.get(self.id)]
        for m in self.targets(now):
            self.send_members(m.addr, entries, wire.F_PUSH)


class FailureDetector:
    """Declares members failed after `timeout_ns` of silence, counted in time
    this member was running and listening.

    Silence is summed over the detector's checks, each adding the time since
    the previous one but at most `step_cap_ns`: a stop of this process
    (SIGSTOP, a descheduled thread, a loop draining a backlog) counts as one
    capped step, never as the others' silence.  And the first check after
    such a stop adds only that step, so the reports waiting in the socket
    are read before anyone's silence grows past it.  A member is heard when
    its ``last_heard`` moved since the previous check; one declared failed
    that is heard again recovers.  Sans-IO: the caller supplies the time and
    the members to watch."""

    def __init__(self, timeout_ns: int, step_cap_ns: int):
        self.timeout_ns = timeout_ns
        self.step_cap_ns = step_cap_ns
        self.last_check = None         # time of the previous check (None: not started)
        self.silent = {}               # node id -> silence counted so far (ns)
        self.heard_at = {}             # node id -> its last_heard at the previous check
        self.failed = set()

    def check(self, now: int, watched):
        """One check over `watched` (Member entries); returns the changes as
        [(node_id, "failed" | "recovered", reason)]."""
        step = 0 if self.last_check is None else min(max(now - self.last_check, 0), self.step_cap_ns)
        self.last_check = now
        out = []
        ids = set()
        for m in watched:
            i = m.node_id
            ids.add(i)
            if self.heard_at.get(i, 0) != m.last_heard:
                self.heard_at[i] = m.last_heard
                self.silent[i] = 0
                if i in self.failed:
                    self.failed.discard(i)
                    out.append((i, "recovered", "heard from again"))
                continue
            s = self.silent[i] = self.silent.get(i, 0) + step
            if s >= self.timeout_ns and i not in self.failed:
                self.failed.add(i)
                out.append((i, "failed", f"silent for {s / NS:.1f} s of this member's running time"))
        for i in [i for i in self.silent if i not in ids]:
            # left the group (or no longer watched): forget it
            self.silent.pop(i, None)
            self.heard_at.pop(i, None)
            self.failed.discard(i)
        return out
