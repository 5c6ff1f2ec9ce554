"""Replay protection for keyed control datagrams (docs/security.md,
"Replay"; csrc/replay.h): a control datagram captured and resent verbatim
-- its MAC is valid -- is dropped before the control plane sees it and
counted under the reason "replay"; a fresh datagram that arrives out of
order is accepted; a member that restarted (a new nonce counter0) is
heard.  Engines exchange the sealed datagrams their C data plane built."""
import os
import random
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.core import digest, wire
from rpbcast.core.node import DEST_MCAST
from rpbcast.protocol.engine import Engine
from ports import free_port

T = wire.MsgType
KEY = bytes(range(16))
FUZZ_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz")


def key_file(tmp_path):
    p = tmp_path / "group.keys"
    if not p.exists():
        p.write_text(f"1 {KEY.hex()}\n")
    return str(p)


def engine(tmp_path, i, counter0, inc=1, **kw):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    return Engine(Config(node_id=i, members=specs, incarnation=inc, key_file=key_file(tmp_path), **kw),
                  0, mac_counter0=counter0)


def reason_name(r):
    return wire.reason_names()[r]


def ctl_queued(e):
    return e.node.counters()["ctl_queued"]


def control_datagram(a, type_):
    """One sealed datagram from engine a holding one genuine-looking control
    message of type_ (to the group, or to member 2 for a request)."""
    inc = a.inc
    missing = wire.missing_section(a.id, inc, digest.encode([(0, 5)], 0, 5)[0])
    me = wire.member_entry(wire.Member(a.id, inc, 1, 0, 0, 1, 0, 7, 0))
    dest = {T.GOSSIP: 2, T.RTX: 2}.get(type_, DEST_MCAST)
    body, seq = {
        T.JOIN: (me, 7),
        T.LEAVE: (b"", 8),
        T.GAPNOTE: (missing, 0),
        T.GCNOTE: (missing, 0),
        T.GOSSIP: (wire.gossip_body(0, 0, 1000), 0),
        T.RTX: (missing, 0),
        T.LOGACK: (b"", 3),
    }[type_]
    a.datagrams_to_send()
    a.emit(dest, type_, body, seq=seq)
    out = [d for _, d in a.datagrams_to_send()]
    assert len(out) == 1
    return out[0]


@pytest.mark.parametrize("type_", [T.JOIN, T.LEAVE, T.GAPNOTE, T.GOSSIP, T.RTX, T.GCNOTE, T.LOGACK],
                         ids=lambda t: t.name)
def test_a_captured_control_datagram_replayed_verbatim_is_dropped_and_counted(tmp_path, type_):
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    d = control_datagram(a, type_)
    q0 = ctl_queued(b)
    assert b.receive_datagram(d, 1, 2000) == 0
    assert ctl_queued(b) == q0 + 1                # the original reached the control plane
    for k in range(3):
        assert reason_name(b.receive_datagram(d, 1, 3000 + k)) == "replay"
    assert ctl_queued(b) == q0 + 1                # no copy did
    assert b.node.rx_reasons() == {"replay": 3}
    assert b.node.auth_stats()["replay_refused"] == 3


def test_a_replayed_request_is_not_answered_again(tmp_path):
    """A genuine RTX from member 2 gets its REPAIRs once; the same datagram
    resent (from anywhere) gets nothing."""
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    for k in range(5):
        a.publish(b"m%d" % k, now=1000)
    a.handle_timer(1001)
    for _, d in a.datagrams_to_send():
        b.receive_datagram(d, 1, 1100)
    assert len(b.recv(now=1200)) == 5
    b.datagrams_to_send()
    b.emit(1, T.RTX, wire.missing_section(1, a.inc, digest.encode([(0, 5)], 0, 5)[0]))
    (rtx,) = [d for _, d in b.datagrams_to_send()]

    def repairs_after(d, now):
        a.datagrams_to_send()
        a.receive_datagram(d, 2, now)
        a.handle_timer(now + 1)
        return sum(1 for _, x in a.datagrams_to_send()
                   for m in wire.parse(x)[1] if m[0] == T.REPAIR)

    assert repairs_after(rtx, 2000) == 5
    assert repairs_after(rtx, 3000) == 0
    assert a.node.rx_reasons() == {"replay": 1}


def test_reordered_fresh_control_datagrams_are_accepted(tmp_path):
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    ds = [control_datagram(a, T.GOSSIP) for _ in range(40)]
    order = list(range(40))
    random.Random(5).shuffle(order)
    for i in order:
        assert b.receive_datagram(ds[i], 1, 2000) == 0, i
    assert b.node.rx_reasons() == {}
    for d in ds:
        assert reason_name(b.receive_datagram(d, 1, 3000)) == "replay"


def test_a_control_datagram_overtaken_by_thousands_of_data_datagrams_is_accepted(tmp_path):
    """DATA datagrams advance the sender's counter but not the window: a
    GOSSIP sealed before 3,000 DATA datagrams and received after the next
    control datagram is still fresh (a 1,024-wide bitmap over the counter
    would call it a replay)."""
    a, b = engine(tmp_path, 1, 10_000, mtu=576), engine(tmp_path, 2, 20_000, mtu=576)
    first = control_datagram(a, T.GOSSIP)
    data = []
    for k in range(3000):
        a.publish(b"x" * 500, now=1000)
        data += [d for _, d in a.datagrams_to_send()]
    assert len(data) >= 3000
    later = control_datagram(a, T.GOSSIP)
    assert b.receive_datagram(later, 1, 2000) == 0
    for d in data[:50]:
        b.receive_datagram(d, 1, 2000)
    assert b.receive_datagram(first, 1, 2001) == 0
    assert b.node.rx_reasons() == {}


def test_a_datagram_overtaken_by_the_whole_window_is_refused(tmp_path):
    """The bound, stated: more than RECENT (64) newer control datagrams of
    a source accepted before it, and a datagram counts as a replay."""
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    ds = [control_datagram(a, T.GOSSIP) for _ in range(66)]
    for d in ds[2:]:
        assert b.receive_datagram(d, 1, 2000) == 0
    assert b.receive_datagram(ds[1], 1, 2000) == 0          # 64 newer: still inside
    assert reason_name(b.receive_datagram(ds[0], 1, 2000)) == "replay"


def test_a_restarted_member_with_a_new_counter0_is_heard(tmp_path):
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    for _ in range(100):
        assert b.receive_datagram(control_datagram(a, T.GOSSIP), 1, 2000) == 0
    old_leave = control_datagram(a, T.LEAVE)
    # the restart: a new incarnation a second later; its counters are the
    # wall clock at seal time (csrc/auth.h), beyond every one of the last run
    a2 = engine(tmp_path, 1, 10_000 + 10**9, inc=2)
    a2.node.set_wall_clock_offset(10**9)
    join = control_datagram(a2, T.JOIN)
    q0 = ctl_queued(b)
    assert b.receive_datagram(join, 1, 3000) == 0
    assert b.receive_datagram(control_datagram(a2, T.GOSSIP), 1, 3001) == 0
    assert ctl_queued(b) == q0 + 2
    # the old run's datagrams stay refused once seen ...
    assert b.receive_datagram(old_leave, 1, 3002) == 0     # never delivered before: fresh
    assert reason_name(b.receive_datagram(old_leave, 1, 3003)) == "replay"
    assert reason_name(b.receive_datagram(join, 1, 3004)) == "replay"


def test_data_datagrams_are_not_windowed(tmp_path):
    """DATA replays are the sequence trackers' business (rx_dup), not a
    replay drop: the hot path pays no window lookup."""
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    for k in range(5):
        a.publish(b"m%d" % k, now=1000)
    out = [d for _, d in a.datagrams_to_send()]
    for d in out + out:
        assert b.receive_datagram(d, 1, 2000) == 0
    assert len(b.recv(now=3000)) == 5
    assert b.node.rx_reasons() == {}
    assert b.node.auth_stats()["replay_sources"] == 0


def test_the_replay_table_is_bounded(tmp_path):
    """Sources beyond the table's bound evict the least recently used
    entry (counted); memory does not grow."""
    b = engine(tmp_path, 2, 20_000)
    cap = b.node.auth_stats()["replay_sources_max"]
    for src in range(3, 3 + cap + 50):
        e = engine(tmp_path, src, 10_000)
        e.datagrams_to_send()
        e.emit(2, T.GOSSIP, wire.gossip_body(0, 0, 1000))
        (d,) = [x for _, x in e.datagrams_to_send()]
        b.receive_datagram(d, 10 + src, 2000)
    s = b.node.auth_stats()
    assert s["replay_sources"] == cap
    assert s["replay_evicted"] == 50


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 99), min_size=1, max_size=300))
def test_replay_window_against_a_reference(tmp_path_factory, deliveries):
    """Any sequence of deliveries of 100 sealed control datagrams of one
    source (repeats, any order) against the rule the window implements,
    stated on the set of accepted counters: a datagram is refused iff it
    was accepted before, or more than 64 newer ones were (csrc/replay.h)."""
    tmp = tmp_path_factory.mktemp("rw")
    a, b = engine(tmp, 1, 10_000), engine(tmp, 2, 20_000)
    ds = [control_datagram(a, T.GOSSIP) for _ in range(100)]      # counters increase with the index
    accepted = set()
    for i in deliveries:
        want = "replay" if i in accepted or sum(1 for j in accepted if j > i) > 64 else "ok"
        assert reason_name(b.receive_datagram(ds[i], 1, 2000)) == want, (i, sorted(accepted))
        if want == "ok":
            accepted.add(i)


@settings(max_examples=30, deadline=None)
@given(st.permutations(range(64)))
def test_any_order_of_64_fresh_control_datagrams_is_accepted(tmp_path_factory, order):
    tmp = tmp_path_factory.mktemp("rw")
    a, b = engine(tmp, 1, 10_000), engine(tmp, 2, 20_000)
    ds = [control_datagram(a, T.GOSSIP) for _ in range(64)]
    for i in order:
        assert b.receive_datagram(ds[i], 1, 2000) == 0


# ---------------------------------------------------------------- on the wire


def capture_control(sender, port, control, count=20):
    """What `sender` (member 1) sends to `port` that holds a control message,
    captured on lo by a packet socket while it publishes `count` messages
    (its gossip, heartbeat lists, ... go out meanwhile): up to `count`
    distinct datagrams, as they were on the wire."""
    import socket
    import struct
    import time

    cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    try:
        cap.bind(("lo", 0x0800))
        cap.settimeout(0.2)
        for k in range(count):
            sender.publish(b"p%d" % k)
        captured = []
        end = time.time() + 3
        while time.time() < end and len(captured) < count:
            try:
                pkt, addr = cap.recvfrom(65536)
            except (TimeoutError, socket.timeout):
                continue
            if addr[2] == socket.PACKET_OUTGOING or len(pkt) < 28 or pkt[9] != 17:
                continue
            ihl = (pkt[0] & 15) * 4
            dport = struct.unpack_from("!H", pkt, ihl + 2)[0]
            d = pkt[ihl + 8:]
            if dport != port or len(d) < 24 or struct.unpack_from("<I", d, 8)[0] != 1:
                continue
            if any(m[0] in control for m in wire.parse(d)[1]) and d not in captured:
                captured.append(d)
        return captured
    finally:
        cap.close()



def resend(captured, node, port):
    """Send the captured datagrams verbatim to `port` (node's); its stats
    before and half a second after."""
    import socket

    st0 = node.stats()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for d in captured:
        s.sendto(d, ("127.0.0.1", port))
    s.close()
    time.sleep(0.5)
    return st0, node.stats()


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_control_datagrams_captured_on_the_wire_and_resent_are_refused(tmp_path):
    """Two keyed members on real sockets in a namespace; a packet socket on
    lo captures what member 1 sends to member 2 (its gossip, heartbeat
    lists, ...), and every captured control datagram is resent verbatim to
    member 2's port: each is refused as a replay and counted, while the
    members keep talking (fresh control datagrams still accepted)."""
    import time

    from rpbcast.api import Node
    from rpbcast.tools import netns

    control = {t for t in T if t not in (T.PAD, T.DATA, T.REPAIR, T.HEARTBEAT)}
    with netns.namespace() as ns, netns.entered(ns):
        ports = {1: free_port(), 2: free_port()}
        gport = free_port()
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in ports]
        nodes = {}
        try:
            for i in ports:
                nodes[i] = Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs,
                                       gossip_interval=0.02, group_addr=f"239.255.91.3:{gport}",
                                       key_file=key_file(tmp_path)))
            # capture only once both are up: a datagram sent before member 2
            # bound its port never reached it, and its "replay" would be the
            # first copy member 2 sees (accepted, docs/security.md)
            time.sleep(0.3)
            captured = capture_control(nodes[1], ports[2], control)
            assert len(captured) >= 5
            time.sleep(0.2)                       # the originals have been received
            st0, st = resend(captured, nodes[2], ports[2])
            refused = st.get("rx_reasons", {}).get("replay", 0) - st0.get("rx_reasons", {}).get("replay", 0)
            assert refused == len(captured), [sorted({m[0] for m in wire.parse(d)[1]}) for d in captured]
            assert st["replay_fresh"] > st0["replay_fresh"]     # genuine gossip still accepted
            assert st.get("rx_reasons", {}).get("auth", 0) == 0
        finally:
            for n in nodes.values():
                n.close()


# ------------------------------------------- replays the window cannot know
#
# Counters are timestamps (csrc/auth.h): a source's replay entry, when it is
# created -- the first datagram of that source since the receiver started,
# or since the table evicted the source -- takes only counters sealed after
# the receiver's wall clock less replay_clock_skew; older ones are refused
# as "stale" (csrc/replay.h).  Clocks are moved with set_wall_clock_offset:
# a receiver "started later" is one whose clock is ahead.

SECOND = 10**9
AUTHORITY = [T.JOIN, T.LEAVE, T.GAPNOTE, T.GCNOTE, T.LOGACK, T.RTX, T.GOSSIP]


def later(e, seconds):
    """e's wall clock as if `seconds` had passed (or its host's clock were off)."""
    e.node.set_wall_clock_offset(int(seconds * SECOND))
    return e


@pytest.mark.parametrize("type_", AUTHORITY, ids=lambda t: t.name)
def test_a_control_datagram_captured_before_the_receiver_started_is_stale(tmp_path, type_):
    """Captured from member 1, resent to a member 2 that started 10 s
    later (a restart, or a new member): dropped as "stale", counted, never
    reaches the control plane -- the window of a fresh node is empty, so
    before counters were timestamps it was taken once."""
    a = engine(tmp_path, 1, 10_000)
    d = control_datagram(a, type_)
    b = later(engine(tmp_path, 2, 20_000), 10)
    q0 = ctl_queued(b)
    for k in range(2):
        assert reason_name(b.receive_datagram(d, 1, 2000 + k)) == "stale"
    assert ctl_queued(b) == q0
    assert b.node.rx_reasons() == {"stale": 2}
    assert b.counters()["replay_stale"] == 2              # Node.stats() shows the engine's counters
    # member 1 itself is heard: what it seals now is after b's start
    later(a, 10)
    assert b.receive_datagram(control_datagram(a, T.GOSSIP), 1, 3000) == 0
    assert ctl_queued(b) == q0 + 1


def test_a_replayed_rtx_to_a_restarted_member_gets_no_repairs(tmp_path):
    """The RTX a receiver sent before member 1 restarted, resent to the new
    run of member 1 (same id, new incarnation, 10 s later): no REPAIR."""
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    b.datagrams_to_send()
    b.emit(1, T.RTX, wire.missing_section(1, a.inc, digest.encode([(0, 5)], 0, 5)[0]))
    (rtx,) = [d for _, d in b.datagrams_to_send()]
    a2 = later(engine(tmp_path, 1, 10_000, inc=2), 10)
    for k in range(5):
        a2.publish(b"m%d" % k, now=1000)
    a2.datagrams_to_send()
    assert reason_name(a2.receive_datagram(rtx, 2, 2000)) == "stale"
    a2.handle_timer(2001)
    assert not [m for _, x in a2.datagrams_to_send() for m in wire.parse(x)[1] if m[0] == T.REPAIR]


def test_a_control_datagram_replayed_after_its_sources_entry_was_evicted_is_stale(tmp_path):
    """Member 2 takes member 1's LEAVE (a genuine one), then hears from
    as many other sources as its replay table holds, so member 1's entry is
    evicted; 10 s on, the captured LEAVE is resent: stale (before, a new
    entry knew nothing and took it again).  Member 1's own new datagrams
    are still heard at once."""
    sys.path.insert(0, FUZZ_DIR)
    from fuzz_engine import Sealer
    a, b = engine(tmp_path, 1, 10_000), engine(tmp_path, 2, 20_000)
    leave = control_datagram(a, T.LEAVE)
    assert b.receive_datagram(leave, 1, 2000) == 0
    cap = b.node.auth_stats()["replay_sources_max"]
    sealer = Sealer(1, KEY, time.time_ns())
    for src in range(3, 3 + cap):
        d = bytearray(wire.datagram([(T.GOSSIP, 0, src, 1, 0, 0, wire.gossip_body(0, 0, 1000))],
                                    group=1, source=src, source_inc=1))
        d[3] |= wire.DGF_MAC
        assert b.receive_datagram(sealer.seal(bytes(d)), 10 + src, 2001) == 0
    assert b.node.auth_stats()["replay_evicted"] >= 1
    later(b, 10)
    q0 = ctl_queued(b)
    assert reason_name(b.receive_datagram(leave, 1, 3000)) == "stale"
    assert ctl_queued(b) == q0
    later(a, 10)
    assert b.receive_datagram(control_datagram(a, T.GOSSIP), 1, 3001) == 0


def test_a_member_that_started_long_before_the_receiver_is_heard_at_once(tmp_path):
    """Member 1 has run for an hour (counter0 an hour ago, thousands of
    datagrams sealed): a receiver that starts now hears its first control
    datagram -- the counter says when the datagram was sealed, not when its
    sender started.  (A floor judged by counter0 + datagrams would refuse it.)"""
    a = engine(tmp_path, 1, time.time_ns() - 3600 * SECOND)
    for k in range(2000):
        a.publish(b"x" * 16, now=1000)
    a.datagrams_to_send()
    b = engine(tmp_path, 2, 20_000)
    for type_ in (T.GOSSIP, T.GAPNOTE, T.LOGACK):
        assert b.receive_datagram(control_datagram(a, type_), 1, 2000) == 0
    assert b.node.rx_reasons() == {}


@pytest.mark.parametrize("behind", [0.5, 3, 4.5])
def test_a_member_whose_clock_is_behind_by_less_than_the_skew_is_heard(tmp_path, behind):
    a = later(engine(tmp_path, 1, 10_000), -behind)
    b = engine(tmp_path, 2, 20_000)                      # replay_clock_skew: 5 s by default
    assert b.receive_datagram(control_datagram(a, T.JOIN), 1, 2000) == 0
    assert b.receive_datagram(control_datagram(a, T.GOSSIP), 1, 2001) == 0
    assert b.node.rx_reasons() == {}


def test_a_member_whose_clock_is_behind_by_more_is_heard_once_its_clock_passes_the_floor(tmp_path):
    """8 s behind with a 5 s skew: refused ("stale", visible in the
    counters) by a receiver that just started; the floor was fixed when the
    entry was created, so 4 s later -- the member's clock now only 4 s
    behind that floor's moment -- it is heard."""
    a = later(engine(tmp_path, 1, 10_000), -8)
    b = engine(tmp_path, 2, 20_000)
    assert reason_name(b.receive_datagram(control_datagram(a, T.GOSSIP), 1, 2000)) == "stale"
    later(a, -8 + 4), later(b, 4)                         # 4 s pass on both hosts
    assert b.receive_datagram(control_datagram(a, T.GOSSIP), 1, 3000) == 0
    assert b.counters()["replay_stale"] == 1


def test_a_replay_captured_within_the_skew_before_the_receiver_started_is_taken_once(tmp_path):
    """The window left, stated: a datagram sealed less than the skew before
    the receiver started (and never seen by it) is taken once, then refused
    as a replay (docs/security.md, "Replay")."""
    a = engine(tmp_path, 1, 10_000)
    d = control_datagram(a, T.GOSSIP)
    b = later(engine(tmp_path, 2, 20_000), 3)
    assert b.receive_datagram(d, 1, 2000) == 0
    assert reason_name(b.receive_datagram(d, 1, 2001)) == "replay"


@pytest.mark.parametrize("off", [0, None])
def test_replay_clock_skew_0_or_none_turns_the_clock_floor_off(tmp_path, off):
    a = engine(tmp_path, 1, 10_000)
    d = control_datagram(a, T.LEAVE)
    b = later(engine(tmp_path, 2, 20_000, replay_clock_skew=off), 3600)
    assert b.node.auth_stats()["replay_clock_skew_ns"] == 0
    assert b.receive_datagram(d, 1, 2000) == 0


def test_replay_clock_skew_sets_the_floor(tmp_path):
    a = engine(tmp_path, 1, 10_000)
    d = control_datagram(a, T.LEAVE)
    b = later(engine(tmp_path, 2, 20_000, replay_clock_skew=0.5), 1)
    assert b.node.auth_stats()["replay_clock_skew_ns"] == SECOND // 2
    assert reason_name(b.receive_datagram(d, 1, 2000)) == "stale"


@pytest.mark.parametrize("bad", [-1, "5", True, float("nan"), float("inf"), 3601])
def test_a_bad_replay_clock_skew_is_a_config_error_naming_it(tmp_path, bad):
    with pytest.raises(ConfigError, match="replay_clock_skew"):
        Config(node_id=1, key_file=key_file(tmp_path), replay_clock_skew=bad)


def test_counters_are_timestamps_strictly_increasing(tmp_path):
    """Each sealed datagram's counter is the sealer's wall clock (within the
    coarse clock's few ms) and strictly above the last; its low 10 bits are
    the run's salt."""
    a = engine(tmp_path, 1, 10_000)

    def counter(d):
        return int.from_bytes(d[-24:-16], "little")

    t0 = time.time_ns()
    cs = [counter(control_datagram(a, T.GOSSIP)) for _ in range(200)]
    t1 = time.time_ns()
    assert all(x < y for x, y in zip(cs, cs[1:]))
    assert t0 - 50 * 10**6 <= cs[0] and cs[-1] <= t1 + 50 * 10**6
    assert len({c & 1023 for c in cs}) == 1
    later(a, -3600)                                       # the clock stepped back: still increasing
    assert counter(control_datagram(a, T.GOSSIP)) > cs[-1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("tick"), st.integers(1, 4)),
                          st.tuples(st.just("seal"), st.just(0)),
                          st.tuples(st.just("deliver"), st.integers(0, 39)),
                          st.tuples(st.just("restart"), st.just(0))),
                min_size=1, max_size=60))
def test_the_clock_floor_against_a_reference(tmp_path_factory, ops):
    """Seal control datagrams at member 1, let whole seconds pass, deliver
    any of them (repeats, any order) to member 2, restart member 2 (a new
    node, empty table) -- against the rule, stated on seal times: a
    datagram is "stale" iff it was sealed before the receiver's clock less
    the skew (5.5 s) at the moment its run first heard member 1; else a
    "replay" iff that run accepted it before (or more than 64 newer ones);
    else taken."""
    tmp = tmp_path_factory.mktemp("cf")
    skew = 5.5
    a = engine(tmp, 1, 10_000)
    b = engine(tmp, 2, 20_000, replay_clock_skew=skew)
    now = 0                                               # virtual seconds on both clocks
    sealed = []                                           # (datagram, seal time)
    floor, accepted = None, set()                         # the receiver run's model
    for op, arg in ops:
        if op == "tick":
            now += arg
            later(a, now), later(b, now)
        elif op == "seal":
            sealed.append((control_datagram(a, T.GOSSIP), now))
        elif op == "restart":
            b = later(engine(tmp, 2, 20_000, replay_clock_skew=skew), now)
            floor, accepted = None, set()
        elif arg < len(sealed):
            d, t = sealed[arg]
            if floor is None:
                floor = now - skew
            if t < floor:
                want = "stale"
            elif arg in accepted or sum(1 for j in accepted if j > arg) > 64:
                want = "replay"
            else:
                want = "ok"
                accepted.add(arg)
            assert reason_name(b.receive_datagram(d, 1, 2000)) == want, (arg, t, now, floor)


# ---------------------------------------------------------------- on the wire

@pytest.mark.netns
@pytest.mark.timeout(120)
def test_control_datagrams_captured_before_a_member_restarted_are_stale_at_its_new_run(tmp_path):
    """Two keyed members on real sockets in a namespace; member 1's control
    datagrams to member 2 are captured; member 2 stops, and starts again
    (a new incarnation, the same port) more than replay_clock_skew later
    (the default, 5 s).  Every captured datagram resent to it is dropped as
    "stale" and counted in Node.stats(), and member 1's fresh gossip is
    taken (before, the new run's empty window took every one once)."""
    from rpbcast.api import Node
    from rpbcast.tools import netns

    control = {t for t in T if t not in (T.PAD, T.DATA, T.REPAIR, T.HEARTBEAT)}
    with netns.namespace() as ns, netns.entered(ns):
        ports = {1: free_port(), 2: free_port()}
        gport = free_port()
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in ports]

        def start(i, inc):
            return Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, incarnation=inc,
                               gossip_interval=0.02, group_addr=f"239.255.91.4:{gport}",
                               key_file=key_file(tmp_path)))

        nodes = {}
        try:
            nodes = {1: start(1, 1), 2: start(2, 1)}
            time.sleep(0.3)
            captured = capture_control(nodes[1], ports[2], control)
            assert len(captured) >= 5
            nodes.pop(2).close()
            time.sleep(5.5)                               # more than the default skew
            nodes[2] = start(2, 2)
            time.sleep(0.3)                               # it hears member 1's fresh gossip
            st0, st = resend(captured, nodes[2], ports[2])
            stale = st.get("rx_reasons", {}).get("stale", 0) - st0.get("rx_reasons", {}).get("stale", 0)
            assert stale == len(captured)
            assert st["replay_stale"] - st0["replay_stale"] == len(captured)
            assert st["replay_fresh"] > 0                 # member 1's genuine gossip is heard
            assert st.get("rx_reasons", {}).get("replay", 0) == 0
        finally:
            for n in nodes.values():
                n.close()
