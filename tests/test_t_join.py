"""t_join for a member that starts while the group runs (thesis §5.3): it
answers for what is published after it began asking, even when its first
JOINs are lost or go to a member that is not up -- not only for what
follows the answer that finally came back (issue 13: a static member
started just before its publisher lost the first ids lost in the network,
skipped as "before t_join")."""
from groups import Group
from rpbcast.core import wire
from rpbcast.drivers.memnet import NS

T = wire.MsgType


def types_in(data):
    return [m for m in wire.parse(data)[1]]


def late_start(g, node, inc):
    g.net.crash(node)
    e = g.start(node, incarnation=inc)
    e.started_late(g.net.now)
    g.net.flush(node)
    return e


def test_ids_lost_before_a_retried_join_answer_are_still_the_joiners():
    g = Group(3, senders=[1])
    g.net.crash(3)                                  # member 3 is down: asking it goes nowhere
    g.net.run(0.3)
    joins = []

    def drop(src, dst, data):
        msgs = types_in(data)
        if src == 2 and dst == 1 and any(m.type == T.JOIN for m in msgs):
            joins.append(g.net.now)
            return len(joins) == 1                  # the first JOIN to the sponsor is lost
        # the publisher's first three ids never reach the joiner
        return dst == 2 and any(m.type == T.DATA and m.seq < 3 for m in msgs)
    g.net.drop_filter = drop
    e2 = late_start(g, 2, inc=2)
    assert e2.group.wants_t_join()
    g.net.run(0.01)
    g.publish_now(10)
    assert g.net.run_until_true(lambda net: not e2.group.wants_t_join(), timeout=2)
    assert len(joins) >= 2                          # the answer came to a later JOIN
    g.net.drop_filter = None
    g.net.run(1.0)
    g.drain()
    got = g.got[2]
    assert sorted(q for (s, i, q) in got if s == 1) == list(range(10)), sorted(got)
    assert set(got.values()) == {1}
    assert e2.counters().get("t_join_skipped", 0) == 0


def test_ids_published_before_the_first_join_are_not_the_joiners():
    """The other side of t_join: what the group had before the member
    started asking is skipped, not pulled -- however late the answer."""
    g = Group(3, senders=[1])
    g.net.crash(3)
    g.publish_now(50)
    g.net.run(0.3)
    joins = []

    def drop(src, dst, data):
        if src == 2 and dst == 1 and any(m.type == T.JOIN for m in types_in(data)):
            joins.append(g.net.now)
            return len(joins) <= 2                  # two JOINs to the sponsor lost
        return False
    g.net.drop_filter = drop
    e2 = late_start(g, 2, inc=2)
    g.net.run(0.12)                                 # more than a sampling interval later
    g.publish_now(5)
    assert g.net.run_until_true(lambda net: not e2.group.wants_t_join(), timeout=2)
    assert len(joins) >= 3
    g.net.drop_filter = None
    g.net.run(1.0)
    g.drain()
    mine = sorted(q for (s, i, q) in g.got[2] if s == 1)
    assert mine == list(range(50, 55)), mine        # the five after its start, none of the fifty
    assert set(g.got[2].values()) == {1}


def test_a_sponsor_answers_with_its_vector_as_of_the_first_join():
    """The vector as of ``asked`` ago: the newest sample at or before then;
    a stream with nothing by then is left out (taken whole); an ask from
    before this member started gets no vector; an age beyond the history
    kept takes each stream's oldest sample."""
    g = Group(2, senders=[1])
    e1 = g.E[1]
    grp = e1.group
    g.net.run(0.2)
    t_before = g.net.now
    g.publish_now(7)
    g.net.run(0.2)
    now = g.net.now
    own = (1, e1.inc)
    assert grp.vector_as_of(now, 0)[own] == 6
    assert own not in grp.vector_as_of(now, now - t_before + 1)     # nothing published by then
    assert grp.vector_as_of(now, int(0.1 * NS))[own] == 6
    assert grp.vector_as_of(now, 100 * NS) is None                  # from before we started
    # the history stays bounded however long the node runs
    g.net.run(5.0)
    assert len(grp._vectors) <= int((1.5 + 0.2) / 0.05) + 3
    assert grp.vector_as_of(g.net.now, 3 * NS)[own] == 6           # older than the history kept


def test_a_vector_in_several_parts_is_taken_whole():
    """A sponsor with more streams than one HBLIST holds answers in
    parts: every part is t_join, not only the first (the rest were taken
    as heartbeats of streams started at 0 -- their whole history pulled)."""
    n = 110                                          # > one part's ~88 entries at mtu 1472
    g = Group(n, senders=list(range(1, n + 1)), gossip_interval=0.1)
    for s in range(1, n + 1):
        g.publish_now(2, s)
    g.net.run(0.5)
    e2 = late_start(g, n, inc=2)
    assert g.net.run_until_true(lambda net: not e2.group.wants_t_join(), timeout=2)
    g.net.run(0.5)
    g.drain()
    before = [k for k in g.got[n] if k[0] != n]
    assert before == [], f"{len(before)} messages from before the start delivered"
    # and what follows is delivered, from every stream
    for s in (1, 60, 100):
        g.publish_now(1, s)
    g.net.run(0.5)
    g.drain()
    assert sorted(k[0] for k in g.got[n]) == [1, 60, 100]


def test_a_sponsor_that_started_after_the_first_join_sends_no_vector():
    """Member 3 starts after member 2 began asking, and after the first
    ids were published: its vector would start at what it first saw,
    skipping ids member 2 lost before.  It answers without a vector and
    member 2 takes t_join from member 1, whose samples reach back."""
    g = Group(3, senders=[1])
    g.net.crash(2)
    g.net.crash(3)
    g.net.run(0.3)
    joins = {1: 0, 3: 0}

    def drop(src, dst, data):
        msgs = types_in(data)
        if src == 2 and dst in joins and any(m.type == T.JOIN for m in msgs):
            joins[dst] += 1
            return dst == 1 and joins[1] == 1           # its first JOIN (to member 1) is lost
        return dst == 2 and any(m.type == T.DATA and m.seq == 0 for m in msgs)
    g.net.drop_filter = drop
    e2 = late_start(g, 2, inc=2)
    g.net.run(0.005)
    g.publish_now(5)
    g.net.run(0.005)
    late_start(g, 3, inc=2)
    assert g.net.run_until_true(lambda net: not e2.group.wants_t_join(), timeout=2)
    assert joins[3] >= 1 and joins[1] >= 2             # asked member 3, then member 1 again
    g.net.drop_filter = None
    g.net.run(1.0)
    g.drain()
    assert sorted(q for (s, i, q) in g.got[2] if s == 1) == [0, 1, 2, 3, 4]
    assert set(g.got[2].values()) == {1}


def test_a_cold_start_does_not_wait_out_the_asking_time():
    """Member 1 starts alone and asks for t_join; member 2 starts later
    and can only say it was not running then.  Every member member 1
    could ask says so: nobody else ran when it started, it takes every
    stream whole at once -- not after the asking second, during which it
    would not pull (a lost message repaired a second late)."""
    g = Group(2, senders=[2])
    g.net.crash(1)
    g.net.crash(2)
    g.net.run(0.3)
    e1 = late_start(g, 1, inc=2)
    g.net.run(0.2)
    assert e1.group.wants_t_join()                   # nobody to answer yet
    t_up = g.net.now
    e2 = late_start(g, 2, inc=2)
    assert g.net.run_until_true(lambda net: not e1.group.wants_t_join(), timeout=2)
    assert g.net.now - t_up < 0.15 * NS, (g.net.now - t_up) / 1e6
    # and member 2's first message, lost to member 1, is pulled at once
    g.net.run_until_true(lambda net: not e2.group.wants_t_join(), timeout=2)
    g.net.drop_filter = lambda src, dst, data: dst == 1 and any(
        m.type == T.DATA and m.seq == 0 for m in types_in(data))
    g.publish_now(3)
    g.net.run(0.05)
    g.net.drop_filter = None
    g.net.run(0.1)
    g.drain()
    assert sorted(q for (s, i, q) in g.got[1] if s == 2) == [0, 1, 2]
