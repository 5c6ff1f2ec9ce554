"""Streams of node ids that are not members live in a small pool of their own
and never displace or block a member's stream (issue 14; docs/security.md,
"Bounds"; csrc/node.h, rp_node_set_members).

Before: the data plane did not know the member table, so a key holder (or,
unkeyed, anyone who can send to the group) sealing DATA under ~max_streams
distinct node ids filled max_streams with streams that were each their
node's live own-heard one -- protected -- and every later genuine new
stream (a member's restart, a new member) was refused.  Now the engine
tells the data plane who is a member; a non-member's stream competes only
with other non-members' in a pool of Config.max_stranger_streams (the least
recently heard retired), and a node id that becomes a member takes its
streams out of the pool."""
import collections

import pytest

from rpbcast import Config
from rpbcast.core.node import Node
from rpbcast.drivers.memnet import NS, MemNet

from test_stream_quota import KEY, collect, sealed_data

POOL = {"max_stranger_streams": 64} if hasattr(Config(), "max_stranger_streams") else {}


class Keyed:
    """Members 1, 2, 3 (and 4, known to all but started later) on a MemNet,
    keyed; receivers 2 and 3 record every delivery."""

    def __init__(self, tmp_path, **bounds):
        self.kf = tmp_path / "keys"
        self.kf.write_text("1 " + KEY.hex() + "\n")
        self.net = MemNet(seed=11, jitter=0.0002)
        self.specs = MemNet.member_specs([1, 2, 3, 4])
        self.bounds = dict(bounds, **POOL)
        self.E = {}
        self.got = {i: collections.Counter() for i in (1, 2, 3)}
        self.inc = 1000
        for i in (2, 3):
            self.E[i] = self.net.add(self.config(i, 100 + i))
        self.E[1] = self.net.add(self.config(1, self.inc))

    def config(self, i, inc, **kw):
        kw = dict(self.bounds, **kw)
        kw.setdefault("members", self.specs)
        kw.setdefault("gossip_interval", 0.02)
        return Config(node_id=i, incarnation=inc, key_file=str(self.kf), **kw)

    def publish(self, e, n, tag):
        for _ in range(n):
            e.publish(tag + b"%d" % e.node.next_seq, now=self.net.now)

    def run(self, secs, receivers=(2, 3)):
        end = self.net.now + int(secs * NS)
        while self.net.now < end:
            self.net.run(0.01)
            for i in receivers:
                for d in self.E[i].recv(now=self.net.now):
                    self.got[i][(d.sender, d.inc, d.seq, d.payload)] += 1

    def assert_once(self, sender, inc, n, receivers=(2, 3)):
        for i in receivers:
            seqs = sorted(k[2] for k in self.got[i] if (k[0], k[1]) == (sender, inc))
            assert seqs == list(range(n)), f"node {i}: ({sender}, {inc}) delivered {seqs[:12]}... of {n}"
            assert all(v == 1 for k, v in self.got[i].items() if (k[0], k[1]) == (sender, inc)), \
                f"node {i}: ({sender}, {inc}) delivered twice"

    def flood(self, ids, per_id=3, receivers=(2, 3)):
        """A key holder's DATA sealed under each node id of ids (per_id
        messages each, in that id's own datagrams), straight to receivers."""
        for node_id in ids:
            for d in sealed_data(node_id, 1, range(per_id)):
                for i in receivers:
                    self.E[i].receive_datagram(d, 1, self.net.now)


def bounded(e, members, per_node, pool):
    """A receiver keeps at most its members' quotas plus the pool."""
    node = e.node
    c = node.counters()
    assert node.npeers <= members * per_node + pool, (node.npeers, members, per_node, pool)
    assert c.get("streams_stranger", node.npeers) <= pool


def test_a_flood_of_stranger_node_ids_stops_no_restart_no_joiner_and_no_member(tmp_path):
    """5,000 node ids' sealed DATA (3 messages each) reach the receivers;
    then (a) member 1 restarts, (b) a new member (9) joins through a
    sponsor, (c) every member publishes.  Before: the forged streams filled
    max_streams (they were live and own-heard) and (a) and (b) were refused.
    Now they churn through the pool of 64 and every genuine stream is
    delivered exactly once."""
    g = Keyed(tmp_path, max_streams=4096, max_streams_per_node=8)
    g.publish(g.E[1], 10, b"a")
    g.run(0.3)
    g.flood(range(10_000, 15_000))
    for i in (2, 3):
        c = g.E[i].counters()
        assert c["streams_refused"] == 0
        bounded(g.E[i], 4, 8, 64)
    # (a) a member's restart
    g.net.crash(1)
    g.inc += 1
    e1 = g.E[1] = g.net.add(g.config(1, g.inc))
    g.publish(e1, 20, b"r")
    # (b) a new member joining through sponsors (not in anybody's list)
    j = g.net.add(g.config(9, 77, members=[], join=True, sponsors=1, addr=9))
    assert g.net.run_until_true(lambda net: j.status == 1 and all(9 in g.E[i].members for i in (2, 3)),
                                timeout=3), "the joiner did not become a member"
    g.publish(j, 20, b"j")
    # (c) every member's stream
    g.publish(g.E[2], 15, b"m2")
    g.publish(g.E[3], 15, b"m3")
    g.run(1.0)
    g.assert_once(1, 1000, 10)
    g.assert_once(1, g.inc, 20)
    g.assert_once(9, 77, 20)
    g.assert_once(3, 103, 15, receivers=(2,))
    g.assert_once(2, 102, 15, receivers=(3,))
    for i in (2, 3):
        c = g.E[i].counters()
        assert c["streams_refused"] == 0 and c["streams_refused_node"] == 0
        assert c["streams_retired_stranger"] >= 5000 - 64      # (the forgeries arrived)
        assert not g.E[i].node.peer_stranger(g.E[i].node.find_peer(9, 77))
        bounded(g.E[i], 5, 8, 64)
        assert not [k for k in g.got[i] if k[0] >= 10_000 and b"FORGED" not in k[3]]


def test_a_new_members_stream_heard_before_its_join_is_promoted_and_delivered_once(tmp_path):
    """A joiner's DATA reaches a receiver before the receiver knows it is a
    member: its stream starts in the pool, and when the membership arrives
    it is promoted (counted streams_promoted) -- the same stream, not a new
    one: everything delivered exactly once, and a stranger flood after
    that cannot retire it."""
    g = Keyed(tmp_path, max_streams=4096, max_streams_per_node=8)
    j = g.net.add(g.config(9, 77, members=[], join=True, sponsors=1, addr=9))
    g.publish(j, 10, b"early")                     # at once: before any JOIN is answered
    assert g.net.run_until_true(lambda net: all(9 in g.E[i].members for i in (2, 3)), timeout=3)
    g.run(0.3)
    promoted = sum(g.E[i].counters()["streams_promoted"] for i in (2, 3))
    assert promoted >= 1, "no receiver heard the joiner before its membership"
    g.flood(range(20_000, 20_500))
    g.publish(j, 10, b"late")
    g.run(0.5)
    g.assert_once(9, 77, 20)
    for i in (2, 3):
        slot = g.E[i].node.find_peer(9, 77)
        assert slot is not None and not g.E[i].node.peer_stranger(slot)


def test_a_stream_retired_from_the_pool_comes_back_at_its_frontier_when_its_node_joins(tmp_path):
    """A node that is not a member yet speaks (its messages are delivered: a
    stranger's stream is a stream), then a flood of other node ids retires
    its stream from the pool, then it joins and speaks again: the stream is
    re-created at the frontier it had (its tombstone in the strangers'
    ring), and every message is delivered exactly once -- what the
    application had taken is not delivered again, what came later is
    delivered.  (What a receiver had NOT taken when the stream was retired
    is dropped with it at that receiver: docs/security.md, "Bounds".)"""
    g = Keyed(tmp_path, max_streams=4096, max_streams_per_node=8)
    # knows the group; the group does not know it (it does not gossip: no
    # MEMBERS exchange makes it a member before it joins)
    late = g.config(9, 77, members=g.specs, addr=9, gossip_interval=60.0, ping_interval=60.0)
    j = g.net.add(late)
    g.publish(j, 10, b"before")
    g.run(0.3)                                          # delivered and taken by the application
    for i in (2, 3):
        assert g.E[i].node.peer_stranger(g.E[i].node.find_peer(9, 77))
    g.flood(range(30_000, 30_200), per_id=1)
    for i in (2, 3):
        assert g.E[i].node.find_peer(9, 77) is None, "the flood did not retire it"
        g.E[i].handle_timer(g.net.now)
    # it becomes a member the way a member table changes: a JOIN through a sponsor
    j.join(g.net.now)
    assert g.net.run_until_true(lambda net: all(9 in g.E[i].members for i in (2, 3)), timeout=3)
    g.publish(j, 10, b"after")
    g.run(0.6)
    g.assert_once(9, 77, 20)
    for i in (2, 3):
        slot = g.E[i].node.find_peer(9, 77)
        assert slot is not None and not g.E[i].node.peer_stranger(slot)
        assert g.E[i].node.peer_info(slot)["base"] == 10


def test_a_member_that_leaves_goes_back_to_the_pool(tmp_path):
    """A member that leaves (LEAVE through sponsors) is a stranger again: its
    stream moves into the pool, where a flood can retire it; it no longer
    counts against max_streams."""
    g = Keyed(tmp_path, max_streams=4096, max_streams_per_node=8)
    g.publish(g.E[1], 5, b"x")
    g.run(0.3)
    g.E[1].leave(g.net.now)
    assert g.net.run_until_true(lambda net: all(g.E[i].members.get(1).status == 0 for i in (2, 3)),
                                timeout=3)
    for i in (2, 3):
        assert g.E[i].node.peer_stranger(g.E[i].node.find_peer(1, 1000))
    g.flood(range(40_000, 40_100), per_id=1)
    for i in (2, 3):
        assert g.E[i].node.find_peer(1, 1000) is None
        assert g.E[i].counters()["streams_stranger"] <= 64
    g.assert_once(1, 1000, 5)


def test_max_stranger_streams_is_checked():
    from rpbcast.config import ConfigError
    for bad in (0, -1, 1 << 25, "64"):
        with pytest.raises(ConfigError, match="max_stranger_streams"):
            Config(node_id=1, max_stranger_streams=bad).validate()
    assert Config().max_stranger_streams == 64


def test_every_engine_style_tells_the_data_plane_who_is_a_member():
    """rpbcast and the baselines on the same engine (pbcast, LBRM, SRM)
    create streams in the same data plane: each tells it its members, and a
    stranger's stream lands in the pool, a member's not."""
    from rpbcast.baselines import make_engine
    specs = MemNet.member_specs([1, 2, 3], loggers=[3])      # (LBRM needs its logger)
    for name in ("rpbcast", "pbcast", "lbrm", "srm"):
        e = make_engine(name, Config(node_id=2, members=specs, incarnation=2, protocol=name, **POOL), 0)
        node = e.node
        assert node.is_member(1) and node.is_member(3) and not node.is_member(50), name
        m = node.peer(50, 1, 0)
        s = node.peer(1, 1, 0)
        assert node.peer_stranger(m) and not node.peer_stranger(s), name
        assert node.counters()["streams_stranger"] == 1, name
        s60 = Node(1, 60, 1, store_bytes=1 << 16, store_entries=64)    # unkeyed here: a stranger's own DATA
        s60.publish(b"hello", None, 0)
        for _, d in s60.datagrams():
            e.receive_datagram(d, 60, 1)
        slot = node.find_peer(60, 1)
        assert slot is not None and node.peer_stranger(slot), name


@pytest.mark.netns
def test_on_real_sockets_a_flood_of_stranger_node_ids_does_not_stop_a_restart(tmp_path):
    """In a namespace, on real UDP sockets and multicast, keyed: receivers
    with max_streams 16; a key holder sends 3,000 sealed DATA, each under
    its own node id (none a member), to the receivers; then member 1
    restarts and is heard, every message exactly once.  Before: the first
    16 forged ids filled max_streams with live own-heard streams and the
    restart was refused."""
    import socket
    import time

    from rpbcast import MemberSpec, Node as ApiNode
    from rpbcast.tools import netns
    from ports import free_port

    kf = tmp_path / "keys"
    kf.write_text("1 " + KEY.hex() + "\n")
    with netns.namespace() as ns, netns.entered(ns):
        ports = {i: free_port() for i in (1, 2, 3)}
        gport = free_port()
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in (1, 2, 3)]

        def start(i, inc, **kw):
            return ApiNode(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, incarnation=inc,
                                  gossip_interval=0.02, group_addr=f"239.255.91.8:{gport}",
                                  key_file=str(kf), **kw))

        nodes = {i: start(i, 100 + i, max_streams=16, **POOL) for i in (2, 3)}
        sender = None
        try:
            sender = start(1, 5000)
            time.sleep(0.05)
            for k in range(10):
                sender.publish(b"a%d" % k)
            for i in (2, 3):
                assert collect(nodes[i], (1, 5000), 10) == {q: 1 for q in range(10)}
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for k in range(3000):
                for d in sealed_data(100_000 + k, 1, [0]):
                    for i in (2, 3):
                        s.sendto(d, ("127.0.0.1", ports[i]))
                if k % 100 == 99:
                    time.sleep(0.002)          # (no socket overflow: every one arrives)
            s.close()
            time.sleep(0.3)
            sender.close()
            sender = start(1, 6000)            # the restart
            time.sleep(0.05)
            for k in range(10):
                sender.publish(b"b%d" % k)
            for i in (2, 3):
                got = collect(nodes[i], (1, 6000), 10)
                assert got == {q: 1 for q in range(10)}, f"node {i}: {got}"
                st = nodes[i].stats()
                assert st["streams_refused"] == 0 and st["streams_refused_node"] == 0
                assert st["streams_retired_stranger"] >= 3000 - 64, st["streams_retired_stranger"]
                assert st["streams_stranger"] <= 64
        finally:
            if sender is not None:
                sender.close()
            for n in nodes.values():
                n.close()
