"""Streams within a group (csrc/streams.c, docs/api.md "Streams"): a stream
id per publication, subscription by stream filtered in the data plane,
per-stream counters, one node and one set of sockets for many streams."""
import time

import numpy as np
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.core.node import Node as CoreNode
from rpbcast.tools import netns
from ports import free_port

pytestmark = pytest.mark.timeout(120)


def carry(a, b, drop=None):
    for i, (_, d) in enumerate(a.datagrams()):
        if drop is None or not drop(i):
            b.rx(d, 7, 0)


def take(b, max_n=4096):
    buf = bytearray(1 << 22)
    streams = np.empty(max_n, np.uint32)
    k, snd, inc, seq, lab, _, off, ln = b.recv_batch(max_n, buf, 0, streams)
    return [(int(seq[i]), int(streams[i]), bytes(buf[int(off[i]):int(off[i]) + int(ln[i])]))
            for i in range(k)]


@pytest.mark.parametrize("fifo", [False, True])
def test_unsubscribed_streams_are_filtered_in_the_data_plane(fifo):
    """Only stream 1 is delivered: the others never reach recv_batch (so no
    Python object is ever made for them -- the data plane counts them as
    filtered), yet they are tracked for reliability like any message."""
    a = CoreNode(1, 1, 1)
    b = CoreNode(1, 2, 1, fifo=fifo)
    b.only_streams(True)
    b.subscribe(1)
    sent = {0: [], 1: [], 2: []}
    for k in range(300):
        s = k % 3
        p = b"s%d-%d" % (s, k) + (b"x" * 3000 if k % 50 == 0 else b"")   # some large ones too
        sent[s].append((a.publish(p, stream=s), p))
    carry(a, b)
    got = take(b)                              # one call: every delivery there is
    assert len(got) == len(sent[1])            # the C side handed over stream 1 only
    assert [(q, p) for q, s, p in got] == sent[1]
    assert {s for _, s, _ in got} == {1}
    stats = b.stream_stats()
    assert stats[1]["delivered"] == stats[1]["received"] == 100 and stats[1]["filtered"] == 0
    for s in (0, 2):
        assert stats[s]["filtered"] == stats[s]["received"] == 100 and stats[s]["delivered"] == 0
    # tracked for reliability: no gap, every id counted as received
    slot = b.find_peer(1, 1)
    assert len(b.missing(slot, 2)) == 0
    c = b.counters()
    assert c["rx_new"] == a.next_seq and c["delivered"] == 100


def test_unsubscribed_stream_gaps_are_still_repaired():
    """A lost message of a stream nobody here reads is still missing here
    (and repaired, so this node can serve it to those who do)."""
    a = CoreNode(1, 1, 1)
    b = CoreNode(1, 2, 1)
    b.only_streams(True)
    b.subscribe(1)
    a.publish(b"a", stream=2)
    a.publish(b"b", stream=2)
    a.publish(b"c", stream=1)
    dgs = [d for _, d in a.datagrams()]
    assert len(dgs) == 1
    from rpbcast.core import wire
    # drop seq 0 (stream 2) by building the datagram without it
    hdr, msgs = wire.parse(dgs[0])
    keep = [m for m in msgs if m.seq != 0]
    b.rx(wire.datagram([(m.type, m.flags, m.sender, m.inc, m.aux, m.seq, m.body) for m in keep],
                       group=1, source=1, source_inc=1), 7, 0)
    slot = b.find_peer(1, 1)
    assert [tuple(iv) for iv in b.missing(slot, 2)] == [(0, 0)]
    assert [p for _, _, p in take(b)] == [b"c"]


def test_per_stream_counters_and_message_stream():
    a = CoreNode(1, 1, 1)
    b = CoreNode(1, 2, 1)
    for s, n in ((0, 3), (7, 5), (2**32 - 1, 2)):
        for k in range(n):
            a.publish(b"p" * 10, stream=s)
    carry(a, b)
    got = take(b)
    assert sorted(s for _, s, _ in got) == [0] * 3 + [7] * 5 + [2**32 - 1] * 2
    st = b.stream_stats()
    assert {s: (v["received"], v["delivered"], v["bytes"]) for s, v in st.items()} == {
        0: (3, 3, 30), 7: (5, 5, 50), 2**32 - 1: (2, 2, 20)}


def test_subscribe_and_unsubscribe_at_runtime_core():
    a = CoreNode(1, 1, 1)
    b = CoreNode(1, 2, 1)
    b.only_streams(True)
    b.subscribe(1)
    a.publish(b"1a", stream=1)
    a.publish(b"2a", stream=2)
    carry(a, b)
    assert [p for _, _, p in take(b)] == [b"1a"]
    b.subscribe(2)
    b.unsubscribe(1)
    a.publish(b"1b", stream=1)
    a.publish(b"2b", stream=2)
    carry(a, b)
    assert [p for _, _, p in take(b)] == [b"2b"]
    b.only_streams(False)
    a.publish(b"1c", stream=1)
    carry(a, b)
    assert [p for _, _, p in take(b)] == [b"1c"]


def test_stream_table_is_bounded_against_invented_ids():
    a = CoreNode(1, 1, 1)
    b = CoreNode(1, 2, 1)
    b.only_streams(True)
    b.subscribe(5)
    for s in range(1500):
        a.publish(b"x", stream=1000 + s)
    a.publish(b"mine", stream=5)
    carry(a, b)
    assert [p for _, _, p in take(b)] == [b"mine"]
    st = b.stream_stats()
    assert len(st) <= 1025 and st["other"]["filtered"] > 0
    assert sum(v["received"] for v in st.values()) == 1501


# ---- on real sockets ------------------------------------------------------

@pytest.mark.netns
def test_one_node_many_streams_subscribe_at_runtime():
    from rpbcast.api import Node
    with netns.namespace() as ns, netns.entered(ns):
        ports = {i: free_port() for i in (1, 2)}
        specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}") for i in ports]

        def cfg(i):
            return Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, gossip_interval=0.02,
                          group_addr=f"239.255.92.{1 + ports[1] % 200}:{ports[1] + 1000}")
        pub = Node(cfg(1))
        sub = Node(cfg(2), streams=[1])
        try:
            def recv_all(t=1.0):
                out = []
                end = time.time() + t
                while time.time() < end:
                    m = sub.receive(timeout=0.05)
                    if m is not None:
                        out.append((m.stream, bytes(m.payload)))
                return out
            for k in range(10):
                pub.publish(b"one%d" % k, stream=1)
                pub.publish(b"two%d" % k, stream=2)
            assert recv_all() == [(1, b"one%d" % k) for k in range(10)]
            sub.subscribe(2)
            sub.unsubscribe(1)
            pub.publish(b"one-late", stream=1)
            pub.publish(b"two-late", stream=2)
            pub.publish_batch([b"b1", b"b2"], stream=2)
            assert recv_all() == [(2, b"two-late"), (2, b"b1"), (2, b"b2")]
            st = sub.stats()["by_stream"]
            assert st[1]["delivered"] == 10 and st[1]["filtered"] == 1
            assert st[2]["delivered"] == 3 and st[2]["filtered"] == 10
            with pytest.raises(ValueError, match="stream"):
                pub.publish(b"x", stream=-1)
        finally:
            pub.close()
            sub.close()


def test_cli_pub_and_sub_by_stream_with_a_large_file(tmp_path):
    """rpbcast pub --stream N [--file PATH], rpbcast sub --stream N
    (repeatable): a subscriber of streams 2 and 3 gets the 300 kB file
    published on stream 3 whole and the text on 2, never stream 1's."""
    import json
    import os
    import subprocess
    import sys
    p1, p2 = free_port(), free_port()
    m = ["--transport", "unicast", "--member", f"1=127.0.0.1:{p1}", "--member", f"2=127.0.0.1:{p2}",
         "--no-stats-socket"]
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    rp = [sys.executable, "-m", "rpbcast"]
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 1200)
    sub = subprocess.Popen(rp + ["sub", "--node-id", "2", "--bind", f"127.0.0.1:{p2}", "--count", "2",
                                 "--timeout", "20", "--format", "json", "--stream", "2", "--stream", "3", *m],
                           env=env, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        for args in (["--stream", "1", "--text", "not-for-you"], ["--stream", "2", "--text", "two"],
                     ["--stream", "3", "--file", str(big)]):
            r = subprocess.run(rp + ["pub", "--node-id", "1", "--bind", f"127.0.0.1:{p1}", "--linger", "1",
                                     *args, *m], env=env, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
        out, _ = sub.communicate(timeout=40)
        msgs = [json.loads(line) for line in out.splitlines()]
        assert sorted((x["stream"], x["size"]) for x in msgs) == [(2, 3), (3, big.stat().st_size)]
        assert sub.returncode == 0
    finally:
        sub.kill()
