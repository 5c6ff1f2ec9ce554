"""The sender's side of atomic delivery: the two-phase commit of paper 004 §6.

A proposal is a PROPOSE record in the sender's own stream.  When the
sender's atomic layer first sees it (``register``) it takes the snapshot --
the atomic view at that moment -- and waits for every member of it to vote
YES.  Then it decides COMMIT: the decision goes to the journal and a sync
covers it *before* the DECIDE record announcing it is published (a sender
that crashes right after announcing still has it; one that crashes before
never told anyone).  A NO, the deadline, or a member of the snapshot booted
or gone decides ABORT.  Decisions are batched into DECIDE records, which
travel in the reliable stream: repairable from peers and loggers.

After a restart the sender re-announces the COMMITs of its earlier
incarnations that its journal holds and then publishes a FENCE: members
abort what is still undecided of those incarnations once they have every
record before the FENCE (Participant.check_fences).  That is safe because a
commit is always in the journal before anyone can hear of it.
"""
from __future__ import annotations

import collections
from typing import Dict, Optional

from rpbcast.core import wire
from rpbcast.core.logstore import LogError
from rpbcast.protocol.atomic import records
from rpbcast.protocol.atomic.outcome import AtomicOutcome

KEEP_OUTCOMES = 1 << 16


class Proposal:
    """One of this member's proposals (current incarnation)."""
    __slots__ = ("seq", "t0", "deadline", "snapshot", "yes", "outcome", "reason", "decided_at", "watchers",
                 "scheme", "fanout")

    def __init__(self, seq, t0, deadline, snapshot, scheme, fanout):
        self.seq = seq
        self.t0 = t0
        self.deadline = deadline
        self.snapshot = snapshot      # frozenset of voter ids
        self.yes = set()
        self.outcome = None           # records.COMMIT / ABORT once decided
        self.reason = records.R_NONE
        self.decided_at = None
        self.watchers = []
        self.scheme = scheme
        self.fanout = fanout

    def result(self) -> Optional[AtomicOutcome]:
        if self.outcome is None:
            return None
        return AtomicOutcome.of(self.seq, self.outcome, self.reason, len(self.snapshot),
                                self.decided_at - self.t0)


class Coordinator:
    def __init__(self, ext):
        self.x = ext
        self.ctx = ext.ctx
        self.pending: Dict[int, Proposal] = {}
        self.outcomes: "collections.OrderedDict[int, Proposal]" = collections.OrderedDict()
        self.old: Dict[tuple, tuple] = {}       # (inc, seq) of earlier incarnations -> (outcome, reason)
        self.unannounced = []                   # (inc, seq, outcome, reason) not yet published
        self.observers = []                     # f(proposal, now) at every decision (tests, metrics)
        self.latencies = collections.deque(maxlen=1 << 16)

    # ------------------------------------------------------------------ proposals
    def register(self, seq: int, prop: records.Propose, t0: int, now: int) -> Proposal:
        """Our PROPOSE record at seq, published at t0: the snapshot is the
        view now."""
        p = self.pending.get(seq) or self.outcomes.get(seq)
        if p is not None:
            return p
        x = self.x
        p = Proposal(seq, t0, t0 + prop.timeout_ns, frozenset(x.view.voters()), prop.scheme, prop.fanout)
        self.pending[seq] = p
        x.count("proposed")
        if not p.snapshot:
            self.decide(p, records.COMMIT, records.R_NONE, now)
            return p
        x.timers.at(p.deadline, self._deadline, seq)
        x.timers.at(t0 + x.view.boot_after_ns, self._boot_check, seq)
        return p

    def get(self, seq: int) -> Optional[Proposal]:
        return self.pending.get(seq) or self.outcomes.get(seq)

    def watch(self, seq: int, fn) -> bool:
        """fn(AtomicOutcome) once proposal seq is decided (at once if it is);
        False if no proposal of ours has that seq."""
        p = self.get(seq)
        if p is None:
            return False
        if p.outcome is not None:
            fn(p.result())
        else:
            p.watchers.append(fn)
        return True

    # ------------------------------------------------------------------ votes
    def on_vote(self, seq: int, what: int, reason: int, voters, src: int, now: int, listed: bool = False):
        """Votes on our proposal seq: one voter's, or (listed) an
        aggregator's list number `reason`."""
        x = self.x
        p = self.pending.get(seq)
        if p is not None and p.scheme == records.TREE and what == wire.ATOMIC_YES:
            # tree: every hop is acknowledged (flat stays the paper's: none)
            x.send(src, (self.ctx.id, self.ctx.inc, seq), wire.ATOMIC_HAVE, reason if listed else 0)
        if p is None:
            done = self.outcomes.get(seq)
            if done is not None and what == wire.ATOMIC_YES:
                # the voter missed the DECIDE record (or it is on its way): tell it
                x.answer(src, (self.ctx.id, self.ctx.inc, seq), done.outcome, done.reason)
            return
        if what == wire.ATOMIC_NO:
            x.count("votes_no_received")
            self.decide(p, records.ABORT, records.R_NO, now)
            return
        view = x.view
        for v in voters:
            view.note_heard(v, now)
            if v in view.booted and view.unboot(v):
                pass                       # heard from after all
            if v in p.snapshot:
                p.yes.add(v)
        if len(p.yes) == len(p.snapshot):
            self.decide(p, records.COMMIT, records.R_NONE, now)

    # ------------------------------------------------------------------ timers
    def _deadline(self, now: int, seq: int):
        p = self.pending.get(seq)
        if p is not None:
            self.decide(p, records.ABORT, records.R_TIMEOUT, now)

    def _boot_check(self, now: int, seq: int):
        """Members of the snapshot silent for their boot period while this
        proposal waits for them are booted (a BOOT record), and every
        proposal waiting for them aborts at once instead of at its deadline."""
        p = self.pending.get(seq)
        if p is None:
            return
        view = self.x.view
        silent, soonest = [], None
        for v in p.snapshot - p.yes:
            since = view.silent_since(v, p.t0)
            due = since + view.boot_after(v)
            if now >= due:
                silent.append(v)
            elif soonest is None or due < soonest:
                soonest = due
        if silent:
            booted = [(v, view.inc_of(v)) for v in silent if view.boot(v, view.inc_of(v), now)]
            if booted:
                self.x.announce_boot(booted, now)
                self.x.count("booted", len(booted))
            self.abort_waiting_on(set(silent), records.R_BOOTED, now)
        elif soonest is not None:
            self.x.timers.at(soonest, self._boot_check, seq)

    def abort_waiting_on(self, ids, reason: int, now: int):
        """Abort every pending proposal that still waits for one of ids."""
        for p in list(self.pending.values()):
            if (p.snapshot - p.yes) & ids:
                self.decide(p, records.ABORT, reason, now)

    # ------------------------------------------------------------------ deciding
    def decide(self, p: Proposal, outcome: int, reason: int, now: int):
        x = self.x
        if p.outcome is not None:
            return
        key = (self.ctx.id, self.ctx.inc, p.seq)
        if outcome == records.COMMIT:
            # On disk before anyone can hear of it.
            try:
                x.journal.add_decision(key, outcome, reason, now)
                x.journal.sync()
            except (LogError, ValueError):
                x.count("log_errors")
                outcome, reason = records.ABORT, records.R_LOG
        else:
            try:
                x.journal.add_decision(key, outcome, reason, now)    # kept for answers; no sync needed
            except (LogError, ValueError):
                x.count("log_errors")
        p.outcome, p.reason, p.decided_at = outcome, reason, now
        del self.pending[p.seq]
        self.outcomes[p.seq] = p
        while len(self.outcomes) > KEEP_OUTCOMES:
            self.outcomes.popitem(last=False)
        self.unannounced.append((self.ctx.inc, p.seq, outcome, reason))
        x.count("commits" if outcome == records.COMMIT else "aborts")
        if outcome == records.COMMIT:
            self.latencies.append(now - p.t0)
        else:
            x.count(f"aborts_{records.REASONS.get(reason, reason)}".replace(" ", "_"))
        x.finished(key, now)
        for fn in self.observers:
            fn(p, now)
        res = p.result()
        for fn in p.watchers:
            fn(res)
        p.watchers = []
        self.announce(now)

    def announce(self, now: int):
        """Publish the decisions not yet announced (DECIDE records); on
        back-pressure they wait for the next timer."""
        while self.unannounced:
            batch = self.unannounced[:records.MAX_DECISIONS]
            try:
                self.x.publish(records.decisions_in(batch)[0], now)
            except BlockingIOError:
                self.x.timers.at(now + 1_000_000, lambda t: self.announce(t))
                return
            del self.unannounced[:len(batch)]

    # ------------------------------------------------------------------ answers
    def decision(self, inc: int, seq: int):
        """(outcome, reason) of our proposal (inc, seq) if decided.  A
        proposal of an earlier incarnation that the journal does not show
        committed was aborted: that is what the FENCE said."""
        if inc == self.ctx.inc:
            p = self.outcomes.get(seq)
            return None if p is None else (p.outcome, p.reason)
        if inc < self.ctx.inc and self.x.journal.existed:
            # (a sender that lost its journal knows nothing of its past)
            return self.old.get((inc, seq), (records.ABORT, records.R_FENCED))
        return None

    # ------------------------------------------------------------------ restart
    def restarted(self, now: int):
        """Re-announce the commits of our earlier incarnations, then FENCE."""
        commits = sorted((inc, seq, o, r) for (inc, seq), (o, r) in self.old.items() if o == records.COMMIT)
        self.unannounced.extend(commits)
        self.announce(now)
        self._fence(now)

    def _fence(self, now: int):
        if self.unannounced:                    # the commits go first
            self.x.timers.at(now + 1_000_000, self._fence)
            return
        try:
            self.x.publish(records.fence(self.ctx.inc), now)
        except BlockingIOError:
            self.x.timers.at(now + 1_000_000, self._fence)
            return
        self.x.count("fences")

    def shutdown(self, now: int):
        """Closing: abort what is still pending (announced if the node can)."""
        for p in list(self.pending.values()):
            self.decide(p, records.ABORT, records.R_SHUTDOWN, now)
