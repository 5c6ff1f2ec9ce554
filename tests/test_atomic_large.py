"""Atomic delivery of payloads larger than a datagram (issue 18: "works with
... the atomic layer"): the payload travels as PART records before a
PROPOSE that names their nonce, count, length and digest
(rpbcast/protocol/atomic/records.py); a member journals the parts with the
proposal and votes only when it holds them all.  Before this change a
payload above one datagram raised ValueError before anything was proposed.

The memnet cases reuse test_atomic's AtomicGroup (real journals); the
socket case is in test_fragments.py."""
from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings, strategies as st

from rpbcast.core import wire
from rpbcast.protocol.atomic import ATOMIC_LABEL, records

from test_atomic import AtomicGroup, everyone_else, key_of

T = wire.MsgType


class PayloadGroup(AtomicGroup):
    """AtomicGroup that also keeps what each member's application got:
    node id -> {key: [payload, ...]}."""

    def __init__(self, *a, **kw):
        self.payloads = collections.defaultdict(lambda: collections.defaultdict(list))
        super().__init__(*a, **kw)

    def drain(self):
        for i, x in self.X.items():
            if i in self.down:
                continue
            msgs = x.take()
            x.mark_delivered(msgs)
            for m in msgs:
                k = (m.sender, m.inc, m.seq)
                self.got[i][k] += 1
                self.payloads[i][k].append(bytes(m.payload))


def big(n, seed=0):
    return bytes((k * 131 + seed * 7 + (k >> 8)) & 0xFF for k in range(n))


def publish_records(g, i, recs):
    """Put records into i's stream as its atomic layer would (label
    ATOMIC_LABEL), bypassing records(): for forged or orphan parts."""
    seqs = []
    g.net.at(g.net.now + 1, lambda net: seqs.extend(
        g.E[i].publish(r, ATOMIC_LABEL, now=net.now) for r in recs))
    g.run(0.001)
    return seqs


# ---------------------------------------------------------------------- commits
@pytest.mark.parametrize("votes", ["flat", "tree"])
@pytest.mark.parametrize("loss", [0.0, 0.1])
def test_a_large_payload_commits_and_arrives_whole_exactly_once(tmp_path, votes, loss):
    g = PayloadGroup(4, tmp_path, loss=loss, votes=votes, fanout=2, timeout=5.0)
    g.run(0.3)
    payloads = [big(200_000, 1), big(1, 2), big(30_000, 3)]
    ps = [g.propose(1, payloads[0]), g.propose(1, payloads[1]), g.propose(3, payloads[2])]
    assert g.run_until(lambda: all(p.result() is not None for p in ps), 10.0)
    assert all(p.result().committed for p in ps), [p.result() for p in ps]
    g.run(0.5)
    for (s, p), payload in zip(g.proposals, payloads):
        k = key_of(g, s, p)
        for i in everyone_else(g, s):
            assert g.payloads[i][k] == [payload], (i, k, [len(x) for x in g.payloads[i][k]])
    # the 200 kB one went as parts (the 1-byte one did not)
    assert all(g.X[i].stats["large_proposals"] >= 1 for i in (2, 3, 4))
    assert all(not g.X[i].participant.parts and not g.X[i].participant.waiting for i in g.ids)


def test_a_proposal_waits_for_parts_repaired_after_it(tmp_path):
    """Parts lost on their first multicast arrive (by repair) after the
    PROPOSE: the member waits for them and votes YES only then."""
    g = PayloadGroup(3, tmp_path, timeout=5.0)
    g.run(0.3)
    dropped = []

    def drop(src, dst, data):
        # the first multicast of every DATA datagram of 1 to 2 except the last (the PROPOSE's)
        if src == 1 and dst == 2 and wire.first_type(data) == T.DATA and len(dropped) < 40 and len(data) > 1000:
            dropped.append(1)
            return True
        return False
    g.net.drop_filter = drop
    payload = big(60_000, 5)
    p = g.propose(1, payload)
    g.net.drop_filter = None
    assert g.run_until(lambda: p.result() is not None, 5.0)
    assert p.result().committed
    g.run(0.3)
    assert dropped
    assert g.X[2].stats["proposals_waiting_for_parts"] == 1
    assert g.payloads[2][key_of(g, 1, p)] == [payload]
    assert g.payloads[3][key_of(g, 1, p)] == [payload]


def test_above_the_message_cap_is_a_clear_error(tmp_path):
    g = AtomicGroup(2, tmp_path)
    x = g.X[1]
    with pytest.raises(ValueError, match="max_message_size"):
        x.records(b"x" * (x.ctx.cfg.message_cap + 1), 1.0)
    assert len(x.records(b"x" * 100, 1.0)) == 1                   # fits: one PROPOSE, inline
    recs = x.records(b"x" * 5000, 1.0)
    assert len(recs) > 2 and records.parse(recs[-1])[1].ref.count == len(recs) - 1


# ---------------------------------------------------------------------- crashes
def test_member_crashes_after_voting_yes_on_a_large_payload_recovers_it_whole(tmp_path):
    """The parts are journalled (and synced) with the proposal before the
    YES: a member killed after its YES hands over the whole payload after
    its restart, once."""
    g = PayloadGroup(4, tmp_path, timeout=2.0)
    g.run(0.3)
    payload = big(100_000, 9)
    p = g.propose(1, payload)
    assert g.run_until(lambda: g.X[3].stats["votes_sent"] >= 1, 0.5, step=0.0002)
    g.crash(3)
    g.run(0.5)
    assert p.result().committed
    assert not g.got[3]
    g.run(1.0)
    g.restart(3)
    assert g.X[3].stats["recovered_pending"] == 1
    assert g.run_until(lambda: g.got[3], 3.0)
    g.run(0.5)
    assert g.payloads[3][key_of(g, 1, p)] == [payload]
    for i in (2, 4):
        assert g.payloads[i][key_of(g, 1, p)] == [payload]


def test_committed_large_payload_not_yet_taken_survives_a_crash(tmp_path):
    g = PayloadGroup(3, tmp_path, timeout=2.0)
    g.run(0.2)
    payload = big(50_000, 4)
    x2 = g.X[2]
    g.down.add(2)                        # 2's application does not take yet
    p = g.propose(1, payload)
    assert g.run_until(lambda: p.result() is not None, 3.0)
    assert p.result().committed
    assert g.run_until(lambda: x2.ready == 1, 2.0)
    g.down.discard(2)
    g.crash(2)
    g.restart(2)
    assert g.run_until(lambda: g.got[2], 3.0)
    assert g.payloads[2][key_of(g, 1, p)] == [payload]


# ---------------------------------------------------------------------- bad input
def test_parts_that_do_not_match_the_digest_get_a_no_and_nobody_delivers(tmp_path):
    g = PayloadGroup(3, tmp_path, timeout=2.0)
    g.run(0.2)
    recs = records.propose_parts(big(20_000), 1200, 77, 2 * 10 ** 9)
    # one part's bytes changed after the digest was taken
    recs[3] = recs[3][:records.PART_HDR] + bytes(len(recs[3]) - records.PART_HDR)
    seqs = publish_records(g, 1, recs)
    assert g.run_until(lambda: g.X[1].coordinator.get(seqs[-1]) is not None
                       and g.X[1].coordinator.get(seqs[-1]).result() is not None, 3.0)
    r = g.X[1].coordinator.get(seqs[-1]).result()
    assert not r.committed
    g.run(0.3)
    assert g.X[2].stats["parts_mismatch"] == 1 and g.X[3].stats["parts_mismatch"] == 1
    assert not any(g.got.values())


def test_orphan_parts_are_bounded_and_collected(tmp_path):
    """Parts whose PROPOSE never comes (a sender that gave up between them)
    stay within reassembly_bytes and are dropped after the retention."""
    g = AtomicGroup(2, tmp_path, retention=0.5)
    x2 = g.X[2]
    x2.participant.parts_cap = 30_000
    g.run(0.2)
    publish_records(g, 1, records.propose_parts(big(20_000), 1200, 5, 10 ** 9)[:-1])
    publish_records(g, 1, records.propose_parts(big(20_000), 1200, 6, 10 ** 9)[:-1])
    g.run(0.2)
    assert 0 < x2.participant.parts_bytes <= 30_000
    assert x2.stats["parts_dropped_over_cap"] > 0
    g.run(2.0)
    assert x2.participant.parts_bytes == 0 and not x2.participant.parts
    assert x2.stats["parts_orphaned"] == 2


def test_a_part_beyond_the_count_its_proposal_names_is_refused(tmp_path):
    g = PayloadGroup(2, tmp_path, timeout=2.0)
    g.run(0.2)
    payload = big(5_000)
    recs = records.propose_parts(payload, 1200, 9, 2 * 10 ** 9)
    extra = records._PART.pack(records.PART, records.VERSION, 0, 1000, 9) + b"junk"
    seqs = publish_records(g, 1, [recs[-1]] + recs[:-1] + [extra])     # PROPOSE first, then the parts
    assert g.run_until(lambda: g.X[1].coordinator.get(seqs[0]).result() is not None, 3.0)
    assert g.X[1].coordinator.get(seqs[0]).result().committed
    g.run(0.2)
    assert g.payloads[2][(1, 1, seqs[0])] == [payload]
    assert g.X[2].participant.parts_bytes <= len(b"junk")


# ---------------------------------------------------------------------- records
@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 20_000), room=st.integers(records.PART_HDR + 1, 1500),
       order=st.randoms(use_true_random=False), flip=st.booleans())
def test_parts_split_parse_and_assemble_against_the_payload(n, room, order, flip):
    payload = bytes((k * 7 + n) & 0xFF for k in range(n))
    recs = records.propose_parts(payload, room, 3, 10 ** 9)
    assert all(len(r) <= max(room, len(recs[-1])) for r in recs)
    kind, prop = records.parse(recs[-1])
    assert kind == records.PROPOSE and prop.ref.count == len(recs) - 1 and prop.ref.length == n
    parts = [records.parse(r)[1] for r in recs[:-1]]
    order.shuffle(parts)
    pieces = {p.index: p.data for p in parts}
    if flip and n:
        k = order.choice(list(pieces))
        if pieces[k]:
            pieces[k] = bytes([pieces[k][0] ^ 1]) + pieces[k][1:]
            assert records.assemble(prop.ref, pieces) is None
            return
    assert records.assemble(prop.ref, pieces) == payload
    assert records.assemble(prop.ref, dict(list(pieces.items())[:-1])) is None or len(pieces) == 0
    if pieces:       # the right number of pieces, one of them at an index beyond the count
        wrong = dict(pieces)
        wrong[prop.ref.count] = wrong.pop(order.choice(list(wrong)))
        assert records.assemble(prop.ref, wrong) is None


@given(st.binary(max_size=64))
def test_garbled_part_and_reference_records_never_raise_beyond_record_error(raw):
    for prefix in (bytes([records.PART, records.VERSION]), bytes([records.PROPOSE, records.VERSION, 0, 1])):
        rec = prefix + raw
        assert records.maybe(rec) is None or records.maybe(rec)[0] in (records.PART, records.PROPOSE)
