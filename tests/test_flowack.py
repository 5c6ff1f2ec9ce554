"""The flow window's data-plane acknowledgments (csrc/flowack.h, FLOWACK in
csrc/wire.h): a receiver's data plane acknowledges its frontier of each
sender's stream, the sender's data plane folds the acknowledgment into its
window -- only a member's own report, from its registered address and
incarnation, about the sender's current stream, never beyond what it sent.
Two core nodes wired by hand: no sockets, no Python timer."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from rpbcast.core import wire
from rpbcast.core.node import Node

T = wire.MsgType
GROUP = 1
S_ID, S_INC, S_ADDR = 1, 5, 1001
R_ID, R_INC, R_ADDR = 2, 7, 1002
EVIL_ADDR = 6666
LIMIT, EVERY = 64, 8
MS = 1_000_000


def _pair(now=0, stale_ns=1000 * MS):
    s, r = Node(GROUP, S_ID, S_INC), Node(GROUP, R_ID, R_INC)
    for n in (s, r):
        n.flow_configure(LIMIT, EVERY, stale_ns, MS)
    s.flow_set_members([(R_ID, R_INC, R_ADDR, True)], now)
    r.flow_set_members([(S_ID, S_INC, S_ADDR, True)], now)
    return s, r


def _publish(s, k, now=0):
    for _ in range(k):
        s.publish(b"m" * 16, now=now)


def _deliver(src_node, src_addr, dst_node, now, take=True):
    """Everything src_node queued, into dst_node (as its loop would); with
    take, its application then takes every delivery (as udp.pyx's take
    does, acknowledging what was taken)."""
    for _dest, d in src_node.datagrams():
        dst_node.rx(bytes(d), src_addr, now)
    if take:
        _take(dst_node, 1 << 20, now)


def _take(node, k, now):
    """The application takes up to k deliveries; the driver then queues the
    flow acknowledgments due (Transport.take -> rp_loop_after_take)."""
    got = node.recv_batch(k, bytearray(k * 64 if k < 1 << 16 else 1 << 22), now)[0]
    node.flow_after_take(now)
    return got


def _ack(seq, source=R_ID, source_inc=R_INC, stream=(S_ID, S_INC), flags=0, body=b""):
    return wire.datagram([(T.FLOWACK, flags, stream[0], stream[1], 0, seq, body)],
                         group=GROUP, source=source, source_inc=source_inc)


def test_the_receivers_data_plane_acknowledgment_reopens_the_window():
    s, r = _pair()
    _publish(s, LIMIT)
    assert s.flow_stats()["room"] == 0              # the window is full: nothing acknowledged
    _deliver(s, S_ADDR, r, 1, take=False)
    r.flow_after_batch(True, 1)                     # the batch drained the socket, but the
    assert r.datagrams() == []                      # application has taken nothing yet
    assert _take(r, LIMIT, 1) == LIMIT              # it takes them all: ack now
    acks = [(dest, bytes(d)) for dest, d in r.datagrams()]
    assert [dest for dest, _ in acks] == [S_ADDR]
    assert wire.parse(acks[0][1])[1][0][:6] == (T.FLOWACK, 0, S_ID, S_INC, 0, LIMIT)
    for _dest, d in acks:
        s.rx(d, R_ADDR, 2)
    moved = s.flow_after_batch(False, 2)
    st_ = s.flow_stats()
    assert moved and st_["front"] == LIMIT and st_["room"] == LIMIT and st_["acks_received"] == 1
    assert r.flow_stats()["acks_sent"] == 1


def test_a_receiver_acks_every_k_messages_without_draining_and_repeats_when_idle():
    s, r = _pair()
    _publish(s, EVERY - 1)
    _deliver(s, S_ADDR, r, 1)
    r.flow_after_batch(False, 1)                    # fewer than EVERY new, socket not drained: wait
    assert r.datagrams() == []
    _publish(s, 1)
    _deliver(s, S_ADDR, r, 2)
    r.flow_after_batch(False, 2)                    # EVERY new: ack
    assert len(r.datagrams()) == 1
    r.flow_after_batch(True, 2 + MS // 2)           # unchanged, too soon to repeat
    assert r.datagrams() == []
    r.flow_after_batch(True, 2 + 2 * MS)            # unchanged, traffic still comes: repeat (a lost ack)
    assert len(r.datagrams()) == 1


def test_lone_messages_get_at_most_one_drained_ack_per_interval():
    """A sender of lone messages (each batch drains the socket) gets an
    acknowledgment at most once per resend interval (1 ms here) from each
    receiver, not one per message: with many receivers one per message
    would be an acknowledgment implosion."""
    s, r = _pair()
    sent = 0
    for k in range(20):                             # 20 lone messages 0.1 ms apart
        now = 1 + k * MS // 10
        _publish(s, 1, now)
        _deliver(s, S_ADDR, r, now)
        r.flow_after_batch(True, now)
        sent += len(r.datagrams())
    assert 1 <= sent <= 3                           # 2 ms of them: the first, then one per ms
    r.flow_after_batch(True, 1 + 5 * MS)            # the next batch after a quiet spell: acks the rest
    acks = [bytes(d) for _dest, d in r.datagrams()]
    assert len(acks) == 1 and wire.parse(acks[0])[1][0][5] == 20


@given(st.lists(st.tuples(st.sampled_from(["ok", "addr", "stranger", "inc", "stream", "ahead"]),
                          st.integers(0, LIMIT + 8)), max_size=40))
@settings(max_examples=150, deadline=None)
def test_only_a_members_own_report_moves_the_window(acks):
    """Against a reference model: the frontier is the greatest genuine
    acknowledgment not beyond what was sent; every forged one is counted
    and changes nothing."""
    s, _r = _pair()
    _publish(s, LIMIT)
    front, rejected = 0, 0
    for i, (kind, seq) in enumerate(acks):
        src, d = R_ADDR, None
        if kind == "addr":
            src = EVIL_ADDR                                  # the member's id, from elsewhere
        elif kind == "stranger":
            d = _ack(seq, source=9, source_inc=1)            # not a member
        elif kind == "inc":
            d = _ack(seq, source_inc=R_INC + 1)              # another incarnation of the member
        elif kind == "stream":
            d = _ack(seq, stream=(S_ID, S_INC - 1))          # about someone else's stream
        elif kind == "ahead":
            d = _ack(LIMIT + 1 + seq)                        # beyond what was sent
        d = d or _ack(seq)
        s.rx(d, src, i)
        s.flow_after_batch(False, i)
        if kind == "ok" and seq <= LIMIT:
            front = max(front, seq)
        else:
            rejected += 1
    st_ = s.flow_stats()
    assert st_["acks_rejected"] == rejected
    assert st_["room"] == front                              # LIMIT - (LIMIT - front)


def test_a_member_that_does_not_hold_the_window_is_ignored_not_counted_as_forged():
    s, _r = _pair()
    s.flow_set_members([(R_ID, R_INC, R_ADDR, True), (3, 1, 1003, False)], 0)   # 3: a logger
    _publish(s, LIMIT)
    s.rx(_ack(LIMIT, source=3, source_inc=1), 1003, 1)
    s.flow_after_batch(False, 1)
    st_ = s.flow_stats()
    assert st_["room"] == 0 and st_["acks_rejected"] == 0 and st_["acks_received"] == 0


def test_malformed_flowacks_are_rejected_by_the_decoder():
    s, _r = _pair()
    _publish(s, LIMIT)
    assert s.rx(_ack(LIMIT, flags=1), R_ADDR, 1) != 0
    assert s.rx(_ack(LIMIT, body=b"x" * 8), R_ADDR, 1) != 0
    assert s.flow_stats()["room"] == 0


def test_a_silent_member_stops_holding_the_window_after_the_timeout_and_counts_again_when_it_acks():
    s, r = _pair(stale_ns=50 * MS)
    _publish(s, LIMIT, now=0)
    s.flow_refresh(1)
    assert s.flow_stats()["room"] == 0
    s.flow_refresh(40 * MS)
    assert s.flow_stats()["room"] == 0                      # behind, silent, not yet for long
    s.flow_refresh(120 * MS)
    st_ = s.flow_stats()
    assert st_["room"] is None and st_["stale"] == 1         # no longer binds
    s.rx(_ack(LIMIT // 2), R_ADDR, 130 * MS)
    s.flow_after_batch(False, 130 * MS)
    assert s.flow_stats()["room"] == LIMIT // 2             # it is back


def test_an_idle_sender_does_not_find_its_members_stale_when_it_publishes_again():
    s, r = _pair(stale_ns=50 * MS)
    s.flow_refresh(0)                                       # caught up (nothing sent)
    _publish(s, LIMIT, now=10_000 * MS)                     # ten seconds later
    s.flow_refresh(10_000 * MS + 1)
    assert s.flow_stats()["room"] == 0                      # still bound, not stale


def test_the_member_table_keeps_a_members_frontier_across_updates_and_resets_a_new_incarnation():
    s, _r = _pair()
    _publish(s, LIMIT)
    s.rx(_ack(LIMIT), R_ADDR, 1)
    s.flow_after_batch(False, 1)
    s.flow_set_members([(R_ID, R_INC, R_ADDR, True), (3, 1, 1003, False)], 2)
    assert s.flow_stats()["room"] == LIMIT                  # same member: kept
    s.flow_set_members([(R_ID, R_INC + 1, R_ADDR, True)], 3)
    assert s.flow_stats()["room"] == 0                      # a restarted member starts over


def test_the_acknowledged_frontier_is_what_the_application_took_not_what_arrived():
    """A receiver acknowledges what its application has taken: messages in
    its delivery queue are still in flight for the sender's window, so the
    window bounds the whole path from publish to the application (main
    acknowledged what its loop had received, and the queueing moved into
    the delivery queue, unbounded).  Each take sends what is due at once."""
    s, r = _pair()
    _publish(s, LIMIT)
    _deliver(s, S_ADDR, r, 1, take=False)
    for t in (1, 2 * MS, 5 * MS):                   # batches, drained, time passing: nothing taken
        r.flow_after_batch(True, t)
    assert r.datagrams() == [] and r.flow_stats()["acks_sent"] == 0
    fronts = []
    for i, k in enumerate((EVERY - 1, 1, 3 * EVERY, LIMIT)):
        now = 6 * MS + i * MS // 10                  # within a resend interval of each other
        _take(r, k, now)
        fronts += [wire.parse(bytes(d))[1][0][5] for _dest, d in r.datagrams()]
    # EVERY - 1 taken: not yet due; EVERY: ack; 4 * EVERY: ack; all of them: ack
    assert fronts == [EVERY, 4 * EVERY, LIMIT]
    for d in _acks_of(fronts):
        s.rx(d, R_ADDR, 7 * MS)
    assert s.flow_after_batch(False, 7 * MS) and s.flow_stats()["room"] == LIMIT


def test_a_receiver_with_a_backlog_from_several_senders_holds_each_of_them_by_all_of_it():
    """Unordered delivery has one queue for every sender: each sender's
    acknowledged frontier is its received frontier less the whole queue
    (the receiver's backlog is every sender's business), never below 0."""
    s, r = _pair()
    o = Node(GROUP, 3, 9)
    r.flow_set_members([(S_ID, S_INC, S_ADDR, True), (3, 9, 1003, True)], 0)
    _publish(s, LIMIT)
    for _ in range(EVERY):
        o.publish(b"o" * 16, now=0)
    _deliver(s, S_ADDR, r, 1, take=False)
    _deliver(o, 1003, r, 1, take=False)
    assert r.pending == LIMIT + EVERY
    _take(r, 2 * EVERY, 2)                           # LIMIT - EVERY still queued: S's frontier EVERY, o's 0
    got = {dest: wire.parse(bytes(d))[1][0][5] for dest, d in r.datagrams()}
    assert got == {S_ADDR: EVERY}


def _acks_of(fronts):
    return [_ack(f) for f in fronts]


@given(st.booleans(), st.lists(st.tuples(st.sampled_from(["s", "o", "take", "batch"]), st.integers(1, 40)),
                               max_size=40))
@settings(max_examples=120, deadline=None)
def test_acknowledgments_against_a_model_of_the_delivery_queue(fifo, ops):
    """Against a reference model of the receiver's delivery queue (arrival
    order; FIFO delivery: a queue per sender): every FLOWACK to S is at most
    what the application has taken of S's stream, never goes down, and once
    the queue is empty and a resend interval has passed, the next take or
    drained batch acknowledges everything received."""
    s = Node(GROUP, S_ID, S_INC)
    r = Node(GROUP, R_ID, R_INC, fifo=fifo)
    o = Node(GROUP, 3, 9)
    s.flow_configure(LIMIT, EVERY, 1000 * MS, MS)
    r.flow_configure(LIMIT, EVERY, 1000 * MS, MS)
    r.flow_set_members([(S_ID, S_INC, S_ADDR, True), (3, 9, 1003, True)], 0)
    queue, taken_s, received_s, last = [], 0, 0, 0
    now = 1

    def acks():
        nonlocal last
        for dest, d in r.datagrams():
            if dest != S_ADDR:
                continue
            f = wire.parse(bytes(d))[1][0][5]
            assert f <= taken_s and f >= last, (f, taken_s, last)
            last = f

    for kind, k in ops + [("take", 1 << 16), ("wait", 0), ("batch", 0)]:
        now += MS // 3
        if kind in ("s", "o"):
            src, addr = (s, S_ADDR) if kind == "s" else (o, 1003)
            for _ in range(k):
                src.publish(b"m" * 16, now=now)
            _deliver(src, addr, r, now, take=False)
            queue += [kind] * k
            received_s += k if kind == "s" else 0
        elif kind == "take":
            b = r.recv_batch(k, bytearray(k * 64), now)
            got = ["s" if x == S_ID else "o" for x in b[1][:b[0]].tolist()]
            if not fifo:
                assert got == queue[:b[0]]          # unordered: one queue, in arrival order
            for g in got:
                queue.remove(g)
            taken_s += got.count("s")
            r.flow_after_take(now)
        elif kind == "batch":
            r.flow_after_batch(True, now)
        else:
            now += 2 * MS
        acks()
    assert not queue and taken_s == received_s
    assert last == received_s                       # nothing waits: all of it acknowledged

