"""Receiver-driven flow control (Config.flow_control = "receivers"): in a
group without loggers a sender never runs further ahead of its slowest live
receiver than its store holds, so nothing is lost at any rate; a receiver
that falls silent stops holding it back after flow_timeout."""
import pytest

from groups import Group, payload
from rpbcast.config import Config, ConfigError
from rpbcast.drivers.memnet import NS

# Small buffers and quick age GC: a sender that outruns a lossy receiver
# loses messages for good unless something holds them back.
TIGHT = dict(store_entries=1024, gossip_interval=0.01, gc_limit=2, idle_after=0.002)


def flood(g, sender, count, per_tick=64, tick=0.0005):
    """Publish `count` messages as fast as the sender takes them; a refused
    publish (BlockingIOError: send buffer full) is retried next tick.
    Returns a dict with how often the sender was refused."""
    e = g.E[sender]
    state = {"left": count, "blocked": 0}
    g.target[sender] = g.target.get(sender, 0) + count

    def go(net):
        for _ in range(per_tick):
            if not state["left"]:
                return
            try:
                e.publish(payload(sender, e.inc, e.node.next_seq), now=net.now)
            except BlockingIOError:
                state["blocked"] += 1
                break
            state["left"] -= 1
        net.at(net.now + int(tick * NS), go)

    g.net.at(g.net.now + int(0.01 * NS), go)
    return state


def lost_events(g):
    return [ev for i in g.receivers() for ev in g.E[i].events if ev[0] == "lost"]


def lossy_to(g, node, p):
    """Drop a fraction p of what reaches `node` (data, repairs and control)."""
    rng = g.net.rng
    g.net.drop_filter = lambda src, dst, data: dst == node and rng.random() < p


def test_without_flow_control_a_lossy_receiver_loses_messages_for_good():
    # The control case: the default (flow_control="loggers") in a group
    # without loggers bounds the send buffer by age, not by the receivers.
    g = Group(4, senders=[1], seed=3, **TIGHT)
    lossy_to(g, 4, 0.3)
    flood(g, 1, 20000)
    g.run_until_complete(timeout=5)
    g.drain()
    assert lost_events(g) or len(g.got[4]) < 20000


def test_flow_control_delivers_everything_to_a_lossy_receiver():
    g = Group(4, senders=[1], seed=3, flow_control="receivers", **TIGHT)
    lossy_to(g, 4, 0.3)
    st = flood(g, 1, 20000)
    assert g.run_until_complete(timeout=30)
    assert not lost_events(g)
    assert not g.duplicates() and not g.extras() and g.payload_ok
    assert st["blocked"] > 0                     # the sender was held back ...
    e = g.E[1]
    assert e.node.acked <= e.node.next_seq
    # ... and never further ahead of the slowest receiver than its store
    assert e.counters()["unacked"] <= TIGHT["store_entries"]


def test_the_window_in_use_never_exceeds_what_the_slowest_receiver_has():
    """After every event: everything below the sender's released frontier
    is held by every receiver (the invariant flow control exists for)."""
    g = Group(3, senders=[1], seed=5, flow_control="receivers", **TIGHT)
    lossy_to(g, 3, 0.2)
    flood(g, 1, 5000)
    e, violations = g.E[1], []

    def check(net):
        acked = e.node.acked
        for i in (2, 3):
            slot = g.E[i].node.find_peer(1, e.inc)
            have = g.E[i].node.peer_contiguous(slot) if slot is not None else 0
            if have < acked:
                violations.append((net.now, i, have, acked))
        return g.complete()

    assert g.net.run_until_true(check, timeout=30, check_every=0.0005)
    assert not violations, violations[:5]


def test_a_silent_receiver_stops_holding_the_sender_back_after_flow_timeout():
    g = Group(4, senders=[1], seed=7, flow_control="receivers", flow_timeout=0.2, **TIGHT)
    g.net.run(0.1)                                # everyone has been heard from
    g.net.crash(4)
    t0 = g.net.now
    flood(g, 1, 3000)
    # (receivers' applications keep reading: g.drain)
    done = g.net.run_until_true(lambda net: g.drain() or g.E[1].node.next_seq >= 3000, timeout=10)
    assert done
    # it waited for the crashed receiver (the store filled) until flow_timeout
    assert g.net.now - t0 > 0.2 * NS
    assert g.run_until_complete(timeout=10)     # the live receivers got everything
    assert not g.duplicates()


def test_flow_control_with_a_logger_waits_for_receivers_and_the_logger(tmp_path):
    g = Group(4, senders=[1], loggers=[4], tmp_path=tmp_path, seed=9, flow_control="receivers",
              fsync="never", **TIGHT)
    lossy_to(g, 3, 0.3)
    flood(g, 1, 5000)
    assert g.run_until_complete(timeout=30)
    assert not lost_events(g) and not g.duplicates()
    lg = g.E[4]
    assert all(lg.logger.log.has(1, g.E[1].inc, q) for q in range(0, 5000, 97))


def test_bad_flow_control_setting_says_what_to_fix():
    with pytest.raises(ConfigError, match="flow_control must be one of"):
        Config(node_id=1, flow_control="senders")
    with pytest.raises(ConfigError, match="flow_timeout must be a positive number"):
        Config(node_id=1, flow_timeout=0)
