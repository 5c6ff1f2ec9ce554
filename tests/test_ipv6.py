"""IPv6: addresses in the configuration, on the wire and on real sockets.

Parsing and formatting ([v6]:port, [fe80::1%lo]:port) round-trip; member
entries carrying IPv6 addresses round-trip through the C decoder while old
IPv4 entries still decode; the endpoint handle table stays bounded under a
flood of sources; and in a network namespace with IPv6 (unicast on loopback, multicast looped
back on a veth pair inside the namespace: netns.enable_ipv6): a group
on ff02::/ff05:: multicast under ip6tables loss delivers every message
exactly once, joins and MEMBERS exchanges carry IPv6 addresses, repairs
travel as IPv6 unicast, and `rpbcast pub/sub` work on an IPv6 group."""
import ipaddress
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rpbcast import Config, ConfigError, MemberSpec, netaddr
from rpbcast.core import wire
from rpbcast.core.wire import MsgType as T, Reason as R
from rpbcast.protocol import membership
from rpbcast.tools import netns

pytestmark = pytest.mark.timeout(120)
needs_ns = pytest.mark.netns

LO = socket.if_nametoindex("lo")


# ---------------------------------------------------------------- parsing

def _v6_text(ip: bytes, scope: int, port: int) -> str:
    host = str(ipaddress.IPv6Address(ip))
    return f"[{host}%lo]:{port}" if scope else f"[{host}]:{port}"


v6_ips = st.binary(min_size=16, max_size=16).filter(lambda b: ipaddress.IPv6Address(b).ipv4_mapped is None)
ports = st.integers(0, 65535)


@st.composite
def v6_endpoints(draw):
    ip = draw(v6_ips)
    scope = 0
    if draw(st.booleans()):
        ip = b"\xfe\x80" + ip[2:]           # link-local: may carry a scope
        scope = LO if draw(st.booleans()) else 0
    return netaddr.Endpoint(6, ip, draw(ports), scope)


@settings(max_examples=300, deadline=None)
@given(v6_endpoints())
def test_ipv6_text_round_trip(ep):
    text = netaddr.format_endpoint(ep)
    assert netaddr.parse_endpoint(text) == ep
    assert text == _v6_text(ep.ip, ep.scope, ep.port)
    # and through the engine's integer form (a handle in this process)
    h = netaddr.addr_of(text)
    assert netaddr.is_v6(h) and h == netaddr.addr_of(text)
    assert netaddr.fmt_addr(h) == text
    assert netaddr.endpoint_of(h) == ep


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), ports)
def test_ipv4_text_round_trip_is_unchanged(ip, port):
    text = f"{ipaddress.IPv4Address(ip)}:{port}"
    ep = netaddr.parse_endpoint(text)
    assert ep == netaddr.Endpoint(4, ip, port, 0)
    assert netaddr.addr_of(text) == (ip << 16) | port       # the IPv4 integer form is what it always was
    assert netaddr.fmt_addr(netaddr.addr_of(text)) == text


def test_the_forms_a_feed_engineer_writes():
    assert netaddr.parse_endpoint("[ff02::1234]:5000") == netaddr.Endpoint(
        6, ipaddress.IPv6Address("ff02::1234").packed, 5000, 0)
    assert netaddr.parse_endpoint("[fe80::1%lo]:6000").scope == LO
    assert netaddr.parse_endpoint(f"[fe80::1%{LO}]:6000").scope == LO
    assert netaddr.parse_endpoint("[::1]:6000") == netaddr.Endpoint(6, bytes(15) + b"\1", 6000, 0)
    assert netaddr.fmt_addr(netaddr.addr_of("[FF05:0::00AB]:7")) == "[ff05::ab]:7"


@pytest.mark.parametrize("text,says", [
    ("::1:6000", "brackets"),
    ("[::1]6000", "[v6 address]:port"),
    ("[::1]:65536", "port must be 0..65535"),
    ("[::g]:5", "not an IPv6 address"),
    ("[::ffff:1.2.3.4]:5", "IPv4-mapped"),
    ("[2001:db8::1%lo]:5", "scope"),
    ("[fe80::1%nosuchif0]:5", "no interface 'nosuchif0'"),
])
def test_bad_ipv6_text_says_what_is_wrong(text, says):
    with pytest.raises(netaddr.AddressError, match=None) as e:
        netaddr.parse_endpoint(text, "bind")
    assert says in str(e.value) and "bind" in str(e.value)


def v6cfg(**kw):
    c = dict(node_id=1, group_addr="[ff02::77]:7400", bind="[::1]:0", interface="lo")
    c.update(kw)
    return Config(**c)


@pytest.mark.parametrize("kw,key", [
    (dict(bind="127.0.0.1:0"), "bind"),                                    # mixed families
    (dict(group_addr="239.1.1.1:7400"), "bind"),
    (dict(members=[MemberSpec(2, "127.0.0.1:7000")]), "member 2 addr"),
    (dict(members=[MemberSpec(2, "[::1]:70000")]), "member 2 addr"),
    (dict(group_addr="[2001:db8::1]:7400"), "group_addr"),               # not multicast
    (dict(group_addr="[ff02::1]:0"), "group_addr"),
    (dict(bind="::1:0"), "bind"),
    (dict(interface=""), "interface"),                                    # v6 multicast names it
    (dict(interface="127.0.0.1"), "interface"),
])
def test_bad_ipv6_configuration_raises_config_error_naming_the_key(kw, key):
    with pytest.raises(ConfigError) as e:
        v6cfg(**kw).validate()
    assert key in str(e.value)


def test_good_ipv6_configurations_validate():
    v6cfg().validate()
    v6cfg(interface=LO, members=[MemberSpec(2, "[fe80::2%lo]:7000")]).validate()
    v6cfg(transport="unicast", interface="", group_addr="[ff05::1:77]:7400").validate()


def test_an_ipv6_node_sends_datagrams_that_fit_a_1500_byte_link():
    assert netaddr.datagram_mtu(v6cfg()) == 1452             # 1500 - 40 (IPv6) - 8 (UDP)
    assert netaddr.datagram_mtu(v6cfg(mtu=9000)) == 9000     # set explicitly: as it is
    assert netaddr.datagram_mtu(Config(node_id=1)) == 1472   # IPv4: unchanged


# ---------------------------------------------------------------- the wire

def _member(draw_ip6, **kw):
    m = dict(id=7, inc=3, status=1, role=0, port=4791, ipv4=0, rank=5, freshness=10, lastseq=99, ip6=draw_ip6)
    m.update(kw)
    return wire.Member(**m)


members_st = st.builds(
    wire.Member, id=st.integers(0, 2**32 - 1), inc=st.integers(0, 2**32 - 1), status=st.integers(0, 4),
    role=st.integers(0, 1), port=ports, ipv4=st.just(0), rank=st.integers(0, 2**32 - 1),
    freshness=st.integers(0, 2**64 - 1), lastseq=st.integers(0, 2**64 - 1),
    ip6=st.binary(min_size=16, max_size=16))
v4_members_st = members_st.map(lambda m: m._replace(ip6=b"", ipv4=m.rank))


def members_dg(body, type_=T.MEMBERS):
    return wire.datagram([(int(type_), wire.F_REPLY if type_ == T.MEMBERS else 0, 7, 3, 0, 42, body)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(members_st, v4_members_st), min_size=1, max_size=20))
def test_member_entries_round_trip_through_the_c_decoder(entries):
    body = b"".join(wire.member_entry(m) for m in entries)
    assert len(body) == sum(56 if m.ip6 else 40 for m in entries)
    h, msgs = wire.parse(members_dg(body))
    assert wire.read_members(msgs[0][6]) == entries


@settings(max_examples=100, deadline=None)
@given(members_st)
def test_a_join_carries_one_ipv6_entry(m):
    data = wire.datagram([(int(T.JOIN), 0, m.id, m.inc, 0, m.freshness % (1 << 62), wire.member_entry(m))])
    assert wire.check(data) == R.OK
    assert wire.read_members(wire.parse(data)[1][0][6]) == [m]
    # two entries, or a truncated one, are not a JOIN
    assert wire.check(wire.datagram([(int(T.JOIN), 0, 7, 3, 0, 1, wire.member_entry(m) * 2)])) == R.BODY
    assert wire.check(wire.datagram([(int(T.JOIN), 0, 7, 3, 0, 1, wire.member_entry(m)[:50])])) == R.BODY


def test_an_old_ipv4_entry_decodes_as_before():
    # the 40 bytes an IPv4-only node sends (its reserved word, now the family, is 0)
    old = struct.pack("<IIBBHIIIQQ", 7, 3, 1, 0, 4791, 0x0A000001, 5, 0, 10, 99)
    assert wire.member_entry(_member(b"", ipv4=0x0A000001)) == old
    h, msgs = wire.parse(members_dg(old * 3))
    assert wire.read_members(msgs[0][6]) == [_member(b"", ipv4=0x0A000001)] * 3
    assert wire.check(wire.datagram([(int(T.JOIN), 0, 7, 3, 0, 10, old)])) == R.OK


V6_ENTRY = struct.pack("<IIBBHIIIQQ", 7, 3, 1, 0, 1, 0, 5, 6, 10, 99) + bytes(range(16))


@pytest.mark.parametrize("body", [
    V6_ENTRY[:40],                                                           # v6 family, address missing
    V6_ENTRY + bytes(8),                                                     # ragged tail
    struct.pack("<IIBBHIIIQQ", 7, 3, 1, 0, 1, 1, 5, 4, 10, 99),              # unknown family byte
    struct.pack("<IIBBHIIIQQ", 7, 3, 1, 0, 1, 1, 5, 6 | 0x100, 10, 99) + bytes(16),  # reserved bytes set
])
def test_malformed_member_entries_are_rejected(body):
    assert wire.check(members_dg(body)) == R.BODY
    assert wire.check(members_dg(V6_ENTRY)) == R.OK


def test_member_addresses_survive_encode_and_decode():
    a6 = netaddr.addr_of("[fd77::9]:7009")
    ip, port, ip6 = membership.addr_to_entry(a6)
    m = _member(ip6, port=port)
    (e,) = wire.read_members(wire.member_entry(m))
    assert membership.entry_addr(e) == a6
    a4 = netaddr.addr_of("10.0.0.1:7")
    ip, port, ip6 = membership.addr_to_entry(a4)
    (e,) = wire.read_members(wire.member_entry(_member(ip6, ipv4=ip, port=port)))
    assert membership.entry_addr(e) == a4
    # a link-local entry takes the receiver's own scope
    ll = netaddr.addr_of("[fe80::5%lo]:7005")
    (e,) = wire.read_members(wire.member_entry(_member(membership.addr_to_entry(ll)[2], port=7005)))
    assert membership.entry_addr(e, LO) == ll


# ---------------------------------------------------------------- the handle table

TABLE_SCRIPT = textwrap.dedent("""
    import json, socket, sys, time
    from rpbcast.drivers import udp
    from rpbcast import netaddr
    udp.addr6_reset(64)
    pinned = [netaddr.addr_of(f"[fd00::{k:x}]:1") for k in range(1, 9)]        # configured: pinned
    hot = udp.addr6_intern(b"\\xfd" + bytes(14) + b"\\x01", 9, 0, False)      # a peer in use
    first = udp.addr6_intern(b"\\xfe" + bytes(15), 1, 0, False)
    for k in range(20000):                                                   # a flood of sources
        udp.addr6_intern(b"\\x20\\x01" + k.to_bytes(14, "big"), 1000, 0, False)
        if k % 16 == 0:
            udp.addr6_lookup(hot)                                            # ... while the peer talks
    st = udp.addr6_stats()
    out = dict(st=st, pinned_ok=all(netaddr.fmt_addr(p) == f"[fd00::{k:x}]:1" for k, p in enumerate(pinned, 1)),
               hot_ok=udp.addr6_lookup(hot) is not None, first_stale=udp.addr6_lookup(first) is None,
               stale_fmt=netaddr.fmt_addr(first))
    udp.addr6_reset(4)
    a = [udp.addr6_intern(bytes(15) + bytes([k]), 1, 0, True) for k in range(4)]
    out["refused"] = udp.addr6_intern(b"\\xff" * 16, 1, 0, False)
    out["refused_count"] = udp.addr6_stats()["refused"]
    print(json.dumps(out))
""")


def test_the_handle_table_stays_bounded_under_a_flood_of_sources():
    r = subprocess.run([sys.executable, "-c", TABLE_SCRIPT], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    st = out["st"]
    assert st["entries"] <= st["cap"] == 64
    assert st["evicted"] >= 20000 - 64 and st["inserted"] >= 20000
    assert out["pinned_ok"] and st["pinned"] == 8      # configured addresses are never evicted
    assert out["hot_ok"]                               # a peer in use survives the flood
    assert out["first_stale"] and "evicted" in out["stale_fmt"]   # a stale handle names no other host
    assert out["refused"] == 0 and out["refused_count"] == 1      # all pinned: refused, counted


FLOOD_SCRIPT = textwrap.dedent("""
    import json, socket, sys, time
    from rpbcast.drivers import udp
    from rpbcast import Config, MemberSpec, netaddr
    from rpbcast.api import Node
    from rpbcast.tools import netns
    udp.addr6_reset(64)
    specs = [MemberSpec(i, f"[fd77::{i}]:{7600 + i}") for i in (1, 2)]
    nodes = {i: Node(Config(node_id=i, bind=f"[fd77::{i}]:{7600 + i}", group_addr="[ff02::7:8]:7600",
                            interface=netns.V6_MCAST_IF, members=specs, gossip_interval=0.02)) for i in (1, 2)}
    def take(n, want):
        got, end = {}, time.time() + 10
        while len(got) < want and time.time() < end:
            m = n.receive(timeout=0.1)
            if m is not None:
                got[m.seq] = got.get(m.seq, 0) + 1
        return got
    for k in range(100):
        nodes[1].publish(b"m%d" % k)
    first = take(nodes[2], 100)
    # 3,000 sources (fd77::3, one port each) send it a datagram each
    for k in range(3000):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind(("fd77::3", 0))
        s.sendto(b"RP" + bytes(40), ("fd77::2", 7602))
        s.close()
    time.sleep(0.5)
    for k in range(100, 200):
        nodes[1].publish(b"m%d" % k)
    second = take(nodes[2], 100)
    st = nodes[2].stats()
    out = dict(table=udp.addr6_stats(), first=first, second=second, sock=st["sock"],
               rejected=sum(st["rx_reasons"].values()))
    for n in nodes.values():
        n.close()
    print(json.dumps(out))
""")


@needs_ns
def test_a_flood_of_ipv6_sources_on_real_sockets_leaves_the_table_bounded_and_the_group_working():
    with netns.namespace6() as ns:
        r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", FLOOD_SCRIPT], capture_output=True,
                           text=True, timeout=90, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    t = out["table"]
    assert t["cap"] == 64 and t["entries"] <= 64
    # every new source that was read got a handle, by evicting an old one (the
    # kernel may drop some of the 3,000 when the socket buffer is full)
    assert t["evicted"] >= 2900 - 64 - 8
    assert t["refused"] == 0 and out["sock"]["rx_unnamed"] == 0
    assert out["rejected"] >= 2900             # the garbage was read, named and rejected (counted)
    # the configured members were never evicted: the group goes on, exactly once
    assert sorted(map(int, out["first"])) == list(range(100)) and set(out["first"].values()) == {1}
    assert sorted(map(int, out["second"])) == list(range(100, 200)) and set(out["second"].values()) == {1}
    assert out["sock"]["tx_unresolved"] == 0


# ---------------------------------------------------------------- real sockets (namespace)

def v6_group(ids, group, loggers=(), tmp_path=None, **kw):
    """Nodes 1.. on fd77::<id> (lo), multicast on `group`."""
    from rpbcast.api import Node
    specs = [MemberSpec(i, f"[fd77::{i}]:{7100 + i}", "logger" if i in loggers else "member") for i in ids]
    nodes = {}
    for i in ids:
        c = dict(node_id=i, bind=f"[fd77::{i}]:{7100 + i}", group_addr=group, interface=netns.V6_MCAST_IF,
                 members=specs, gossip_interval=0.02, store_bytes=64 << 20, store_entries=1 << 18)
        c.update(kw)
        if i in loggers:
            c.update(role="logger", log_dir=str(tmp_path / f"log{i}"))
        nodes[i] = Node(Config(**c))
    # A static member started while a stream may run takes the ids after its
    # sponsor's answer (t_join); the logger, asked first, starts last here, so
    # wait until every node has its answer before anyone publishes: an id lost
    # in the network before the answer would otherwise count as before t_join.
    end = time.time() + 3.0
    while time.time() < end and any(n.engine.group.wants_t_join() for n in nodes.values()):
        time.sleep(0.02)
    return nodes


def collect(node, want, timeout=15.0):
    got = {}
    end = time.time() + timeout
    while len(got) < want and time.time() < end:
        m = node.receive(timeout=0.2)
        if m is not None:
            key = (m.sender, m.seq)
            got[key] = got.get(key, 0) + 1
            assert bytes(m.payload) == b"m%d" % m.seq
    # a little longer: a duplicate would show now
    end = time.time() + 0.3
    while time.time() < end:
        m = node.receive(timeout=0.05)
        if m is not None:
            got[(m.sender, m.seq)] = got.get((m.sender, m.seq), 0) + 1
    return got


def publish_n(node, n, per=20, pause=0.001):
    for k in range(n):
        node.publish(b"m%d" % k)
        if k % per == per - 1:
            time.sleep(pause)


def close_all(nodes):
    for n in nodes.values():
        n.close()


@needs_ns
@pytest.mark.parametrize("group", ["[ff02::7:1]:7400", "[ff05::7:2]:7401"])
def test_ipv6_multicast_with_kernel_loss_delivers_everything_exactly_once(tmp_path, group):
    with netns.namespace6(loss=0.01) as ns, netns.entered(ns):
        nodes = v6_group([1, 2, 3, 4], group, loggers=[4], tmp_path=tmp_path)
        try:
            assert all(netaddr.is_v6(n.transport.addr) for n in nodes.values())
            assert nodes[1].engine.cfg.mtu == 1452
            assert nodes[2].addr == "[fd77::2]:7102"
            publish_n(nodes[1], 3000)
            for i in (2, 3):
                got = collect(nodes[i], 3000)
                assert set(got) == {(1, k) for k in range(3000)}, f"node {i} misses {3000 - len(got)}"
                assert max(got.values()) == 1
            dropped, _ = netns.loss_counters6(ns)
            assert dropped > 0
            for i in (2, 3):
                st = nodes[i].stats()
                assert st["rx_reasons"] == {}
                assert st["sock"]["family"] == 6 and st["sock"]["tx_unresolved"] == 0
                # the data came by multicast; repairs filled the holes the loss left
                assert 0 < st["repairs_peer"] + st["repairs_logger"] < 3000 // 5
        finally:
            close_all(nodes)


def _batch_through(nodes, n=20000):
    """Publish n messages from node 1 in batches; node 2 receives them all."""
    payload = np.frombuffer(b"".join(b"m%d" % k for k in range(n)), np.uint8)
    lens = np.array([len(b"m%d" % k) for k in range(n)], np.uint32)
    sent = 0
    while sent < n:
        off = int(lens[:sent].sum())
        sent += nodes[1].publish_batch(payload[off:], lens[sent:])
    seqs, buf, end = [], bytearray(8 << 20), time.time() + 15
    while len(seqs) < n and time.time() < end:
        b = nodes[2].recv_batch(8192, buf)
        if not b.count:
            nodes[2].transport.wait(0.1)
            continue
        for i in range(b.count):
            assert bytes(b.payload(i)) == b"m%d" % b.seqs[i]
        seqs.extend(b.seqs.tolist())
    assert sorted(seqs) == list(range(n))
    return nodes[1].stats()["sock"], nodes[2].stats()["sock"]


@needs_ns
def test_gso_and_gro_work_the_same_on_ipv6_sockets():
    """The same batch over an IPv4 and an IPv6 group in one namespace: UDP
    GSO (UDP_SEGMENT) is used, or not, alike on both."""
    from rpbcast.api import Node
    with netns.namespace6() as ns, netns.entered(ns):
        v6 = v6_group([1, 2], "[ff05::7:6]:7405")
        try:
            s6, r6 = _batch_through(v6)
        finally:
            close_all(v6)
        specs = [MemberSpec(i, f"127.0.0.{i}:{7300 + i}") for i in (1, 2)]
        v4 = {i: Node(Config(node_id=i, bind=f"127.0.0.{i}:{7300 + i}", group_addr="239.255.91.1:7406",
                             members=specs, gossip_interval=0.02)) for i in (1, 2)}
        try:
            s4, r4 = _batch_through(v4)
        finally:
            close_all(v4)
    assert s6["family"] == 6 and s4["family"] == 4
    assert s6["gso"] == s4["gso"] and r6["gro"] == r4["gro"]
    if s6["gso"] == 1:
        assert s6["tx_gso_sends"] > 0 and s6["tx_dgrams"] > s6["tx_calls"]


@needs_ns
def test_ttl_0_keeps_an_ipv6_group_on_this_host():
    """ttl = 0 is hop limit 0: the host's own copies are delivered, nothing
    goes out on the link (the kernel counts them as output discards)."""
    with netns.namespace6() as ns, netns.entered(ns):
        def out_discards():
            with open("/proc/net/snmp6") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("Ip6OutDiscards"))
        before = out_discards()
        nodes = v6_group([1, 2], "[ff02::7:a]:7408", ttl=0)
        try:
            publish_n(nodes[1], 200)
            got = collect(nodes[2], 200)
            assert set(got) == {(1, k) for k in range(200)} and max(got.values()) == 1
            assert out_discards() > before
        finally:
            close_all(nodes)


@needs_ns
def test_unicast_fan_out_over_ipv6_with_kernel_loss(tmp_path):
    """transport = 'unicast': every datagram to each member's IPv6 address,
    no multicast at all; 2 % loss; exactly once."""
    with netns.namespace6(loss=0.02) as ns, netns.entered(ns):
        nodes = v6_group([1, 2, 3], "[ff05::7:7]:7407", transport="unicast", interface="")
        try:
            publish_n(nodes[1], 2000)
            for i in (2, 3):
                got = collect(nodes[i], 2000)
                assert set(got) == {(1, k) for k in range(2000)}, f"node {i} misses {2000 - len(got)}"
                assert max(got.values()) == 1
                assert nodes[i].stats()["sock"]["tx_unresolved"] == 0
            assert netns.loss_counters6(ns)[0] > 0
        finally:
            close_all(nodes)


@needs_ns
def test_repairs_travel_as_ipv6_unicast(tmp_path):
    """Multicast to the group is cut (15 % of it) while unicast is not: every
    hole is filled by RTX/REPAIR between the members' IPv6 unicast addresses."""
    with netns.namespace6() as ns, netns.entered(ns):
        nodes = v6_group([1, 2, 3], "[ff02::7:3]:7402")
        rule = ["-p", "udp", "-d", "ff02::7:3", "-m", "statistic", "--mode", "random", "--probability", "0.15",
                "-j", "DROP"]
        netns.drop6(ns, rule)
        try:
            publish_n(nodes[1], 2000)
            for i in (2, 3):
                got = collect(nodes[i], 2000)
                assert set(got) == {(1, k) for k in range(2000)}, f"node {i} misses {2000 - len(got)}"
                assert max(got.values()) == 1
            st = [nodes[i].stats() for i in (2, 3)]
            assert sum(s["repairs_peer"] + s["repairs_logger"] for s in st) > 0
            assert all(s["sock"]["tx_unresolved"] == 0 and s["sock"]["rx_unnamed"] == 0 for s in st)
        finally:
            close_all(nodes)


@needs_ns
def test_join_and_members_exchange_carry_ipv6_addresses(tmp_path):
    """A logger known from configuration; two members join by multicast JOIN
    and learn each other through MEMBERS: every table holds the IPv6
    addresses, and the joined members deliver each other's messages."""
    from rpbcast.api import Node
    with netns.namespace6() as ns, netns.entered(ns):
        logger = MemberSpec(9, "[fd77::4]:7109", "logger")
        common = dict(group_addr="[ff02::7:4]:7403", interface=netns.V6_MCAST_IF, members=[logger],
                      gossip_interval=0.02)
        nodes = {9: Node(Config(node_id=9, bind=logger.addr, role="logger", log_dir=str(tmp_path / "lg"),
                                **common))}
        for i in (1, 2):
            nodes[i] = Node(Config(node_id=i, bind=f"[fd77::{i}]:{7100 + i}", join=True, sponsors=1, **common))
        try:
            want = {1: "[fd77::1]:7101", 2: "[fd77::2]:7102", 9: "[fd77::4]:7109"}
            end = time.time() + 15
            tables = {}
            while time.time() < end:
                tables = {i: {nid: addr for nid, addr, status, _ in n.members() if status == membership.MEMBER}
                          for i, n in nodes.items()}
                if all(t == want for t in tables.values()):
                    break
                time.sleep(0.1)
            assert all(t == want for t in tables.values()), tables
            nodes[1].publish(b"m0")
            got = collect(nodes[2], 1, timeout=10)
            assert got == {(1, 0): 1}
        finally:
            close_all(nodes)


@needs_ns
def test_pub_and_sub_on_an_ipv6_group(tmp_path):
    with netns.namespace6() as ns:
        env = dict(os.environ, RPBCAST_RUNTIME_DIR=str(tmp_path / "rt"), PYTHONPATH=os.pathsep.join(sys.path))
        m = ["--group", "[ff02::7:5]:7404", "--interface", netns.V6_MCAST_IF,
             "--member", "1=[fd77::1]:7201", "--member", "2=[fd77::2]:7202", "--member", "9=[fd77::4]:7209/logger"]
        run = ["ip", "netns", "exec", ns, sys.executable, "-m", "rpbcast"]
        lg = subprocess.Popen(run + ["logger", "--node-id", "9", "--bind", "[fd77::4]:7209",
                                     "--dir", str(tmp_path / "log"), *m], env=env, stderr=subprocess.PIPE, text=True)
        sub = subprocess.Popen(run + ["sub", "--node-id", "2", "--bind", "[fd77::2]:7202", *m, "--count-only",
                                      "--count", "20000", "--timeout", "30", "--format", "json"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for p in ("1-9.sock", "1-2.sock"):
                end = time.time() + 20
                while not (tmp_path / "rt" / p).exists() and time.time() < end:
                    time.sleep(0.05)
            r = subprocess.run(run + ["pub", "--node-id", "1", "--bind", "[fd77::1]:7201", *m, "--count", "20000",
                                      "--batch", "64"], env=env, capture_output=True, text=True, timeout=90)
            assert r.returncode == 0, r.stderr
            assert "every message acknowledged" in r.stderr
            out, err = sub.communicate(timeout=60)
            assert sub.returncode == 0, err
            rep = json.loads(out.strip().splitlines()[-1])
            assert rep["delivered"] == 20000
            (s,) = rep["streams"]
            assert (s["sender"], s["distinct"], s["duplicates"]) == (1, 20000, 0)
        finally:
            lg.send_signal(signal.SIGTERM)
            lg.wait(timeout=20)
            sub.kill()
