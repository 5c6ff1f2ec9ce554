"""Identity among key holders (Config.signed; docs/security.md, "Identity
among key holders"): with one group key any key holder can seal a datagram
in another member's name; with signatures, an authority-bearing message
(JOIN, LEAVE, MEMBERS, GAPNOTE, GCNOTE, LOGACK) is taken only with a valid
Ed25519 signature of the datagram's source, and anything else is dropped
under the reason "sig".  DATA is not signed.  The forgeries are sealed
with the real group key (the key holder's view), so the MAC passes."""
import os
import struct
import sys
import time

import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.core import digest, wire
from rpbcast.core.node import DEST_MCAST, ed25519_public
from rpbcast.protocol.engine import Engine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz"))
from fuzz_engine import Sealer  # noqa: E402  (AES-128-GMAC sealing in Python, as csrc/auth.c)
from ports import free_port

T = wire.MsgType
KEY = bytes(range(0x30, 0x40))
KID = 7
PRIV = {i: bytes([i]) * 32 for i in (1, 2, 3, 4)}
PUB = {i: ed25519_public(p) for i, p in PRIV.items()}
SIGNED_TRAILER = 93


def key_file(tmp_path, i, pubs=(1, 2, 3), sign=True):
    p = tmp_path / f"keys{i}"
    lines = [f"{KID} {KEY.hex()}"]
    if sign:
        lines.append(f"sign {PRIV[i].hex()}")
    lines += [f"pub {j} {PUB[j].hex()}" for j in pubs]
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def engine(tmp_path, i, signed=True, counter0=None, **kw):
    specs = [MemberSpec(j, j) for j in (1, 2, 3)]
    return Engine(Config(node_id=i, members=specs, incarnation=1, signed=signed,
                         key_file=key_file(tmp_path, i, sign=signed, **kw)), 0,
                  mac_counter0=counter0 if counter0 is not None else 1000 * i)


def reason(e, d, src=1, now=2000):
    return wire.reason_names()[e.receive_datagram(d, src, now)]


def gapnote_body(sender, inc=1):
    return wire.missing_section(sender, inc, digest.encode([(0, 1 << 20)], 0, 1 << 20)[0])


def emitted(e, type_, body=b"", dest=DEST_MCAST, seq=0):
    e.datagrams_to_send()
    e.emit(dest, type_, body, seq=seq)
    (d,) = [x for _, x in e.datagrams_to_send()]
    return d


# a forger's counter: counters are wall-clock timestamps (csrc/auth.h), so
# one 11 days ahead is far above every genuine member's
FAR_AHEAD = time.time_ns() + 10**15


def forged(source, msgs, sig_block=None, counter=None):
    """A datagram in `source`'s name sealed with the group key, as a key
    holder can: without a signature, or with `sig_block` (68 bytes) and the
    SIG flag.  Its counter by default FAR_AHEAD."""
    counter = FAR_AHEAD if counter is None else counter
    d = bytearray(wire.datagram(msgs, group=1, source=source, source_inc=1))
    d[3] |= wire.DGF_MAC
    if sig_block is None:
        return Sealer(KID, KEY, counter).seal(bytes(d))
    d[3] |= wire.DGF_SIG
    struct.pack_into("<H", d, 18, SIGNED_TRAILER)
    d += sig_block
    ctr = counter
    t = Sealer(KID, KEY, counter).tag(bytes(d), source, ctr)
    return bytes(d) + bytes([KID]) + struct.pack("<Q", ctr) + t


# ---------------------------------------------------------------- configuration

def test_signed_needs_its_keys(tmp_path):
    with pytest.raises(ConfigError, match="signed needs key_file"):
        Config(signed=True)
    with pytest.raises(ConfigError, match="no 'sign"):
        Config(signed=True, key_file=key_file(tmp_path, 1, sign=False))
    with pytest.raises(ConfigError, match="no 'pub"):
        Config(signed=True, key_file=key_file(tmp_path, 1, pubs=()))
    p = tmp_path / "bad"
    p.write_text(f"1 {KEY.hex()}\nsign {PRIV[1].hex()}\npub 2 00ff\n")
    with pytest.raises(ConfigError, match="key_file .*32 bytes"):
        Config(signed=True, key_file=str(p))
    # the MAC key reader is not disturbed by signature lines
    assert Config(key_file=key_file(tmp_path, 1)).key_file


# ---------------------------------------------------------------- genuine

@pytest.mark.parametrize("type_, body, seq", [
    (T.GAPNOTE, gapnote_body(1), 0), (T.GCNOTE, gapnote_body(1), 0), (T.LOGACK, b"", 3),
    (T.LEAVE, b"", 5), (T.JOIN, wire.member_entry(wire.Member(1, 1, 1, 0, 0, 1, 0, 9, 0)), 9),
], ids=["GAPNOTE", "GCNOTE", "LOGACK", "LEAVE", "JOIN"])
def test_a_signed_authority_message_of_its_own_source_is_taken(tmp_path, type_, body, seq):
    a, b = engine(tmp_path, 1), engine(tmp_path, 2)
    d = emitted(a, type_, body, seq=seq)
    assert d[3] & wire.DGF_SIG and len(d) >= SIGNED_TRAILER
    assert a.node.signatures == 1
    q0 = b.node.counters()["ctl_queued"]
    assert reason(b, d) == "ok"
    assert b.node.counters()["ctl_queued"] == q0 + 1
    assert reason(b, d) == "replay"                   # the signed window


def test_signed_datagrams_of_several_sources_interleaved_are_all_taken(tmp_path):
    """One verifier, three signers, alternating, many datagrams each (a
    verification context reused across keys once refused valid signatures:
    found on real sockets, csrc/auth.c resets it)."""
    es = {i: engine(tmp_path, i) for i in (1, 3)}
    b = engine(tmp_path, 2)
    for k in range(20):
        for i, e in es.items():
            d = emitted(e, T.LOGACK if k % 2 else T.LEAVE, seq=k + 1)
            assert reason(b, d, src=i) == "ok", (i, k)
    assert all(e.node.signatures == 20 for e in es.values())


def test_data_is_not_signed_and_is_delivered(tmp_path):
    a, b = engine(tmp_path, 1), engine(tmp_path, 2)
    for k in range(20):
        a.publish(b"m%d" % k, now=1000)
    a.handle_timer(1001)
    out = [d for _, d in a.datagrams_to_send()]
    assert a.node.signatures == 0 and not any(d[3] & wire.DGF_SIG for d in out)
    for d in out:
        assert reason(b, d) == "ok"
    assert sorted(m.seq for m in b.recv(now=3000)) == list(range(20))
    assert b.counters()["signatures"] == 0


def test_signed_and_encrypted(tmp_path):
    specs = [MemberSpec(j, j) for j in (1, 2)]
    a, b = (Engine(Config(node_id=i, members=specs, incarnation=1, signed=True, encrypt=True,
                          key_file=key_file(tmp_path, i, pubs=(1, 2))), 0, mac_counter0=1000 * i)
            for i in (1, 2))
    d = emitted(a, T.GAPNOTE, gapnote_body(1))
    assert d[3] & wire.DGF_ENC and d[3] & wire.DGF_SIG
    assert reason(b, d) == "ok"
    tampered = bytearray(d)
    tampered[-SIGNED_TRAILER + 10] ^= 1              # inside the (encrypted) signature
    assert reason(b, bytes(tampered)) == "auth"


# ---------------------------------------------------------------- forgeries by a key holder

GAP = [(T.GAPNOTE, 0, 1, 1, 0, 0, gapnote_body(1))]


@pytest.mark.parametrize("how", ["unsigned", "garbage signature", "signer is another node",
                                 "signed by another key"])
def test_a_key_holder_cannot_speak_in_another_members_name(tmp_path, how):
    """Member 3 holds the group key: it seals a GAPNOTE "lost [0, 2^20)"
    about member 1's stream in member 1's name (source 1).  Dropped under
    "sig" and never seen by the control plane; member 1's own signed word
    is still taken afterwards (the forgery did not move its window)."""
    b = engine(tmp_path, 2)
    sig = {"unsigned": None,
           "garbage signature": struct.pack("<I", 1) + os.urandom(64),
           "signer is another node": struct.pack("<I", 3) + os.urandom(64),
           "signed by another key": "member 3"}[how]
    if sig == "member 3":
        # member 3's own genuine signed GAPNOTE about stream 1, re-addressed
        # to source 1 and re-sealed with the group key: 3's signature
        d = bytearray(emitted(engine(tmp_path, 3), T.GAPNOTE, gapnote_body(1))[:-25])
        struct.pack_into("<I", d, 8, 1)
        struct.pack_into("<I", d, len(d) - 68, 1)
        ctr = FAR_AHEAD
        d = bytes(d) + bytes([KID]) + struct.pack("<Q", ctr) + Sealer(KID, KEY, ctr).tag(bytes(d), 1, ctr)
    else:
        d = forged(1, GAP, sig)
    q0 = b.node.counters()["ctl_queued"]
    assert reason(b, d) == "sig"
    assert b.node.counters()["ctl_queued"] == q0
    assert b.node.rx_reasons() == {"sig": 1}
    a = engine(tmp_path, 1)                               # its counter is far below the forgery's
    assert reason(b, emitted(a, T.GAPNOTE, gapnote_body(1))) == "ok"


def test_a_signed_datagram_captured_before_the_receiver_started_is_stale(tmp_path):
    """Signed datagrams have a replay window of their own; it has the clock
    floor too (csrc/replay.h): member 1's genuine signed GAPNOTE, resent to
    a member 2 that started 10 s later, is "stale", never taken."""
    d = emitted(engine(tmp_path, 1), T.GAPNOTE, gapnote_body(1))
    b = engine(tmp_path, 2)
    b.node.set_wall_clock_offset(10 * 10**9)
    q0 = b.node.counters()["ctl_queued"]
    assert reason(b, d) == "stale"
    assert b.node.counters()["ctl_queued"] == q0
    assert b.node.auth_stats()["replay_stale"] == 1


def test_a_forged_sig_flag_on_a_non_authority_datagram_is_checked(tmp_path):
    """A GOSSIP claiming a signature must carry a valid one: otherwise a key
    holder could push member 1's signed window ahead with it."""
    b = engine(tmp_path, 2)
    gossip = [(T.GOSSIP, 0, 1, 1, 0, 0, wire.gossip_body(0, 0, 1))]
    assert reason(b, forged(1, gossip, struct.pack("<I", 1) + bytes(64))) == "sig"
    assert reason(b, forged(1, gossip)) == "ok"           # unsigned GOSSIP: no authority, allowed


def test_a_member_without_a_signing_key_is_not_taken_for_authority(tmp_path):
    """A keyed member that does not sign: its DATA is delivered, its
    authority-bearing messages are dropped at a verifying member; and a
    signer unknown to the verifier (no pub line) is dropped too."""
    b = engine(tmp_path, 2)
    u = engine(tmp_path, 3, signed=False)
    u.publish(b"x", now=1000)
    u.handle_timer(1001)
    for _, d in u.datagrams_to_send():
        assert reason(b, d, src=3) == "ok"
    assert len(b.recv(now=3000)) == 1
    assert reason(b, emitted(u, T.LEAVE, seq=4), src=3) == "sig"
    stranger = Engine(Config(node_id=4, members=[MemberSpec(j, j) for j in (1, 2, 3, 4)], incarnation=1,
                             signed=True, key_file=key_file(tmp_path, 4, pubs=(1, 2, 3, 4))), 0,
                      mac_counter0=4000)
    assert reason(b, emitted(stranger, T.LEAVE, seq=4), src=4) == "sig"


def test_a_verifying_node_without_signing_reads_signed_datagrams(tmp_path):
    """Keyed nodes that do not verify read signed datagrams (the longer
    trailer) like any other: turning signatures on is a rolling change."""
    a = engine(tmp_path, 1)
    plain = Engine(Config(node_id=2, members=[MemberSpec(j, j) for j in (1, 2, 3)], incarnation=1,
                          key_file=key_file(tmp_path, 2, sign=False)), 0, mac_counter0=2000)
    assert reason(plain, emitted(a, T.LEAVE, seq=4)) == "ok"
    a.publish(b"y", now=1000)
    a.handle_timer(1001)
    for _, d in a.datagrams_to_send():
        assert reason(plain, d) == "ok"
    assert len(plain.recv(now=3000)) == 1


# ---------------------------------------------------------------- real sockets

@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_signed_group_with_a_logger_on_real_sockets(tmp_path):
    """Two members and a logger, all signing, on real sockets in a
    namespace: every message is delivered exactly once, the logger's
    LOGACKs are signed and taken (the sender's buffer is released), and
    nothing is dropped under "sig"."""
    import time

    from rpbcast.api import Node
    from rpbcast.tools import netns


    with netns.namespace() as ns, netns.entered(ns):
        ports = {i: free_port() for i in (1, 2, 3)}
        gport = free_port()
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}", "logger" if i == 3 else "member") for i in ports]
        nodes = {}
        try:
            for i in ports:
                cfg = dict(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, gossip_interval=0.02,
                           group_addr=f"239.255.91.4:{gport}", signed=True, key_file=key_file(tmp_path, i))
                if i == 3:
                    cfg.update(role="logger", log_dir=str(tmp_path / "log3"))
                nodes[i] = Node(Config(**cfg))
            for k in range(300):
                while True:
                    try:
                        nodes[1].publish(b"s%d" % k)
                        break
                    except BlockingIOError:
                        time.sleep(0.001)
            got = {}
            end = time.time() + 15
            while len(got) < 300 and time.time() < end:
                m = nodes[2].receive(timeout=0.1)
                if m is not None:
                    got[m.seq] = got.get(m.seq, 0) + 1
            assert len(got) == 300 and set(got.values()) == {1}
            end = time.time() + 10
            while nodes[3].stats()["signatures"] == 0 and time.time() < end:
                time.sleep(0.05)
            assert nodes[3].stats()["signatures"] > 0             # the logger signed its LOGACKs
            time.sleep(0.5)
            for i in ports:
                assert nodes[i].stats().get("rx_reasons", {}).get("sig", 0) == 0, i
        finally:
            for n in nodes.values():
                n.close()
