"""A lost repair of the lowest missing ids while later repairs keep
arriving (issue 18: 1 MB messages at 1 % loss).

Under a steady stream with steady loss a receiver always has ids in flight,
and they keep arriving.  When the repair of the *lowest* run is lost, the
old rule ("ask again only when nothing of the stream arrived for a while")
never fires while the stream runs: the hole holds the receiver's contiguous
frontier -- and with it receiver-driven flow control and every large
message that lacks it -- until the stream stops or the gossip phase times
out (2 x gc_limit rounds).  The lowest run in flight is now asked again
once later ids arrived and it did not for a whole wait.  On the in-memory
network's virtual clock: deterministic."""
import collections

from groups import Group
from rpbcast.core import wire
from rpbcast.drivers.memnet import NS

T = wire.MsgType


def data_seqs(data):
    return [m.seq for m in wire.parse(data)[1] if m.type in (T.DATA, T.REPAIR)]


def run_steady_stream_losing_one_repair(count=2000, every=25, lost_repairs=1):
    """Sender 1 publishes `count` messages, one per 50 us; receiver 2 loses
    the first copy of every `every`-th message (a steady trickle of pulls
    and repairs), and of seq H = 10 * every also its first `lost_repairs`
    repairs.  Returns (the group, H, virtual time H was published,
    virtual time receiver 2 delivered it or None)."""
    g = Group(2, senders=[1], jitter=0.00002)
    g.net.latency = int(0.0001 * NS)             # 100 us each way: a LAN
    head = 10 * every
    seen = collections.Counter()

    def drop(src, dst, data):
        if src != 1 or dst != 2:
            return False
        out = False
        for s in data_seqs(data):
            seen[s] += 1
            if seen[s] == 1 and s % every == 0:
                out = True                       # the multicast copy
            elif s == head and seen[s] <= 1 + lost_repairs:
                out = True                       # and the first repair(s) of H
        return out

    g.net.drop_filter = drop
    g.t_start = g.net.now
    g.publish_stream(count, per_tick=1, tick=0.00005)
    published = delivered = None
    end = g.net.now + int(2.0 * NS)
    while g.net.now < end and delivered is None:
        g.net.run_until(g.net.now + int(0.0002 * NS))
        g.drain()
        if published is None and g.E[1].node.next_seq > head:
            published = g.net.now
        if g.got[2][(1, g.E[1].inc, head)]:
            delivered = g.net.now
    return g, head, published, delivered


def test_a_lost_repair_of_the_lowest_ids_is_asked_again_while_the_stream_runs():
    g, head, published, delivered = run_steady_stream_losing_one_repair()
    assert seen_loss(g, head)
    assert delivered is not None
    stream_end = 0.01 + 2000 * 0.00005           # publish_stream's start delay + the stream
    # pull (<= 1 ms) + a lost repair + one wait (nack_retry 3 ms) + a round trip, with room;
    # before, it waited for the stream to end (~110 ms) or the gossip phase to time out
    assert (delivered - published) / NS <= 0.012, (delivered - published) / 1e6
    assert (delivered - g.t_start) / NS < stream_end
    assert g.E[2].stats.get("reasked_heads", 0) >= 1
    assert g.run_until_complete(timeout=5)
    assert not g.duplicates() and not g.extras() and g.payload_ok


def seen_loss(g, head):
    return g.E[2].counters()["repairs_peer"] > 10


def test_a_head_asked_again_is_not_asked_twice_while_its_repair_is_on_the_way():
    """Asking again costs one repair of the run, not one per check: the
    lowest run is asked again only after another whole wait."""
    g, head, published, delivered = run_steady_stream_losing_one_repair(lost_repairs=2)
    assert delivered is not None
    assert (delivered - published) / NS <= 0.02, (delivered - published) / 1e6
    assert g.E[2].stats.get("reasked_heads", 0) <= 6
    assert g.run_until_complete(timeout=5)
    assert not g.duplicates() and not g.extras()
