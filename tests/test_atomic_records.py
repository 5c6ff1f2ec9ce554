"""The atomic layer's records (what travels in a stream) and its journal
(what a member keeps on disk): round trips, hostile bytes, crash recovery."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from rpbcast.protocol.atomic import records
from rpbcast.protocol.atomic.journal import Journal
from rpbcast.protocol.atomic.records import RecordError

NS = 1_000_000_000


def test_every_record_kind_round_trips():
    k, p = records.parse(records.propose(b"payload", 3 * NS, records.TREE, 8, 41))
    assert k == records.PROPOSE and p == records.Propose(records.TREE, 3 * NS, 41, 8, b"payload")
    ds = [records.Decision(7, 5, records.COMMIT, 0), records.Decision(6, 2**40, records.ABORT, records.R_TIMEOUT)]
    assert records.parse(records.decide(ds)) == (records.DECIDE, ds)
    assert records.parse(records.boot([(4, 9), (5, 1)])) == (records.BOOT, [(4, 9), (5, 1)])
    assert records.parse(records.join()) == (records.JOIN, None)
    assert records.parse(records.fence(12)) == (records.FENCE, 12)


def test_decisions_are_packed_into_records_of_at_most_max():
    items = [(1, q, records.COMMIT, 0) for q in range(records.MAX_DECISIONS * 2 + 3)]
    recs = records.decisions_in(items)
    assert len(recs) == 3
    got = [d for r in recs for d in records.parse(r)[1]]
    assert [(d.inc, d.seq, d.outcome, d.reason) for d in got] == items


@pytest.mark.parametrize("bad", [
    b"", b"\x01", b"\x01\x01\x00\x00", b"\x01\x02" + bytes(14),              # short; a future version
    records.propose(b"x", NS)[:15],                                          # a header cut short
    bytes([1, 1, 7, 0]) + bytes(12),                                         # unknown vote scheme
    bytes([1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]),                 # timeout 0
    records.decide([records.Decision(1, 1, 1, 0)]) + b"\x00",                # trailing byte
    bytes([2, 1, 0, 0]),                                                     # no decisions
    bytes([2, 1, 1, 0]) + bytes(4) + bytes([9, 0, 0, 0]) + bytes(8),         # outcome 9
    bytes([2, 1, 1, 0]) + bytes(4) + bytes([1, 0, 0, 0]) + (2**62).to_bytes(8, "little"),   # seq out of range
    bytes([3, 1, 0, 0]), bytes([3, 1, 200, 0]) + bytes(1600),                # BOOT: none, too many
    bytes([4, 1, 1, 0]), bytes([5, 1, 0, 0]), bytes([9, 1, 0, 0]),           # JOIN, FENCE, unknown kind
])
def test_malformed_records_raise_record_error_only(bad):
    with pytest.raises(RecordError):
        records.parse(bad)
    assert records.maybe(bad) is None


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_record_error(data):
    try:
        records.parse(data)
    except RecordError:
        pass


def test_what_a_sync_covered_survives_a_crash_and_nothing_else(tmp_path):
    j = Journal(str(tmp_path / "j"))
    assert not j.existed
    o1 = j.add_proposal((1, 1, 5), b"first", 0)
    j.add_decision((1, 1, 5), records.COMMIT, 0, 0)
    j.sync()
    assert j.synced >= o1 > 0
    o2 = j.add_proposal((1, 1, 6), b"second, never synced", 0)
    assert o2 > j.synced
    assert j.add_proposal((1, 1, 5), b"first", 0) == 0          # there already
    j.mark_delivered([(1, 1, 5)])
    j.crash()
    r = Journal(str(tmp_path / "j"))
    assert r.existed
    got = r.recover()
    assert got.proposals == {(1, 1, 5): b"first"}
    assert got.decisions == {(1, 1, 5): (records.COMMIT, 0)}
    assert got.delivered == {(1, 1, 5)}
    r.close()


def test_gc_drops_finished_proposals(tmp_path):
    j = Journal(str(tmp_path / "j"))
    for q in range(10):
        j.add_proposal((2, 3, q), b"p", 0)
        j.add_decision((2, 3, q), records.ABORT, 1, 0)
    j.sync()
    j.gc(2, 3, 6)
    j.mark_delivered([])                 # the application's thread applies delivered/'s share
    # the index forgets them at once (segments go when wholly below)
    rec = j.recover()
    assert sorted(q for _, _, q in rec.proposals) == [6, 7, 8, 9]
    j.close()
