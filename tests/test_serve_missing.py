"""Node.serve_missing: a whole body of MISSING sections served in C in one
call, checked against the path the engine takes today -- decode the sections
in Python, Node.serve per section, encode the GcNOTEs in Python -- on random
stores and random requests: the same datagrams, counters and trace, and the
unanswered ids a model of serving predicts."""
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rpbcast.core import digest, wire
from rpbcast.core.node import (SERVE_FROM_LOGGER, SERVE_GCNOTE, SERVE_GCNOTE_AT_ONCE, Node,
                               ServedSection)

T = wire.MsgType
SELF, PEERS, STRANGER = (1, 0), [(2, 0), (3, 5)], (9, 0)
SRC = 77
NOW = 10**9

# (peers, own) of the engine's three callers today.
GOSSIP = (SERVE_GCNOTE, SERVE_GCNOTE)                               # a member answers a GOSSIP
GOSSIP_AT_LOGGER = (SERVE_FROM_LOGGER, SERVE_FROM_LOGGER)           # a logger answers a GOSSIP
RTX = (0, SERVE_GCNOTE | SERVE_GCNOTE_AT_ONCE)                      # an RTX (a member)
RTX_AT_LOGGER = (SERVE_FROM_LOGGER, SERVE_GCNOTE | SERVE_GCNOTE_AT_ONCE)


def build(spec):
    """A node whose store holds some of what it received and published, and
    no longer some other part (aged out of the gossip buffer)."""
    n = Node(1, SELF[0], SELF[1], mtu=spec["mtu"], max_scan=spec["max_scan"])
    n.hold_send = False
    n.enable_trace(1 << 12)
    if spec["rate"]:
        n.set_rate_limit(spec["rate"], spec["burst"])
    buf = bytearray(1 << 16)
    for phase in (0, 1):
        for (s, i), seqs in zip(PEERS, spec["rx"][phase]):
            for q in seqs:
                n.rx(wire.datagram([(T.DATA, 0, s, i, 0, q, b"p%d" % q)], group=1, source=s,
                                   source_inc=i), 1000 + s, 0)
        for _ in range(spec["own"][phase]):
            n.publish(b"own", now=0)
        n.recv_batch(1 << 12, buf)
        if phase == 0:
            for _ in range(3):
                n.round(1)          # the first phase ages out of the gossip buffer
    n.datagrams()
    n.take_trace()
    return n


def missing_body(sections):
    out = []
    for kind, stream, intervals in sections:
        if kind == "lastseen":
            out.append(wire.lastseen_section([(5, 0, 3)]))
        elif kind == "bad":
            out.append(wire.section(wire.Section.MISSING, struct.pack("<II", *stream) + b"\x80"))
        else:
            top = int(intervals[-1][1]) if intervals else 0
            d, cov, k = digest.encode(intervals, 0, top + 3, 1 << 16)
            out.append(wire.missing_section(stream[0], stream[1], d))
    return b"".join(out)


def send_gcnote(node, mtu, dest, sender, inc, intervals):
    """Engine._send_gcnote as it is today."""
    budget = mtu - wire.DG_HDR - wire.MSG_HDR - 12
    iv = np.asarray(intervals, dtype=np.uint64)
    frm = int(iv[0, 0])
    while frm <= int(iv[-1, 1]):
        d, cov, k = digest.encode(iv, frm, int(iv[-1, 1]), budget)
        if not d:
            break
        node.emit(dest, T.GCNOTE, 0, node.node_id, node.inc, 0, 0, wire.missing_section(sender, inc, d))
        if cov >= int(iv[-1, 1]):
            break
        frm = cov + 1


def reference(node, body, how, mtu):
    """Decode in Python, Node.serve per section, GcNOTEs encoded in Python;
    returns [(sender, inc, intervals, served, gc)] and the predicted
    unanswered ids per section."""
    peers, own = how
    done, later = [], []
    for kind, _, data in wire.sections(body):
        if kind != wire.Section.MISSING:
            continue
        s, i, d = wire.read_missing(data)
        try:
            iv, _, _, _ = digest.decode(d)
        except digest.DigestError:
            continue
        h = own if (s, i) == SELF else peers
        held = [x for x in ids_of(iv) if node.holds(s, i, x)]
        served, gc = node.serve(s, i, iv, SRC, bool(h & SERVE_FROM_LOGGER), NOW, bool(h & SERVE_GCNOTE))
        done.append((s, i, iv, served, gc, held))
        if gc and h & SERVE_GCNOTE_AT_ONCE:
            send_gcnote(node, mtu, SRC, s, i, gc)
        elif gc:
            later.append((s, i, gc))
    for s, i, gc in later:
        send_gcnote(node, mtu, SRC, s, i, gc)
    return done


def unanswered(node, max_scan, s, i, iv, served, gc, held):
    """Ids the model says nobody answered: all of an unknown stream's; those
    past max_scan; those held but over the rate limit (the first `served`
    held ones got their REPAIR); those neither held nor GcNOTE'd."""
    ids = ids_of(iv)
    if (s, i) != SELF and node.find_peer(s, i) is None:
        return ids
    scanned, rest = ids[:max_scan], ids[max_scan:]
    gcs = set(ids_of(gc))
    got = set(held[:served])
    return [x for x in scanned if x not in got and x not in gcs] + rest


def ids_of(intervals):
    return [x for lo, hi in intervals for x in range(int(lo), int(hi) + 1)]


@st.composite
def requests(draw):
    secs = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["missing"] * 6 + ["lastseen", "bad"]))
        stream = draw(st.sampled_from([SELF, STRANGER] + PEERS))
        ids = sorted(draw(st.sets(st.integers(0, 45), min_size=1, max_size=30)))
        iv = []
        for x in ids:
            if iv and iv[-1][1] + 1 >= x:
                iv[-1] = (iv[-1][0], x)
            else:
                iv.append((x, x))
        secs.append((kind, stream, iv))
    return secs


@st.composite
def stores(draw):
    seqs = st.sets(st.integers(0, 40), max_size=30)
    return {
        "rx": [[draw(seqs) for _ in PEERS] for _ in range(2)],
        "own": [draw(st.integers(0, 20)), draw(st.integers(0, 20))],
        "mtu": draw(st.sampled_from([96, 140, 1472])),
        "max_scan": draw(st.sampled_from([0, 7, 25])),       # 0: the default (65536)
        "rate": draw(st.sampled_from([0, 0, 50.0])),
        "burst": draw(st.sampled_from([1, 4, 12])),
    }


def check(spec, secs, how):
    body = missing_body(secs)
    a, b = build(spec), build(spec)
    ref = reference(a, body, how, spec["mtu"])
    got = b.serve_missing(body, SRC, how[0], NOW, own_how=how[1])
    assert all(isinstance(x, ServedSection) for x in got)
    assert b.datagrams() == a.datagrams()
    assert b.counters() == a.counters()
    ta, tb = a.take_trace(), b.take_trace()
    assert (ta is None) == (tb is None)
    if ta is not None:
        for k in ta:
            assert np.array_equal(ta[k], tb[k]), k
    assert len(got) == len(ref)
    for g, (s, i, iv, served, gc, held) in zip(got, ref):
        assert (g.sender, g.inc) == (s, i)
        assert g.intervals.tolist() == iv.tolist()
        assert g.served == served
        assert g.gcnote_ids == len(ids_of(gc))
        assert g.gcnote_first == (gc[0][0] if gc else None)
        assert ids_of(g.unanswered) == unanswered(a, spec["max_scan"] or 65536, s, i, iv, served, gc,
                                                  held)


@settings(max_examples=300, deadline=None)
@given(stores(), requests(), st.sampled_from([GOSSIP, GOSSIP_AT_LOGGER, RTX, RTX_AT_LOGGER]))
def test_serve_missing_matches_the_python_path(spec, secs, how):
    check(spec, secs, how)


def test_gcnotes_over_several_messages_and_sections():
    """Many holes GcNOTE'd at a small MTU take several messages; GOSSIP sends
    them after every section, RTX right after their own section."""
    spec = {"rx": [[set(range(0, 40, 2)), set(range(0, 40, 3))], [{40}, {41}]], "own": [20, 2],
            "mtu": 96, "max_scan": 0, "rate": 0, "burst": 1}
    secs = [("missing", PEERS[0], [(0, 41)]), ("missing", SELF, [(0, 21)]),
            ("missing", PEERS[1], [(0, 41)])]
    for how in (GOSSIP, RTX):
        check(spec, secs, how)
    got = build(spec).serve_missing(missing_body(secs), SRC, SERVE_GCNOTE, NOW)
    assert [g.gcnote_ids for g in got] == [20, 20, 14]


def test_malformed_framing_serves_nothing():
    n = build({"rx": [[{1}, set()], [set(), set()]], "own": [0, 3], "mtu": 1472, "max_scan": 0,
               "rate": 0, "burst": 1})
    good = missing_body([("missing", SELF, [(0, 2)])])
    for bad in (good + b"\x01\x00", good + wire.section(wire.Section.MISSING, b"\x01\x02")):
        with pytest.raises(wire.WireError):
            n.serve_missing(bad, SRC, SERVE_GCNOTE, NOW)
        assert n.datagrams() == []
    assert n.serve_missing(b"", SRC, SERVE_GCNOTE, NOW) == []
    assert len(n.serve_missing(good, SRC, SERVE_GCNOTE, NOW)) == 1
