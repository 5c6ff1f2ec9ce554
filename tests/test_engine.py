"""The protocol engine, driven through its sans-IO interface on the in-memory
network (the unreliable channel of thesis §2.3)."""
import struct

import pytest

from groups import Group, payload
from rpbcast.core import wire
from rpbcast.config import Config, ConfigError, MemberSpec
from rpbcast.protocol.engine import Engine
from rpbcast.drivers.memnet import NS, MemNet
from rpbcast.core.node import DEST_MCAST


def test_lossless_group_delivers_everything_once_without_repairs(tmp_path):
    g = Group(5, senders=[1, 2], loggers=[5], tmp_path=tmp_path)
    g.publish_stream(200)
    assert g.run_until_complete(timeout=5)
    assert not g.duplicates() and not g.extras() and g.payload_ok
    assert g.total("gaps") == 0
    assert g.total("repairs_peer") + g.total("repairs_logger") == 0
    assert g.total("served") == 0


@pytest.mark.parametrize("loss", [0.0, 0.01, 0.05, 0.20])
def test_ten_nodes_three_senders_one_logger_exactly_once(tmp_path, loss, capsys):
    g = Group(10, senders=[1, 2, 3], loggers=[10], tmp_path=tmp_path, loss=loss, seed=7)
    g.publish_stream(300, per_tick=3)
    assert g.run_until_complete(timeout=60), "not everything was delivered"
    assert not g.duplicates(), "a message was delivered twice"
    assert not g.extras(), "a message was delivered that nobody sent"
    assert g.payload_ok
    recv = g.receivers()
    peer, logger = g.total("repairs_peer", recv), g.total("repairs_logger", recv)
    with capsys.disabled():
        print(f"\n  loss {loss:4.0%}: repairs by peers {peer:5d}, by the logger {logger:4d}, "
              f"gaps {g.total('gaps', recv)}, datagrams dropped {g.net.dropped}/{g.net.sent}")
    if loss == 0:
        assert peer + logger == 0
    if 0 < loss <= 0.05:
        # The thesis's central claim: gossip moves repairs off the logger.
        assert peer > 4 * logger


def test_idle_sender_last_message_lost_is_recovered_by_heartbeat(tmp_path):
    """The sender goes idle right after a message everybody lost: the idle
    heartbeat reveals the gap (§5.1)."""
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path)
    last = 9

    def drop_last(src, dst, data):
        h, msgs = wire.parse(data)
        return any(m.type == wire.MsgType.DATA and m.seq == last for m in msgs)

    g.net.drop_filter = drop_last
    g.publish_stream(last + 1, per_tick=1)
    assert g.run_until_complete(timeout=5)
    assert g.total("hb_in", g.receivers()) > 0
    assert all(g.got[i][(1, 1, last)] == 1 for i in (2, 3))


def test_idle_heartbeat_lost_too_signatures_recover_it(tmp_path):
    """Last message and the idle heartbeat both lost for node 3: the hashed
    heartbeat signature in gossip differs, node 3 gets the heartbeat list
    and pulls the message (§5.1)."""
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path)
    last = 9

    def drop(src, dst, data):
        if dst != 3:
            return False
        h, msgs = wire.parse(data)
        return any((m.type == wire.MsgType.DATA and m.seq == last) or m.type == wire.MsgType.HEARTBEAT
                   for m in msgs)

    g.net.drop_filter = drop
    g.publish_stream(last + 1, per_tick=1)
    assert g.run_until_complete(timeout=5)
    assert g.E[3].counters()["hb_in"] == 0          # it never saw a HEARTBEAT
    assert g.E[3].traffic()["hblist"][0] > 0        # it learnt from a heartbeat list
    assert g.got[3][(1, 1, last)] == 1


def test_gcnote_hands_over_to_the_logger(tmp_path):
    """A receiver cut off while peers collect their gossip buffers gets
    GcNOTEs and is repaired by the logger (§4.3)."""
    g = Group(5, senders=[1], loggers=[5], tmp_path=tmp_path, gc_limit=2)
    cut = {"on": True}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and (dst == 3 or src == 3)
    g.publish_stream(100, per_tick=10)
    g.net.run(1.0)                 # gossip buffers are collected after 2 rounds
    cut["on"] = False
    assert g.run_until_complete(timeout=10)
    c = g.E[3].counters()
    assert c["to_logger_ids"] > 0
    assert c["repairs_logger"] > 0
    assert not g.duplicates()


def test_malformed_datagrams_are_counted_not_fatal(tmp_path):
    g = Group(2, senders=[1], tmp_path=tmp_path)
    e = g.E[2]
    good = wire.datagram([(wire.MsgType.DATA, 0, 1, 1, 0, 0, b"x")])
    bad = [b"", b"\x00" * 10, b"XX" + good[2:], good[:-1], good + b"\x00",
           good[:2] + b"\x09" + good[3:], bytes(range(256))]
    for b in bad:
        e.receive_datagram(b, 1, g.net.now)
    reasons = e.node.rx_reasons()
    assert sum(reasons.values()) == len(bad)
    assert reasons["short"] == 2 and reasons["magic"] >= 1 and reasons["version"] == 1
    # still works
    assert e.receive_datagram(good, 1, g.net.now) == 0
    assert e.counters()["rx_new"] == 1


def test_other_group_is_rejected(tmp_path):
    g = Group(2, senders=[1], tmp_path=tmp_path)
    other = wire.datagram([(wire.MsgType.DATA, 0, 1, 1, 0, 0, b"x")], group=99)
    assert g.E[2].receive_datagram(other, 1, g.net.now) == wire.Reason.GROUP
    assert g.E[2].counters()["rx_new"] == 0


def test_dynamic_join_with_sponsors(tmp_path):
    """A node joins a running group through k sponsors and answers for
    messages after its join time (§5.3)."""
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path)
    g.publish_stream(50, per_tick=5)
    g.net.run(0.2)
    new = Config(node_id=9, incarnation=1, join=True, sponsors=2, gossip_interval=0.05,
                 members=[], addr=9)
    e = g.net.add(new)
    assert g.net.run_until_true(lambda net: e.status == 1, timeout=2)
    assert e.group.sponsors == set() and any(ev[:2] == ("status", "member") for ev in e.events)
    # the others know it now
    assert all(9 in g.E[i].members for i in (1, 2, 3, 4))
    start = g.E[1].node.next_seq
    g.publish_stream(30, per_tick=5)
    g.net.run(0.5)
    got = {d.seq for d in e.recv()}
    assert set(range(start, start + 30)) <= got
    assert min(got) >= start - 1          # nothing from before its join time


def test_membership_changes_are_trace_events(tmp_path):
    from rpbcast.protocol.trace_events import EV_MEMBER
    from rpbcast.protocol.membership import MEMBER
    g = Group(3, senders=[1])
    for i in g.ids:
        g.E[i].node.enable_trace(4096)
    e = g.net.add(Config(node_id=9, incarnation=5, join=True, sponsors=2, gossip_interval=0.05,
                         members=[], addr=9))
    assert g.net.run_until_true(lambda net: e.status == MEMBER and all(9 in g.E[i].members for i in g.ids),
                                timeout=2)
    for i in g.ids:
        t = g.E[i].node.take_trace()
        rows = {(int(s), int(c), int(a)) for ev, s, c, a in zip(t["event"], t["sender"], t["inc"], t["aux"])
                if ev == EV_MEMBER}
        assert (9, 5, MEMBER) in rows, (i, rows)


def test_logger_restart_keeps_serving_what_it_acknowledged(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, fsync="always")
    g.publish_stream(200, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(0.5)
    acked = g.E[1].node.acked
    assert acked == 200
    # Crash the logger: drop the engine without closing the log.
    g.net.crash(4)
    log = g.E[4].logger.log
    del g.E[4]
    log.close()
    e = g.start(4)
    assert {k: v for k, v in e.logger.recovered.items()} == {(1, 1): 200}
    # A brand-new receiver that wants everything gets it from the restarted logger.
    late = g.net.add(Config(node_id=7, incarnation=1, members=g.specs + [MemberSpec(7, 7)],
                            catch_up=True, gossip_interval=0.05))
    slot = late.node.peer(1, 1, 0)
    late.node.heartbeat(slot, 199, False, g.net.now)
    late.node.to_logger_phase(slot, 0, 199)
    assert g.net.run_until_true(lambda net: len({d.seq for d in late.recv()} | set()) >= 0 and
                                late.node.peer_missing_count(slot) == 0, timeout=5)
    c = late.counters()
    assert c["repairs_logger"] == 200


def test_a_loggers_gossip_never_acknowledges_records_that_are_not_on_disk(tmp_path):
    # Senders derive ACKs from a logger's gossip frontier (§5.2).  Records
    # still in the logger's write buffer are not durable: until a sync
    # covers them, neither the LOGACK nor the gossip may release them.
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, fsync="interval", fsync_interval=1000.0,
              logger_report_interval=0.05)
    g.publish_stream(300, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(1.0)                               # many logger gossip rounds, no sync
    assert g.E[4].node.logged == 300
    assert g.E[1].node.acked == 0                # the sender still holds everything
    g.E[4].logger._sync()                        # a sync: now it is durable
    g.net.run(0.5)
    assert g.E[1].node.acked == 300


@pytest.mark.parametrize("fsync", ["interval", "always"])
def test_logger_killed_mid_run_loses_nothing_it_acknowledged(tmp_path, fsync):
    # The logger dies for real in the middle of a lossy stream: records it
    # had not flushed are gone with its process (LogStore.abandon).  The
    # sender let go only of what a sync covered, resends the rest to the
    # restarted logger, and at the end the log holds every message.
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, fsync=fsync, loss=0.05, seed=11,
              fsync_interval=0.02, logger_retx_timeout=0.1)
    g.publish_stream(3000, per_tick=5)
    g.net.run(0.3)
    lg = g.E[4]
    acked_at_crash = g.E[1].node.acked
    logged_at_crash = lg.node.logged
    assert 0 < acked_at_crash < 3000 and logged_at_crash > 0
    g.net.crash(4)
    lg.logger.log.abandon()
    del g.E[4]
    g.net.run(0.2)                               # the stream goes on without a logger
    e = g.start(4)
    recovered = e.logger.recovered.get((1, g.E[1].inc), 0)
    assert recovered >= acked_at_crash           # everything acknowledged survived the kill
    assert g.run_until_complete(timeout=20)
    assert g.net.run_until_true(lambda net: g.E[1].node.acked == 3000, timeout=10)
    assert all(e.logger.log.has(1, g.E[1].inc, q) for q in range(3000))
    assert not g.duplicates() and not g.extras()


def test_a_sender_that_crashes_right_after_its_last_message_still_gets_it_to_everyone():
    # The sender dies 1 ms after publishing, before its idle heartbeat (5 ms):
    # node 3 missed the message and nothing tells it the message exists.
    # Node 2 has it; once the stream has been silent a while, node 2 counts
    # its latest seq in its heartbeat signature (Node.infer_idle), node 3
    # sees the signatures differ, gets the list and pulls the message.
    g = Group(3, senders=[1], seed=1, gossip_interval=0.02, member_timeout=0.5)
    g.net.run(0.05)
    cut = {"on": True}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and dst == 3
    e = g.E[1]
    e.publish(payload(1, e.inc, 0), now=g.net.now)
    g.target[1] = 1
    g.net.flush(1)
    g.net.run(0.001)
    g.net.crash(1)
    cut["on"] = False
    assert g.net.run_until_true(lambda net: (g.drain() or True) and (1, e.inc, 0) in g.got[3], timeout=2)
    assert g.E[2].node.idle_entries() == [(1, e.inc, 0)]
    assert not g.duplicates()


def test_two_members_that_missed_each_others_reconnect_talk_again():
    # Found by the FIFO-SRB state machine: node 2 and node 3 went away at
    # the same time, each heard the other leave, and each came back while
    # the other held it as away (a reconnect is announced only to members
    # held as up).  Each holds the other as DISCONNECTED; the only other
    # member has crashed.  With no target left, a member probes one it
    # believes away, and the membership signature in that gossip sets both
    # views right.
    from rpbcast.protocol.membership import DISCONNECTED, MEMBER
    g = Group(3, senders=[1], seed=2, gossip_interval=0.02, member_timeout=0.3)
    g.net.run(0.05)
    g.net.crash(1)                                 # nobody left to relay
    for i in (2, 3):
        g.E[i].disconnect(g.net.now)
    for i in (2, 3):
        g.net.flush(i)
    g.net.run(0.01)
    for i in (2, 3):
        g.E[i].reconnect(g.net.now)
        g.net.flush(i)
    g.net.run(0.01)
    assert g.E[2].members.get(3).status == DISCONNECTED and g.E[3].members.get(2).status == DISCONNECTED
    assert g.E[2].status == MEMBER and g.E[3].status == MEMBER
    assert g.net.run_until_true(lambda net: g.E[2].members.get(3).status == MEMBER
                                and g.E[3].members.get(2).status == MEMBER, timeout=3)


def test_without_loggers_a_peers_gcnote_does_not_stop_repair_from_other_peers(tmp_path):
    """No logger: a peer that collected the message says so (GcNOTE), but
    another peer still holds it.  The receiver must keep gossiping rather
    than hand the ids to the (crashed) sender and wait forever."""
    g = Group(4, senders=[1], tmp_path=tmp_path, gc_limit=2)
    g.start(4, gc_limit=100000)     # node 4 keeps everything
    cut = {"on": True}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and dst == 3
    g.publish_stream(50, per_tick=10)
    for _ in range(10):
        g.net.run(0.1)
        g.drain()
    assert g.E[2].counters()["store_entries"] == 0 and g.E[4].counters()["store_entries"] >= 50
    g.net.crash(1)
    cut["on"] = False
    e = g.E[3]

    def done(net):
        g.drain()
        return len(g.got[3]) == 50

    assert g.net.run_until_true(done, timeout=10)
    assert not [ev for ev in e.events if ev[0] == "lost"]
    assert g.E[2].counters()["gcnote_ids"] >= 1    # node 2 did answer with GcNOTEs


def test_sender_restart_new_incarnation_gap_is_declared_lost(tmp_path):
    """A sender crashes with unacknowledged messages nobody received; it
    comes back with a new incarnation.  The logger declares the old ids lost
    and receivers stop waiting (thesis §6.2)."""
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, member_timeout=0.5,
              logger_retx_timeout=5.0)
    g.publish_stream(20, per_tick=5)
    g.net.run(0.3)
    # The last 5 messages reach nobody, then the sender dies.
    g.net.drop_filter = lambda src, dst, data: src == 1
    e1 = g.E[1]
    for k in range(5):
        e1.publish(b"lost%d" % k, now=g.net.now)
    g.net.flush(1)
    g.net.run(0.01)
    # Receivers learn the ids exist (a heartbeat got through to them).
    for i in (2, 3, 4):
        slot = g.E[i].node.peer(1, 1, 0)
        g.E[i].node.heartbeat(slot, 24, False, g.net.now)
    g.net.crash(1)
    g.net.drop_filter = None
    g.E[1] = g.start(1, incarnation=2)
    assert g.net.run_until_true(
        lambda net: all(g.E[i].node.peer_missing_count(g.E[i].node.find_peer(1, 1)) == 0 for i in (2, 3)),
        timeout=10)
    for i in (2, 3):
        lost = [ev for ev in g.E[i].events if ev[0] == "lost"]
        assert lost and all(ev[1:3] == (1, 1) for ev in lost)
        assert {q for ev in lost for q in range(ev[3], ev[4] + 1)} == set(range(20, 25))


def test_want_hook_abandons_unwanted_repairs(tmp_path):
    """End-to-end argument (§3.3): the application decides a missing message
    is not wanted any more; nobody asks for it."""
    asked = []

    def want(sender, inc, lo, hi):
        asked.append((lo, hi))
        return False

    g = Group(3, senders=[1], tmp_path=tmp_path, want=want)
    g.net.drop_filter = lambda src, dst, data: dst == 2 and any(
        m.type == wire.MsgType.DATA and m.seq == 3 for m in wire.parse(data)[1])
    g.publish_stream(10, per_tick=1)
    g.net.run(1.0)
    assert asked
    e = g.E[2]
    slot = e.node.find_peer(1, 1)
    assert e.node.peer_missing_count(slot) == 0
    assert e.counters()["forgotten"] == 1
    assert any(ev[0] == "unwanted" for ev in e.events)


def test_repair_rate_limit(tmp_path):
    g = Group(3, senders=[1], tmp_path=tmp_path, repair_rate=100.0, repair_burst=10.0,
              immediate_nack=False, gc_limit=200)
    cut = {"on": True}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and dst == 3
    g.publish_stream(300, per_tick=30)
    g.net.run(0.05)
    cut["on"] = False
    g.net.run(0.5)
    served = g.total("served")
    # 2 nodes can serve, at 100/s each plus a burst of 10, for ~0.5 s.
    assert served <= 2 * (10 + 100 * 0.6)
    assert g.total("serve_limited") > 0
    assert g.run_until_complete(timeout=10)


def test_config_errors_say_what_to_fix():
    with pytest.raises(ConfigError, match="log_dir"):
        Config(role="logger")
    with pytest.raises(ConfigError, match="selection must be one of"):
        Config(selection="random")
    with pytest.raises(ConfigError, match="mtu must be between"):
        Config(mtu=10)
    with pytest.raises(ConfigError, match="unknown configuration keys: bogus"):
        Config.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="gossip_interval must be a positive"):
        Config(gossip_interval=0)
    with pytest.raises(ConfigError, match="srb_window needs delivery"):
        Config(srb_window=8)


def test_config_from_toml(tmp_path):
    p = tmp_path / "node.toml"
    p.write_text('[rpbcast]\nnode_id = 5\ngossip_interval = 0.1\nselection = "uniform"\n'
                 '[[rpbcast.members]]\nnode_id = 6\naddr = 6\n')
    c = Config.from_toml(p)
    assert c.node_id == 5 and c.gossip_interval == 0.1 and c.selection == "uniform"
    assert c.members == [MemberSpec(6, 6)]


def test_without_loggers_unrecoverable_messages_are_reported_lost(tmp_path):
    """No logger and every copy collected: reliability is only probabilistic
    then, and the application must be told which ids are gone."""
    g = Group(3, senders=[1], tmp_path=tmp_path, gc_limit=2)
    cut = {"on": True}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and dst == 3
    g.publish_stream(50, per_tick=10)
    for _ in range(10):             # everyone else delivers and collects after 2 rounds
        g.net.run(0.1)
        g.drain()
    assert g.E[2].counters()["store_entries"] == 0
    cut["on"] = False
    e = g.E[3]

    def settled(net):
        slot = e.node.find_peer(1, 1)
        return slot is not None and e.node.peer_next(slot) == 50 and e.node.total_missing() == 0

    assert g.net.run_until_true(settled, timeout=5)
    lost = {q for ev in e.events if ev[0] == "lost" for q in range(ev[3], ev[4] + 1)}
    g.drain()
    got = {k[2] for k in g.got[3]}
    assert lost and lost | got == set(range(50)) and not (lost & got)
