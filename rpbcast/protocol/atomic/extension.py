"""AtomicDelivery: the atomic layer as an engine extension.

It runs wherever an engine runs (real sockets, memnet, the simulator) and
sees the engine only through its Context.  After every received batch (and
on its timer, for what this member published itself) it takes the atomic
records the data plane stored since it last looked (``Node.take_labelled``:
a C walk, the records hidden from the application) and hands them to its
parts:

    view         who must vote: the member table less booted members
    coordinator  our proposals: snapshot, votes, decision, DECIDE/FENCE
    participant  others' proposals: journal, YES/NO, decisions, in doubt
    aggregator   tree votes collected for others (scheme "tree")
    journal      the crash-safe log (rpbcast.core.logstore)

ATOMIC control messages (votes, questions, answers) arrive through
``on_message``.  The application's side is ``propose``/``watch`` (a
sender) and ``take``/``mark_delivered`` (a member); rpbcast.api wraps them
as Node.publish_atomic and Node.receive_atomic.
"""
from __future__ import annotations

import collections
import os
from typing import Optional

from rpbcast.config import ConfigError
from rpbcast.core import wire
from rpbcast.protocol.atomic import records
from rpbcast.protocol.atomic.aggregator import Aggregator
from rpbcast.protocol.atomic.coordinator import Coordinator
from rpbcast.protocol.atomic.journal import Journal
from rpbcast.protocol.atomic.participant import Participant
from rpbcast.protocol.atomic.timers import Timers
from rpbcast.protocol.atomic.view import AtomicView
from rpbcast.protocol.extension import Extension

T = wire.MsgType
NS = 1_000_000_000
GC_EVERY_NS = NS
OPTIONS = ("timeout", "votes", "fanout", "vote_retry", "boot_after", "aggregate_delay", "fsync", "retention",
           "ask_max")


def _ns(seconds) -> int:
    return int(round(float(seconds) * NS))


class AtomicDelivery(Extension):
    """Atomic (all-or-none) delivery for this member (docs/atomic.md).

    directory: where its journal lives (default Config.atomic_dir, else
    <state_dir>/atomic-<node id>).  Keyword options override the
    Config.atomic_* keys of the same name (timeout, votes, fanout, ...)."""

    needs_every_rx = True        # a proposal is voted on as it arrives

    def __init__(self, directory: Optional[str] = None, **options):
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"unknown AtomicDelivery options: {', '.join(unknown)}")
        self.directory = directory
        self.options = options
        self.stats = collections.Counter()

    # ------------------------------------------------------------------ setup
    def _opt(self, name):
        return self.options[name] if name in self.options else getattr(self.ctx.cfg, f"atomic_{name}")

    def attach(self, ctx):
        super().attach(ctx)
        cfg = ctx.cfg
        directory = self.directory or cfg.atomic_dir
        if directory is None:
            if cfg.state_dir is None:
                raise ConfigError("atomic delivery needs a directory for its journal: set atomic_dir "
                                  "(or state_dir)")
            directory = os.path.join(cfg.state_dir, f"atomic-{cfg.node_id}")
        self.directory = directory
        votes = self._opt("votes")
        if votes not in records.SCHEMES:
            raise ConfigError(f"atomic_votes must be one of {tuple(records.SCHEMES)}, got {votes!r}")
        self.scheme = records.SCHEMES[votes]
        self.fanout = int(self._opt("fanout"))
        self.timeout_ns = _ns(self._opt("timeout"))
        self.vote_retry_ns = _ns(self._opt("vote_retry"))
        self.retention_ns = _ns(self._opt("retention"))
        self.ask_max_ns = _ns(self._opt("ask_max"))
        self.journal = Journal(directory, fsync=bool(self._opt("fsync")))
        self.timers = Timers()
        self.view = AtomicView(ctx, _ns(self._opt("boot_after")))
        self.coordinator = Coordinator(self)
        self.participant = Participant(self)
        self.aggregator = Aggregator(self, _ns(self._opt("aggregate_delay")))
        self.cursor = 0
        self._nonce = 0                           # ties a large payload's PART records to its PROPOSE
        self._finished = collections.deque()      # (time, key) of decided proposals, for the journal's GC
        self._gc_below = {}
        self._next_gc = ctx.now + GC_EVERY_NS
        self._restart_due = False
        self._recover(ctx.now)

    def _recover(self, now):
        ctx = self.ctx
        rec = self.journal.recover()
        for (s, i, q) in list(rec.proposals) + list(rec.decisions):
            if s == ctx.id and i >= ctx.inc:
                self.journal.close()
                raise ConfigError(f"atomic delivery: the journal in {self.directory} already has incarnation "
                                  f"{i} of node {s}; a restarted node needs a newer incarnation (set state_dir, "
                                  f"or a larger incarnation)")
        for key, dec in rec.decisions.items():
            if key[0] == ctx.id:
                self.coordinator.old[(key[1], key[2])] = dec
        parts = {}
        for (s, i, q), raw in rec.parts.items():
            got = records.maybe(raw)
            if got is not None and got[0] == records.PART:
                parts.setdefault((s, i, got[1].nonce), {})[got[1].index] = (q, got[1].data)
        for key, raw in rec.proposals.items():
            if key[0] != ctx.id:
                self.participant.recovered(key, raw, rec.decisions.get(key), key in rec.delivered, now, parts)
        self.stats["recovered_proposals"] = len(rec.proposals)
        self._restart_due = rec.existed

    # ------------------------------------------------------------------ services for the parts
    def count(self, name, k=1):
        self.stats[name] += k

    def publish(self, record: bytes, now: int) -> int:
        """A record into our reliable stream; raises BlockingIOError on
        back-pressure."""
        seq = self.ctx.publish(record, records.ATOMIC_LABEL, now)
        self.count("records_published")
        return seq

    def send(self, addr, key, what, reason=0, body=b"", flags=0):
        """One ATOMIC message about proposal key to addr."""
        s, i, q = key
        self.ctx.emit(addr, T.ATOMIC, body, flags, sender=s, inc=i, aux=wire.atomic_aux(what, reason), seq=q)

    def answer(self, dest, key, outcome, reason):
        self.send(dest, key, wire.ATOMIC_COMMITTED if outcome == records.COMMIT else wire.ATOMIC_ABORTED, reason)
        self.count("answers_sent")

    def retry_ns(self, peer: int) -> int:
        """The first vote repeat towards peer: the configured interval, at
        least two round trips."""
        m = self.ctx.members.get(peer)
        rtt = m.rtt if m is not None and m.rtt else 0.0
        return max(self.vote_retry_ns, int(2 * rtt * NS))

    def announce_boot(self, members, now):
        try:
            self.publish(records.boot(members), now)
        except BlockingIOError:
            self.count("boot_not_announced")

    def announce_join(self, now):
        try:
            self.publish(records.join(), now)
            self.count("joins")
        except BlockingIOError:
            self.count("join_not_announced")

    def finished(self, key, now):
        self._finished.append((now, key))

    def decision(self, key):
        """(outcome, reason) of proposal key if known here."""
        s, i, q = key
        if s == self.ctx.id:
            return self.coordinator.decision(i, q)
        return self.participant.decision(key)

    # ------------------------------------------------------------------ engine hooks
    def after_rx(self, now):
        self._scan(now)

    def _scan(self, now):
        """The atomic records stored since the last look, in store order."""
        cur, found = self.ctx.node.take_labelled(records.ATOMIC_LABEL, self.cursor, True)
        self.cursor = cur
        if found:
            for s, i, q, t, raw in found:
                self._on_record(s, i, q, t, raw, now)
            self.participant.flush_votes(now)
        if self.participant.fences:
            self.participant.check_fences(now)

    def _on_record(self, s, i, q, t, raw, now):
        ctx = self.ctx
        parsed = records.maybe(raw)
        if parsed is None:
            self.count("bad_records")
            return
        kind, body = parsed
        if s == ctx.id:
            if i == ctx.inc and kind == records.PROPOSE:
                self.coordinator.register(q, body, t, now)
            return
        booted = self.view.booted.get(s)
        if booted is not None and i > booted[0]:
            self.view.unboot(s)          # a newer incarnation: it is back
        p = self.participant
        if kind == records.PROPOSE:
            p.on_propose((s, i, q), body, raw, now)
        elif kind == records.PART:
            p.on_part((s, i, q), body, raw, now)
        elif kind == records.DECIDE:
            p.on_decide(s, body, now)
        elif kind == records.BOOT:
            p.on_boot(s, q, body, now)
        elif kind == records.JOIN:
            self.view.unboot(s)
        elif kind == records.FENCE:
            p.on_fence(s, i, q, body, now)

    def on_message(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if type_ != T.ATOMIC:
            return False
        self._scan(now)                 # our own proposal may not be registered yet
        what, reason = aux & 0xFF, (aux >> 8) & 0xFF
        if aux >> 16 or not wire.ATOMIC_YES <= what < wire.ATOMIC_KINDS or (
                flags & wire.F_VOTERS and what != wire.ATOMIC_YES):
            self.count("bad_messages")
            return True
        key = (sender, inc, seq)
        ctx = self.ctx
        if what in (wire.ATOMIC_YES, wire.ATOMIC_NO):
            voters = wire.read_voter_ids(body) if flags & wire.F_VOTERS else [source]
            self.count("votes_received", len(voters))
            if sender == ctx.id and inc == ctx.inc:
                self.coordinator.on_vote(seq, what, reason, voters, src, now, bool(flags & wire.F_VOTERS))
                return True
            d = self.decision(key)
            if d is not None:
                self.answer(src, key, *d)          # decided: the voter missed it
            elif what == wire.ATOMIC_YES and sender != ctx.id:
                h = self.participant.held.get(key)
                self.aggregator.add(key, sender, voters, now, h.fanout if h is not None else self.fanout,
                                    None if flags & wire.F_VOTERS else src)
        elif what == wire.ATOMIC_HAVE:
            if sender != ctx.id:
                if source == sender:
                    self.aggregator.on_have(key, reason)     # the sender has our list
                self.participant.on_have(key)                # (or our own YES: from either)
        elif what == wire.ATOMIC_ASK:
            d = self.decision(key)
            if d is not None:
                self.answer(src, key, *d)
        else:
            outcome = records.COMMIT if what == wire.ATOMIC_COMMITTED else records.ABORT
            if sender != ctx.id:
                self.participant.learn(key, outcome, reason, now)
        return True

    def on_member(self, node_id, status, now):
        if status == "left":
            self.coordinator.abort_waiting_on({node_id}, records.R_LEFT, now)

    def get_timer(self):
        if self._restart_due or self.ctx.node.store_head != self.cursor:
            return 0                     # records to look at (our own publications): now
        return min(self.timers.next(), self._next_gc)

    def on_timer(self, now):
        if self._restart_due:
            # a restart: we may have been booted meanwhile (join again), and
            # what our earlier incarnations left undecided is fenced
            self._restart_due = False
            self.announce_join(now)
            self.coordinator.restarted(now)
        self._scan(now)
        self.timers.run(now)
        if now >= self._next_gc:
            self._next_gc = now + GC_EVERY_NS
            self._gc(now)

    def _gc(self, now):
        """Forget decisions older than the retention, and let the journal
        drop what no longer matters: below the oldest proposal of a stream
        still pending, in doubt or not yet handed over."""
        horizon = now - self.retention_ns
        self.participant.gc(horizon)
        cand = {}
        fin = self._finished
        while fin and fin[0][0] < horizon:
            _, (s, i, q) = fin.popleft()
            cand[(s, i)] = max(cand.get((s, i), 0), q + 1)
        if not cand:
            return
        low = {}
        part_low = self.participant.part_low
        for s, i, q in list(self.participant.held) + [(m.sender, m.inc, m.seq) for m in self.participant.ready]:
            q = part_low.get((s, i, q), q)           # a large payload's parts come before its PROPOSE
            low[(s, i)] = min(low.get((s, i), q), q)
        for q in self.coordinator.pending:
            k = (self.ctx.id, self.ctx.inc)
            low[k] = min(low.get(k, q), q)
        for (s, i), below in cand.items():
            below = min(below, low.get((s, i), below))
            if below > self._gc_below.get((s, i), 0):
                self.journal.gc(s, i, below)
                self._gc_below[(s, i)] = below

    # ------------------------------------------------------------------ the application
    def records(self, payload, timeout: Optional[float] = None) -> list:
        """What propose publishes for payload, in order: its PROPOSE record,
        or -- for a payload larger than one datagram -- its PART records and
        then the PROPOSE that refers to them.  Raises ValueError for a bad
        timeout or a payload above Config.max_message_size."""
        t = self.timeout_ns if timeout is None else _ns(timeout)
        if t <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        cap = self.ctx.cfg.message_cap
        if len(payload) > cap:
            raise ValueError(f"an atomic payload of {len(payload)} bytes is above the cap of {cap} bytes "
                             f"(Config.max_message_size)")
        voters = len(self.view.voters())
        rec = records.propose(payload, t, self.scheme, self.fanout, voters)
        room = self.ctx.node.max_body - 8           # a labelled message in one datagram
        if len(rec) <= room:
            return [rec]
        # Records are found by their label in the store, one message each
        # (Node.take_labelled): a large payload goes as PART records, tied
        # to their PROPOSE by a nonce of this incarnation.
        self._nonce += 1
        return records.propose_parts(payload, room, self._nonce, t, self.scheme, self.fanout, voters)

    def propose(self, payload, now: int, timeout: Optional[float] = None):
        """Publish an atomic message at time now (the driver's clock: the
        deadline counts from it); returns its Proposal (``.result()`` is the
        AtomicOutcome once decided).  For engines driven directly (memnet,
        the simulator); rpbcast.api.Node.publish_atomic waits for it.
        Raises BlockingIOError if back-pressure keeps any record out (parts
        already published are then orphans members drop after the
        retention)."""
        seq = None
        for rec in self.records(payload, timeout):
            seq = self.publish(rec, now)
        self._scan(now)
        return self.coordinator.get(seq)

    def watch(self, seq: int, fn, now: int) -> bool:
        """fn(AtomicOutcome) once our proposal seq (published with record())
        is decided."""
        self._scan(now)
        return self.coordinator.watch(seq, fn)

    def take(self, max_n: int = 1 << 16):
        """Committed messages for the application, in the order this member
        learned their decisions; call mark_delivered before handing them over."""
        return self.participant.take(max_n)

    def untake(self, msgs):
        """Put messages taken but not handed over (mark_delivered failed)
        back at the head of the queue."""
        self.participant.untake(msgs)

    def mark_delivered(self, msgs):
        """Durably record that msgs reach the application (its own log: the
        application's thread may call this without the node lock)."""
        if msgs:
            self.journal.mark_delivered([(m.sender, m.inc, m.seq) for m in msgs])

    @property
    def ready(self) -> int:
        return len(self.participant.ready)

    def state(self) -> dict:
        c = self.coordinator
        lat = sorted(c.latencies)

        def pct(q):
            return lat[min(len(lat) - 1, int(q * len(lat)))] / 1e9 if lat else None
        return {"scheme": "tree" if self.scheme == records.TREE else "flat", "directory": self.directory,
                "pending": len(c.pending), "held": len(self.participant.held),
                "in_doubt": len(self.participant.in_doubt()), "ready": len(self.participant.ready),
                "booted": sorted(self.view.booted), "view": len(self.view.voters()),
                "latency_p50": pct(0.5), "latency_p99": pct(0.99),
                "journal": {"appended": self.journal.appended, "synced": self.journal.synced},
                **dict(self.stats)}

    def close(self, now: Optional[int] = None):
        """Abort our pending proposals (announced) and close the journal."""
        self.coordinator.shutdown(self.ctx.now if now is None else now)
        self.journal.close()

    def crash(self):
        """Stop as a killed process would (tests): the journal loses what no
        sync covered, nothing is announced."""
        self.journal.crash()
