"""Atomic delivery's guarantees as properties: a hypothesis state machine
drives a memnet group (loss, duplication, crashes, restarts, proposals
from any member, flat or tree votes) and checks after every step

  * exactly once: no member hands a proposal to its application twice,
    across its incarnations;
  * nothing uncommitted: a member delivers only what its sender committed;
  * a YES means on disk: every YES a member sends -- and so every vote a
    decision counts -- is covered by a completed fsync of its journal (the
    C log's own counter), and

at the end, once every member is up and the network heals:

  * all or none: every committed proposal is delivered by every member of
    its snapshot, every aborted one by none, and nothing stays undecided
    (a sender that crashed undecided restarts and fences);
  * the journals agree: after a crash of everyone, each member of a
    committed proposal's snapshot still has it on disk.
"""
from __future__ import annotations

import collections
import os

from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rpbcast.protocol.atomic import records
from rpbcast.protocol.atomic.journal import Journal
from rpbcast.protocol.atomic.participant import Participant

from test_atomic import AtomicGroup

N = 4


class AtomicMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.g = None

    @initialize(votes=st.sampled_from(["flat", "tree"]), seed=st.integers(0, 2**16),
                loss=st.sampled_from([0.0, 0.05, 0.2]), dup=st.sampled_from([0.0, 0.1]))
    def build(self, votes, seed, loss, dup):
        import tempfile
        from pathlib import Path
        self.tmp = tempfile.TemporaryDirectory(prefix="rpb-atomic-prop-")
        self.g = AtomicGroup(N, Path(self.tmp.name), seed=seed, loss=loss, dup=dup, votes=votes, fanout=2,
                             timeout=0.4, boot_after=0.3, vote_retry=0.02, ask_max=0.3)
        self.votes = {}            # (voter, key) -> [(synced, ordinal)] at every YES it sent
        self.delivered_by = collections.defaultdict(set)
        self.by_key = {}           # proposal key -> (sender, Proposal)
        for i in self.g.X:
            self._instrument(i)
        self.g.run(0.3)

    def _instrument(self, i):
        """Record the journal's synced count at every YES of member i, and
        check every decision against what was recorded."""
        x = self.g.X[i]
        votes = self.votes
        for key, h in x.participant.held.items():
            if h.voted and not h.ordinal:       # recovered from disk when it (re)started
                votes.setdefault((i, key), []).append((1, 1))
        orig = Participant._vote

        def vote(h, now, _x=x, _i=i):
            if h.ordinal:               # logged by this process: a sync must have covered it
                votes.setdefault((_i, h.key), []).append((_x.journal.synced, h.ordinal))
            else:                       # recovered from disk after a restart
                votes.setdefault((_i, h.key), []).append((1, 1))
            return orig(_x.participant, h, now)
        x.participant._vote = vote

        def decided(p, now, _i=i, _x=x):
            key = (_i, _x.ctx.inc, p.seq)
            if p.outcome == records.COMMIT:
                for v in p.yes:
                    seen = votes.get((v, key))
                    assert seen, f"COMMIT {key} counts {v}'s YES, which {v} never sent"
                    assert all(synced >= ordinal for synced, ordinal in seen), \
                        f"{v} said YES to {key} before a sync covered it: {seen}"
                assert p.yes == p.snapshot
        x.coordinator.observers.append(decided)

    def teardown(self):
        if self.g is None:
            return
        try:
            self.check_all_or_none()
        finally:
            for i, x in self.g.X.items():
                if i not in self.g.down:
                    x.journal.close()
            self.tmp.cleanup()

    # ------------------------------------------------------------------ rules
    def up(self):
        return [i for i in self.g.ids if i not in self.g.down]

    @rule(data=st.data())
    def propose(self, data):
        up = self.up()
        if not up:
            return
        s = data.draw(st.sampled_from(up))
        for _ in range(data.draw(st.integers(1, 3))):
            p = self.g.propose(s, b"p%d" % len(self.g.proposals))
            self.by_key[(s, self.g.inc[s], p.seq)] = (s, p)

    @rule(ms=st.integers(1, 400))
    def run(self, ms):
        self.g.run(ms / 1000.0)

    @precondition(lambda self: self.g is not None and len(self.g.down) < N - 1)
    @rule(data=st.data())
    def crash(self, data):
        i = data.draw(st.sampled_from(self.up()))
        self.g.crash(i)

    @precondition(lambda self: self.g is not None and self.g.down)
    @rule(data=st.data())
    def restart(self, data):
        i = data.draw(st.sampled_from(sorted(self.g.down)))
        self.g.restart(i)
        self._instrument(i)

    @rule(loss=st.sampled_from([0.0, 0.1, 0.3]))
    def set_loss(self, loss):
        self.g.net.loss = loss

    # ------------------------------------------------------------------ after every step
    @invariant()
    def exactly_once_and_only_committed(self):
        if self.g is None:
            return
        for i, got in self.g.got.items():
            for key, n in got.items():
                assert n == 1, f"member {i} delivered {key} {n} times"
                sender, p = self.by_key[key]
                assert p.outcome == records.COMMIT, f"member {i} delivered {key}, decided {p.outcome}"
                assert (i, key) in self.votes, f"member {i} delivered {key} without voting YES"

    # ------------------------------------------------------------------ the end
    def check_all_or_none(self):
        g = self.g
        g.net.loss = 0.0
        g.net.dup = 0.0
        for i in sorted(g.down):
            g.restart(i)
            self._instrument(i)
        def outcome_of(key, s, p):
            # a sender that crashed undecided: its Proposal object (of the
            # dead incarnation) never decided; the restarted sender says
            # what its journal holds (a commit) or that it fenced it
            if p.outcome is not None:
                return p.outcome
            d = g.X[s].coordinator.decision(key[1], key[2])
            return None if d is None else d[0]

        done = g.run_until(lambda: all(outcome_of(k, s, p) is not None for k, (s, p) in self.by_key.items())
                           and all(not x.participant.held for x in g.X.values()), 20.0, step=0.05)
        g.run(1.0)
        for key, (s, p) in self.by_key.items():
            outcome = outcome_of(key, s, p)
            holders = {i for i in g.ids if g.got[i][key]}
            if outcome == records.COMMIT:
                # every member of the snapshot; beyond it only a member that
                # voted YES anyway (one booted while alive, say)
                assert holders >= set(p.snapshot), (key, holders, p.snapshot)
                assert all((i, key) in self.votes for i in holders), (key, holders)
            else:
                assert not holders, (key, holders)
        assert done, {i: list(x.participant.held) for i, x in g.X.items()}
        outcomes = [outcome_of(k, s, p) for k, (s, p) in self.by_key.items()]
        event(f"commits: {'some' if records.COMMIT in outcomes else 'none'}")
        event(f"aborts: {'some' if records.ABORT in outcomes else 'none'}")
        for name in ("recovered_pending", "in_doubt", "fences", "booted", "joins", "digests_sent"):
            if any(x.stats[name] for x in g.X.values()):
                event(name)
        # every member of a committed snapshot has the proposal on its disk
        for i, x in g.X.items():
            x.crash()
        for key, (s, p) in self.by_key.items():
            if p.outcome != records.COMMIT:
                continue
            for v in p.snapshot:
                j = Journal(str(g.tmp / f"atomic{v}"))
                r = j.recover()
                j.close()
                assert key in r.proposals, f"{v} lost {key} from its journal"
        g.down.update(g.X)


TestAtomicDelivery = AtomicMachine.TestCase
TestAtomicDelivery.settings = settings(max_examples=int(os.environ.get("ATOMIC_EXAMPLES", 40)), stateful_step_count=25, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])
