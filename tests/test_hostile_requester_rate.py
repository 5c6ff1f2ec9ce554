"""A per-requester repair rate by default (issue 14, docs/security.md "No
amplification"): replies to a validated address (a member) are not capped
by the amplification rule, so without a rate per requester one member
asking for everything over and over took all of a node's repair capacity.
Now each source address has its own token bucket (csrc/reqlimit.h, on by
default): the greedy requester gets its rate and no more, and a second
requester is still served."""
import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.core import digest, wire
from rpbcast.protocol.engine import Engine

T = wire.MsgType
MS = 1_000_000
N = 3000
SPECS = [MemberSpec(1, 1), MemberSpec(2, 2), MemberSpec(3, 3)]


def server(**kw):
    """Member 1 with N messages of its own stream stored."""
    e = Engine(Config(node_id=1, members=SPECS, incarnation=1, store_entries=1 << 16, **kw), 0)
    for _ in range(N):
        e.publish(b"m" * 20, now=0)
    e.datagrams_to_send()
    return e


def ask_everything(e, requester, now):
    """An RTX from `requester` for every id of member 1's stream; returns
    the REPAIRs that came back to it."""
    d, _, _ = digest.encode([[0, N - 1]], 0, N - 1, 1200)
    rtx = wire.datagram([(T.RTX, 0, requester, 1, 0, 0, wire.missing_section(1, 1, d))],
                        group=1, source=requester, source_inc=1)
    assert e.receive_datagram(rtx, requester, now) == wire.Reason.OK
    repairs = 0
    for dest, dg in e.datagrams_to_send():
        _, msgs = wire.parse(dg)
        if dest == requester:
            repairs += sum(1 for m in msgs if m[0] == T.REPAIR)
    return repairs


def test_a_greedy_requester_gets_its_rate_and_another_is_still_served():
    e = server(requester_repair_rate=1000.0, requester_repair_burst=200.0)
    got = 0
    for k in range(10):                       # everything, every 100 ms, for 1 s
        got += ask_everything(e, 2, (1000 + 100 * k) * MS)
    # a burst of 200 plus 1000/s over 0.9 s
    assert 1000 <= got <= 200 + 1000 * 0.9 + 1
    assert e.counters()["serve_limited_requester"] > 0
    # the second requester, at once after: its own full burst
    assert ask_everything(e, 3, 1900 * MS) == 200


def test_the_limit_is_on_by_default():
    e = server()
    cfg = Config()
    assert cfg.requester_repair_rate > 0
    burst = cfg.requester_repair_rate / 10
    # one request within a burst: served whole (catch-up is not slowed) ...
    assert ask_everything(e, 2, 1000 * MS) == N
    # ... but asking for it all over again at once is not
    got = sum(ask_everything(e, 2, 1000 * MS) for _ in range(int(burst // N) + 3))
    assert got <= burst - N + 1
    assert ask_everything(e, 3, 1000 * MS) == N
    assert e.counters()["requesters"] == 2


def test_the_requester_table_is_bounded_and_evicts_the_least_recently_used():
    e = server(requester_repair_rate=1000.0, requester_repair_burst=10.0, repair_requesters=2)
    assert ask_everything(e, 2, 1000 * MS) == 10
    assert ask_everything(e, 3, 1001 * MS) == 10
    assert ask_everything(e, 2, 1002 * MS) == 2            # 2 ms at 1000/s
    c = e.counters()
    assert (c["requesters"], c["requesters_evicted"]) == (2, 0)
    ask_everything(e, 4, 1003 * MS)                         # a third address: 3 goes
    c = e.counters()
    assert (c["requesters"], c["requesters_evicted"]) == (2, 1)
    assert ask_everything(e, 2, 1003 * MS) == 1             # 2 was kept: its own bucket
    assert ask_everything(e, 3, 1003 * MS) == 10            # 3 comes back new (2 goes)
    assert e.counters()["requesters_evicted"] == 2


@pytest.mark.parametrize("kw, key", [(dict(requester_repair_rate=-1), "requester_repair_rate"),
                                     (dict(requester_repair_rate="fast"), "requester_repair_rate"),
                                     (dict(requester_repair_burst=-1), "requester_repair_burst"),
                                     (dict(repair_requesters=0), "repair_requesters")])
def test_bad_requester_limits_name_the_key(kw, key):
    with pytest.raises(ConfigError, match=key):
        Config(**kw)
