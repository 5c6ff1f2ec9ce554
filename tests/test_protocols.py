"""The baselines (pbcast, LBRM, SRM) on the same framework as rpbcast, driven
through the Engine's sans-IO interface on the in-memory network."""
import random
import struct

import pytest

from groups import Group
from rpbcast.core import wire
from rpbcast.config import Config, ConfigError
from rpbcast.core.digest import decode as digest_decode
from rpbcast.protocol.engine import Engine
from rpbcast.drivers.memnet import NS, MemNet
from rpbcast.baselines import PROTOCOLS, make_engine
from rpbcast.baselines.pbcast import SEC_HAVE

T = wire.MsgType
BASELINES = ("pbcast", "lbrm", "srm")
DRIVER_API = ("receive_datagram", "receive_datagrams", "handle_timer", "get_timer",
              "datagrams_to_send", "publish", "recv", "counters", "traffic", "events", "node")


class PGroup(Group):
    """tests/groups.Group with engines built by make_engine(protocol)."""

    def __init__(self, n, senders, loggers=(), tmp_path=None, protocol="rpbcast", params=None, **kw):
        self.protocol = protocol
        self.params = params or {}
        super().__init__(n, senders, loggers, tmp_path, **kw)

    def start(self, i, **over):
        net = self.net
        cfg = self.config(i, **over)
        cfg = cfg.replace(addr=cfg.addr or cfg.node_id)
        e = make_engine(self.protocol, cfg, net.now, random.Random(net.rng.getrandbits(64)),
                        **self.params)
        net.engines[cfg.addr] = e
        net.down.discard(cfg.addr)
        net._arm(cfg.addr)
        self.E[i] = e
        return e


def group(protocol, n, senders, tmp_path, **kw):
    loggers = [n] if protocol in ("lbrm", "rpbcast") else []
    kw.setdefault("fsync", "never")      # virtual time: no real fsync every 5 ms
    return PGroup(n, senders, loggers=loggers, tmp_path=tmp_path, protocol=protocol, **kw)


def msgs_of(data):
    return wire.parse(data)[1]


def spy(net, pred):
    """Record (time, src, dst, message) of every message matching pred
    (as the sender emits it, before any loss); drops nothing itself."""
    seen = []
    old = net.drop_filter

    def f(src, dst, data):
        for m in msgs_of(data):
            if pred(src, dst, m):
                seen.append((net.now, src, dst, m))
        return old(src, dst, data) if old is not None else False

    net.drop_filter = f
    return seen


# ---------------------------------------------------------------- factory

def test_factory_builds_every_protocol_with_the_engine_driver_interface(tmp_path):
    for p in PROTOCOLS:
        members = MemNet.member_specs([1, 2], loggers=[2] if p == "lbrm" else [])
        cfg = Config(node_id=1, addr=1, members=members, incarnation=1)
        e = make_engine(p, cfg, NS, random.Random(1))
        assert all(hasattr(e, a) for a in DRIVER_API), p
        assert isinstance(e, Engine)
        assert isinstance(e.get_timer(), int)
    assert type(make_engine("rpbcast", Config(node_id=1), NS)) is Engine
    with pytest.raises(ConfigError, match="protocol must be one of"):
        make_engine("tcp", Config(node_id=1), NS)
    with pytest.raises(ConfigError, match="unknown srm parameters: C3"):
        make_engine("srm", Config(node_id=1), NS, C3=1.0)
    with pytest.raises(ConfigError, match="exactly one logger"):
        make_engine("lbrm", Config(node_id=1), NS)
    with pytest.raises(ConfigError, match="no loggers"):
        make_engine("pbcast", Config(node_id=1, role="logger", log_dir=str(tmp_path)), NS)



def test_each_baseline_composes_its_parts_and_builds_none_of_rpbcasts(tmp_path):
    """A baseline states what it is made of: static membership, its send
    buffer, RTT probes or answers, its own part -- and for LBRM the shared
    logger role, logger ACKs and serving.  Nothing of rpbcast's gossip
    repair, membership protocol or heartbeat lists is built."""
    from rpbcast.baselines.lbrm import Lbrm, ReceiveCache
    from rpbcast.baselines.pbcast import Pbcast
    from rpbcast.baselines.srm import Srm
    from rpbcast.protocol.group import Group as MembershipProtocol, StaticGroup
    from rpbcast.protocol.logger import LoggerRole
    from rpbcast.protocol.pings import PingReplies, Pings
    from rpbcast.protocol.send_buffer import HoldForLoggers, LoggerAcks, NoHold

    def build(p, role="member", **kw):
        members = MemNet.member_specs([1, 2], loggers=[2] if p in ("lbrm", "rpbcast") else [])
        node = 2 if role == "logger" else 1
        cfg = Config(node_id=node, addr=node, members=members, incarnation=1, role=role,
                     log_dir=str(tmp_path / f"{p}{node}") if role == "logger" else None, fsync="never", **kw)
        return make_engine(p, cfg, NS, random.Random(1))

    rp = build("rpbcast")
    assert type(rp.group) is MembershipProtocol and hasattr(rp, "repair") and hasattr(rp, "heartbeats")
    expect = {"pbcast": (Pbcast, NoHold, Pings), "srm": (Srm, NoHold, PingReplies),
              "lbrm": (Lbrm, HoldForLoggers, PingReplies)}
    for p, (part, buffer, pings) in expect.items():
        e = build(p)
        assert type(e.group) is StaticGroup, p
        assert type(e.send_buffer) is buffer and type(e.pings) is pings, p
        assert isinstance(getattr(e, p), part), p
        assert not any(hasattr(e, a) for a in ("repair", "heartbeats")), p
        assert e.extensions == [] and e.logger is None, p
    assert type(build("pbcast", selection="uniform").pings) is PingReplies
    lbrm = build("lbrm")
    assert isinstance(lbrm.logger_acks, LoggerAcks) and isinstance(lbrm.cache, ReceiveCache)
    lg = build("lbrm", role="logger")
    assert isinstance(lg.logger, LoggerRole) and lg.extensions == [lg.logger]
    # what each declares to drivers (the driver contract)
    assert tuple(build("pbcast").driver_needs) == (True, False)
    assert tuple(build("lbrm").driver_needs) == (True, False)
    assert tuple(build("srm").driver_needs) == (False, False)


# ---------------------------------------------------------------- all baselines

@pytest.mark.parametrize("protocol", BASELINES)
def test_lossless_group_delivers_everything_once_without_repairs(tmp_path, protocol):
    g = group(protocol, 6, [1, 2], tmp_path)
    g.publish_stream(200, per_tick=4)
    assert g.run_until_complete(timeout=5)
    g.net.run(1.0)
    g.drain()
    assert not g.duplicates() and not g.extras() and g.payload_ok
    assert g.total("gaps") == 0
    assert g.total("served") == 0
    assert g.total("repairs_peer") + g.total("repairs_logger") == 0
    tr = g.E[3].traffic()
    assert "rtx" not in tr and "repair" not in tr
    if protocol == "pbcast":
        assert tr["gossip"][2] > 0 and "heartbeat" not in tr
    if protocol == "lbrm":
        assert "gossip" not in tr and g.E[1].traffic()["heartbeat"][2] > 0
        assert g.E[1].traffic()["logack"][0] > 0
    if protocol == "srm":
        assert "gossip" not in tr and tr["hblist"][2] > 0


@pytest.mark.parametrize("protocol", BASELINES)
def test_moderate_loss_and_duplication_everything_delivered_exactly_once(tmp_path, protocol, capsys):
    g = group(protocol, 10, [1, 2, 3], tmp_path, loss=0.05, dup=0.02, seed=11)
    g.publish_stream(300, per_tick=3)
    assert g.run_until_complete(timeout=20), "not everything was delivered"
    assert not g.duplicates(), "a message was delivered twice"
    assert not g.extras() and g.payload_ok
    recv = g.receivers()
    peer, logger = g.total("repairs_peer", recv), g.total("repairs_logger", recv)
    assert peer + logger > 0
    c = g.E[4].counters()
    for k in g.E[4].STATS:
        assert k in c
    with capsys.disabled():
        print(f"\n  {protocol:6s} loss 5%: repairs peer {peer:4d} logger {logger:4d}, served "
              f"{g.total('served'):4d}, gaps {g.total('gap_ids', recv)}")
    if protocol == "lbrm":
        assert peer == 0 and logger >= g.total("gap_ids", recv) - g.total("filled_other", recv)
    else:
        assert logger == 0
    if protocol == "pbcast":
        assert g.total("lost_ids") == 0


# ---------------------------------------------------------------- LBRM

def test_lbrm_variable_heartbeat_backs_off_from_quarter_second_to_32s(tmp_path):
    g = group("lbrm", 3, [1], tmp_path)
    hb = spy(g.net, lambda src, dst, m: src == 1 and dst == 2 and m.type == T.HEARTBEAT)
    data = spy(g.net, lambda src, dst, m: src == 1 and dst == 2 and m.type == T.DATA)
    g.publish_stream(5, per_tick=1)
    g.net.run(100.0)
    last_data = data[-1][0]
    times = [last_data] + [t for t, *_ in hb]
    gaps = [round((b - a) / NS, 3) for a, b in zip(times, times[1:])]
    assert gaps == [0.25, 0.5, 1, 2, 4, 8, 16, 32, 32]
    assert all(m.seq == 4 and not m.flags & wire.F_IDLE for *_, m in hb)
    # New data resets the back-off.
    g.publish_stream(1, per_tick=1)
    g.net.run(1.0)
    t_data = data[-1][0]
    new = [t for t, *_ in hb if t > t_data]
    assert [round((t - t_data) / NS, 3) for t in new] == [0.25, 0.75]
    assert g.complete()


def test_lbrm_last_message_lost_everywhere_heartbeat_logger_asks_sender(tmp_path):
    g = group("lbrm", 5, [1], tmp_path)
    last = 9
    g.net.drop_filter = lambda src, dst, data: any(
        m.type == T.DATA and m.seq == last for m in msgs_of(data))
    g.publish_stream(last + 1, per_tick=1)
    assert g.run_until_complete(timeout=3)
    assert g.E[1].counters()["served"] >= 1              # to the logger only
    for i in (2, 3, 4):
        c = g.E[i].counters()
        assert c["hb_in"] > 0 and c["repairs_logger"] == 1 and c["repairs_peer"] == 0


def test_lbrm_logger_that_sends_serves_its_own_messages_after_its_cache_dropped_them(tmp_path):
    # The logger also publishes (thesis §7.2: all 18 members send).  Its
    # last message is lost at node 2, which learns of it from the heartbeat
    # and asks the logger -- but its first requests are lost too, so it asks
    # only after the logger's receive cache (round(1) every 0.25 s) dropped
    # the message.  The logger logs what it publishes and serves it from the
    # log; before the fix node 2 asked every 0.25 s, forever (rpbcast.sim,
    # 18 senders, 1 % loss, seed 1: one message never delivered).
    g = group("lbrm", 5, [5], tmp_path)
    lg = g.E[5]
    last = 9
    mute_until = 2 * NS
    g.net.drop_filter = lambda src, dst, data: any(
        (dst == 2 and m.type == T.DATA and m.seq == last) or (src == 2 and m.type == T.RTX
                                                                and g.net.now < mute_until)
        for m in msgs_of(data))
    repairs = spy(g.net, lambda src, dst, m: m.type == T.REPAIR and dst == 2)
    g.publish_stream(last + 1, per_tick=1)
    assert g.run_until_complete(timeout=4)
    assert [(src, m.sender, m.seq) for _, src, _, m in repairs] == [(5, 5, last)]
    assert repairs[0][0] >= mute_until
    assert repairs[0][3].flags & wire.F_FROM_LOGGER            # from the log, not the cache
    assert all(lg.logger.log.has(5, lg.inc, q) for q in range(last + 1))


def test_lbrm_repairs_all_come_from_the_logger_and_requests_repeat_every_quarter_second(tmp_path):
    g = group("lbrm", 6, [1, 2], tmp_path, loss=0.1, seed=5)
    logger = 6
    cut = {"on": False}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and logger in (src, dst)
    repairs = spy(g.net, lambda src, dst, m: m.type == T.REPAIR and dst != logger)
    rtx = spy(g.net, lambda src, dst, m: src == 3 and m.type == T.RTX)
    data = spy(g.net, lambda src, dst, m: dst == 3 and m.type == T.DATA)
    g.publish_stream(200, per_tick=2)
    g.net.run(0.05)
    cut["on"] = True                 # the logger is unreachable for a while
    g.net.run(1.3)
    cut["on"] = False
    assert g.run_until_complete(timeout=10)
    assert not g.duplicates()
    assert repairs and {src for _, src, _, _ in repairs} == {logger}
    assert all(m.flags & wire.F_FROM_LOGGER for *_, m in repairs)
    assert all(dst == logger for _, _, dst, _ in rtx)     # never a peer
    # Once the data stopped (no new gaps), node 3 asked again every 0.25 s
    # while the logger was cut off, and until repaired.
    times = sorted({t for t, *_ in rtx if t > data[-1][0] + g.net.latency + NS // 1000})
    periodic = [round((b - a) / NS, 4) for a, b in zip(times, times[1:])]
    assert len(periodic) >= 4 and all(x == 0.25 for x in periodic)
    recv = g.receivers()
    assert g.total("repairs_peer", recv) == 0 and g.total("repairs_logger", recv) > 0
    assert all(g.E[i].counters()["served"] == 0 for i in (3, 4, 5))


# ---------------------------------------------------------------- SRM

def _srm_shared_losses(suppress, tmp_path, lost=(20, 40, 60, 80, 100)):
    """21 nodes: sender 1, receivers 2..13 (k = 12) lose the same ids, 14..21
    get them (8 holders besides the sender)."""
    d = 0.005                         # distance estimate; memnet latency is 0.5 ms
    g = group("srm", 21, [1], tmp_path, seed=3,
              params=dict(distance=lambda a, b: d, suppress=suppress))
    losers = set(range(2, 14))
    g.net.drop_filter = lambda src, dst, data: dst in losers and any(
        m.type == T.DATA and m.seq in lost for m in msgs_of(data))
    nacks = spy(g.net, lambda src, dst, m: m.type == T.RTX and dst == 21)
    g.publish_stream(120, per_tick=1, tick=0.01)
    assert g.run_until_complete(timeout=10)
    assert not g.duplicates() and not g.extras()
    n_nacks = len(nacks)
    n_repairs = g.total("served")
    return g, n_nacks, n_repairs, len(losers), len(lost)


def test_srm_suppression_few_nacks_and_repairs_for_a_shared_loss(tmp_path, capsys):
    g, nacks, repairs, k, n = _srm_shared_losses(True, tmp_path / "a")
    assert nacks <= 3 * n and repairs <= 3 * n            # far fewer than k = 12 each
    assert g.total("nacks_suppressed") > 0 and g.total("repairs_suppressed") > 0
    g2, nacks2, repairs2, _, _ = _srm_shared_losses(False, tmp_path / "b")
    with capsys.disabled():
        print(f"\n  SRM, {n} losses shared by k = {k}: {nacks} NACKs and {repairs} repairs with "
              f"suppression, {nacks2} and {repairs2} without")
    assert nacks * 3 < nacks2 and repairs * 3 < repairs2  # the control: many more


def test_srm_request_and_repair_timers_follow_c1_c2_d1_d2(tmp_path):
    d = 0.05
    g = group("srm", 3, [1], tmp_path, params=dict(distance=lambda a, b: d))
    g.net.drop_filter = lambda src, dst, data: dst == 3 and any(
        m.type == T.DATA and m.seq == 5 for m in msgs_of(data))
    data6 = spy(g.net, lambda src, dst, m: m.type == T.DATA and m.seq == 6 and dst == 3)
    nack = spy(g.net, lambda src, dst, m: m.type == T.RTX and src == 3 and dst == 1)
    rep = spy(g.net, lambda src, dst, m: m.type == T.REPAIR and dst == 3)
    g.publish_stream(10, per_tick=1, tick=0.002)
    assert g.run_until_complete(timeout=3)
    t_gap = data6[0][0] + g.net.latency            # arrives after latency + jitter <= 0.2 ms
    t_nack = nack[0][0]
    assert 2 * d - 0.001 <= (t_nack - t_gap) / NS <= 4 * d + 0.001          # [C1 d, (C1+C2) d]
    assert len(nack) == 1 and len(rep) == 1
    assert d - 0.001 <= (rep[0][0] - t_nack) / NS <= 2 * d + 0.001          # [D1 d, (D1+D2) d]


def test_srm_session_messages_reveal_a_lost_last_message(tmp_path):
    g = group("srm", 4, [1], tmp_path, params=dict(session_interval=0.2))
    last = 9
    g.net.drop_filter = lambda src, dst, data: dst in (2, 3) and any(
        m.type == T.DATA and m.seq == last for m in msgs_of(data))
    g.publish_stream(last + 1, per_tick=1)
    assert g.run_until_complete(timeout=3)
    for i in (2, 3):
        c = g.E[i].counters()
        assert c["hb_in"] == 0 and c["repairs_peer"] == 1
        assert g.E[i].traffic()["hblist"][0] > 0
    assert not g.duplicates()


# ---------------------------------------------------------------- pbcast

def test_pbcast_positive_digest_advertises_exactly_what_the_buffer_holds(tmp_path):
    g = group("pbcast", 6, [1, 2], tmp_path, loss=0.15, seed=3, gc_limit=3)
    g.publish_stream(400, per_tick=2, tick=0.002)
    checks = 0
    for _ in range(40):
        g.net.run(0.013)
        g.drain()
        for i in g.ids:
            e = g.E[i]
            for s, inc, have, frm, upto in e.pbcast.held():
                held = {q for q in range(upto + 1) if e.node.holds(s, inc, q)}
                assert held == {q for lo, hi in have for q in range(lo, hi + 1)}
                checks += 1
    assert checks > 100
    # ... and on the wire: GOSSIP sections of kind HAVE, digests per stream.
    gossip = spy(g.net, lambda src, dst, m: m.type == T.GOSSIP)
    g.net.run(0.2)
    secs = [sec for *_, m in gossip for sec in wire.read_gossip(m.body)[3]]
    assert secs and all(kind == SEC_HAVE for kind, _, _ in secs)
    for kind, _, data in secs:
        s, i = struct.unpack_from("<II", data)
        iv, frm, upto, _ = digest_decode(data[8:])
        assert s in (1, 2) and frm <= upto


def test_pbcast_solicits_from_the_gossiper_only(tmp_path):
    g = group("pbcast", 5, [1], tmp_path)
    g.net.drop_filter = lambda src, dst, data: dst == 3 and any(
        m.type == T.DATA and m.seq in (4, 5, 6) for m in msgs_of(data))
    to3 = spy(g.net, lambda src, dst, m: dst == 3 and m.type == T.GOSSIP)
    sol = spy(g.net, lambda src, dst, m: src == 3 and m.type == T.RTX)
    g.publish_stream(20, per_tick=1)
    assert g.run_until_complete(timeout=3)
    assert sol and g.E[3].counters()["repairs_peer"] == 3
    for t, _, dst, _ in sol:       # each solicitation answers a gossip just received from dst
        assert any(src == dst and 0 <= t - tg <= 0.002 * NS for tg, src, _, _ in to3)


def test_pbcast_loses_messages_a_logger_would_have_saved(tmp_path, capsys):
    """Thesis Fig. 7-5: with a GC limit short for the loss rate, pbcast does
    not deliver some messages; rpbcast with a logger delivers them all."""
    kw = dict(loss=0.25, seed=2, gc_limit=2, gossip_interval=0.05)
    p = group("pbcast", 8, [1, 2], tmp_path, **kw)
    p.publish_stream(300, per_tick=3)
    p.run_until_complete(timeout=3)
    p.drain()
    lost = {}
    for i in p.receivers():
        lost[i] = {(ev[1], ev[2], q) for ev in p.E[i].events if ev[0] == "lost"
                   for q in range(ev[3], ev[4] + 1)}
        got = set(p.got[i])
        assert not lost[i] & got
        assert got | lost[i] == p.expected(i)      # every id delivered or reported lost
    n_lost = sum(len(v) for v in lost.values())
    assert n_lost > 0 and not p.duplicates()
    r = group("rpbcast", 9, [1, 2], tmp_path, **kw)
    r.publish_stream(300, per_tick=3)
    assert r.run_until_complete(timeout=20)
    assert not r.duplicates() and not r.extras()
    with capsys.disabled():
        print(f"\n  loss 25%, gc_limit 2: pbcast never delivered {n_lost} (receiver, message) pairs; "
              f"rpbcast delivered all ({r.total('repairs_logger')} from the logger)")
