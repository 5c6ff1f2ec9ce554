"""Stalls are not failures: receiver-driven flow control (flow_control =
"receivers", no logger) under the faults users met, on the in-memory network.

Each test is a failure from issue 13: before the fix a sender released its
send buffer past any receiver not heard from for flow_timeout (1 s) at the
moment it looked -- a sender stopped for 1.5 s, a receiver stalled for a
second, a unicast blackout or a short partition lost messages for good.
Now a receiver stops holding a sender back only once a failure detector
declares it failed, the sender's own stops do not count as the others'
silence, and the application is told ("released", id, reason).
"""
import pytest

from groups import Group, payload
from rpbcast.core.node import DEST_MCAST
from rpbcast.drivers.memnet import NS
from rpbcast.protocol.extension import Extension
from rpbcast.protocol.membership import Member, MEMBER, ROLE_MEMBER

# Small buffers and quick age GC: whatever a sender releases too early is
# gone within a few rounds.
TIGHT = dict(store_entries=1024, gossip_interval=0.01, gc_limit=2, idle_after=0.002)


# ---------------------------------------------------------------------------
# faults on the in-memory network

class _Stopped:
    """Stands in for a stopped node's engine (SIGSTOP, or a process the
    machine did not schedule): its timers do not run and what arrives waits
    in its socket.  When it runs again its overdue timers fire *first* and
    only then is the backlog read -- the worst order, which a loop that
    reads a bounded batch per wake-up meets after a long stop."""

    def __init__(self, net, addr, until):
        self.net, self.addr, self.until = net, addr, until
        self.engine = net.engines[addr]
        self.backlog = []

    def get_timer(self):
        return self.until

    def handle_timer(self, now):
        if now < self.until:
            return
        e = self.engine
        self.net.engines[self.addr] = e
        e.handle_timer(now)
        for src, data in self.backlog:
            e.receive_datagram(data, src, now)

    def receive_datagram(self, data, src, now):
        self.backlog.append((src, data))

    def datagrams_to_send(self):
        return []


def stop(g, node, seconds):
    """Stop node for `seconds` of virtual time from now (see _Stopped)."""
    net = g.net
    proxy = _Stopped(net, node, net.now + int(seconds * NS))
    net.engines[node] = proxy
    net._timer_at.pop(node, None)
    net._arm(node)
    return proxy


def is_stopped(g, node):
    return isinstance(g.net.engines.get(node), _Stopped)


def cut(g, node, start, seconds):
    """Partition: nothing reaches or leaves `node` during [start, start + seconds)."""
    t0, t1 = int(start), int(start + seconds * NS)
    prev = g.net.drop_filter

    def drop(src, dst, data):
        if t0 <= g.net.now < t1 and node in (src, dst):
            return True
        return prev(src, dst, data) if prev else False
    g.net.drop_filter = drop


def unicast_blackout(g, start, seconds):
    """Every unicast datagram is lost during [start, start + seconds);
    multicast still flows (reports, requests and repairs are unicast)."""
    t0, t1 = int(start), int(start + seconds * NS)
    for e in g.E.values():
        out = e.datagrams_to_send

        def filtered(out=out):
            sent = out()
            if t0 <= g.net.now < t1:
                return [(d, data) for d, data in sent if d == DEST_MCAST]
            return sent
        e.datagrams_to_send = filtered


def lossy_to(g, node, p):
    rng = g.net.rng
    g.net.drop_filter = lambda src, dst, data: dst == node and rng.random() < p


def flood(g, sender, count, per_tick=64, tick=0.0005):
    """Publish `count` messages as fast as the sender takes them (not while
    its process is stopped); returns how often publish was refused."""
    e = g.E[sender]
    state = {"left": count, "blocked": 0}
    g.target[sender] = g.target.get(sender, 0) + count

    def go(net):
        if not is_stopped(g, sender):
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


def events(g, node, kind):
    return [ev for ev in g.E[node].events if ev[0] == kind]


def lost_anywhere(g):
    return [ev for i in g.receivers() for ev in g.E[i].events if ev[0] == "lost"]


def exactly_once(g, timeout=60):
    """Run until every receiver has everything; assert nothing was lost,
    duplicated or invented."""
    done = g.run_until_complete(timeout=timeout)
    missing = {i: len(g.expected(i) - set(g.got[i])) for i in g.receivers()}
    assert done, f"incomplete: missing per receiver {missing}, lost events {lost_anywhere(g)[:5]}"
    assert not lost_anywhere(g)
    assert not g.duplicates() and not g.extras() and g.payload_ok


def applications_read(g, every=0.005):
    """Receivers' applications take deliveries as they come (the store then
    holds only what the buffers keep)."""
    def read(net):
        g.drain()
        net.at(net.now + int(every * NS), read)
    g.net.at(g.net.now, read)


def never_ahead(g, sender=1, every=0.0005):
    """Check, every `every` s of virtual time, that the sender released
    nothing a receiver it did not declare failed lacks -- the invariant
    flow control exists for.  Returns the list of violations."""
    e, violations = g.E[sender], []

    def check(net):
        released = {ev[1] for ev in e.events if ev[0] == "released"}
        for i in g.receivers():
            if i == sender or i in released:
                continue
            slot = g.E[i].node.find_peer(sender, e.inc)
            have = g.E[i].node.peer_contiguous(slot) if slot is not None else 0
            if have < e.node.acked:
                violations.append((net.now / NS, i, have, e.node.acked))
        net.at(net.now + int(every * NS), check)
    g.net.at(g.net.now, check)
    return violations


def at(g, seconds, fn):
    g.net.at(g.net.now + int(seconds * NS), lambda net: fn())


# ---------------------------------------------------------------------------
# the failures of issue 13

def test_a_sender_stopped_for_longer_than_a_second_releases_nobody():
    # SIGSTOP of the sender for 1.5 s in the middle of a flood: on resume
    # its timers were all due before it read the reports waiting for it,
    # and it judged every (healthy) receiver silent.
    g = Group(4, senders=[1], seed=3, flow_control="receivers", **TIGHT)
    lossy_to(g, 4, 0.2)
    flood(g, 1, 20000)
    at(g, 0.3, lambda: stop(g, 1, 1.5))
    ahead = never_ahead(g)
    exactly_once(g)
    assert not ahead, ahead[:3]
    assert not events(g, 1, "released")


def test_a_receiver_stalled_for_a_second_and_a_half_loses_nothing():
    # A receiver the loaded machine did not run for 1.5 s (the plain
    # loggerless run that lost 1.7 M messages in 1 of 7 runs).
    g = Group(4, senders=[1], seed=5, flow_control="receivers", **TIGHT)
    lossy_to(g, 4, 0.05)
    flood(g, 1, 20000)
    at(g, 0.2, lambda: stop(g, 3, 1.5))
    ahead = never_ahead(g)
    exactly_once(g)
    assert not ahead, ahead[:3]
    assert not events(g, 1, "released")


def test_a_unicast_blackout_of_a_second_loses_nothing():
    # Reports, requests and repairs are unicast; data still flows by
    # multicast, so the sender runs until its store is full of messages a
    # lossy receiver has not reported.
    g = Group(4, senders=[1], seed=7, flow_control="receivers", **TIGHT)
    lossy_to(g, 4, 0.1)
    unicast_blackout(g, g.net.now + int(0.2 * NS), 1.2)
    flood(g, 1, 20000)
    ahead = never_ahead(g)
    exactly_once(g)
    assert not ahead, ahead[:3]
    assert not events(g, 1, "released")


def test_a_partitioned_receiver_catches_up_after_the_partition_heals():
    g = Group(4, senders=[1], seed=9, flow_control="receivers", **TIGHT)
    cut(g, 4, g.net.now + int(0.2 * NS), 3.0)
    st = flood(g, 1, 20000)
    ahead = never_ahead(g)
    exactly_once(g)
    assert not ahead, ahead[:3]
    assert st["blocked"] > 0            # the sender waited for it ...
    assert not events(g, 1, "released")  # ... rather than giving it up


def test_bursty_loss_loses_nothing():
    # Gilbert-like on/off loss on one receiver's link, both ways: good
    # spells of ~0.2 s, bad spells (everything lost) of ~0.5 s on average,
    # some longer than a second.
    g = Group(4, senders=[1], seed=11, flow_control="receivers", **TIGHT)
    rng = g.net.rng
    state = {"bad": False}

    def toggle(net):
        state["bad"] = not state["bad"]
        net.at(net.now + int(rng.expovariate(1 / (0.5 if state["bad"] else 0.2)) * NS), toggle)
    g.net.at(g.net.now + int(0.05 * NS), toggle)
    g.net.drop_filter = lambda src, dst, data: 4 in (src, dst) and state["bad"]
    flood(g, 1, 20000, per_tick=8)
    ahead = never_ahead(g)
    exactly_once(g)
    assert not ahead, ahead[:3]


# ---------------------------------------------------------------------------
# failures are still failures: declared, told, released

def test_a_crashed_receiver_is_declared_failed_after_flow_timeout_of_the_senders_running_time():
    g = Group(4, senders=[1], seed=13, flow_control="receivers", flow_timeout=0.5, **TIGHT)
    g.net.run(0.1)
    g.net.crash(4)
    flood(g, 1, 5000)
    g.net.run(0.2)
    # the sender itself stops for 2 s: that is not the receiver's silence
    stop(g, 1, 2.0)
    g.net.run(2.05)
    assert not events(g, 1, "released")
    g.net.run(0.2)
    assert not events(g, 1, "released")
    assert g.net.run_until_true(lambda net: events(g, 1, "released"), timeout=1.0)
    (rel,) = events(g, 1, "released")
    assert rel[1] == 4 and "silent" in rel[2]
    assert ("member", 4, "failed") == events(g, 1, "member")[-1][:3]
    assert g.E[1].counters()["flow_released"] == 1
    assert g.run_until_complete(timeout=10)          # the live receivers got everything
    assert not g.duplicates()


def test_a_released_receiver_that_comes_back_is_held_for_again():
    # Partitioned for longer than flow_timeout: declared failed and
    # released; heard from again: restored, and the sender again never
    # runs further ahead of it than its store.  What was released while it
    # was away and aged out of every buffer it is told it lost (no
    # logger), and the sender does not wait for those forever.
    g = Group(4, senders=[1], seed=15, flow_control="receivers", flow_timeout=0.3, **TIGHT)
    applications_read(g)
    cut(g, 4, g.net.now + int(0.1 * NS), 1.0)
    flood(g, 1, 30000, per_tick=8)            # 16 k msgs/s: still sending when it comes back
    assert g.net.run_until_true(lambda net: events(g, 1, "restored"), timeout=5)
    assert [ev[1] for ev in events(g, 1, "released")] == [4]
    assert events(g, 1, "restored")[0][1] == 4
    e, r = g.E[1], g.E[4]
    assert e.node.next_seq < 25000
    released_before = e.node.acked
    violations = []

    def told(net):
        # from now on nothing leaves the send buffer before receiver 4 has it
        slot = r.node.find_peer(1, e.inc)
        have = r.node.peer_contiguous(slot) if slot is not None else 0
        if e.node.acked > max(released_before, have):
            violations.append((net.now, have, e.node.acked))
        lost = {(1, e.inc, q) for ev in events(g, 4, "lost") for q in range(ev[3], ev[4] + 1)}
        return (e.node.next_seq >= 30000 and all(set(g.got[i]) >= g.expected(i) for i in (2, 3))
                and set(g.got[4]) | lost >= g.expected(4))

    assert g.net.run_until_true(told, timeout=60, check_every=0.001)
    assert not violations, violations[:3]
    assert events(g, 4, "lost")             # it was told what it cannot have
    assert not g.duplicates() and not g.extras()


class _Declares(Extension):
    """An extension with a failure detector of its own (as GSGC has)."""


def test_a_failure_declared_by_an_extension_releases_at_once():
    g = Group(4, senders=[1], seed=17, flow_control="receivers", **TIGHT)
    x = g.E[1].add_extension(_Declares())
    g.net.run(0.1)
    g.net.crash(4)
    st = flood(g, 1, 5000)
    g.net.run(0.3)
    assert g.E[1].node.next_seq < 5000        # held back by the crashed receiver
    x.ctx.post_event("member", 4, "failed")
    assert g.run_until_complete(timeout=5)
    (rel,) = events(g, 1, "released")
    assert rel[1] == 4 and "declared failed" in rel[2]
    x.ctx.post_event("member", 4, "recovered")
    assert events(g, 1, "restored")[0][1] == 4
    assert st["blocked"] > 0


def test_gsgc_declaring_a_receiver_failed_releases_it(tmp_path):
    from rpbcast.protocol.gsgc import GsgcExtension
    g = Group(5, senders=[1], seed=19, flow_control="receivers", flow_timeout=3600, gossip_interval=0.02,
              store_entries=4096, idle_after=0.002)
    for e in g.E.values():
        e.add_extension(GsgcExtension())
        g.net._arm(e.cfg.addr)
    g.net.run(0.5)
    g.net.crash(5)
    flood(g, 1, 20000)
    assert g.run_until_complete(timeout=30)
    (rel,) = events(g, 1, "released")
    assert rel[1] == 5
    assert ("member", 5, "failed") in events(g, 1, "member")


# ---------------------------------------------------------------------------
# the detector on its own

def _member(i, heard):
    return Member(i, 1, MEMBER, ROLE_MEMBER, i, -1, 1, 0, heard)


def test_detector_counts_only_its_own_running_time():
    from rpbcast.protocol.group import FailureDetector
    ms = 1_000_000
    d = FailureDetector(timeout_ns=100 * ms, step_cap_ns=10 * ms)
    a, b = _member(2, 1), _member(3, 1)
    t = 0
    assert d.check(t, [a, b]) == []
    for _ in range(5):                       # 50 ms of checks; a heard each time
        t += 10 * ms
        a.last_heard = t
        assert d.check(t, [a, b]) == []
    t += 5000 * ms                           # this process stopped for 5 s
    assert d.check(t, [a, b]) == []          # ... counts as one 10 ms step
    a.last_heard = t + 1                     # the backlog read: a was there all along
    out = []
    while not out:
        t += 10 * ms
        out = d.check(t, [a, b])
        a.last_heard = t
    assert [o[:2] for o in out] == [(3, "failed")] and "silent" in out[0][2]
    assert t - 5000 * ms >= 30 * ms          # 50 + 10 + 40 ms of b's silence that were observed
    b.last_heard = t
    assert [o[:2] for o in d.check(t + ms, [a, b])] == [(3, "recovered")]
    assert d.check(t + 2 * ms, [a]) == [] and 3 not in d.silent   # b left: forgotten


# ---------------------------------------------------------------------------
# flow_commit: a receiver reports only what its application made durable

def test_with_flow_commit_a_sender_keeps_what_receivers_have_not_committed():
    # Without a logger, a receiver that crashes loses what its node had
    # received (and reported) but its application had not checkpointed:
    # the sender had released it (the loggerless kill-receiver fault lost
    # 15-30 k messages at 200 k msgs/s).  With flow_commit the reports
    # stop at the committed frontier, so the sender still holds the rest.
    g = Group(3, senders=[1], seed=7, flow_control="receivers", flow_commit=True, **TIGHT)
    e = g.E[1]
    g.publish_stream(500)
    g.net.run(1.0)
    g.drain()
    assert all(len(g.got[i]) == 500 for i in (2, 3))          # delivered ...
    assert e.node.acked == 0                                   # ... but nobody committed: all held
    g.E[2].commit({(1, e.inc): 300})
    g.E[3].commit({(1, e.inc): 200})
    g.net.run(0.2)
    assert e.node.acked == 200                                 # the least committed frontier
    g.E[3].commit({(1, e.inc): 100})                           # frontiers never move back
    g.E[3].commit({(1, e.inc): 500})
    g.net.run(0.2)
    assert e.node.acked == 300
    g.E[2].commit({(1, e.inc): 500})
    g.net.run(0.2)
    assert e.node.acked == 500 and not events(g, 1, "released")


def test_flow_commit_is_checked():
    from rpbcast.config import Config, ConfigError
    with pytest.raises(ConfigError, match="flow_commit"):
        Config(node_id=1, flow_commit=True).validate()          # with flow_control "loggers"
    with pytest.raises(ConfigError, match="flow_commit"):
        Config(node_id=1, flow_control="receivers", flow_commit="yes").validate()
    g = Group(2, senders=[1], flow_control="receivers")
    with pytest.raises(ValueError, match="flow_commit"):
        g.E[2].commit({(1, 1): 10})
