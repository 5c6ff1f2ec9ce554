"""Trace recording in the C core (csrc/trace.h): per-message events of
consecutive ids with everything else equal become one row with a count;
expanded, the rows are exactly the per-message events."""
import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rpbcast.core.node import Node, TraceEvent, trace_event_names
from rpbcast.analysis.tracefile import EVENT_CODES

SEND, RECV, DELIVER, GAP = (EVENT_CODES[e] for e in ("send", "recv", "deliver", "gap"))


def expand(t):
    """[(t, event, sender, inc, seq, size, peer, aux)] with runs expanded."""
    out = []
    for i in range(len(t["t_ns"])):
        base = [int(t[k][i]) for k in ("t_ns", "event", "sender", "inc")]
        tail = [int(t[k][i]) for k in ("size", "peer", "aux")]
        for q in range(int(t["seq"][i]), int(t["seq"][i]) + int(t["count"][i])):
            out.append(tuple(base + [q] + tail))
    return out


def test_a_batch_of_in_order_messages_is_one_row_per_event_kind():
    snd = Node(1, 1, 1, mtu=1472, store_bytes=1 << 24, store_entries=1 << 16)
    rcv = Node(1, 2, 1, mtu=1472, store_bytes=1 << 24, store_entries=1 << 16)
    snd.enable_trace(1 << 16)
    rcv.enable_trace(1 << 16)
    n = 5000
    payloads = np.zeros(n * 64, np.uint8)
    assert snd.publish_batch(payloads, np.full(n, 64, np.uint32), None, 7) == n
    sent = snd.take_trace()
    assert len(sent["t_ns"]) == 1 and int(sent["count"][0]) == n and int(sent["event"][0]) == SEND
    dgs = snd.datagrams()
    for _, d in dgs:
        rcv.rx(d, 99, 100)
    out = bytearray(1 << 22)
    assert rcv.recv_batch(n, out, 200)[0] == n
    t = rcv.take_trace()
    assert len(t["t_ns"]) == 2                     # one recv run, one deliver run
    ev = expand(t)
    assert [e[4] for e in ev if e[1] == RECV] == list(range(n))
    assert [e[4] for e in ev if e[1] == DELIVER] == list(range(n))
    assert {(e[0], e[5]) for e in ev if e[1] == RECV} == {(100, 64)}
    assert {(e[0], e[5]) for e in ev if e[1] == DELIVER} == {(200, 64)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 60), st.integers(-1, 3), st.integers(0, 2)),
                min_size=1, max_size=25))
def test_expanded_rows_are_exactly_the_per_message_events(steps):
    """Several senders, varying sizes and times, a datagram lost anywhere in
    a step (ids on both sides of the hole share time and stream, and must not
    join one run), datagrams arriving one by one: the expanded trace has one recv and one
    deliver per message received, with the right time, size and source."""
    senders = {s: Node(1, s, 1, mtu=1472, store_bytes=1 << 22, store_entries=1 << 14) for s in (1, 2, 3)}
    rcv = Node(1, 9, 1, mtu=1472, store_bytes=1 << 24, store_entries=1 << 16)
    rcv.enable_trace(1 << 16)
    now = 1000
    want_recv = collections.Counter()
    want_deliver = collections.Counter()
    out = bytearray(1 << 22)
    for s, k, drop, size_kind in steps:
        size = (8, 64, 100)[size_kind]
        node = senders[s]
        node.publish_batch(np.zeros(k * size, np.uint8), np.full(k, size, np.uint32), None, now)
        for j, (_, d) in enumerate(node.datagrams()):
            if j == drop:
                continue                           # lost: later ids are not contiguous with earlier
            rcv.rx(d, s, now)
        now += 3
        k_del, snd_, incs, seqs, labels, rxt, offs, lens = rcv.recv_batch(1 << 14, out, now)
        for i in range(k_del):
            want_deliver[(now, int(snd_[i]), int(seqs[i]), int(lens[i]))] += 1
            want_recv[(int(rxt[i]), int(snd_[i]), int(seqs[i]), int(lens[i]))] += 1
        now += 1
    t = rcv.take_trace()
    if t is None:
        assert not want_deliver
        return
    ev = expand(t)
    got_deliver = collections.Counter((e[0], e[2], e[4], e[5]) for e in ev if e[1] == DELIVER)
    got_recv = collections.Counter((e[0], e[2], e[4], e[5]) for e in ev if e[1] == RECV)
    assert got_deliver == want_deliver
    assert got_recv == want_recv
    assert all(e[6] == e[2] for e in ev if e[1] == RECV)        # peer = the datagram's source
    assert len(t["t_ns"]) <= len(ev)


def test_a_run_never_continues_across_a_take():
    snd = Node(1, 1, 1, mtu=1472, store_bytes=1 << 22, store_entries=1 << 14)
    snd.enable_trace(64)
    z = np.zeros(10 * 64, np.uint8)
    lens = np.full(10, 64, np.uint32)
    snd.publish_batch(z, lens, None, 5)
    a = snd.take_trace()
    snd.publish_batch(z, lens, None, 5)          # same time, next ids: would extend the taken row
    b = snd.take_trace()
    assert (int(a["seq"][0]), int(a["count"][0])) == (0, 10)
    assert len(b["t_ns"]) == 1 and (int(b["seq"][0]), int(b["count"][0])) == (10, 10)


def test_a_full_buffer_still_extends_its_last_row_and_counts_what_it_drops():
    snd = Node(1, 1, 1, mtu=1472, store_bytes=1 << 22, store_entries=1 << 14)
    snd.enable_trace(2)
    z = np.zeros(64, np.uint8)
    one = np.full(1, 64, np.uint32)
    for now in (1, 2, 2, 2, 3, 4):               # rows: t=1; t=2 x3 (one row); t=3, t=4 dropped
        snd.publish_batch(z, one, None, now)
    t = snd.take_trace()
    assert t["t_ns"].tolist() == [1, 2] and t["count"].tolist() == [1, 3]
    assert snd.counters()["trace_dropped"] == 2


def test_trace_event_codes_come_from_one_place():
    """TraceEvent is csrc/trace.h's list; the trace file names agree."""
    from rpbcast.analysis.tracefile import EVENT_NAMES
    assert trace_event_names() == EVENT_NAMES
    assert [(e.name, int(e)) for e in TraceEvent][:4] == [("SEND", 1), ("RECV", 2), ("RECV_DUP", 3),
                                                          ("DELIVER", 4)]
    assert TraceEvent.LOST == 14 and len(TraceEvent) == 14
