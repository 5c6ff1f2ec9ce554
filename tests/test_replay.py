"""Replay protection for keyed control datagrams (docs/security.md,
"Replay"; csrc/replay.h): a control datagram captured and resent verbatim
-- its MAC is valid -- is dropped before the control plane sees it and
counted under the reason "replay"; a fresh datagram that arrives out of
order is accepted; a member that restarted (a new nonce counter0) is
heard.  Engines exchange the sealed datagrams their C data plane built."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from rpbcast import Config, MemberSpec
from rpbcast.core import digest, wire
from rpbcast.core.node import DEST_MCAST
from rpbcast.protocol.engine import Engine
from ports import free_port

T = wire.MsgType
KEY = bytes(range(16))


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
    # the restart: a new incarnation, its counter starting at the (later) wall clock
    a2 = engine(tmp_path, 1, 10_000 + 10**9, inc=2)
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

@pytest.mark.netns
@pytest.mark.timeout(120)
def test_control_datagrams_captured_on_the_wire_and_resent_are_refused(tmp_path):
    """Two keyed members on real sockets in a namespace; a packet socket on
    lo captures what member 1 sends to member 2 (its gossip, heartbeat
    lists, ...), and every captured control datagram is resent verbatim to
    member 2's port: each is refused as a replay and counted, while the
    members keep talking (fresh control datagrams still accepted)."""
    import socket
    import struct
    import time

    from rpbcast.api import Node
    from rpbcast.tools import netns


    control = {t for t in T if t not in (T.PAD, T.DATA, T.REPAIR, T.HEARTBEAT)}
    with netns.namespace() as ns, netns.entered(ns):
        ports = {1: free_port(), 2: free_port()}
        gport = free_port()
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in ports]
        nodes, cap = {}, None
        try:
            for i in ports:
                nodes[i] = Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs,
                                       gossip_interval=0.02, group_addr=f"239.255.91.3:{gport}",
                                       key_file=key_file(tmp_path)))
            # capture only once both are up: a datagram sent before member 2
            # bound its port never reached it, and its "replay" would be the
            # first copy member 2 sees (accepted, docs/security.md)
            time.sleep(0.3)
            cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
            cap.bind(("lo", 0x0800))
            cap.settimeout(0.2)
            for k in range(20):
                nodes[1].publish(b"p%d" % k)
            captured = []
            end = time.time() + 3
            while time.time() < end and len(captured) < 20:
                try:
                    pkt, addr = cap.recvfrom(65536)
                except (TimeoutError, socket.timeout):
                    continue
                if addr[2] == socket.PACKET_OUTGOING or len(pkt) < 28 or pkt[9] != 17:
                    continue
                ihl = (pkt[0] & 15) * 4
                dport = struct.unpack_from("!H", pkt, ihl + 2)[0]
                d = pkt[ihl + 8:]
                if dport != ports[2] or len(d) < 24 or struct.unpack_from("<I", d, 8)[0] != 1:
                    continue
                if any(m[0] in control for m in wire.parse(d)[1]) and d not in captured:
                    captured.append(d)
            assert len(captured) >= 5
            time.sleep(0.2)                       # the originals have been received
            st0 = nodes[2].stats()
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for d in captured:
                s.sendto(d, ("127.0.0.1", ports[2]))
            s.close()
            time.sleep(0.5)
            st = nodes[2].stats()
            refused = st.get("rx_reasons", {}).get("replay", 0) - st0.get("rx_reasons", {}).get("replay", 0)
            assert refused == len(captured), [sorted({m[0] for m in wire.parse(d)[1]}) for d in captured]
            assert st["replay_fresh"] > st0["replay_fresh"]     # genuine gossip still accepted
            assert st.get("rx_reasons", {}).get("auth", 0) == 0
        finally:
            if cap is not None:
                cap.close()
            for n in nodes.values():
                n.close()
