"""Logger GC from derived ACKs, intermittently connected members, FIFO
delivery, gossip target selection."""
import collections
import glob
import os
import random

import pytest

from groups import Group, payload
from rpbcast.protocol import selection
from rpbcast.drivers.memnet import NS


def log_segments(g, i):
    return glob.glob(os.path.join(g.E[i].cfg.log_dir, "seg-*.rplog"))


def test_logger_gc_advances_when_every_member_reports(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, logger_report_interval=0.05, log_min_keep=0)
    g.publish_stream(300, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(3.0)            # reports reach the logger, GC runs each second
    lg = g.E[4].logger
    assert lg.gc_below.get((1, 1)) == 300
    # what was collected is not served any more: a request gets a GAPNOTE
    e = g.E[4]
    assert not e.node.holds(1, 1, 10)


def test_logger_gc_waits_for_a_silent_member_until_the_failsafe(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, logger_report_interval=0.05,
              log_retention=5.0, log_min_keep=0)
    # node 3 never reports (nothing from it reaches the logger)
    g.net.drop_filter = lambda src, dst, data: src == 3 and dst == 4
    g.publish_stream(200, per_tick=10)
    g.net.run(3.0)
    lg = g.E[4].logger
    assert lg.gc_below.get((1, 1), 0) == 0        # blocked by node 3
    assert g.E[4].node.holds(1, 1, 5)
    g.net.run(4.0)                                 # past log_retention: the failsafe collects
    assert lg.gc_below.get((1, 1), 0) == 200


def test_logger_keeps_stable_messages_for_log_min_keep(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, logger_report_interval=0.05, log_min_keep=4.0)
    g.publish_stream(100, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(2.5)
    lg = g.E[4].logger
    assert lg.gc_below.get((1, 1), 0) == 0       # stable, but not for 4 s yet
    g.net.run(4.0)
    assert lg.gc_below.get((1, 1)) == 100


def test_a_restarted_members_predecessor_does_not_acknowledge_for_it(tmp_path):
    """Reports belong to an incarnation: what a crashed receiver received but
    never checkpointed must stay with the logger for its successor."""
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, logger_report_interval=0.05, log_min_keep=0)
    g.publish_stream(100, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(0.5)
    g.net.crash(3)
    g.start(3, incarnation=2, catch_up=True)           # comes back, wants everything again
    g.net.run(0.3)
    lg = g.E[4].logger
    g.publish_stream(50, per_tick=10)
    g.net.run(2.5)
    assert lg.report_inc.get(3) == 2
    assert g.run_until_complete(timeout=10)             # it got all 150 back
    assert {k[2] for k in g.got[3]} == set(range(150))


def test_disconnected_member_catches_up_from_the_logger(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, logger_report_interval=0.05, gc_limit=3,
              log_min_keep=0)
    g.publish_stream(50, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.drain()
    e3 = g.E[3]
    e3.disconnect(g.net.now)
    g.net.flush(3)                 # (a real transport sends at once)
    cut = {"on": True}
    g.net.drop_filter = lambda src, dst, data: cut["on"] and 3 in (src, dst)
    g.net.run(0.2)
    # the others know it is away, and stop gossiping to it
    for i in (1, 2, 4):
        m = g.E[i].members.get(3)
        assert m is not None and m.status == 4          # DISCONNECTED
    assert all(t.node_id != 3 for t in g.E[1].group.targets(g.net.now))
    g.publish_stream(200, per_tick=10)
    g.net.run(3.0)
    # the logger kept everything node 3 has not acknowledged
    assert g.E[4].logger.gc_below.get((1, 1), 0) <= 50
    cut["on"] = False
    e3.reconnect(g.net.now)
    g.net.flush(3)
    assert g.run_until_complete(timeout=10)
    assert not g.duplicates()
    assert e3.counters()["repairs_logger"] > 0
    g.net.run(3.0)
    assert g.E[4].logger.gc_below.get((1, 1)) == 250   # and now it can collect


def test_fifo_delivery_is_per_sender_in_order(tmp_path):
    g = Group(4, senders=[1, 2], tmp_path=tmp_path, loss=0.1, jitter=0.003, delivery="fifo")
    g.publish_stream(300, per_tick=3)
    order = collections.defaultdict(list)
    end = g.net.now + 20 * NS
    while g.net.now < end:
        g.net.run(0.01)
        for i in (3, 4):
            for d in g.E[i].recv():
                order[(i, d.sender)].append(d.seq)
        if all(len(order[(i, s)]) == 300 for i in (3, 4) for s in (1, 2)):
            break
    for key, seqs in order.items():
        assert seqs == list(range(300)), f"{key} out of order or incomplete"
    assert sum(g.E[i].counters()["gaps"] for i in (3, 4)) > 0      # reordering happened


@pytest.mark.parametrize("kind", ["uniform", "linear", "quadratic"])
def test_selection_follows_the_distribution(kind):
    rng = random.Random(4)
    cands = ["near", "mid", "far"]
    rtts = [0.001, 0.005, 0.010]
    w = selection.weights(rtts, kind)
    counts = collections.Counter(selection.choose(cands, rtts, kind, rng) for _ in range(30000))
    for c, wi in zip(cands, w):
        assert abs(counts[c] / 30000 - wi / sum(w)) < 0.015
    if kind == "uniform":
        assert len(set(w)) == 1
    else:
        assert w[0] > w[1] > w[2] > 0
    if kind == "quadratic":
        lin = selection.weights(rtts, "linear")
        assert w[2] / w[0] < lin[2] / lin[0]        # biased harder


def test_contact_matrix_rows_are_distributions():
    rtt = [[0, 1, 2, 3], [1, 0, 1, 2], [2, 1, 0, 1], [3, 2, 1, 0]]
    for kind in ("uniform", "linear", "quadratic"):
        C = selection.contact_matrix(rtt, kind)
        for i, row in enumerate(C):
            assert row[i] == 0 and abs(sum(row) - 1) < 1e-12


def test_immediate_pulls_are_not_repeated_before_a_repair_could_return(tmp_path):
    """10 ms round trips, 1% loss: a pull is asked again only after twice
    the measured RTT and only for what is still missing, so each lost id
    costs about one repair (asking every few ms for everything missing
    served each id ~3 times here, 17 times on a loaded machine)."""
    g = Group(3, senders=[1], tmp_path=tmp_path, loss=0.01, gossip_interval=0.25)
    g.net.latency = int(0.005 * NS)
    g.net.run(3.0)                  # pings: round-trip estimates
    g.publish_stream(20000, per_tick=20, tick=0.001)
    for _ in range(40):
        g.net.run(0.1)
        g.drain()
    assert all(len(g.got[i]) == 20000 for i in (2, 3))
    served = g.total("served")
    gaps = g.total("gap_ids")
    assert gaps > 100 and served <= 1.4 * gaps, (served, gaps)


def test_a_logger_that_sends_logs_its_own_messages_and_serves_them_from_the_log(tmp_path):
    # The logger also publishes (thesis §7.2: every member sends).  Node 2
    # loses the logger's last message, and its pulls are lost too until long
    # after every gossip buffer (the logger's own included) has collected the
    # message: only the log still has it.  Found by the thesis experiments;
    # before the fix the logger never logged what it sent, and a request for
    # its own stream made it pull its own messages from the members.
    from rpbcast.core import wire
    T = wire.MsgType
    g = Group(4, senders=[4], loggers=[4], tmp_path=tmp_path, gc_limit=2)
    lg = g.E[4]
    last = 9
    mute_until = g.net.now + 1 * NS          # 20 gossip rounds; gc_limit is 2
    repairs = []

    def drop(src, dst, data):
        out = False
        for m in wire.parse(data)[1]:
            if dst == 2 and m.type == T.DATA and m.sender == 4 and m.seq == last:
                out = True
            if src == 2 and m.type in (T.GOSSIP, T.RTX) and g.net.now < mute_until:
                out = True
            if dst == 2 and m.type == T.REPAIR and m.sender == 4 and not out:
                repairs.append((g.net.now, src, m.seq, m.flags))
        return out

    g.net.drop_filter = drop
    g.publish_stream(last + 1, per_tick=1)
    assert g.run_until_complete(timeout=4)
    assert not g.duplicates() and not g.extras()
    assert all(lg.logger.log.has(4, lg.inc, q) for q in range(last + 1))
    assert not any(g.E[i].node.holds(4, lg.inc, last) for i in (1, 3))   # peers let go of it
    assert [(src, seq) for _, src, seq, _ in repairs] == [(4, last)]
    t, _, _, flags = repairs[0]
    assert t >= mute_until and flags & wire.F_FROM_LOGGER
    assert lg.node.counters()["served_from_log"] == 1         # read back from disk
    # asked for its own stream, the logger did not start pulling it
    assert all(pid != 4 for _, pid, _ in lg.node.peer_ids())


def test_late_joiner_with_catch_up_gets_the_history_from_the_logger(tmp_path):
    # §5.3 join through sponsors, with catch_up: the joiner answers for the
    # whole stream, not only what follows its join time, and what the
    # peers' gossip buffers no longer hold comes from the logger's log.
    from rpbcast.config import Config
    from rpbcast.protocol.membership import MEMBER
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, gc_limit=3, log_min_keep=0)
    g.publish_stream(200, per_tick=10)
    assert g.run_until_complete(timeout=5)
    g.net.run(0.5)                                # gossip buffers have let go of it
    assert not g.E[2].node.holds(1, g.E[1].inc, 0)
    e = g.net.add(Config(node_id=9, incarnation=1, join=True, sponsors=2, catch_up=True,
                         gossip_interval=0.05, gc_limit=3, members=[], addr=9))
    assert g.net.run_until_true(lambda net: e.status == MEMBER, timeout=2)
    g.publish_stream(50, per_tick=5)
    got = collections.Counter()

    def done(net):
        for d in e.recv(now=net.now):
            got[d.seq] += 1
        return set(got) >= set(range(250))

    assert g.net.run_until_true(done, timeout=10)
    assert max(got.values()) == 1
    assert e.counters()["repairs_logger"] >= 190      # the history came from the log


def test_two_loggers_both_hold_a_message_before_it_leaves_the_send_buffer(tmp_path):
    # ack_loggers = 2: a message leaves the sender's buffer only once both
    # loggers logged it; then either one alone can serve every repair.
    g = Group(5, senders=[1], loggers=[4, 5], tmp_path=tmp_path, ack_loggers=2, fsync="never",
              gc_limit=3, log_min_keep=0)
    g.net.drop_filter = lambda src, dst, data: dst == 5 and g.net.now < g.net_t_cut
    g.net_t_cut = g.net.now + int(0.5 * NS)           # logger 5 hears nothing for 0.5 s
    g.publish_stream(200, per_tick=10)
    g.net.run(0.4)
    assert g.E[4].node.logged == 200 and g.E[5].node.logged == 0
    assert g.E[1].node.acked == 0                     # one logger is not enough
    assert g.run_until_complete(timeout=5)
    assert g.net.run_until_true(lambda net: g.E[1].node.acked == 200, timeout=5)
    assert g.E[5].node.logged == 200                  # it got them resent
    # logger 4 dies; a new receiver's history is served by logger 5 alone
    g.net.crash(4)
    from rpbcast.config import Config, MemberSpec
    late = g.net.add(Config(node_id=7, incarnation=1, members=g.specs + [MemberSpec(7, 7)], catch_up=True,
                            gossip_interval=0.05))
    slot = late.node.peer(1, g.E[1].inc, 0)
    late.node.heartbeat(slot, 199, False, g.net.now)
    assert g.net.run_until_true(lambda net: late.node.peer_missing_count(slot) == 0, timeout=10)
    assert {d.seq for d in late.recv(now=g.net.now)} == set(range(200))
    assert g.E[5].node.counters()["served_from_log"] > 0 and g.E[4].node.counters()["served_from_log"] == 0


# ---------------------------------------------------------------- the engine's seams

def test_trace_event_codes_are_those_of_the_c_core():
    import re
    from rpbcast.protocol import trace_events
    header = os.path.join(os.path.dirname(__file__), os.pardir, "csrc", "trace.h")
    with open(header) as f:
        codes = {m.group(1): int(m.group(2)) for m in re.finditer(r"RP_(EV_[A-Z_]+) = (\d+)", f.read())}
    assert codes and {k: getattr(trace_events, k) for k in codes} == codes


def test_an_extension_works_through_its_public_context_alone():
    """Every hook an extension may use, driven end to end: its own timer
    and messages, sections riding on the engine's gossip, frontiers, events
    and traces -- through the Context only."""
    from rpbcast.core import wire
    from rpbcast.core.node import DEST_MCAST
    from rpbcast.protocol.extension import Context, Extension
    from rpbcast.protocol.trace_events import EV_HEARTBEAT
    T = wire.MsgType
    KIND = 0x50
    PROBE = wire.stability_body(12345, [])

    class Probe(Extension):
        gossip_frontiers = True

        def __init__(self):
            self.seen = collections.defaultdict(list)

        def attach(self, ctx):
            super().attach(ctx)
            self.due = ctx.now + int(0.1 * NS)

        def get_timer(self):
            return self.due

        def on_timer(self, now):
            ctx = self.ctx
            self.due = now + int(0.1 * NS)
            ctx.emit(DEST_MCAST, T.STABILITY, PROBE)                 # a type no part handles
            m = ctx.members.get(1 if ctx.id != 1 else 2)
            ctx.report_frontiers(m, now)
            ctx.post_event("probe", ctx.id, now)
            ctx.trace(now, EV_HEARTBEAT, ctx.id, ctx.inc, 0, 0, 0, 7)

        def gossip_sections(self, target, budget, now):
            return [wire.section(KIND, b"hi")]

        def on_section(self, source, kind, data, now):
            self.seen["section"].append((source, kind, bytes(data)))

        def on_message(self, msg, now):
            if msg[0] == T.STABILITY and msg[6] == PROBE:
                self.seen["message"].append(msg[7])
                return True
            return False

        def on_lastseen(self, source, source_inc, entries, now):
            self.seen["lastseen"].append((source, source_inc))

        def after_rx(self, now):
            self.seen["rx"].append(now)

    g = Group(3, senders=[1])
    for i in g.ids:
        g.E[i].node.enable_trace(1 << 12)
    x = {i: g.E[i].add_extension(Probe()) for i in g.ids}
    assert all(isinstance(p.ctx, Context) for p in x.values())
    g.publish_stream(20)
    g.net.run(1.0)
    for i in g.ids:
        others = set(g.ids) - {i}
        assert set(x[i].seen["message"]) == others
        assert set(x[i].seen["section"]) == {(j, KIND, b"hi") for j in others}
        assert {s for s, inc in x[i].seen["lastseen"]} == others and x[i].seen["rx"]
        assert any(ev[0] == "probe" for ev in g.E[i].events)
        t = g.E[i].node.take_trace()
        assert any(int(a) == 7 for ev, a in zip(t["event"], t["aux"]) if ev == EV_HEARTBEAT)


def test_hooks_hold_only_what_extensions_override():
    from rpbcast.protocol.extension import Extension

    class Quiet(Extension):
        pass

    class Timed(Extension):
        def get_timer(self):
            return None

    g = Group(2, senders=[1])
    e = g.E[1]
    before = {k: len(v) for k, v in vars(e.hooks).items() if isinstance(v, list)}
    e.add_extension(Quiet())
    assert {k: len(v) for k, v in vars(e.hooks).items() if isinstance(v, list)} == before
    t = e.add_extension(Timed())
    assert e.hooks.timed == [t] and isinstance(e.get_timer(), int)


def test_the_logger_role_is_an_extension_that_declares_what_a_logger_is(tmp_path):
    from rpbcast.protocol.extension import Extension
    from rpbcast.protocol.logger import LoggerRole
    for fsync in ("interval", "always"):
        (tmp_path / fsync).mkdir()
        g = Group(3, senders=[1], loggers=[3], tmp_path=tmp_path / fsync, fsync=fsync)
        lg, member = g.E[3], g.E[1]
        assert isinstance(lg.logger, LoggerRole) and isinstance(lg.logger, Extension)
        assert lg.extensions[0] is lg.logger                 # first, before any other extension
        assert lg.hooks.serves_from_log and lg.hooks.gossip_frontiers
        assert lg.hooks.logger_phase == lg.logger.logger_phase
        assert lg.driver_needs.every_rx == (fsync == "always")
        assert member.logger is None and not member.hooks.serves_from_log
        assert member.hooks.logger_phase is None and not member.driver_needs.every_rx
        with pytest.raises(AttributeError):
            lg.logger = None                                 # a read-only handle


def test_the_send_buffer_strategy_is_chosen_once_from_the_config(tmp_path):
    from rpbcast.protocol.send_buffer import HoldForLoggers, HoldForReceivers
    g = Group(3, senders=[1], loggers=[3], tmp_path=tmp_path)
    assert type(g.E[1].send_buffer) is HoldForLoggers and g.E[1].node.hold_send
    g = Group(3, senders=[1])
    assert type(g.E[1].send_buffer) is HoldForLoggers and not g.E[1].node.hold_send   # nobody acknowledges
    g = Group(3, senders=[1], flow_control="receivers")
    assert type(g.E[1].send_buffer) is HoldForReceivers and g.E[1].node.hold_send
