"""Atomic delivery (docs/atomic.md) on the in-memory network: commits,
aborts, booting, the crash cases, the records' and messages' bad input.

``AtomicGroup`` (also used by test_atomic_properties.py) is a memnet group
whose members run the AtomicDelivery extension with real journals
(LogStore directories); a crash abandons the journal as a killed process
would (what no sync covered is lost) and a restart is a new incarnation on
the same directory."""
from __future__ import annotations

import collections

import pytest

from rpbcast.config import Config, ConfigError
from rpbcast.core import wire
from rpbcast.core.logstore import LogError
from rpbcast.drivers.memnet import NS, MemNet
from rpbcast.protocol.atomic import ATOMIC_LABEL, AtomicDelivery, records

T = wire.MsgType


class AtomicGroup:
    """Members 1..n on a MemNet, each with an AtomicDelivery journal under
    tmp_path; the application of every member takes its committed messages
    after every step (``got``: node id -> Counter of proposal keys, across
    incarnations)."""

    def __init__(self, n, tmp_path, seed=1, loss=0.0, dup=0.0, loggers=(), **options):
        self.ids = list(range(1, n + 1))
        self.loggers = list(loggers)
        self.net = MemNet(seed=seed, loss=loss, dup=dup)
        self.specs = MemNet.member_specs(self.ids, loggers=self.loggers)
        self.tmp = tmp_path
        self.options = dict(timeout=1.0, boot_after=0.5, vote_retry=0.02)
        self.options.update(options)
        self.inc = {i: 1 for i in self.ids}
        self.E, self.X = {}, {}
        self.got = collections.defaultdict(collections.Counter)
        self.proposals = []            # (sender, Proposal)
        self.down = set()
        for i in self.ids:
            self.start(i)

    def start(self, i):
        role = "logger" if i in self.loggers else "member"
        cfg = Config(node_id=i, members=self.specs, incarnation=self.inc[i], gossip_interval=0.05, role=role,
                     log_dir=str(self.tmp / f"log{i}") if role == "logger" else None, member_timeout=2.0)
        e = self.net.add(cfg)
        self.E[i] = e
        self.down.discard(i)
        if role == "member":
            self.X[i] = e.add_extension(AtomicDelivery(str(self.tmp / f"atomic{i}"), **self.options))
        return e

    def crash(self, i):
        """i stops now, as a SIGKILL would stop it."""
        self.net.crash(i)
        if i in self.X:
            self.X[i].crash()
        self.down.add(i)

    def restart(self, i):
        self.inc[i] += 1
        return self.start(i)

    def propose(self, i, payload=b"x", timeout=None):
        holder = []
        self.net.at(self.net.now + 1, lambda net: holder.append(
            self.X[i].propose(payload, net.now, timeout=timeout)))
        self.run(0.0005)
        p = holder[0]
        self.proposals.append((i, p))
        return p

    def drain(self):
        for i, x in self.X.items():
            if i in self.down:
                continue
            msgs = x.take()
            x.mark_delivered(msgs)
            for m in msgs:
                self.got[i][(m.sender, m.inc, m.seq)] += 1

    def run(self, seconds, step=0.01):
        end = self.net.now + int(seconds * NS)
        while self.net.now < end:
            self.net.run_until(min(end, self.net.now + int(step * NS)))
            self.drain()

    def run_until(self, cond, timeout, step=0.01):
        end = self.net.now + int(timeout * NS)
        while self.net.now < end:
            if cond():
                return True
            self.run(step, step)
        return cond()

    def members(self):
        return [i for i in self.ids if i not in self.loggers]


def key_of(group, sender, p, inc=None):
    return (sender, inc if inc is not None else group.inc[sender], p.seq)


def everyone_else(group, sender):
    return [i for i in group.members() if i != sender]


# ---------------------------------------------------------------------- commits
@pytest.mark.parametrize("votes", ["flat", "tree"])
@pytest.mark.parametrize("loss", [0.0, 0.2])
def test_a_commit_reaches_every_member_exactly_once(tmp_path, votes, loss):
    g = AtomicGroup(6, tmp_path, loss=loss, votes=votes, fanout=2, timeout=3.0)
    g.run(0.3)
    ps = [g.propose(1, b"m%d" % k) for k in range(5)] + [g.propose(4, b"from 4")]
    assert g.run_until(lambda: all(p.result() is not None for _, p in g.proposals), 5.0)
    assert all(p.result().committed for _, p in g.proposals), [p.result() for _, p in g.proposals]
    g.run(0.5)
    for s, p in g.proposals:
        k = key_of(g, s, p)
        for i in everyone_else(g, s):
            assert g.got[i][k] == 1, (i, k, g.got[i])
        assert g.got[s][k] == 0            # a sender learns the outcome instead
    assert len(ps) == 6


def test_records_never_reach_the_ordinary_delivery_path(tmp_path):
    g = AtomicGroup(3, tmp_path)
    g.run(0.2)
    g.net.at(g.net.now + 1, lambda net: [g.E[1].publish(b"plain%d" % k, now=net.now) for k in range(3)])
    p = g.propose(1, b"atomic")
    g.run(0.5)
    assert p.result().committed
    for i in (2, 3):
        plain = g.E[i].recv()
        assert sorted(d.payload for d in plain) == [b"plain0", b"plain1", b"plain2"]
        assert all(d.label != ATOMIC_LABEL for d in plain)
        assert list(g.got[i]) == [(1, 1, p.seq)]


def test_the_tree_sends_the_sender_fewer_messages_than_flat(tmp_path):
    """Tree votes: about n / fanout messages reach the sender, not n."""
    counts = {}
    for votes in ("flat", "tree"):
        g = AtomicGroup(17, tmp_path / votes, votes=votes, fanout=4, aggregate_delay=0.005)
        g.run(0.3)
        before = g.E[1].traffic().get("atomic", (0, 0, 0, 0))[0]
        ps = [g.propose(1, b"v") for _ in range(4)]
        g.run(0.5)
        assert all(p.result().committed for p in ps)
        counts[votes] = g.E[1].traffic()["atomic"][0] - before
    assert counts["flat"] == 4 * 16
    assert counts["tree"] <= 4 * 6, counts          # 16 voters in groups of 4: ~4 digests each


def test_tree_voters_go_to_the_sender_when_their_aggregator_does_not_answer(tmp_path):
    g = AtomicGroup(5, tmp_path, votes="tree", fanout=2, timeout=2.0)
    g.run(0.3)
    # view without sender 1: [2, 3, 4, 5] -> aggregators 2 (for 2, 3) and 4 (for 4, 5)
    assert g.X[3].view.aggregator(1, 2) == 2 and g.X[5].view.aggregator(1, 2) == 4
    g.net.drop_filter = lambda src, dst, data: src == 3 and dst == 2 and wire.first_type(data) == T.ATOMIC
    p = g.propose(1, b"around the aggregator")
    g.run(1.0)
    assert p.result().committed
    assert g.X[3].stats["votes_sent"] == 3          # twice to 2 (unanswered), then to 1
    assert g.X[5].stats["votes_sent"] == 1          # answered by 4 at once
    assert all(g.got[i] == {(1, 1, p.seq): 1} for i in (2, 3, 4, 5))


# ---------------------------------------------------------------------- aborts
def test_a_no_vote_aborts_and_nobody_delivers(tmp_path):
    g = AtomicGroup(4, tmp_path)
    g.run(0.2)
    # member 3's disk is full: it cannot hold the proposal, so it says NO

    def full(*a, **k):
        raise LogError(28, "No space left on device")
    g.X[3].journal.add_proposal = full
    p = g.propose(1, b"doomed")
    g.run(0.5)
    r = p.result()
    assert not r.committed and r.reason == records.reason_text(records.R_NO)
    assert not any(g.got[i] for i in g.ids)
    assert all(not g.X[i].participant.held for i in (2, 3, 4))        # everyone learned ABORT
    assert g.X[3].stats["log_errors"] == 1


def test_a_dead_member_is_booted_then_rejoins(tmp_path):
    g = AtomicGroup(4, tmp_path, boot_after=0.3, timeout=5.0)
    g.run(0.3)
    g.crash(4)
    p = g.propose(1, b"while 4 is down")
    g.run(1.0)
    r = p.result()
    assert not r.committed and r.reason == records.reason_text(records.R_BOOTED)
    assert r.latency < 1.0                       # booted after ~0.3 s, not the 5 s deadline
    # everyone learned the boot from 1's BOOT record: the next proposals leave 4 out
    assert all(4 in g.X[i].view.booted for i in (1, 2, 3))
    q = g.propose(2, b"without 4")
    g.run(0.5)
    assert q.result().committed and q.result().snapshot == 2
    # 4 comes back (a new incarnation): its JOIN record puts it back in every view
    g.restart(4)
    assert g.run_until(lambda: all(4 not in g.X[i].view.booted for i in (1, 2, 3)), 3.0)
    r3 = g.propose(3, b"with 4 again")
    g.run(0.5)
    assert r3.result().committed and r3.result().snapshot == 3
    assert g.got[4][key_of(g, 3, r3)] == 1


def test_the_deadline_aborts_when_votes_cannot_arrive(tmp_path):
    g = AtomicGroup(3, tmp_path, timeout=0.4, boot_after=5.0)
    g.run(0.2)
    # 3's votes never reach 1 (3 itself is alive: its gossip still does)
    g.net.drop_filter = lambda src, dst, data: src == 3 and dst == 1 and wire.first_type(data) == T.ATOMIC
    p = g.propose(1)
    g.run(1.0)
    assert not p.result().committed and p.result().reason == "timeout"
    assert not g.got[2] and not g.got[3]


# ---------------------------------------------------------------------- crashes
def test_member_crashes_after_voting_yes_restarts_and_delivers_once(tmp_path):
    """The paper's recovery: a member that voted YES and crashed finds the
    proposal in its journal, learns the decision and delivers it once."""
    g = AtomicGroup(4, tmp_path, timeout=2.0)
    g.run(0.3)
    # 3 will not hear the decision: it is killed right after its YES left
    p = g.propose(1, b"survives the crash")
    assert g.run_until(lambda: g.X[3].stats["votes_sent"] >= 1, 0.5, step=0.0002)
    g.crash(3)
    g.run(0.5)
    assert p.result().committed          # every YES arrived, 3's too
    assert not g.got[3]
    g.run(1.0)                            # down well past the deadline
    g.restart(3)
    assert g.X[3].stats["recovered_pending"] == 1
    assert g.run_until(lambda: g.got[3], 3.0)
    g.run(1.0)
    assert g.got[3] == {(1, 1, p.seq): 1}
    for i in (2, 4):
        assert g.got[i] == {(1, 1, p.seq): 1}


def test_a_member_that_delivered_does_not_deliver_again_after_a_crash(tmp_path):
    g = AtomicGroup(3, tmp_path)
    g.run(0.2)
    p = g.propose(1, b"once")
    g.run(0.5)
    assert g.got[2] == {(1, 1, p.seq): 1}
    g.crash(2)
    g.restart(2)
    g.run(1.0)
    assert g.got[2] == {(1, 1, p.seq): 1}


def test_sender_crashes_between_votes_and_decision_members_wait_then_abort_on_its_fence(tmp_path):
    """Voters in doubt never abort by themselves (the sender may have
    committed); the restarted sender's FENCE aborts what it never decided."""
    g = AtomicGroup(4, tmp_path, timeout=0.5)
    g.run(0.3)
    # 4's votes are lost: 1 waits, holding 2's and 3's YES
    g.net.drop_filter = lambda src, dst, data: src == 4 and dst == 1 and wire.first_type(data) == T.ATOMIC
    p = g.propose(1, b"undecided")
    assert g.run_until(lambda: len(g.X[1].coordinator.pending.get(p.seq).yes) == 2, 0.3, step=0.001)
    g.crash(1)
    g.net.drop_filter = None
    g.run(5.0)                           # ten deadlines
    for i in (2, 3, 4):
        assert list(g.X[i].participant.held) == [(1, 1, p.seq)]      # in doubt, still held
        assert g.X[i].participant.in_doubt() == [(1, 1, p.seq)]
        assert g.X[i].stats["asked"] > 0
    assert not any(g.got.values())
    g.restart(1)
    assert g.run_until(lambda: all(not g.X[i].participant.held for i in (2, 3, 4)), 3.0)
    for i in (2, 3, 4):
        assert g.X[i].participant.decision((1, 1, p.seq)) == (records.ABORT, records.R_FENCED)
    assert g.X[1].stats["fences"] == 1
    assert not any(g.got.values())


def test_sender_crashes_after_its_commit_is_on_disk_restarts_and_announces_it(tmp_path):
    """The decision was journalled (synced) and nobody heard it: the
    restarted sender re-announces it, and every member delivers."""
    g = AtomicGroup(4, tmp_path)
    g.run(0.3)

    def die(p, now):
        # the COMMIT is on the sender's disk; its announcement never leaves
        g.net.drop_filter = lambda src, dst, data: src == 1
        g.crash(1)
    g.X[1].coordinator.observers.append(die)
    p = g.propose(1, b"committed, then silence")
    g.run(2.0)
    assert p.outcome == records.COMMIT
    assert not any(g.got.values())
    assert all(g.X[i].participant.held for i in (2, 3, 4))
    g.net.drop_filter = None
    g.restart(1)
    assert g.run_until(lambda: all(g.got[i] for i in (2, 3, 4)), 3.0)
    g.run(0.5)
    for i in (2, 3, 4):
        assert g.got[i] == {(1, 1, p.seq): 1}


def test_sender_dies_after_telling_one_member_the_others_learn_it_from_that_member(tmp_path):
    """CONFIRM is repairable from peers: a DECIDE record that reached one
    member reaches the others although its sender never comes back."""
    g = AtomicGroup(4, tmp_path)
    g.run(0.3)

    def decided(p, now):
        # from now on 1's datagrams reach only 2, and then 1 dies
        g.net.drop_filter = lambda src, dst, data: src == 1 and dst != 2

        def die(net):
            g.crash(1)
        g.net.at(now + 2_000_000, die)
    g.X[1].coordinator.observers.append(decided)
    p = g.propose(1, b"told one")
    g.run(0.1)
    assert p.outcome == records.COMMIT and 1 in g.down
    assert g.got[2] == {(1, 1, p.seq): 1}
    assert g.run_until(lambda: all(g.got[i] for i in (3, 4)), 5.0)
    for i in (2, 3, 4):
        assert g.got[i] == {(1, 1, p.seq): 1}


def test_a_logger_serves_a_decide_record_nobody_else_kept(tmp_path):
    """With a logger, a DECIDE record is in its log: a member that was down
    while everyone's gossip buffer let it go still repairs it (here from
    the logger, the only holder)."""
    g = AtomicGroup(4, tmp_path, loggers=[4])
    g.run(0.3)

    def decided(p, now):
        # from the decision on, only the logger reaches 3
        g.net.drop_filter = lambda src, dst, data: dst == 3 and src in (1, 2)
    g.X[1].coordinator.observers.append(decided)
    p = g.propose(1, b"logged")
    assert g.run_until(lambda: g.got[3], 5.0)
    assert p.outcome == records.COMMIT
    # the DECIDE record (the only data of 1's after the filter) came from the log
    assert g.E[3].counters()["repairs_logger"] == 1
    assert g.got[3] == {(1, 1, p.seq): 1}


# ---------------------------------------------------------------------- bad input
def test_malformed_records_and_messages_are_counted_never_raised(tmp_path):
    g = AtomicGroup(3, tmp_path)
    g.run(0.2)
    bad = [b"", b"\x01", b"\x09\x01\x00\x00", records.propose(b"x", NS)[:-1][:5], b"\x02\x01\x05\x00" + bytes(7),
           b"\x01\x02" + bytes(14)]
    g.net.at(g.net.now + 1, lambda net: [g.E[1].publish(b, label=ATOMIC_LABEL, now=net.now) for b in bad])
    def send_bad(net):
        e = g.E[1]
        for aux, flags, body in ((0, 0, b""), (9, 0, b""), (1 | (1 << 16), 0, b""),
                                 (wire.ATOMIC_NO, wire.F_VOTERS, wire.voter_ids([2]))):
            e.emit(2, T.ATOMIC, body, flags, sender=3, inc=1, aux=aux, seq=5)
    g.net.at(g.net.now + 2, send_bad)
    g.run(0.3)
    assert g.X[2].stats["bad_records"] == g.X[3].stats["bad_records"] == len(bad)
    assert g.X[2].stats["bad_messages"] == 4
    p = g.propose(1, b"still works")
    g.run(0.3)
    assert p.result().committed


def test_configuration_errors_name_the_key():
    for kw, key in ((dict(atomic=True), "atomic_dir"), (dict(atomic_votes="gossip"), "atomic_votes"),
                    (dict(atomic_fanout=1), "atomic_fanout"), (dict(atomic_timeout=0), "atomic_timeout"),
                    (dict(atomic=True, atomic_dir="/x", delivery="fifo"), "delivery"),
                    (dict(atomic_vote_retry=-1.0), "atomic_vote_retry")):
        with pytest.raises(ConfigError, match=key):
            Config(**kw)


def test_a_reused_incarnation_is_refused(tmp_path):
    g = AtomicGroup(2, tmp_path)
    g.run(0.2)
    p = g.propose(1)
    g.run(0.3)
    assert p.result().committed
    g.crash(1)
    g.inc[1] -= 1                     # the same incarnation again
    with pytest.raises(ConfigError, match="newer incarnation"):
        g.restart(1)


def test_unknown_options_are_refused():
    with pytest.raises(TypeError, match="bogus"):
        AtomicDelivery("/tmp/x", bogus=1)
