"""Optional encryption of datagram bodies (Config.encrypt; docs/security.md,
"Encryption"; csrc/auth.h): with a key and encrypt=True every datagram's
body is AES-128-GCM ciphertext under the group key -- the one seal per
datagram the MAC already was -- so nothing of a payload is on the wire;
key holders decrypt and deliver exactly once; a node without the key (or
with another) drops every datagram, counted under "auth"."""
import socket
import time

import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.core import wire
from rpbcast.core.node import DEST_MCAST
from rpbcast.protocol.engine import Engine
from rpbcast.tools import netns
from ports import free_port

pytestmark = pytest.mark.timeout(120)

KEY = bytes(range(16))
OTHER = bytes(range(50, 66))
SECRET = b"SECRET-PAYLOAD-"


def key_file(tmp_path, name, key=KEY, kid=1):
    p = tmp_path / name
    p.write_text(f"{kid} {key.hex()}\n")
    return str(p)


def engine(tmp_path, i, key=KEY, encrypt=True, keyed=True, kid=1):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2), MemberSpec(3, 3)]
    kf = key_file(tmp_path, f"k{i}", key, kid) if keyed else None
    return Engine(Config(node_id=i, members=specs, incarnation=1, key_file=kf,
                         encrypt=encrypt and keyed), 0, mac_counter0=1000 * i)


def published(e, n=30, now=1000):
    for k in range(n):
        e.publish(SECRET + b"%d" % k, now=now)
    e.handle_timer(now + 1)
    return [d for _, d in e.datagrams_to_send()]


# ---------------------------------------------------------------- configuration

def test_encrypt_needs_a_key_file(tmp_path):
    with pytest.raises(ConfigError, match="encrypt needs key_file"):
        Config(encrypt=True)
    with pytest.raises(ConfigError, match="encrypt must be True or False"):
        Config(encrypt="yes", key_file=key_file(tmp_path, "k"))


# ---------------------------------------------------------------- engines

def test_encrypted_datagrams_hide_the_payload_and_are_delivered_exactly_once(tmp_path):
    a, b = engine(tmp_path, 1), engine(tmp_path, 2)
    out = published(a)
    assert out
    for d in out:
        assert d[3] & wire.DGF_ENC and d[3] & wire.DGF_MAC
        assert SECRET not in d and b"SECRET" not in d
    for d in out:
        assert b.receive_datagram(d, 1, 2000) == 0
    got = b.recv(now=3000)
    assert sorted((m.seq, bytes(m.payload)) for m in got) == [(k, SECRET + b"%d" % k) for k in range(30)]
    for d in out:                                        # replays: duplicates, not deliveries
        b.receive_datagram(d, 1, 4000)
    assert b.recv(now=5000) == []
    assert b.node.rx_reasons().get("auth", 0) == 0


def test_mac_only_datagrams_carry_the_payload_in_the_clear(tmp_path):
    """The control for the test above: without encrypt the marker is on
    the wire (so `not in` there means something)."""
    a = engine(tmp_path, 1, encrypt=False)
    out = published(a)
    assert any(SECRET in d for d in out)
    assert not any(d[3] & wire.DGF_ENC for d in out)


@pytest.mark.parametrize("who", ["wrong key", "unkeyed", "unknown key id"])
def test_a_member_without_the_key_drops_every_encrypted_datagram(tmp_path, who):
    a = engine(tmp_path, 1)
    c = {"wrong key": lambda: engine(tmp_path, 3, key=OTHER),
         "unkeyed": lambda: engine(tmp_path, 3, keyed=False),
         "unknown key id": lambda: engine(tmp_path, 3, kid=9)}[who]()
    out = published(a)
    for d in out:
        assert wire.reason_names()[c.receive_datagram(d, 1, 2000)] == "auth"
    assert c.node.rx_reasons() == {"auth": len(out)}
    assert c.recv(now=3000) == []
    assert c.node.find_peer(1, 1) is None


def test_a_flipped_ciphertext_bit_is_dropped(tmp_path):
    a, b = engine(tmp_path, 1), engine(tmp_path, 2)
    out = published(a)
    for d in out:
        d = bytearray(d)
        d[30] ^= 0x01
        assert wire.reason_names()[b.receive_datagram(bytes(d), 1, 2000)] == "auth"
    assert b.recv(now=3000) == []


def test_a_keyed_node_without_encrypt_reads_encrypted_datagrams(tmp_path):
    """Turning encryption on is a rolling change: a member not yet
    encrypting still reads (and authenticates) its peers' datagrams."""
    a, b = engine(tmp_path, 1), engine(tmp_path, 2, encrypt=False)
    for d in published(a):
        assert b.receive_datagram(d, 1, 2000) == 0
    assert len(b.recv(now=3000)) == 30


def test_control_messages_are_encrypted_and_read(tmp_path):
    """A control message's body is ciphertext too, and the receiving control
    plane reads it: a LEAVE takes member 1 out of b's table ("left"
    event), as it does unencrypted; a JOIN's member entry is not on the wire."""
    a, b = engine(tmp_path, 1), engine(tmp_path, 2)
    entry = wire.member_entry(wire.Member(1, 1, 1, 0, 0x5EC7, 0x7F000001, 0, 3, 0))
    a.emit(DEST_MCAST, wire.MsgType.JOIN, entry, seq=3)
    a.emit(DEST_MCAST, wire.MsgType.LEAVE, b"", seq=5)
    out = [d for _, d in a.datagrams_to_send()]
    assert out and not any(entry in d for d in out)
    for d in out:
        assert b.receive_datagram(d, 1, 2000) == 0
    b.handle_timer(2500)
    events = []
    while (ev := b.next_event()) is not None:
        events.append(ev)
    assert ("member", 1, "left") in [tuple(e[:3]) for e in events]
    assert b.node.counters()["ctl_queued"] >= 1


# ---------------------------------------------------------------- real sockets

def publish(node, n, tag):
    for k in range(n):
        while True:
            try:
                node.publish(tag + b"%d" % k)
                break
            except BlockingIOError:
                time.sleep(0.001)
        if k % 50 == 49:
            time.sleep(0.001)


def collect(node, want, timeout=10.0):
    got = {}
    end = time.time() + timeout
    while sum(got.values()) < want and time.time() < end:
        m = node.receive(timeout=0.1)
        if m is not None:
            k = (m.sender, m.seq, bytes(m.payload))
            got[k] = got.get(k, 0) + 1
    return got


@pytest.mark.netns
@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "control-mac-only"])
def test_an_encrypted_group_on_the_wire(tmp_path, encrypt):
    """Members 1 and 2 hold the key and encrypt; member 3 has another key;
    5 % of UDP is dropped on input, so payloads also travel in unicast
    repairs.  A packet socket on lo captures every UDP datagram sent in the
    namespace -- multicast and unicast, before the loss: none holds the
    payload, each is ENC.  Member 2 delivers each message exactly once;
    member 3 delivers nothing and counts every datagram under "auth".
    The control run (MAC only) finds the payload in multicast and unicast
    captures alike: the capture does see it when it is there."""
    import struct
    import threading

    from rpbcast.api import Node          # here: the engine tests above need no socket driver
    with netns.namespace(loss=0.05) as ns, netns.entered(ns):
        ports = {i: free_port() for i in (1, 2, 3)}
        gport = free_port()
        gip = "239.255.91.2"
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in ports]
        cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
        cap.bind(("lo", 0x0800))
        cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
        cap.settimeout(0.2)
        udp, stop = [], threading.Event()

        def capture():
            while not stop.is_set():
                try:
                    pkt, addr = cap.recvfrom(1 << 17)
                except (TimeoutError, socket.timeout):
                    continue
                if addr[2] != socket.PACKET_OUTGOING and len(pkt) > 28 and pkt[9] == 17:
                    ihl = (pkt[0] & 15) * 4
                    udp.append((struct.unpack_from("!H", pkt, ihl + 2)[0], pkt[ihl + 8:]))

        th = threading.Thread(target=capture, daemon=True)
        th.start()
        nodes = {}
        try:
            for i in ports:
                kf = key_file(tmp_path, f"keys{i}", KEY if i != 3 else OTHER)
                nodes[i] = Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs,
                                       gossip_interval=0.02, group_addr=f"{gip}:{gport}",
                                       store_entries=1 << 16, key_file=kf, encrypt=encrypt))
            publish(nodes[1], 300, SECRET)
            got = collect(nodes[2], 300, timeout=20)
            assert len(got) == 300 and set(got.values()) == {1}
            assert {p for _, _, p in got} == {SECRET + b"%d" % k for k in range(300)}
            time.sleep(0.3)
            assert collect(nodes[2], 1, timeout=0.3) == {}          # nothing twice
            st2 = nodes[2].stats()
            assert st2["replay_fresh"] > 0 and st2["replay_refused"] == 0   # control read, none refused
            assert collect(nodes[3], 1, timeout=0.5) == {}
            assert nodes[3].stats()["rx_reasons"].get("auth", 0) > 0
        finally:
            stop.set()
            th.join()
            cap.close()
            for n in nodes.values():
                n.close()
        ours = [(port, d) for port, d in udp if port in ports.values() or port == gport]
        assert sum(1 for port, _ in ours if port == gport) >= 10
        assert sum(1 for port, _ in ours if port != gport) >= 10           # unicast too
        if encrypt:
            assert all(d[:2] == b"RP" and d[3] & wire.DGF_ENC for _, d in ours)
            assert not any(b"SECRET" in d for _, d in udp)
        else:
            assert any(b"SECRET" in d for port, d in ours if port == gport)
            assert any(b"SECRET" in d for port, d in ours if port != gport)    # repairs
