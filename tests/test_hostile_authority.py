"""Defence in depth among key holders (issue 14, docs/security.md,
"Authority"): a member that holds the group key -- node 5 here, running
the library, so every datagram it sends carries its own node id and a
valid MAC -- sends each forgery of the issue's "Forgeries are all accepted"
paragraph in the name of others.  Each is dropped and counted by reason,
none acts, and the genuine stream is delivered exactly once.

On the in-memory network: the point is the engine's path (the C data plane
and the control plane's dispatch), which is the same on real sockets."""
import struct

import pytest

from rpbcast import Config
from rpbcast.core import digest, wire
from rpbcast.core.node import DEST_MCAST
from rpbcast.drivers.memnet import NS, MemNet

T = wire.MsgType
KEY = bytes(range(16))
SENDER, RECEIVERS, LOGGER, ATTACKER = 1, (2, 3), 4, 5
N = 200


class Keyed:
    """Members 1..5 on a MemNet, all with the group key; 4 is a logger."""

    def __init__(self, tmp_path, logger=True):
        kf = tmp_path / "keys"
        kf.write_text("1 " + KEY.hex() + "\n")
        self.net = MemNet(seed=3, jitter=0.0002)
        ids = [1, 2, 3, 4, 5]
        specs = MemNet.member_specs(ids, loggers=[LOGGER] if logger else [])
        self.E = {}
        for i in ids:
            role = "logger" if (logger and i == LOGGER) else "member"
            # (the key holder's MTU is larger: it may send what others cannot answer in one datagram)
            self.E[i] = self.net.add(Config(node_id=i, members=specs, role=role, incarnation=10 + i,
                                            mtu=9000 if i == ATTACKER else 1472,
                                            gossip_interval=0.02, key_file=str(kf),
                                            log_dir=str(tmp_path / f"log{i}") if role == "logger" else None))
        self.got = {i: {} for i in RECEIVERS}

    def publish(self, n, tag):
        e = self.E[SENDER]
        left = [n]

        def go(net):
            for _ in range(5):
                if left[0] <= 0:
                    return
                e.publish(tag + b"%d" % e.node.next_seq, now=net.now)
                left[0] -= 1
            net.at(net.now + NS // 1000, go)

        self.net.at(self.net.now + NS // 1000, go)

    def drain(self):
        for i in RECEIVERS:
            for d in self.E[i].recv(now=self.net.now):
                k = (d.sender, d.inc, d.seq, d.payload)
                self.got[i][k] = self.got[i].get(k, 0) + 1

    def forge(self, *msgs, dest=DEST_MCAST):
        """The key holder sends these messages (type, flags, sender, inc, aux, seq, body)."""
        a = self.E[ATTACKER]

        def go(net):
            for type_, flags, sender, inc, aux, seq, body in msgs:
                a.node.emit(dest, type_, flags, sender, inc, aux, seq, body)
        self.net.at(self.net.now + 1, go)

    def exactly_once(self, total):
        inc = self.E[SENDER].inc
        for i in RECEIVERS:
            seqs = sorted(k[2] for k in self.got[i] if k[0] == SENDER and k[1] == inc)
            assert seqs == list(range(total)), f"node {i}: {len(seqs)} of {total}"
            assert max(self.got[i].values()) == 1, f"node {i} delivered twice"
            assert not [k for k in self.got[i] if b"FORGED" in k[3]], f"node {i} delivered a forgery"

    def rejected(self, reason):
        return {i: self.E[i].counters().get("ctl_rejected_" + reason, 0) for i in self.E if i != ATTACKER}


def run(g, secs):
    end = g.net.now + int(secs * NS)
    while g.net.now < end:
        g.net.run(0.01)
        g.drain()


def start(tmp_path, logger=True):
    g = Keyed(tmp_path, logger)
    g.publish(N, b"m")
    run(g, 0.5)
    return g


def member_entry(node_id, inc, addr, freshness, status=1, role=0):
    return struct.pack("<IIBBHIIIQQ", node_id, inc, status, role, addr & 0xFFFF, (addr >> 16) & 0xFFFFFFFF,
                       0, 0, freshness, 0)


def gap_body(sender, inc, lo, hi):
    return wire.missing_section(sender, inc, digest.encode([(lo, hi)], lo, hi)[0])


# ------------------------------------------------------------------ DATA

def test_data_ahead_of_the_stream_from_another_node_is_dropped(tmp_path):
    """Issue: "DATA as member 1 at seq+200 is delivered and the genuine
    messages are then dropped as duplicates"."""
    g = start(tmp_path)
    inc = g.E[SENDER].inc
    g.forge(*[(T.DATA, 0, SENDER, inc, 0, N + 50 + k, b"FORGED%d" % k) for k in range(5)])
    run(g, 0.1)
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)
    for i in RECEIVERS:
        assert g.E[i].node.rx_reasons().get("not_own", 0) >= 1


def test_data_at_a_new_incarnation_from_another_node_does_not_end_the_stream(tmp_path):
    """Issue: "at incarnation+1 the real stream is marked dead" -- by DATA
    from another node, or by a REPAIR naming the new incarnation."""
    g = start(tmp_path)
    inc = g.E[SENDER].inc
    g.forge((T.DATA, 0, SENDER, inc + 1, 0, 0, b"FORGED-inc"))
    g.forge((T.REPAIR, 0, SENDER, inc + 1, 0, 0, b"FORGED-inc-repair"))
    run(g, 0.1)
    for i in (2, 3, LOGGER):
        node = g.E[i].node
        assert not node.peer_dead(node.find_peer(SENDER, inc)), f"node {i} ended the live stream"
    g.publish(N, b"n")
    run(g, 1.5)
    g.exactly_once(2 * N)


# ------------------------------------------------------------------ notes

@pytest.mark.parametrize("span", ["absurd", "plausible"])
def test_a_gapnote_about_another_senders_stream_from_a_non_logger_is_dropped(tmp_path, span):
    """Issue: "A forged GAPNOTE 'lost [0, 2^40]' makes genuine messages
    permanently lost".  Receivers miss ids 150..199 (the key holder's
    note arrives while they are missing) and still get every one."""
    g = Keyed(tmp_path)
    inc = g.E[SENDER].inc
    lost = set(range(150, 200))
    g.net.drop_filter = lambda src, dst, data: (dst in RECEIVERS and any(
        m[0] in (T.DATA, T.REPAIR) and m[2] == SENDER and m[5] in lost for m in wire.parse(data)[1]))
    g.publish(N, b"m")
    run(g, 0.3)
    assert all(g.E[i].node.peer_missing_count(g.E[i].node.find_peer(SENDER, inc), 2) == len(lost)
               for i in RECEIVERS)
    hi = (1 << 40) if span == "absurd" else N + 10
    before = {i: g.E[i].counters()["forgotten"] for i in RECEIVERS}
    g.forge((T.GAPNOTE, wire.F_LOST, ATTACKER, g.E[ATTACKER].inc, 0, 0, gap_body(SENDER, inc, 0, hi)))
    run(g, 0.1)
    g.net.drop_filter = None
    run(g, 1.5)
    assert all(not any(ev[0] == "lost" for ev in g.E[i].events) for i in RECEIVERS)
    assert {i: g.E[i].counters()["forgotten"] for i in RECEIVERS} == before
    g.exactly_once(N)
    reason = "out_of_bounds" if span == "absurd" else "not_authority"
    assert all(g.rejected(reason)[i] >= 1 for i in RECEIVERS), g.rejected(reason)


def test_a_gcnote_beyond_anything_sent_is_dropped(tmp_path):
    g = start(tmp_path)
    inc = g.E[SENDER].inc
    g.forge((T.GCNOTE, 0, ATTACKER, g.E[ATTACKER].inc, 0, 0, gap_body(SENDER, inc, 0, 1 << 40)))
    run(g, 0.1)
    assert all(g.rejected("out_of_bounds")[i] >= 1 for i in RECEIVERS)
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


# ------------------------------------------------------------------ ACKs

def test_a_logger_ack_from_a_non_logger_frees_nothing_and_blocks_nothing(tmp_path):
    """Issue: "One 48-byte forged logger ACK frees unlogged messages and then
    blocks every real ACK: publish is blocked for good"."""
    g = start(tmp_path)
    s = g.E[SENDER]
    inc = s.inc
    run(g, 0.5)
    assert s.node.acked == s.node.next_seq == N         # the logger acknowledged everything
    g.net.crash(LOGGER)                                  # from now on nothing real acknowledges
    g.publish(50, b"n")
    run(g, 0.2)
    held = s.node.acked
    assert held == N
    g.forge((T.LOGACK, 0, SENDER, inc, 0, 1 << 20, b""), dest=SENDER)
    run(g, 0.1)
    assert s.node.acked == held, "a key holder's ACK released unlogged messages"
    assert g.rejected("not_authority")[SENDER] == 1
    # the real logger comes back and its ACKs are heard
    g.net.down.discard(LOGGER)
    g.net._arm(LOGGER)
    run(g, 1.5)
    assert s.node.acked == s.node.next_seq == N + 50
    g.exactly_once(N + 50)


# ------------------------------------------------------------------ membership

def test_a_join_in_another_nodes_name_is_dropped(tmp_path):
    """Issue: "A forged JOIN makes the attacker a member that receives
    traffic" -- here node 99's entry, with the key holder's address."""
    g = start(tmp_path)
    g.forge((T.JOIN, 0, 99, 1, 0, 1 << 40, member_entry(99, 1, ATTACKER, 1 << 40)))
    run(g, 0.2)
    for i in (1, 2, 3, LOGGER):
        assert 99 not in g.E[i].members, f"node {i}"
    assert all(g.rejected("not_own_name")[i] >= 1 for i in (1, 2, 3, LOGGER))
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


def test_a_leave_in_another_members_name_is_dropped(tmp_path):
    """Issue: "a forged LEAVE removes a member for good"."""
    g = start(tmp_path)
    victim = 2
    g.forge((T.LEAVE, 0, victim, g.E[victim].inc, 0, 1 << 40, b""))
    run(g, 0.3)
    for i in (1, 3, LOGGER):
        m = g.E[i].members.get(victim)
        assert m is not None and m.status == 1 and m.freshness < 1 << 40, f"node {i}: {m}"
    assert all(g.rejected("not_own_name")[i] >= 1 for i in (1, 3, LOGGER))
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


def test_a_members_entry_moving_a_member_to_another_address_is_dropped(tmp_path):
    """Issue: "a forged MEMBERS entry redirects a member's unicast traffic
    to the attacker"."""
    g = start(tmp_path)
    victim = 3
    entry = member_entry(victim, g.E[victim].inc, ATTACKER, 1 << 40)
    g.forge((T.MEMBERS, wire.F_PUSH, ATTACKER, g.E[ATTACKER].inc, 1, 0, entry))
    run(g, 0.3)
    for i in (1, 2, LOGGER):
        assert g.E[i].members.get(victim).addr == victim, f"node {i} redirected"
    assert all(g.rejected("members_not_authority")[i] >= 1 for i in (1, 2, LOGGER))
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


@pytest.mark.parametrize("status", [0, 4])
def test_a_members_entry_from_a_third_party_cannot_mark_a_member_left_or_jump_its_freshness(tmp_path, status):
    """A key holder's MEMBERS entry about another member, same incarnation
    and address: "left" (status 0) one step fresher, or "disconnected"
    (status 4) 2^40 fresher, which no genuine entry could ever pass.  Only
    the member itself or a logger says a member left, and a third party
    moves freshness only a few steps."""
    g = start(tmp_path)
    victim = 2
    before = g.E[1].members.get(victim).freshness
    fresh = before + 1 if status == 0 else before + (1 << 40)
    entry = member_entry(victim, g.E[victim].inc, victim, fresh, status=status)
    g.forge((T.MEMBERS, wire.F_PUSH, ATTACKER, g.E[ATTACKER].inc, 1, 0, entry))
    run(g, 0.3)
    for i in (1, 3, LOGGER):
        m = g.E[i].members.get(victim)
        assert m.status == 1 and m.freshness < before + 16, f"node {i}: {m}"
    reason = "members_not_authority" if status == 0 else "members_out_of_bounds"
    assert all(g.rejected(reason)[i] >= 1 for i in (1, 3, LOGGER))
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


def test_a_member_reasserts_its_entry_over_a_third_partys_fresher_one(tmp_path):
    """A small step ahead passes the bound (a relayed entry may be a few
    steps ahead): the forged "disconnected" reaches the others, but it
    reaches the member too, which answers with its own entry, fresher."""
    g = start(tmp_path)
    victim = 2
    before = g.E[1].members.get(victim).freshness
    entry = member_entry(victim, g.E[victim].inc, victim, before + 3, status=4)
    g.forge((T.MEMBERS, wire.F_PUSH, ATTACKER, g.E[ATTACKER].inc, 1, 0, entry))
    run(g, 0.5)
    for i in (1, 3, LOGGER):
        m = g.E[i].members.get(victim)
        assert m.status == 1 and m.freshness > before + 3, f"node {i}: {m}"
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


# ------------------------------------------------------------------ the dispatch guard

def test_a_message_that_makes_a_handler_raise_is_dropped_and_counted(tmp_path):
    """Whatever a handler raises on a peer's message stays inside the
    engine: the message is dropped, counted handler_error, and the next
    message is handled.  (A handler made to raise here: the inputs that
    made real ones raise are bounded now -- the next test is one.)"""
    g = start(tmp_path)
    e = g.E[2]
    real = e._handlers[T.PING]
    calls = []

    def raising(msg, now):
        calls.append(msg)
        if len(calls) == 1:
            raise ValueError("a handler's bug")
        real(msg, now)
    e._handlers[T.PING] = raising
    a = g.E[ATTACKER]
    for k in range(2):
        g.forge((T.PING, 0, ATTACKER, a.inc, 0, 7 + k, bytes(8)), dest=2)
        run(g, 0.05)
    assert len(calls) == 2
    assert e.counters()["ctl_rejected_handler_error"] == 1
    assert "ValueError: a handler's bug" in e.last_handler_error
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


def test_a_members_entry_with_an_absurd_freshness_is_refused(tmp_path):
    """A MEMBERS entry (in the key holder's own name) with freshness 2^60
    raised OverflowError in the membership signature, after the table had
    taken it: every later change of that entry raised again."""
    g = start(tmp_path)
    a = g.E[ATTACKER]
    g.forge((T.MEMBERS, wire.F_PUSH, ATTACKER, a.inc, 1, 0, member_entry(ATTACKER, a.inc, ATTACKER, 1 << 60)))
    run(g, 0.2)
    for i in (1, 2, 3, LOGGER):
        assert g.E[i].members.get(ATTACKER).freshness < 1 << 48, f"node {i}"
    g.publish(N, b"n")
    run(g, 1.0)
    g.exactly_once(2 * N)


# ------------------------------------------------------------------ on real sockets

@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_key_holder_in_a_namespace_forges_in_others_names_and_nothing_acts(tmp_path):
    """Real keyed nodes (1 sends, 2 and 3 receive, 4 logs) in a network
    namespace; a key holder (node 55: the group key, its own node id, its
    own MAC) sends DATA ahead of member 1's stream, a logger ACK for it,
    a GAPNOTE "lost [0, 2^40]" about it, a LEAVE of member 2 and a MEMBERS
    entry moving member 3 to itself, to every member's port and the group."""
    import socket
    import time as _time

    from rpbcast.core.node import Node as CoreNode
    from rpbcast.tools import netns
    from test_auth import OLD, collect, drain, keyed_group, publish

    with netns.namespace() as ns, netns.entered(ns):
        nodes, ports, (gip, gport) = keyed_group(tmp_path, {i: [(1, OLD)] for i in (1, 2, 3, 4)},
                                                 loggers=[4])
        try:
            publish(nodes[1], 300)
            for i in (2, 3):
                assert len(collect(nodes[i], 300)) == 300
            inc = {i: n.incarnation for i, n in nodes.items()}
            members0 = sorted((m[0], m[1], m[3]) for m in nodes[2].members())
            holder = CoreNode(1, 55, 1)
            holder.set_auth([(1, OLD)], _time.time_ns())
            me = (0x7F000001 << 16) | 9
            forged = [
                (T.DATA, 0, 1, inc[1], 0, 500, b"FORGED-ahead"),
                (T.LOGACK, 0, 1, inc[1], 0, 1 << 20, b""),
                (T.GAPNOTE, wire.F_LOST, 55, 1, 0, 0, gap_body(1, inc[1], 0, 1 << 40)),
                (T.LEAVE, 0, 2, inc[2], 0, 1 << 40, b""),
                (T.MEMBERS, wire.F_PUSH, 55, 1, 1, 0, member_entry(3, inc[3], me, 1 << 40)),
            ]
            out = []
            for type_, flags, sender, inc_, aux, seq, body in forged:     # one datagram each
                holder.emit(DEST_MCAST, type_, flags, sender, inc_, aux, seq, body)
                out += [d for _, d in holder.datagrams()]
            assert len(out) == len(forged)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
            for d in out:
                for i in nodes:
                    s.sendto(d, ("127.0.0.1", ports[i]))
            s.close()
            _time.sleep(0.3)
            publish(nodes[1], 300, tag=b"n")
            for i in (2, 3):
                got = collect(nodes[i], 300)
                assert sorted(got) == sorted((1, 300 + k, b"n%d" % k) for k in range(300)), f"node {i}"
                assert max(got.values()) == 1
                assert not [m for m in drain(nodes[i]) if b"FORGED" in m[2]]
            for i in (2, 3):
                st = nodes[i].stats()
                assert st["rx_reasons"].get("not_own", 0) >= 1, f"node {i}"
                assert st.get("ctl_rejected", 0) >= 2, f"node {i}"
                assert not [e for e in nodes[i].events() if e[0] == "lost"], f"node {i}"
            assert nodes[1].stats().get("ctl_rejected_not_authority", 0) >= 1
            assert sorted((m[0], m[1], m[3]) for m in nodes[2].members()) == members0
            addr3 = {m[0]: m[1] for m in nodes[2].members()}[3]
            assert {m[0]: m[1] for m in nodes[1].members()}[3] == addr3 == f"127.0.0.1:{ports[3]}"
            publish(nodes[1], 100, tag=b"p")
            assert len(collect(nodes[3], 100)) == 100
        finally:
            for n in nodes.values():
                n.close()
