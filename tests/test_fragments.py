"""Large messages: fragmentation at publish, reassembly at delivery
(csrc/frag.c, docs/api.md "Large messages").

The data-plane tests drive two C nodes directly (datagrams carried by the
test, shuffled, duplicated, dropped); a hypothesis property compares what a
receiver delivers with a small reference reassembler; the socket tests run
in a network namespace with kernel loss and a logger."""
import random
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.core.node import Node as CoreNode
from rpbcast.tools import netns
from ports import free_port

pytestmark = pytest.mark.timeout(240)

MTU = 1472
MAX_BODY = MTU - 48          # the largest unfragmented unlabelled payload


def pair(fifo=False, **kw):
    a = CoreNode(1, 1, 1, mtu=MTU, **kw)
    b = CoreNode(1, 2, 1, mtu=MTU, fifo=fifo, **kw)
    return a, b


def carry(a, b, shuffle=None, dup=0.0, drop=None):
    """a's datagrams into b; returns how many."""
    dgs = [d for _, d in a.datagrams()]
    if shuffle is not None:
        shuffle.shuffle(dgs)
    n = 0
    for i, d in enumerate(dgs):
        if drop is not None and drop(i, d):
            continue
        b.rx(d, 7, 0)
        n += 1
        if dup and shuffle is not None and shuffle.random() < dup:
            b.rx(d, 7, 0)
    return n


def take(b, max_n=4096):
    """Everything b delivers now: [(sender, seq, label, stream, bytes)]."""
    out = []
    buf = bytearray(1 << 16)
    streams = np.empty(max_n, np.uint32)
    while True:
        k, snd, inc, seq, lab, _, off, ln = b.recv_batch(max_n, buf, 0, streams)
        if not k:
            if b.recv_need > len(buf):
                buf = bytearray(b.recv_need)
                continue
            return out
        for i in range(k):
            o = int(off[i])
            out.append((int(snd[i]), int(seq[i]), None if lab[i] == 2**64 - 1 else int(lab[i]),
                        int(streams[i]), bytes(buf[o:o + int(ln[i])])))


def payload(n, seed=0):
    return random.Random(seed).randbytes(n)


@pytest.mark.parametrize("size", [0, 1, MAX_BODY - 1, MAX_BODY, MAX_BODY + 1, 2 * MAX_BODY,
                                  2 * MAX_BODY + 1, 100_000, 1 << 20])
@pytest.mark.parametrize("fifo", [False, True])
def test_sizes_across_the_mtu_arrive_whole_once(size, fifo):
    a, b = pair(fifo=fifo)
    p = payload(size, size)
    seq = a.publish(p)
    a.publish(b"after")
    carry(a, b, shuffle=random.Random(size))
    got = take(b)
    assert [g[4] for g in got if g[4] == p] == [p]             # whole, once
    assert got[0][1] == seq if fifo else True                  # FIFO: the large one first
    assert sorted(g[4] for g in got) == sorted([p, b"after"])
    assert take(b) == []
    fs = b.frag_stats()
    assert fs["partial"] == 0 and fs["partial_bytes"] == 0
    frags = 1 if size + 32 <= MAX_BODY or size <= MAX_BODY else -(-size // (MAX_BODY - 32))
    assert fs["whole"] == (1 if frags > 1 else 0)
    assert a.next_seq == frags + 1                              # one seq per fragment


def test_exactly_a_datagram_is_not_fragmented():
    a, b = pair()
    a.publish(payload(MAX_BODY))
    assert a.next_seq == 1
    a.publish(payload(MAX_BODY + 1))
    assert a.next_seq == 3


def test_cap_and_cap_plus_one():
    cap = 64 << 20
    a, b = pair(max_message=cap, store_bytes=160 << 20, store_entries=1 << 17)
    p = payload(cap, 1)
    first = a.publish(p)
    with pytest.raises(ValueError, match="max_message_size"):
        a.publish(b"x" * (cap + 1))
    assert a.next_seq == first + -(-cap // (MAX_BODY - 32))     # cap+1 sent nothing
    carry(a, b)
    got = take(b)
    assert len(got) == 1 and got[0][4] == p
    with pytest.raises(ConfigError, match="max_message_size"):
        Config(node_id=1, max_message_size=cap).validate()     # the default store cannot hold it
    Config(node_id=1, max_message_size=cap, store_bytes=128 << 20).validate()
    with pytest.raises(ConfigError, match="reassembly_bytes"):
        Config(node_id=1, reassembly_bytes=1000).validate()


class RefReassembler:
    """What a receiver must deliver: a message once all its fragments came,
    once; FIFO delivery also in the sender's order of first seqs."""

    def __init__(self, msgs, fifo):
        self.msgs = msgs                  # first seq -> (count, payload)
        self.fifo = fifo
        self.have = set()
        self.done = set()

    def arrive(self, seqs):
        self.have |= set(seqs)

    def deliverable(self):
        out = []
        for first in sorted(self.msgs):
            count, p = self.msgs[first]
            whole = all(s in self.have for s in range(first, first + count))
            if first in self.done:
                continue
            if whole:
                out.append(first)
            elif self.fifo:
                break
        self.done |= set(out)
        return out


def datagram_seqs(dg):
    """The DATA seqs a datagram carries (one message per datagram here, or
    several small ones)."""
    from rpbcast.core.wire import parse
    return [m.seq for m in parse(dg)[1] if m.type == 1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 12 * MAX_BODY), min_size=1, max_size=6),
       seed=st.integers(0, 2**32 - 1), dup=st.sampled_from([0.0, 0.3]),
       fifo=st.booleans(), steps=st.integers(1, 5))
def test_any_arrival_order_with_duplicates_matches_the_reference(sizes, seed, dup, fifo, steps):
    a, b = pair(fifo=fifo)
    msgs = {}
    for i, n in enumerate(sizes):
        p = payload(n, seed + i)
        first = a.publish(p)
        msgs[first] = (a.next_seq - first, p)
    rng = random.Random(seed)
    dgs = [d for _, d in a.datagrams()]
    rng.shuffle(dgs)
    dgs += [rng.choice(dgs) for _ in range(int(len(dgs) * dup))]
    rng.shuffle(dgs)
    ref = RefReassembler(msgs, fifo)
    delivered = []
    cut = sorted(set(rng.sample(range(1, len(dgs) + 1), min(steps, len(dgs)))) | {len(dgs)})
    lo = 0
    for hi in cut:
        for d in dgs[lo:hi]:
            b.rx(d, 7, 0)
            ref.arrive(datagram_seqs(d))
        lo = hi
        got = take(b)
        want = ref.deliverable()
        assert [g[1] for g in got] == (want if fifo else [g[1] for g in got])
        assert sorted(g[1] for g in got) == sorted(want)
        for g in got:
            assert g[4] == msgs[g[1]][1]
        delivered += got
    assert sorted(g[1] for g in delivered) == sorted(msgs)     # all whole, each once
    assert b.frag_stats()["partial"] == 0


def test_publish_batch_with_large_messages():
    a, b = pair()
    ps = [payload(n, n) for n in (10, 5000, MAX_BODY + 1, 300_000, 7)]
    lens = np.array([len(p) for p in ps], np.uint32)
    assert a.publish_batch(b"".join(ps), lens) == len(ps)
    carry(a, b)
    assert sorted(g[4] for g in take(b)) == sorted(ps)


def test_a_lost_fragment_drops_the_partial_with_a_reason():
    """A fragment declared lost for good (a GAPNOTE: node.forget) drops its
    message's partial: counted, and FIFO delivery moves past it."""
    a, b = pair(fifo=True)
    big = payload(20_000, 3)
    first = a.publish(big)
    a.publish(b"next")
    count = a.next_seq - 1 - first
    lost = first + 4
    carry(a, b, drop=lambda i, d: lost in datagram_seqs(d))
    assert take(b) == []                                       # FIFO waits for the big one
    fs = b.frag_stats()
    assert fs["partial"] == 1 and fs["partial_bytes"] == len(big)
    slot = b.find_peer(1, 1)
    b.forget(slot, lost, lost)
    fs = b.frag_stats()
    assert fs["partial"] == 0 and fs["dropped_lost"] == 1
    assert [g[4] for g in take(b)] == [b"next"]
    assert count > 4


def test_a_repaired_fragment_completes_the_message():
    a, b = pair()
    big = payload(20_000, 4)
    first = a.publish(big)
    lost = first + 2
    carry(a, b, drop=lambda i, d: lost in datagram_seqs(d))
    assert take(b) == []
    slot = b.find_peer(1, 1)
    assert [tuple(iv) for iv in b.missing(slot, 2)] == [(lost, lost)]
    # the sender serves the missing id from its store, as for any message
    from rpbcast.core import digest, wire
    sec = wire.missing_section(1, 1, digest.encode([(lost, lost)], lost, lost)[0])
    served = a.serve_missing(sec, 7, 0)
    assert sum(s.served for s in served) == 1
    rep = [d for _, d in a.datagrams()]
    assert rep, "the sender served the lost fragment"
    for d in rep:
        b.rx(d, 7, 0)
    assert [g[4] for g in take(b)] == [big]


def test_incarnation_death_drops_partials_with_a_reason():
    a, b = pair(fifo=True)
    big = payload(30_000, 5)
    a.publish(big)
    carry(a, b, drop=lambda i, d: i == 3)
    assert b.frag_stats()["partial"] == 1
    a2 = CoreNode(1, 1, 2, mtu=MTU)                            # node 1 restarted
    a2.publish(b"new life")
    carry(a2, b)
    fs = b.frag_stats()
    assert fs["partial"] == 0 and fs["dropped_dead"] == 1 and fs["partial_bytes"] == 0
    assert [g[4] for g in take(b)] == [b"new life"]


def test_reassembly_bound_waits_then_drops_a_stale_partial():
    """At the reassembly bound a new message waits (its fragment is missing
    again, asked for later) while the partials progress; a partial without
    progress for 5 s gives way, counted."""
    a, b = pair(reassembly_bytes=50_000)
    p1, p2 = payload(30_000, 1), payload(30_000, 2)
    f1 = a.publish(p1)
    f2 = a.publish(p2)
    last1 = f2 - 1
    dgs = [d for _, d in a.datagrams()]
    in1 = [d for d in dgs if max(datagram_seqs(d)) < f2 and last1 not in datagram_seqs(d)]
    in2 = [d for d in dgs if min(datagram_seqs(d)) >= f2]
    for d in in1:
        b.rx(d, 7, 0)                                  # message 1 partial (its last fragment lost)
    b.rx(in2[0], 7, 1_000_000_000)                     # 1 s later: message 2 must wait
    fs = b.frag_stats()
    assert fs["partial"] == 1 and fs["dropped_bound"] == 0
    slot = b.find_peer(1, 1)
    s2 = min(datagram_seqs(in2[0]))
    assert any(lo <= s2 <= hi for lo, hi in b.missing(slot, 2))   # asked for again later
    for d in in2:
        b.rx(d, 7, 6_000_000_000)                      # 6 s: message 1 is stale, gives way
    fs = b.frag_stats()
    assert fs["dropped_bound"] == 1 and fs["partial_bytes"] <= 50_000
    assert f1 < f2


def test_fifo_label_purge_takes_whole_messages():
    """FIFO-SRB's purge (TP4) in a FIFO queue: a newer message with the same
    label makes an older queued one obsolete -- for fragmented messages the
    label is on the whole message, so the whole older message goes, never a
    piece of it."""
    a, b = pair(fifo=True)
    old, new = payload(10_000, 1), payload(12_000, 2)
    a.publish(old, label=5)
    a.publish(b"other", label=6)
    a.publish(new, label=5)
    carry(a, b, shuffle=random.Random(1))
    got = take(b)
    assert [(g[2], g[4]) for g in got] == [(6, b"other"), (5, new)]
    assert b.counters()["purged"] == 1
    assert b.frag_stats()["partial"] == 0


def test_fifo_srb_window_refuses_fragments_clearly():
    a = CoreNode(1, 1, 1, mtu=MTU, srb_w=64)
    with pytest.raises(ValueError, match="FIFO-SRB"):
        a.publish(payload(MAX_BODY + 1))
    a.publish(payload(MAX_BODY))                               # one datagram: fine


def test_malformed_extension_header_is_rejected_and_counted():
    from rpbcast.core import wire
    a, b = pair()
    a.publish(payload(5000, 9))
    dg = bytearray(a.datagrams()[0][1])
    # the first message's extension header: count 1 -> 0 (offset 24 dg + 24 msg + 8 label + 16)
    dg[24 + 24 + 8 + 16:24 + 24 + 8 + 20] = (0).to_bytes(4, "little")
    assert b.rx(bytes(dg), 7, 0) == wire.Reason.BODY
    assert b.rx_reasons() and b.frag_stats()["fragments"] == 0


def test_reserved_label_is_refused():
    a, _ = pair()
    with pytest.raises(ValueError, match="reserved"):
        a.publish(b"x", label=2**64 - 3)


# ---- on real sockets ------------------------------------------------------

def group(n, loggers=(), tmp_path=None, **kw):
    from rpbcast.api import Node
    ports = {i: free_port() for i in range(1, n + 1)}
    specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}", "logger" if i in loggers else "member") for i in ports]
    nodes = {}
    for i in ports:
        cfg = dict(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, gossip_interval=0.02,
                   store_bytes=128 << 20, store_entries=1 << 18,
                   group_addr=f"239.255.91.{1 + (ports[1] % 200)}:{ports[1] + 1000}")
        cfg.update(kw)
        if i in loggers:
            cfg.update(role="logger", log_dir=str(tmp_path / f"log{i}"))
        if cfg.get("atomic"):
            cfg.update(state_dir=str(tmp_path / f"state{i}"))
        nodes[i] = Node(Config(**cfg))
    return nodes


@pytest.mark.netns
def test_large_messages_under_kernel_loss_with_a_logger_whole_and_once(tmp_path):
    sizes = [MAX_BODY + 1, 50_000, 200_000, 1 << 20, 3000, 700_000]
    with netns.namespace(loss=0.05) as ns, netns.entered(ns):
        nodes = group(4, loggers=[4], tmp_path=tmp_path)
        try:
            time.sleep(0.2)
            sent = {}
            for k, n in enumerate(sizes * 3):
                p = payload(n, 100 + k)
                while True:
                    try:
                        sent[nodes[1].publish(p)] = p
                        break
                    except BlockingIOError:
                        time.sleep(0.01)
            for i in (2, 3):
                got = {}
                end = time.time() + 30
                while len(got) < len(sent) and time.time() < end:
                    m = nodes[i].receive(timeout=0.2)
                    if m is not None:
                        assert m.seq not in got, "delivered twice"
                        got[m.seq] = bytes(m.payload)
                assert got == sent, f"node {i}: {len(got)} of {len(sent)}"
                assert nodes[i].receive(timeout=0.3) is None
                st = nodes[i].stats()
                assert st["reassembly"]["whole"] == len(sent)
            dropped, _ = netns.loss_counters(ns)
            assert dropped > 0
            sts = [nodes[i].stats() for i in (2, 3, 4)]
            assert sum(s["repairs_peer"] + s["repairs_logger"] for s in sts) > 0   # lost fragments repaired
        finally:
            for n in nodes.values():
                n.close()


@pytest.mark.netns
def test_api_errors_name_the_cap(tmp_path):
    with netns.namespace() as ns, netns.entered(ns):
        nodes = group(2, max_message_size=100_000)
        try:
            with pytest.raises(ValueError, match="max_message_size"):
                nodes[1].publish(b"x" * 100_001)
            with pytest.raises(ValueError, match="max_message_size"):
                nodes[1].publish_batch([b"a", b"x" * 100_001])      # "a" goes out, then the error
            seq = nodes[1].publish(b"y" * 100_000)
            got = [nodes[2].receive(timeout=5) for _ in range(2)]
            assert [(m.seq, bytes(m.payload)) for m in got] == [(0, b"a"), (seq, b"y" * 100_000)]
        finally:
            for n in nodes.values():
                n.close()


@pytest.mark.netns
def test_atomic_publish_larger_than_a_datagram_commits_whole_on_sockets(tmp_path):
    """A 1 MB atomic payload goes as PART records before its PROPOSE
    (docs/atomic.md): it commits and every other member's receive_atomic
    hands over the whole payload once (before: ValueError "atomic payload
    must fit one datagram"); above max_message_size it is a clear error."""
    with netns.namespace() as ns, netns.entered(ns):
        nodes = group(3, tmp_path=tmp_path, atomic=True, max_message_size=2 << 20)
        try:
            time.sleep(0.2)
            big = bytes(range(256)) * 4096
            out = nodes[1].publish_atomic(big, timeout=10.0)
            assert out.committed, out
            for i in (2, 3):
                m = nodes[i].receive_atomic(timeout=10)
                assert m is not None and m.seq == out.seq and bytes(m.payload) == big
                assert nodes[i].receive_atomic(timeout=0.2) is None
            with pytest.raises(ValueError, match="max_message_size"):
                nodes[1].publish_atomic(b"z" * ((2 << 20) + 1), timeout=2.0)
            assert nodes[1].publish_atomic(b"small", timeout=2.0).committed
        finally:
            for n in nodes.values():
                n.close()


def test_many_partials_of_a_dead_incarnation_all_dropped_and_skipped():
    """More partials than one drop call takes (64): every one is dropped and
    FIFO delivery moves past every one."""
    a, b = pair(fifo=True)
    firsts = [a.publish(payload(2 * MAX_BODY, k)) for k in range(70)]
    seconds = {f + 1 for f in firsts}
    carry(a, b, drop=lambda i, d: bool(set(datagram_seqs(d)) & seconds))
    assert b.frag_stats()["partial"] == 70
    a2 = CoreNode(1, 1, 2, mtu=MTU)
    a2.publish(b"after the restart")
    carry(a2, b)
    fs = b.frag_stats()
    assert fs["partial"] == 0 and fs["dropped_dead"] == 70
    assert [g[4] for g in take(b)] == [b"after the restart"]
