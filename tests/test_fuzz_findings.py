"""Regression tests for what the engine fuzzer (fuzz/fuzz_engine.py) found:
each is the smallest input that reproduced a finding, with the behaviour
that must hold instead."""
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.core import wire
from rpbcast.protocol.engine import Engine
from rpbcast.protocol.membership import MEMBER, MemberTable, Member

T = wire.MsgType
MS = 1_000_000


def engine(node_id=1):
    specs = [MemberSpec(1, 1), MemberSpec(2, 2), MemberSpec(3, 3)]
    return Engine(Config(node_id=node_id, members=specs, incarnation=1, gossip_interval=0.01), 0)


def entry(node_id, inc, freshness, status=MEMBER):
    return wire.member_entry(wire.Member(node_id, inc, status, 0, 2, 0, 5, freshness, 0))


# A member's freshness is a u64 on the wire.  The membership signature packed
# it as (freshness << 8 | status << 4 | role) into a u64 argument, so any
# freshness at or above 2^56 raised OverflowError out of receive_datagram
# (fuzz_engine seed 3: a LEAVE with seq 2^62-1, a JOIN or MEMBERS entry with
# a large freshness).
@pytest.mark.parametrize("what", ["LEAVE", "JOIN", "MEMBERS"])
@pytest.mark.parametrize("freshness", [2**56, 2**62 - 1])
def test_a_huge_member_freshness_is_merged_not_raised(what, freshness):
    e = engine()
    if what == "LEAVE":
        m = (T.LEAVE, 0, 2, 1, 0, freshness, b"")
    elif what == "JOIN":
        m = (T.JOIN, 0, 2, 1, 0, freshness, entry(2, 1, freshness))
    else:
        m = (T.MEMBERS, wire.F_PUSH, 2, 1, 1, 0, entry(2, 1, freshness))
    d = wire.datagram([m], group=1, source=2, source_inc=1)
    assert e.receive_datagram(d, 2, MS) == wire.Reason.OK
    assert e.members.get(2).freshness == freshness          # merged: the newest entry wins
    for k in range(2, 30):                                   # gossip rounds carry the signature
        e.handle_timer(k * 10 * MS)
        e.datagrams_to_send()


def test_the_membership_signature_folds_a_u64_freshness_the_same_on_every_node():
    a, b = MemberTable(1), MemberTable(2)
    for t in (a, b):
        t.upsert(Member(3, 1, MEMBER, 0, 3, 2, 2**64 - 1, 0))
    c = MemberTable(1)
    c.upsert(Member(3, 1, MEMBER, 0, 3, 2, 2**64 - 2, 0))
    assert a.signature == b.signature != c.signature
