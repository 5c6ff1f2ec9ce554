"""GSGC as an engine extension (rpbcast/protocol/gsgc.py) on the in-memory network.

The merge rules of Fig. 2 themselves (same / next / old round, redundant and
out-of-round messages) are tested against the reference model in
tests/test_stability.py; here the protocol around them: views, wire,
failure detection, joins, local gossip, the adaptive step, and what S does
to the buffers.
"""
import collections
import math
import random

import numpy as np
import pytest

from groups import Group
from rpbcast.core import wire
from rpbcast.config import Config
from rpbcast.protocol.gsgc import (CTRL, LOCAL, GsgcConfig, GsgcExtension, OnlineSearch, diffusion_steps,
                                   find_window, k_threshold, view_hash, zones_by_proximity, zones_by_rtt)
from rpbcast.protocol.membership import MEMBER, NOT_MEMBER, Member
from rpbcast.drivers.memnet import NS, MemNet

STEP = 0.05     # Group's gossip_interval: one GSGC step per engine round by default


# ---------------------------------------------------------------------------
# helpers

def with_gsgc(g, ids=None, **kw):
    X = {}
    for i in (ids or list(g.E)):
        X[i] = g.E[i].add_extension(GsgcExtension(**kw))
        g.net._arm(g.E[i].cfg.addr)
    return X


def R_of(e, key):
    """Node e's real receive frontier for stream key = (sender, inc)."""
    if key == (e.id, e.inc):
        return e.node.next_seq
    slot = e.node.find_peer(*key)
    return 0 if slot is None else e.node.peer_contiguous(slot)


class Safety:
    """Checks, every dt of virtual time, that no member's S exceeds the
    receive frontier R of any member it counts as live (in its view and not
    declared failed) and that S never decreases."""

    def __init__(self, g, X, dt=0.005):
        self.g, self.X, self.dt = g, X, dt
        self.checks = 0
        self.violations = []
        self.last = {}
        g.net.at(g.net.now, self._tick)

    def _tick(self, net):
        self.check()
        net.at(net.now + int(self.dt * NS), self._tick)

    def check(self):
        g = self.g
        for i, x in self.X.items():
            if g.E[i].cfg.addr in g.net.down or not x.layers:
                continue
            if x.local:         # global S: every member not down or declared failed
                live = set(g.E) - set(x.state()["failed"])
            else:               # flat: the members of its view it counts as alive
                live = {k[0] for k in x.layers[0].alive_keys()}
            for key, v in zip(x.streams, x.stable_array()):
                v = int(v)
                if v < self.last.get((i, key), 0):
                    self.violations.append(("S decreased", i, key, v))
                self.last[(i, key)] = v
                for k, e in g.E.items():
                    if k not in live or e.cfg.addr in g.net.down:
                        continue
                    if v > R_of(e, key):
                        self.violations.append((g.net.now, i, key, v, k, R_of(e, key)))
        self.checks += 1


def rounds(X, ids=None):
    return {i: x.state()["round"] for i, x in X.items() if ids is None or i in ids}


def everything_stable(g, X, ids):
    for i in ids:
        S = X[i].state()["S"]
        for s, n in g.target.items():
            if S.get((s, g.E[s].inc), 0) < n:
                return False
    return True


# ---------------------------------------------------------------------------
# stability, safety, buffers

def test_group_reaches_stability_and_S_never_exceeds_a_live_R(tmp_path):
    g = Group(7, senders=[1, 2, 3], loggers=[7], tmp_path=tmp_path, loss=0.05, seed=11)
    X = with_gsgc(g)
    safety = Safety(g, X)
    g.publish_stream(400, per_tick=1, tick=0.002)
    assert g.run_until_complete(timeout=20)
    assert g.net.run_until_true(lambda net: everything_stable(g, X, g.ids), timeout=5)
    assert safety.checks > 100 and not safety.violations, safety.violations[:5]
    for i, x in X.items():
        st = x.state()
        assert st["round"] >= 5
        assert st["failed"] == []
        assert st["tts"]["count"] > 0 and 0 < st["tts"]["mean"] < 2.0
        assert st["S"] == {(s, 1): 400 for s in (1, 2, 3)}
        # stable => released: nothing left in the gossip buffer
        c = g.E[i].counters()
        assert c["gossip_buffer_entries"] == 0, (i, c["gossip_buffer_entries"])
    # the state rode on the engine's own gossip, with the multicast shortcut
    tot = sum((x.stats for x in X.values()), start=collections.Counter())
    assert sum(x.state()["rounds_completed"] for x in X.values()) >= 5
    assert tot["sent_piggyback"] > tot["sent_standalone"]
    assert tot["multicast_sent"] > 0 and tot["multicast_rx"] > 0


def test_first_round_covers_data_received_before_gsgc_started(tmp_path):
    """Regression: a member that hears a gossip before its own first step
    created its layer without the streams its data plane already had; they
    entered with M = 0, so the whole first round concluded S = 0 for them.
    With the data everywhere before GSGC starts, the first round completed
    anywhere must cover all of it."""
    g = Group(10, senders=[1, 2], tmp_path=tmp_path, seed=3, gossip_interval=1000.0)
    g.publish_stream(20, per_tick=5)
    assert g.run_until_complete(timeout=5)
    X = with_gsgc(g, step=0.2, b=2, multicast=False)     # first steps scattered over 0.2 s
    assert g.net.run_until_true(lambda net: any(x.stats["completed_flat"] for x in X.values()), timeout=10)
    done = [i for i, x in X.items() if x.stats["completed_flat"]]
    for i in done:
        assert X[i].state()["rounds_completed"] == 1
        assert X[i].state()["S"] == {(1, 1): 20, (2, 1): 20}, (i, X[i].state()["S"])


def _store_growth(tmp_path, gsgc, seed=5):
    """Continuous sending with age-based GC effectively off (gc_limit huge):
    receivers' store entries at 1/3, 2/3 and the end of the run."""
    g = Group(5, senders=[1], tmp_path=tmp_path, seed=seed, gc_limit=1_000_000,
              gossip_buffer_bytes=0)
    X = with_gsgc(g, age_limit=0) if gsgc else {}
    g.publish_stream(4500, per_tick=3, tick=0.002)      # 1500 msg/s for 3 s
    samples = []                                        # peak store entries of each second
    for _ in range(3):
        peak = 0
        for _ in range(20):
            g.net.run(0.05)
            g.drain()                                   # the application keeps up
            peak = max([peak] + [g.E[i].counters()["store_entries"] for i in (2, 3, 4, 5)])
        samples.append(peak)
    gb = max(g.E[i].counters()["gossip_buffer_bytes"] for i in g.ids)
    return samples, gb, X, g


def test_buffers_stay_bounded_under_continuous_sending(tmp_path):
    (a1, a2, a3), gb, X, g = _store_growth(tmp_path, gsgc=True)
    (b1, b2, b3), gb0, _, _ = _store_growth(tmp_path, gsgc=False)
    # without stability nothing leaves: the store grows with every message
    assert b1 >= 1400 and b3 >= 4400 and b3 > 2.8 * b1
    # with it the store plateaus at rate x time-to-stable
    assert max(a1, a2, a3) < 800 and a3 < 1.5 * a1, (a1, a2, a3)
    assert gb < gb0 / 5
    tts = X[2].state()["tts"]
    assert tts["count"] > 10 and tts["p99"] < 0.5


def _acks_dropped(logger, sender):
    def drop(src, dst, data):
        if src != logger or dst != sender:
            return False
        _, msgs = wire.parse(data)
        for m in msgs:
            if m.type == wire.MsgType.LOGACK:
                return True
            if m.type == wire.MsgType.GOSSIP:
                _, _, _, secs = wire.read_gossip(m.body)
                if any(k == wire.Section.LASTSEEN for k, _, _ in secs):
                    return True
        return False
    return drop


@pytest.mark.parametrize("gsgc", [False, True])
def test_stability_frees_gossip_buffers_but_never_what_only_a_logger_may_release(tmp_path, gsgc):
    """The logger's acknowledgments never reach the sender.  Stability frees
    every gossip buffer, but the sender's send buffer waits for the logger:
    S counts what the logger has received, not what it has synced, and a
    logger too slow to gossip in time can be declared failed and leave S
    (a stress run lost messages that way before the send hold was kept)."""
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, seed=2)
    g.net.drop_filter = _acks_dropped(4, 1)
    if gsgc:
        X = with_gsgc(g)
    g.publish_stream(500, per_tick=5)
    assert g.run_until_complete(timeout=10)
    g.net.run(1.0)
    e = g.E[1]
    assert e.node.acked == 0                           # nothing but the logger may release it
    assert e.counters()["store_entries"] == 500
    if gsgc:
        assert X[1].state()["S"][(1, e.inc)] == 500     # ... though it is stable
        assert e.counters()["gossip_buffer_entries"] == 0
        for i in (2, 3):
            assert g.E[i].counters()["store_entries"] == 0     # receivers freed by stability


def test_a_slow_member_is_not_declared_failed_before_fail_after(tmp_path):
    """K has a floor in seconds (fail_after): a member that falls silent for
    less than that (a logger whose timers run late under load) stays in the
    stability computation; one silent for longer is declared failed."""
    g = Group(5, senders=[1], loggers=[5], tmp_path=tmp_path, seed=6, gossip_interval=0.02)
    X = with_gsgc(g, fail_after=0.5)
    g.publish_stream(2000, per_tick=2, tick=0.001)
    g.net.run(0.4)
    mute = {"on": True}
    g.net.drop_filter = lambda src, dst, data: mute["on"] and src == 5
    g.net.run(0.4)                                     # silent 0.4 s < fail_after
    assert all(5 not in X[i].state()["failed"] for i in (1, 2, 3, 4))
    g.net.run(0.5)                                     # now silent 0.9 s
    assert all(5 in X[i].state()["failed"] for i in (1, 2, 3, 4))
    mute["on"] = False
    assert g.net.run_until_true(lambda net: all(5 not in X[i].state()["failed"] for i in (1, 2, 3, 4)),
                                timeout=5)


# ---------------------------------------------------------------------------
# failure detection

def test_crashed_member_is_declared_failed_and_rounds_resume(tmp_path):
    g = Group(7, senders=[1, 2], loggers=[7], tmp_path=tmp_path, seed=4)
    X = with_gsgc(g)
    safety = Safety(g, X)
    g.publish_stream(3000, per_tick=1, tick=0.001)      # 3 s of traffic
    g.net.run(0.6)
    g.net.crash(5)
    t_crash = g.net.now
    K = X[1].state()["K"]
    live = [1, 2, 3, 4, 6, 7]
    assert g.net.run_until_true(lambda net: all(5 in X[i].state()["failed"] for i in live),
                                timeout=4 * K * STEP)
    t_all = g.net.now
    assert t_all - t_crash >= 0.5 * K * STEP * NS          # not before ~K steps
    events = [ev for ev in g.E[1].events if ev[0] == "member" and ev[1] == 5]
    assert ("member", 5, "failed") in events
    r0 = rounds(X, live)
    g.net.run(1.0)
    r1 = rounds(X, live)
    assert all(r1[i] >= r0[i] + 3 for i in live), (r0, r1)
    g.target = {1: 3000, 2: 3000}
    assert g.net.run_until_true(lambda net: everything_stable(g, X, live), timeout=5)
    assert not safety.violations, safety.violations[:5]
    for i in live:
        assert g.E[i].counters()["gossip_buffer_entries"] == 0


def test_silent_member_blocks_S_until_declared_failed_and_not_before(tmp_path):
    """Node 4 keeps receiving but nothing it sends arrives: rounds stop (at
    most the one in progress completes) until it is declared failed."""
    g = Group(6, senders=[1], tmp_path=tmp_path, seed=8)
    X = with_gsgc(g)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.5)
    others = [1, 2, 3, 5, 6]
    g.net.drop_filter = lambda src, dst, data: src == 4
    t0 = g.net.now
    top0 = max(rounds(X, others).values())
    declared = {}
    progress = []

    def watch(net):
        for i in others:
            if i not in declared and 4 in X[i].state()["failed"]:
                declared[i] = net.now
        if len(declared) < len(others):
            progress.append((net.now, max(rounds(X, others).values()),
                             {i: X[i].state()["S"].get((1, 1), 0) for i in others}))
            net.at(net.now + int(0.005 * NS), watch)

    g.net.at(g.net.now, watch)
    K = X[1].state()["K"]
    assert g.net.run_until_true(lambda net: len(declared) == len(others), timeout=4 * K * STEP)
    first = min(declared.values())
    assert first - t0 >= 0.5 * K * STEP * NS
    # before the first declaration: at most the round in progress completed
    before = [p for p in progress if p[0] < first]
    assert max(p[1] for p in before) <= top0 + 1
    # ... and S stood still after that (sampled a round's worth after t0)
    late = [p for p in before if p[0] > t0 + 0.3 * NS]
    assert late and all(p[2] == late[0][2] for p in late)
    # after: rounds resume without node 4
    top1 = max(rounds(X, others).values())
    g.net.run(1.0)
    assert max(rounds(X, others).values()) >= top1 + 3
    S_after = X[1].state()["S"][(1, 1)]
    assert S_after > max(late[0][2].values()) + 100


def test_member_heard_from_again_comes_back(tmp_path):
    g = Group(6, senders=[1], tmp_path=tmp_path, seed=9)
    X = with_gsgc(g, quorum=0.0)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.3)
    g.net.drop_filter = lambda src, dst, data: src == 3 or dst == 3      # partitioned away
    assert g.net.run_until_true(lambda net: 3 in X[1].state()["failed"], timeout=5)
    g.net.drop_filter = None
    assert g.net.run_until_true(lambda net: all(3 not in X[i].state()["failed"] for i in (1, 2, 4, 5, 6)),
                                timeout=5)
    assert ("member", 3, "recovered") in g.E[1].events


def _isolate_sender(tmp_path, quorum):
    g = Group(5, senders=[1], tmp_path=tmp_path, seed=10)
    X = with_gsgc(g, quorum=quorum)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.3)
    g.net.drop_filter = lambda src, dst, data: src == 1 or dst == 1
    s0, r0 = X[1].state()["S"][(1, 1)], X[1].state()["round"]
    g.net.run(3.0)                                  # 1500 more messages published meanwhile
    st = X[1].state()
    return st, st["S"][(1, 1)] - s0, st["round"] - r0


def test_isolated_member_does_not_compute_stability_alone(tmp_path):
    """Quorum: a member that loses everybody declares at most a minority
    failed, so it never completes rounds on its own R and never declares
    its own unsent-anywhere messages stable."""
    st, dS, dr = _isolate_sender(tmp_path, quorum=0.5)
    assert len(st["failed"]) == 2                  # 3 of 5 stay alive: more than half
    assert dr <= 1 and dS < 300                    # at most the round in progress
    assert st["stats"].get("quorum_held", 0) > 0
    # the control: without the quorum it declares everybody failed and
    # calls its own stream stable on its own R
    st, dS, dr = _isolate_sender(tmp_path, quorum=0.0)
    assert len(st["failed"]) == 4 and dr > 10 and dS > 1000


# ---------------------------------------------------------------------------
# sub-group size b

def _steps_per_round(b, seed):
    g = Group(16, senders=[1], seed=seed, gossip_interval=STEP)
    X = with_gsgc(g, b=b, multicast=False)
    g.publish_stream(100000, per_tick=1, tick=0.005)
    g.net.run(1.0)
    r0, s0 = max(rounds(X).values()), X[1].step_no
    g.net.run(4.0)
    r1, s1 = max(rounds(X).values()), X[1].step_no
    return (s1 - s0) / (r1 - r0)


def test_larger_subgroup_completes_rounds_in_fewer_steps():
    spr1 = _steps_per_round(1, seed=21)
    spr3 = _steps_per_round(3, seed=21)
    assert spr3 < 0.75 * spr1, (spr1, spr3)
    assert spr3 < 4 <= spr1         # b = 1 over 16 members needs several steps a round


# ---------------------------------------------------------------------------
# joins (§3.3)

def _join_group(tmp_path, seed=12, **kw):
    g = Group(5, senders=[1], loggers=[5], tmp_path=tmp_path, seed=seed)
    X = with_gsgc(g, **kw)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.5)
    new = Config(node_id=6, incarnation=1, join=True, sponsors=2, gossip_interval=STEP, members=[], addr=6)
    e = g.net.add(new)
    g.E[6] = e
    X[6] = e.add_extension(GsgcExtension(**kw))
    return g, X


@pytest.mark.parametrize("window", [None, 0.004])
def test_join_during_a_round_under_admission_window(tmp_path, window):
    g, X = _join_group(tmp_path, admission="window", admission_window=window)
    safety = Safety(g, X)
    old = [1, 2, 3, 4, 5]

    def admitted(net):
        return all(6 in {k[0] for k in X[i].layers[0].keys} for i in old + [6] if X[i].layers)

    assert g.net.run_until_true(lambda net: g.E[6].status == 1 and admitted(net), timeout=5)
    w = (window or 2 * STEP) * NS
    hows = []
    for i in old:
        adm = [a for a in X[i].layers[0].admissions if 6 in a[3]]
        assert len(adm) == 1, adm
        t, rnd, how, ids, offset = adm[0]
        hows.append(how)
        # admitted within the window after a round start, at a round start,
        # or because a peer already had in this round -- never later into
        # a round on its own
        assert how in ("window", "round_start", "peer"), adm
        if how == "window":
            assert offset <= w
        if how == "round_start":
            assert offset == 0
    if window is not None:
        assert set(hows) - {"window"}, hows     # a short window defers some admissions
    # the newcomer takes part: rounds complete with it, S stays safe for it
    # too, and its buffers are released by stability
    r0 = rounds(X)
    g.net.run(1.5)
    r1 = rounds(X)
    assert all(r1[i] >= r0[i] + 3 for i in old)
    assert r1[6] >= max(r1.values()) - 1
    assert not safety.violations, safety.violations[:5]
    assert X[6].state()["S"][(1, 1)] > 0 and X[6].stats["released"] > 0
    assert X[6].layers[0].armed          # it merged live arrays before judging anyone
    assert X[6].state()["failed"] == []


def test_join_under_execution_control_pauses_rounds(tmp_path):
    g, X = _join_group(tmp_path, seed=13, admission="execution")
    old = [1, 2, 3, 4, 5]
    assert g.net.run_until_true(lambda net: all(X[i].layers[0].admissions for i in old),
                                timeout=5, check_every=0.001)
    quiet = min(X[i].layers[0].quiet_until for i in old)
    done0 = sum(x.stats["completed_flat"] for x in X.values())
    r0 = rounds(X, old)
    assert quiet - g.net.now > 0.05 * NS
    g.net.run_until(quiet - int(0.002 * NS))
    # nobody gossips the stability state, so no round completes anywhere
    assert sum(x.stats["completed_flat"] for x in X.values()) == done0
    assert rounds(X, old) == r0
    g.net.run(1.5)
    assert all(v >= max(r0.values()) + 3 for v in rounds(X, old).values())


def test_leaving_member_leaves_the_view_at_once_and_is_not_failed(tmp_path):
    g = Group(6, senders=[1], tmp_path=tmp_path, seed=17)
    X = with_gsgc(g, admission="window", admission_window=0.001)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.5)
    g.E[4].leave(g.net.now)
    stay = [1, 2, 3, 5, 6]
    assert g.net.run_until_true(
        lambda net: all(4 not in {k[0] for k in X[i].layers[0].keys} for i in stay), timeout=3)
    assert g.net.run_until_true(lambda net: g.E[4].status == NOT_MEMBER, timeout=3)
    r0 = rounds(X, stay)
    sent4 = X[4].stats["sent_flat"]
    g.net.run(1.0)
    assert all(v >= r0[i] + 3 for i, v in rounds(X, stay).items())
    assert all(X[i].state()["failed"] == [] for i in stay)
    assert X[4].stats["sent_flat"] == sent4                 # the leaver stopped taking part


# ---------------------------------------------------------------------------
# views

def test_mismatched_views_merge_S_but_not_M_W_L():
    """Unit level: two members whose tables differ (so their rank lists
    differ) ignore each other's M, W and L, but hearing from each other
    still counts; once the tables agree they merge."""
    net = MemNet(seed=1)
    specs = MemNet.member_specs([1, 2, 3])
    a = net.add(Config(node_id=1, incarnation=1, members=specs, gossip_interval=STEP))
    b = net.add(Config(node_id=2, incarnation=1, members=specs, gossip_interval=STEP))
    xa, xb = a.add_extension(GsgcExtension()), b.add_extension(GsgcExtension())

    def deliver(src_ext, dst_ext, source):
        dst_ext.after_rx(net.now)
        for sec in src_ext._sections(src_ext.layers[0], net.now):
            for kind, _, data in wire.sections(sec):
                dst_ext.on_section(source, kind, data, net.now)

    for x in (xa, xb):
        x._step(net.now, piggyback=False)
    la, lb = xa.layers[0], xb.layers[0]
    # each knows only its own incarnation yet (static specs say inc 0)
    assert la.hash != lb.hash
    la.arr.set_L(la.ids[3], 9)
    before = (la.arr.M.tolist(), la.arr.W.tolist(), la.arr.L.tolist())
    deliver(xb, xa, 2)
    after = (la.arr.M.tolist(), la.arr.W.tolist(), la.arr.L.tolist())
    assert after[:2] == before[:2]
    assert after[2][la.ids[3]] == 9                # node 2's L[3] = 0 was not merged ...
    assert after[2][la.ids[2]] == 0                # ... but hearing from node 2 counts (Fig. 3)
    assert xa.stats["view_mismatch"] == 1 and xa.stats.get("merged", 0) == 0
    # the tables converge (as the membership gossip would make them)
    for e, ids in ((a, (2, 3)), (b, (1, 3))):
        for i in ids:
            e.members.upsert(Member(i, 1, MEMBER, 0, i, -1, 5))
    for x in (xa, xb):
        x._step(net.now, piggyback=False)
    la, lb = xa.layers[0], xb.layers[0]
    assert la.hash == lb.hash
    deliver(xb, xa, 2)
    assert xa.stats["merged"] == 1
    assert la.arr.heard(la.ids[2]) and la.arr.heard(la.ids[1]) and not la.arr.heard(la.ids[3])


def test_view_hash_and_k_threshold():
    assert view_hash(0, [(1, 1), (2, 1)]) != view_hash(0, [(1, 1), (2, 2)])
    assert view_hash(0, [(1, 1)]) != view_hash(1, [(1, 1)])
    assert view_hash(0, [(1, 1), (2, 1)]) == view_hash(0, [(1, 1), (2, 1)])
    # K grows with log n, shrinks with b, stays within the one-byte counters
    assert k_threshold(8, 1) < k_threshold(256, 1) < k_threshold(10**6, 1) <= 250
    assert k_threshold(256, 3) < k_threshold(256, 1)
    assert k_threshold(2, 1) >= 6
    assert diffusion_steps(1024, 1) == pytest.approx(10 + math.log(1024))


# ---------------------------------------------------------------------------
# local gossip (§5)

def test_local_gossip_completes_rounds_mostly_inside_zones(tmp_path):
    zones = {i: (i - 1) // 4 for i in range(1, 13)}        # 3 zones of 4
    g = Group(12, senders=[1, 6], loggers=[12], tmp_path=tmp_path, seed=14, loss=0.02)
    X = with_gsgc(g, zones=zones, controllers=1)
    safety = Safety(g, X)
    g.publish_stream(600, per_tick=2)
    assert g.run_until_complete(timeout=20)
    assert g.net.run_until_true(lambda net: everything_stable(g, X, g.ids), timeout=10)
    assert not safety.violations, safety.violations[:5]
    ctrl = sorted(i for i, x in X.items() if x.state()["controller"])
    assert ctrl == [1, 5, 9]                       # G = 1: the lowest id of each zone
    intra = sum(x.stats["sent_intra_zone"] for x in X.values())
    inter = sum(x.stats["sent_inter_zone"] for x in X.values())
    assert intra > 0 and inter > 0 and intra / (intra + inter) >= 0.7, (intra, inter)
    assert all(x.stats["sent_controllers"] == 0 for i, x in X.items() if i not in ctrl)
    # phase 2 completed rounds and multicast the global S
    assert sum(X[i].stats["completed_controllers"] for i in ctrl) > 0
    assert sum(x.stats["multicast_rx"] for x in X.values()) > 0
    for i in g.ids:
        assert g.E[i].counters()["gossip_buffer_entries"] == 0


def test_local_gossip_controller_crash_is_replaced(tmp_path):
    zones = {i: (i - 1) // 4 for i in range(1, 13)}
    g = Group(12, senders=[2], loggers=[12], tmp_path=tmp_path, seed=16)
    X = with_gsgc(g, zones=zones, controllers=1)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.8)
    assert X[5].state()["controller"] and not X[6].state()["controller"]
    g.net.crash(5)
    live = [i for i in g.ids if i != 5]
    assert g.net.run_until_true(lambda net: X[6].state()["controller"], timeout=5)
    assert 5 in X[6].state()["failed"]              # it took over because 5 was declared failed
    assert g.net.run_until_true(lambda net: all(5 in X[i].state()["failed"] for i in (7, 8)), timeout=2)
    safety = Safety(g, X)
    s0 = {i: X[i].state()["S"][(2, 1)] for i in live}
    g.net.run(1.5)
    assert not safety.violations, safety.violations[:5]
    s1 = {i: X[i].state()["S"][(2, 1)] for i in live}
    assert all(s1[i] > s0[i] + 300 for i in live), (s0, s1)      # global stability resumed


def test_controllers_start_phase_two_only_once_their_zone_has_a_local_s(tmp_path):
    """§5: "after the local stability arrays are constructed, the SCs start
    the second phase".  A controller that gossiped among controllers from
    the start would only carry an empty zone S (its rounds conclude S = 0)
    on the links its zone's first round needs."""
    zones = {i: (i - 1) // 4 for i in range(1, 13)}
    g = Group(12, senders=[2], loggers=[12], tmp_path=tmp_path, seed=16)
    X = with_gsgc(g, zones=zones, controllers=1, step=0.05)
    first_local = {}
    first_ctrl_send = {}

    def watch(net):
        for i, x in X.items():
            lay = x.layers.get(LOCAL)
            if i not in first_local and lay is not None and lay.arr.round >= 1:
                first_local[i] = net.now
            if i not in first_ctrl_send and x.stats["sent_controllers"]:
                first_ctrl_send[i] = net.now
        net.at(net.now + NS // 1000, watch)
    g.net.at(g.net.now, watch)
    g.publish_stream(300, per_tick=1, tick=0.002)
    assert g.run_until_complete(timeout=20)
    assert g.net.run_until_true(lambda net: everything_stable(g, X, g.ids), timeout=10)
    ctrl = sorted(i for i, x in X.items() if x.state()["controller"])
    assert ctrl == [1, 5, 9]
    assert set(first_ctrl_send) == set(ctrl)
    for i in ctrl:
        assert first_ctrl_send[i] >= first_local[i], (i, first_ctrl_send[i], first_local[i])
        assert X[i].layers[CTRL].arr.rounds_completed + X[i].layers[CTRL].arr.round > 0


def test_controllers_step_at_their_own_interval(tmp_path):
    """§5's local groups and SC group have step intervals of their own
    (0.7 s and 0.2-0.7 s in the paper): step2 paces the controller layer."""
    zones = {i: (i - 1) // 4 for i in range(1, 9)}
    g = Group(8, senders=[2], loggers=[8], tmp_path=tmp_path, seed=3)
    X = with_gsgc(g, zones=zones, controllers=1, step=0.02, step2=0.1)
    g.publish_stream(200, per_tick=1, tick=0.002)
    assert g.run_until_complete(timeout=20)
    g.net.run(2.0)
    assert everything_stable(g, X, g.ids)
    for i in (1, 5):
        loc, ctl = X[i].layers[LOCAL].steps, X[i].layers[CTRL].steps
        assert ctl > 5 and 3.5 < loc / ctl < 7, (i, loc, ctl)   # 0.1 / 0.02 = 5, the controller layer started later
    with pytest.raises(ValueError, match="step2"):
        GsgcConfig(step2=0.1).validate()                       # needs zones
    with pytest.raises(ValueError, match="step2"):
        GsgcConfig(zones={1: 0}, step2=0.1).validate()         # needs step


def test_without_failure_detection_nobody_is_declared_failed_and_no_live_arrays_are_sent(tmp_path):
    """The paper's simulations detect stability alone (§4); a silent member
    then stops rounds instead of being declared failed."""
    g = Group(5, senders=[1], loggers=[5], tmp_path=tmp_path, seed=5)
    X = with_gsgc(g, failure_detection=False)
    g.publish_stream(100000, per_tick=1, tick=0.002)
    g.net.run(0.5)
    r0 = max(rounds(X).values())
    assert r0 >= 2
    g.net.crash(3)
    g.net.run(3.0)
    for i, x in X.items():
        if i == 3:
            continue
        assert x.state()["failed"] == [] and not x.layers[0].armed
        assert x.state()["round"] <= r0 + 1                   # stuck on the silent member


def test_zones_by_proximity_follow_the_network():
    """Zones of at most `size` members from RTTs: on the paper's tree they
    are subtrees, so local gossip stays off the root, where random zones
    cross it for most pairs."""
    from rpbcast.sim import topology as T
    topo = T.balanced_tree(1000)
    ids = T.choose_members(topo, 300, seed=1)
    rtt = lambda a, b: 2 * topo.latency_ns(a, b) / NS      # noqa: E731
    z = zones_by_proximity(ids, rtt, 50)
    assert z == zones_by_proximity(list(reversed(ids)), rtt, 50)       # deterministic
    assert set(z) == set(ids)
    by = collections.defaultdict(list)
    for v, k in z.items():
        by[k].append(v)
    sizes = sorted(len(m) for m in by.values())
    assert sizes[-1] <= 50 and sum(1 for s in sizes if s <= 25) <= 1 and len(by) <= 12
    assert all(k == min(m) for k, m in by.items())                    # named by their lowest id

    def root_crossings(groups):
        pairs = cross = 0
        for m in groups:
            for a in m:
                for b in m:
                    if a < b:
                        pairs += 1
                        cross += 1 in topo.path(a, b)
        return cross / pairs
    rnd = list(ids)
    random.Random(1).shuffle(rnd)
    assert root_crossings(by.values()) < 0.1
    assert root_crossings([rnd[k:k + 50] for k in range(0, 300, 50)]) > 0.5
    # no two zones fit together; a remainder smaller than min_size joins its
    # closest zone instead of standing alone (with the default, size // 4 = 1, it stays)
    pos = {1: 0.0, 2: 0.001, 3: 0.002, 4: 0.003, 5: 0.2}
    near = lambda a, b: abs(pos[a] - pos[b])                # noqa: E731
    assert zones_by_proximity(pos, near, 4) == {1: 1, 2: 1, 3: 1, 4: 1, 5: 5}
    assert zones_by_proximity(pos, near, 4, min_size=2) == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    assert zones_by_proximity(pos, near, 2) == {1: 1, 2: 1, 3: 3, 4: 3, 5: 5}


def test_zones_by_rtt():
    pos = {1: 0.0, 2: 0.001, 3: 0.0015, 4: 0.05, 5: 0.051, 6: 0.2}
    z = zones_by_rtt(pos, lambda a, b: abs(pos[a] - pos[b]), 0.005)
    assert z == {1: 1, 2: 1, 3: 1, 4: 4, 5: 4, 6: 6}


# ---------------------------------------------------------------------------
# adaptive step (§4.3)

# TPR (s) against step interval (s) for a dense group of 200, shaped like
# Fig. 6(B): steep before the critical point, flat around the minimum
# (28.6 s at 9 s), then linear (steps x interval) after it.
FIG6B_B3 = ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20],
            [190, 95, 45, 32.5, 30.5, 30.2, 29.9, 29.4, 29.0, 28.6, 31.2, 33.8, 36.5, 39.2, 42, 45, 60])
FIG6B_B1 = ([0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20],
            [200, 60, 33, 30, 32.5, 40, 48, 64, 80, 120, 160])


def curve(points):
    xs, ys = points
    return lambda x: float(np.interp(x, xs, ys))


def test_find_window_paper_example_b3():
    f = curve(FIG6B_B3)
    w = find_window(f, a0=0, b0=20, g=2, e=0.10, p=1)
    assert w.iterations1 == 5                       # "part one finishes after 5 iterations"
    assert 8 <= w.s <= 10 and w.f_s <= 1.02 * 28.6
    assert 3 <= w.s1 <= 5 and 9 <= w.s2 <= 11, w
    # everything inside the window is within e of f(s)
    for x in np.arange(w.s1, w.s2 + 1e-9, 0.25):
        assert abs(f(x) - w.f_s) < 0.10 * w.f_s


def test_find_window_b1_is_narrow():
    w1 = find_window(curve(FIG6B_B1), a0=0, b0=20, g=2, e=0.10, p=1)
    w3 = find_window(curve(FIG6B_B3), a0=0, b0=20, g=2, e=0.10, p=1)
    assert 2 <= w1.s1 and w1.s2 <= 4.5 and w1.s2 - w1.s1 <= 2.5, w1
    assert w3.s2 - w3.s1 > 2 * (w1.s2 - w1.s1)


def test_find_window_on_a_grid_and_bounds():
    w = find_window(curve(FIG6B_B3), a0=0, b0=20, g=2, e=0.10, p=1, grid=1)
    assert all(float(x).is_integer() for x in w.evaluations)
    assert 3 <= w.s1 <= w.s <= w.s2 <= 11
    # a flat curve: the upper loop stops at b0 (the figure's has no bound)
    w = find_window(lambda x: 10.0, a0=0, b0=20, g=1, e=0.1, p=1)
    assert 0 < w.s1 <= w.s <= w.s2 <= 20


def test_online_search_matches_offline_and_reruns():
    f = curve(FIG6B_B3)
    off = find_window(f, a0=0.5, b0=20, g=2, e=0.10, p=1)
    on = OnlineSearch(0.5, 20, 2, 0.10, 1, rounds_per_probe=3, warmup=1, period=100.0)
    rng = random.Random(3)
    now = 0
    x = on.start(now)
    probes = 0
    while on.searching:
        probes += 1
        for _ in range(4):          # warmup + 3 rounds, with 1 % noise
            now += int(f(x) * NS)
            y = on.observe(f(x) * (1 + rng.uniform(-0.01, 0.01)), now)
            if y is not None:
                x = y
                break
        assert probes < 100
    w = on.windows[0]
    assert abs(w.s - off.s) < 1e-9 and abs(w.s1 - off.s1) <= 1 and abs(w.s2 - off.s2) <= 1
    assert on.x == w.s
    assert on.tick(now + 50 * NS) is None
    assert on.tick(now + 101 * NS) is not None and on.searching       # periodic re-run


def test_adaptive_step_is_set_by_the_leader_and_adopted_by_all():
    g = Group(6, senders=[1], seed=15, gossip_interval=0.02)
    X = with_gsgc(g, step=0.05, adaptive=dict(a0=0.005, b0=0.1, g=0.03, e=0.2, p=0.01,
                                              rounds_per_probe=2, warmup=1, period=1000.0))
    g.publish_stream(100000, per_tick=1, tick=0.005)
    assert g.net.run_until_true(lambda net: bool(X[1].tuner.windows), timeout=60, check_every=0.2)
    w = X[1].tuner.windows[0]
    assert 0.005 <= w.s1 <= w.s <= w.s2 <= 0.1
    assert len(w.evaluations) >= 4
    g.net.run(1.0)
    steps = {i: X[i].step_ns for i in X}
    assert all(v == int(round(w.s * NS)) // 1000 * 1000 or v == int(round(w.s * NS)) for v in steps.values()), steps
    assert all(X[i].stats.get("step_adopted", 0) > 0 for i in X if i != 1)


def test_config_errors_say_what_to_fix():
    for kw, word in [(dict(b=0), "b "), (dict(admission="later"), "admission"), (dict(K=300), "K must"),
                     (dict(adaptive=dict(a0=0, b0=1, g=0.1, e=0.1, p=0.1)), "step="),
                     (dict(zones=3), "zones"), (dict(quorum=1.0), "quorum")]:
        with pytest.raises(ValueError, match=word):
            GsgcConfig(**kw).validate()
    assert GsgcConfig(step=0.1, adaptive=dict(a0=0, b0=1, g=0.1, e=0.1, p=0.1)).validate()


def test_the_package_face_and_the_control_section():
    """rpbcast.protocol.gsgc is a package by concept; its face keeps every
    name callers import, and GSGC's own section round-trips."""
    import rpbcast.protocol.gsgc as gsgc
    from rpbcast.protocol.gsgc.sections import CTL_GLOBAL_S, SEC_GSGC, control_section, read_control
    for name in gsgc.__all__:
        assert getattr(gsgc, name) is not None, name
    body = wire.stability_body(3, [(1, 1, 7)])
    sec = control_section(0x1234_5678_9ABC_DEF0, 2, CTL_GLOBAL_S, 20_000, (5 << 16) | 9, body)
    ((kind, _, data),) = wire.sections(sec)
    c = read_control(data)
    assert kind == SEC_GSGC and c == (0x1234_5678_9ABC_DEF0, 2, CTL_GLOBAL_S, 20_000, (5 << 16) | 9, body)
    assert read_control(data[:10]) is None
