"""Authenticated datagrams (docs/security.md): a keyed group's members
deliver exactly once; datagrams without a valid MAC -- forgeries built to
parse, tampered or replayed ones -- are dropped before anything is parsed
and counted under the "auth" reason; two keys are valid during a roll-over.
Real groups run on real sockets inside a network namespace each test
creates."""
import os
import socket
import struct
import time

import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.api import Node
from rpbcast.core import digest, wire
from rpbcast.protocol.engine import Engine
from rpbcast.tools import netns
from ports import free_port

pytestmark = pytest.mark.timeout(120)
needs_ns = pytest.mark.netns

T = wire.MsgType
OLD = bytes(range(16))
NEW = bytes(range(100, 116))


def key_file(tmp_path, name, *keys):
    p = tmp_path / name
    p.write_text("# group keys: the first is the sending key\n" +
                 "".join(f"{kid} {k.hex()}\n" for kid, k in keys))
    return str(p)


# ---------------------------------------------------------------- key files

@pytest.mark.parametrize("text, why", [
    ("", "needs one key"),
    ("1 00\n", "must be 16 bytes"),
    ("1 zz0102030405060708090a0b0c0d0e0f\n", "expected"),
    ("300 000102030405060708090a0b0c0d0e0f\n", "0..255"),
    ("1 000102030405060708090a0b0c0d0e0f\n1 000102030405060708090a0b0c0d0e0f\n", "twice"),
    ("1 000102030405060708090a0b0c0d0e0f\n2 000102030405060708090a0b0c0d0e0f\n"
     "3 000102030405060708090a0b0c0d0e0f\n", "found 3"),
])
def test_a_bad_key_file_is_a_config_error_naming_key_file(tmp_path, text, why):
    p = tmp_path / "keys"
    p.write_text(text)
    with pytest.raises(ConfigError, match="key_file") as e:
        Config(key_file=str(p))
    assert why in str(e.value)


def test_a_missing_key_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="key_file .*cannot be read"):
        Config(key_file=str(tmp_path / "nope"))


# ---------------------------------------------------------------- the data plane

def engines(tmp_path, keys_a, keys_b):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2)]
    mk = lambda i, keys: Engine(Config(node_id=i, members=specs, incarnation=1,  # noqa: E731
                                       key_file=key_file(tmp_path, f"k{i}", *keys) if keys else None),
                                0, mac_counter0=1000 * i)
    return mk(1, keys_a), mk(2, keys_b)


def sent(e, n=20, now=1000):
    for k in range(n):
        e.publish(b"m%d" % k, now=now)
    e.handle_timer(now + 1)
    return [d for _, d in e.datagrams_to_send()]


def test_every_datagram_of_a_keyed_node_carries_a_verified_mac(tmp_path):
    a, b = engines(tmp_path, [(1, OLD)], [(1, OLD)])
    out = sent(a)
    assert out
    for d in out:
        h, _ = wire.parse(d)
        assert h.dflags & wire.DGF_MAC and h.mac_len == 25 and d[-25] == 1
        assert len(d) <= 1472
        b.receive_datagram(d, 1, 2000)
    assert b.node.rx_reasons() == {}
    assert sorted(m.seq for m in b.recv(now=3000)) == list(range(20))


@pytest.mark.parametrize("what", ["unkeyed", "wrong key", "unknown key id", "flipped header bit",
                                  "flipped body bit", "flipped tag bit", "flipped counter",
                                  "truncated"])
def test_a_datagram_without_a_valid_mac_is_dropped_and_counted(tmp_path, what):
    keys = {"unkeyed": None, "wrong key": [(1, NEW)], "unknown key id": [(2, OLD)]}.get(what, [(1, OLD)])
    a, b = engines(tmp_path, keys, [(1, OLD)])
    out = sent(a)
    for d in out:
        d = bytearray(d)
        if what == "flipped header bit":
            d[20] ^= 1                       # dseq: informational, still authenticated
        elif what == "flipped body bit":
            d[len(d) // 2] ^= 0x80
        elif what == "flipped tag bit":
            d[-1] ^= 1
        elif what == "flipped counter":
            d[-20] ^= 1
        elif what == "truncated":
            d = d[:-1]
        assert b.receive_datagram(bytes(d), 1, 2000) == wire.Reason.AUTH
    assert b.node.rx_reasons() == {"auth": len(out)}
    assert b.recv(now=3000) == []
    assert b.node.find_peer(1, 1) is None or b.node.peer_next(b.node.find_peer(1, 1)) == 0


def test_a_replayed_data_datagram_is_not_delivered_again(tmp_path):
    a, b = engines(tmp_path, [(1, OLD)], [(1, OLD)])
    out = sent(a)
    for d in out:
        b.receive_datagram(d, 1, 2000)
    assert len(b.recv(now=2500)) == 20
    dup0 = b.node.counters()["rx_dup"]
    for _ in range(3):
        for d in out:                        # a captured valid datagram, sent again
            b.receive_datagram(d, 1, 3000)
    assert b.recv(now=3500) == []
    assert b.node.counters()["rx_dup"] - dup0 == 3 * 20
    assert b.node.rx_reasons() == {}


def test_unkeyed_nodes_send_no_trailer(tmp_path):
    a, b = engines(tmp_path, None, None)
    for d in sent(a):
        h, _ = wire.parse(d)
        assert h.dflags == 0 and h.mac_len == 0


# ---------------------------------------------------------------- real groups

def keyed_group(tmp_path, keys_of, loggers=()):
    """Members 1..n on 127.0.0.1 in the current namespace, node i keyed with
    keys_of[i] (a list of (id, key)), multicast on lo."""
    ids = sorted(keys_of)
    ports = {i: free_port() for i in ids}
    gport = free_port()
    specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}", "logger" if i in loggers else "member") for i in ids]
    nodes = {}
    for i in ids:
        cfg = dict(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, gossip_interval=0.02,
                   group_addr=f"239.255.91.1:{gport}", store_entries=1 << 16,
                   key_file=key_file(tmp_path, f"keys{i}", *keys_of[i]))
        if i in loggers:
            cfg.update(role="logger", log_dir=str(tmp_path / f"log{i}"))
        nodes[i] = Node(Config(**cfg))
    return nodes, ports, ("239.255.91.1", gport)


def collect(node, want, timeout=10.0):
    got = {}
    end = time.time() + timeout
    while sum(got.values()) < want and time.time() < end:
        m = node.receive(timeout=0.1)
        if m is not None:
            got[(m.sender, m.seq, bytes(m.payload))] = got.get((m.sender, m.seq, bytes(m.payload)), 0) + 1
    return got


def drain(node, secs=0.3):
    got = []
    end = time.time() + secs
    while time.time() < end:
        m = node.receive(timeout=0.05)
        if m is not None:
            got.append((m.sender, m.seq, bytes(m.payload)))
    return got


def publish(node, n, tag=b"m"):
    for k in range(n):
        while True:
            try:
                node.publish(tag + b"%d" % k)
                break
            except BlockingIOError:
                time.sleep(0.001)
        if k % 50 == 49:
            time.sleep(0.001)


def forgeries(inc, gport):
    """Datagrams that parse and would act if they were believed (issue 14):
    DATA as member 1 far ahead, a GAPNOTE "lost [0, 2^40]", a logger ACK
    for member 1, a JOIN of node 99, a LEAVE of member 2, a MEMBERS entry
    moving member 3 to the attacker, an incarnation+1 DATA."""
    gap = wire.missing_section(1, inc[1], digest.encode([(0, 1 << 40)], 0, 1 << 40)[0])
    join = struct.pack("<IIBBHIIIQQ", 99, 1, 1, 0, gport, 0x7F000001, 0, 0, 1 << 40, 0)
    move = struct.pack("<IIBBHIIIQQ", 3, inc[3], 1, 0, gport, 0x7F000001, 2, 0, 1 << 40, 0)
    msgs = [
        (4, [(T.DATA, 0, 1, inc[1], 0, 200, b"FORGED-ahead")]),
        (1, [(T.DATA, 0, 1, inc[1] + 1, 0, 0, b"FORGED-inc")]),
        (4, [(T.GAPNOTE, 0, 4, inc[4], 0, 0, gap)]),
        (4, [(T.LOGACK, 0, 1, inc[1], 0, 1 << 20, b"")]),
        (99, [(T.JOIN, 0, 99, 1, 0, 1 << 40, join)]),
        (2, [(T.LEAVE, 0, 2, inc[2], 0, 1 << 40, b"")]),
        (3, [(T.MEMBERS, wire.F_PUSH, 3, inc[3], 1, 0, move)]),
    ]
    out = []
    for source, m in msgs:
        d = wire.datagram(m, group=1, source=source, source_inc=inc.get(source, 1))
        out.append(d)
        # ... and with a trailer that looks right but is not (key id 1, garbage tag)
        bad = bytearray(wire.datagram(m, group=1, source=source, source_inc=inc.get(source, 1)))
        bad[3] |= wire.DGF_MAC
        bad[18:20] = (25).to_bytes(2, "little")
        out.append(bytes(bad) + bytes([1]) + os.urandom(24))
    return out


@needs_ns
def test_keyed_group_rejects_and_counts_every_forgery(tmp_path):
    with netns.namespace() as ns, netns.entered(ns):
        nodes, ports, (gip, gport) = keyed_group(tmp_path, {i: [(1, OLD)] for i in (1, 2, 3, 4)},
                                                 loggers=[4])
        try:
            publish(nodes[1], 300)
            for i in (2, 3):
                got = collect(nodes[i], 300)
                assert sorted(got) == sorted((1, k, b"m%d" % k) for k in range(300))
            inc = {i: n.incarnation for i, n in nodes.items()}
            members0 = sorted((m[0], m[1], m[3]) for m in nodes[2].members())
            auth0 = {i: n.stats().get("rx_reasons", {}).get("auth", 0) for i, n in nodes.items()}
            forged = forgeries(inc, gport)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
            for d in forged:
                s.sendto(d, (gip, gport))
                for i in nodes:
                    s.sendto(d, ("127.0.0.1", ports[i]))
            s.close()
            time.sleep(0.3)
            # the genuine stream goes on, is delivered exactly once, and
            # nothing forged is delivered or acted on
            publish(nodes[1], 300, tag=b"n")
            for i in (2, 3):
                got = collect(nodes[i], 300)
                assert sorted(got) == sorted((1, 300 + k, b"n%d" % k) for k in range(300)), f"node {i}"
                assert max(got.values()) == 1
                assert not [m for m in drain(nodes[i]) if b"FORGED" in m[2]]
            for i, n in nodes.items():
                st = n.stats()
                # every forgery reached it twice (multicast, unicast); own-id ones are
                # dropped as looped-back multicast before the MAC is looked at
                own = sum(1 for d in forged if struct.unpack_from("<I", d, 8)[0] == i)
                assert st["rx_reasons"].get("auth", 0) - auth0[i] == 2 * (len(forged) - own), f"node {i}"
                assert set(st["rx_reasons"]) == {"auth"}
            assert sorted((m[0], m[1], m[3]) for m in nodes[2].members()) == members0
            assert 99 not in [m[0] for m in nodes[3].members()]
            # the sender's buffer was not released by the forged ACK: it still publishes
            publish(nodes[1], 100, tag=b"p")
            assert len(collect(nodes[3], 100)) == 100
        finally:
            for n in nodes.values():
                n.close()


@needs_ns
def test_a_captured_datagram_replayed_on_the_wire_is_not_delivered_again(tmp_path):
    with netns.namespace() as ns, netns.entered(ns):
        nodes, ports, (gip, gport) = keyed_group(tmp_path, {i: [(1, OLD)] for i in (1, 2)})
        snoop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        snoop.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        snoop.bind((gip, gport))
        snoop.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                         socket.inet_aton(gip) + socket.inet_aton("127.0.0.1"))
        snoop.settimeout(2.0)
        try:
            publish(nodes[1], 200)
            got = collect(nodes[2], 200)
            assert len(got) == 200
            captured = []
            while True:
                try:
                    d, _ = snoop.recvfrom(65536)
                except (TimeoutError, socket.timeout):
                    break
                h, msgs = wire.parse(d)
                if any(m[0] == T.DATA for m in msgs):
                    captured.append(d)
                if len(captured) >= 5:
                    break
            assert captured
            dup0 = nodes[2].stats()["rx_dup"]
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for d in captured * 3:
                s.sendto(d, ("127.0.0.1", ports[2]))
            s.close()
            time.sleep(0.3)
            assert drain(nodes[2]) == []
            st = nodes[2].stats()
            assert st["rx_dup"] > dup0
            assert st.get("rx_reasons", {}) == {}     # valid MACs: duplicates, not forgeries
        finally:
            snoop.close()
            for n in nodes.values():
                n.close()


@needs_ns
def test_roll_over_a_member_still_sending_under_the_old_key_is_heard(tmp_path):
    with netns.namespace() as ns, netns.entered(ns):
        # 1 and 2 have moved on to the new key; 3 still sends under the old one
        keys = {1: [(2, NEW), (1, OLD)], 2: [(2, NEW), (1, OLD)], 3: [(1, OLD), (2, NEW)]}
        nodes, _, _ = keyed_group(tmp_path, keys)
        try:
            publish(nodes[1], 300)
            publish(nodes[3], 300, tag=b"o")
            for i, senders in ((2, (1, 3)), (3, (1,)), (1, (3,))):
                want = sum(300 for _ in senders)
                got = collect(nodes[i], want)
                exp = set()
                if 1 in senders:
                    exp |= {(1, k, b"m%d" % k) for k in range(300)}
                if 3 in senders:
                    exp |= {(3, k, b"o%d" % k) for k in range(300)}
                assert set(got) == exp, f"node {i}"
                assert max(got.values()) == 1
                assert nodes[i].stats().get("rx_reasons", {}) == {}
        finally:
            for n in nodes.values():
                n.close()


@needs_ns
def test_a_member_without_the_current_keys_is_not_heard(tmp_path):
    with netns.namespace() as ns, netns.entered(ns):
        keys = {1: [(2, NEW)], 2: [(2, NEW)], 3: [(1, OLD)]}
        nodes, _, _ = keyed_group(tmp_path, keys)
        try:
            publish(nodes[3], 50, tag=b"o")
            time.sleep(0.5)
            assert drain(nodes[2]) == []
            assert nodes[2].stats()["rx_reasons"].get("auth", 0) > 0
        finally:
            for n in nodes.values():
                n.close()
