"""The lossless latency path (issue 15): what a message costs besides its
trip through the kernel.

- The own multicast copy.  Loopback hands every datagram a node multicasts
  back to its own receiving socket (IP_MULTICAST_LOOP must stay on for the
  other members on this host); a socket filter drops it in the kernel, so a
  publisher is not woken once per publish to read and discard its own copy.
- The application's receive calls allocate per call what the call takes,
  not per call what it could take: receive() reuses its buffer while no
  payload it handed out is alive, recv_batch without a buffer returns one of
  the size the payloads take (a zeroed buffer of mtu * max_n bytes per call,
  and seven arrays of max_n entries, cost more than the message's trip).
"""
import socket
import threading
import time

import numpy as np
import pytest

from rpbcast import Config, ConfigError, MemberSpec
from rpbcast.api import Node
from rpbcast.tools import netns
from ports import free_port

pytestmark = pytest.mark.timeout(120)
needs_ns = pytest.mark.netns


def pair(**kw):
    """Two static members of one group on loopback multicast."""
    ports = {1: free_port(), 2: free_port()}
    specs = [MemberSpec(i, f"127.0.0.1:{p}") for i, p in ports.items()]
    group = f"239.255.93.{1 + ports[1] % 200}:{ports[1] + 1000}"
    nodes = []
    for i, p in ports.items():
        nodes.append(Node(Config(node_id=i, bind=f"127.0.0.1:{p}", members=specs, group_addr=group,
                                 member_timeout=3600, **kw)))
    return nodes[0], nodes[1], group


def close(*nodes):
    for n in nodes:
        n.close(linger=0)


def counters(node):
    s = node.stats()
    return {"rx_own": s["node"]["rx_own"] if "node" in s else s["rx_own"],
            "rx_dgrams": s["sock"]["rx_dgrams"], "wakeups": s["loop"]["wakeups"],
            "rx_bad": s["node"]["rx_bad"] if "node" in s else s["rx_bad"]}


def receive_all(node, n, timeout=10.0):
    got = {}
    end = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        m = node.receive(timeout=0.5)
        if m is not None:
            got[(m.sender, m.seq)] = bytes(m.payload)
    return got


@needs_ns
def test_the_own_multicast_copy_never_reaches_the_publisher():
    """A publishes 300 messages 1 ms apart while nobody reads on A: B gets
    every one (loopback still on), A's node never sees its own copy (rx_own
    stays 0: on the unfiltered path it counts one per publish), and A's loop
    thread is not woken per publish.  A still hears B (the filter is its
    own, not the group's)."""
    n = 300
    with netns.namespace() as ns, netns.entered(ns):
        # idle heartbeats 50 ms after a publish (not 5 ms): the loop's timer
        # wake-ups stay few even if this machine is slow, the own copies
        # would be one per publish; no tail probe (by design a timer wake-up
        # after every lone publish: Config.tail_probe) and no flow window (B's
        # acknowledgments, up to one per ms, arrive on A's unicast socket)
        a, b, _ = pair(idle_after=0.05, tail_probe=0, flow_window=0)
        try:
            time.sleep(0.2)
            c0 = counters(a)
            got = {}
            t = threading.Thread(target=lambda: got.update(receive_all(b, n)))
            t.start()
            for k in range(n):
                a.publish(b"m%d" % k)
                time.sleep(0.001)
            t.join()
            c1 = counters(a)
            assert sorted(got) == [(1, k) for k in range(n)]
            assert c1["rx_own"] == c0["rx_own"] == 0
            woke = c1["wakeups"] - c0["wakeups"]
            assert woke < n / 2, f"A's loop woke {woke} times for {n} publishes"
            b.publish(b"from B")
            m = a.receive(timeout=5)
            assert m is not None and (m.sender, bytes(m.payload)) == (2, b"from B")
        finally:
            close(a, b)


@needs_ns
def test_without_the_filter_the_own_copy_comes_back():
    """drop_own_copy = false: the old path, the node discards the copy itself
    (the counter the test above relies on is live)."""
    with netns.namespace() as ns, netns.entered(ns):
        a, b, _ = pair(drop_own_copy=False)
        try:
            for k in range(20):
                a.publish(b"m%d" % k)
            assert len(receive_all(b, 20)) == 20
            end = time.monotonic() + 5
            while counters(a)["rx_own"] < 20 and time.monotonic() < end:
                time.sleep(0.01)
            assert counters(a)["rx_own"] >= 20        # (and its heartbeats)
        finally:
            close(a, b)


@needs_ns
def test_short_datagrams_still_reach_the_node_and_are_counted():
    """The filter passes what is too short to be rpbcast's: the node counts
    it as malformed, as it always did (nothing dropped silently)."""
    with netns.namespace() as ns, netns.entered(ns):
        a, b, group = pair()
        try:
            ip, port = group.split(":")
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
            bad0 = counters(a)["rx_bad"]
            for _ in range(5):
                s.sendto(b"RP\x01short", (ip, int(port)))
            s.close()
            end = time.monotonic() + 5
            while counters(a)["rx_bad"] < bad0 + 5 and time.monotonic() < end:
                time.sleep(0.01)
            assert counters(a)["rx_bad"] == bad0 + 5
        finally:
            close(a, b)


def test_drop_own_copy_is_validated():
    with pytest.raises(ConfigError, match="drop_own_copy"):
        Config(node_id=1, drop_own_copy="yes").validate()
    assert Config.from_dict({"node_id": 1, "drop_own_copy": False}).validate().drop_own_copy is False


@needs_ns
def test_receive_reuses_its_buffer_unless_a_payload_is_held():
    """Message by message: receive() keeps one buffer while the payloads it
    handed out are gone, and takes a fresh one when one is still held -- whose
    bytes then stay what they were."""
    with netns.namespace() as ns, netns.entered(ns):
        a, b, _ = pair()
        try:
            # (a reference kept here would hold the buffer: a mark in its
            # last byte, which no payload of these reaches, tells it apart
            # from a fresh, zeroed one)
            for k in range(5):
                # every other message comes while receive() waits (its
                # refill came back empty first), the others are there already
                if k % 2:
                    threading.Timer(0.05, a.publish, args=(b"m%d" % k,)).start()
                else:
                    a.publish(b"m%d" % k)
                m = b.receive(timeout=5)
                assert m is not None and bytes(m.payload) == b"m%d" % k
                del m
                if k == 0:
                    b._batch.buf[-1] = 0xAB
                assert b._batch.buf[-1] == 0xAB, f"message {k}: receive() took a fresh buffer"
            a.publish(b"held")
            held = b.receive(timeout=5).payload
            for k in range(5, 10):
                a.publish(b"m%d" % k)
                m = b.receive(timeout=5)
                assert bytes(m.payload) == b"m%d" % k
            assert b._batch.buf[-1] == 0, "a payload was held: a fresh buffer"
            assert bytes(held) == b"held"
        finally:
            close(a, b)


@needs_ns
def test_recv_batch_without_a_buffer_returns_one_of_the_payloads_size():
    """recv_batch(max_n) with no buffer: the batch's buffer holds what it
    took (not mtu * max_n zeroed bytes), its arrays are count long and its
    own (a later call does not change them)."""
    with netns.namespace() as ns, netns.entered(ns):
        a, b, _ = pair()
        try:
            for k in range(3):
                a.publish(b"p%03d" % k)
            end = time.monotonic() + 5
            while b.transport.pending() < 3 and time.monotonic() < end:
                b.wait(0.1)
            x = b.recv_batch(65536)
            assert x.count == 3 and len(x.buf) == 12
            assert [bytes(x.payload(i)) for i in range(3)] == [b"p000", b"p001", b"p002"]
            assert len(x.seqs) == len(x.offs) == len(x.streams) == 3
            seqs = x.seqs.copy()
            a.publish(b"p003")
            end = time.monotonic() + 5
            y = b.recv_batch(16)
            while not y.count and time.monotonic() < end:
                b.wait(0.1)
                y = b.recv_batch(16)
            assert y.count == 1 and bytes(y.payload(0)) == b"p003"
            assert np.array_equal(x.seqs, seqs) and bytes(x.payload(0)) == b"p000"
            empty = b.recv_batch(16)
            assert empty.count == 0 and len(empty.buf) == 0
            a.publish(b"p004")
            end = time.monotonic() + 5
            z = b.recv_batch(100_000)          # beyond the kept columns: columns of its own
            while not z.count and time.monotonic() < end:
                b.wait(0.1)
                z = b.recv_batch(100_000)
            assert z.count == 1 and bytes(z.payload(0)) == b"p004" and len(z.seqs) == 1
        finally:
            close(a, b)


@needs_ns
def test_recv_batch_from_two_threads_takes_each_message_once():
    """The columns the node fills are per thread: two threads taking at once
    get disjoint, intact batches."""
    n = 3000
    with netns.namespace() as ns, netns.entered(ns):
        a, b, _ = pair()
        try:
            got = [[], []]
            stop = threading.Event()

            def taker(i):
                buf = bytearray(1 << 20)
                while not stop.is_set():
                    x = b.recv_batch(64, buf)
                    for j in range(x.count):
                        assert bytes(x.payload(j)) == b"m%d" % int(x.seqs[j])
                        got[i].append(int(x.seqs[j]))
                    if not x.count:
                        time.sleep(0.0005)

            ts = [threading.Thread(target=taker, args=(i,)) for i in range(2)]
            for t in ts:
                t.start()
            for k in range(n):
                a.publish(b"m%d" % k)
                if k % 50 == 49:
                    time.sleep(0.002)
            end = time.monotonic() + 10
            while len(got[0]) + len(got[1]) < n and time.monotonic() < end:
                time.sleep(0.01)
            stop.set()
            for t in ts:
                t.join()
            assert sorted(got[0] + got[1]) == list(range(n))
        finally:
            close(a, b)


@needs_ns
def test_loop_cpu_pins_the_loop_thread_only():
    """Config.loop_cpu: the node's loop thread runs on that CPU alone; the
    application's thread keeps its own affinity."""
    import os
    cpu = max(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    with netns.namespace() as ns, netns.entered(ns):
        a, b, _ = pair(loop_cpu=cpu)
        try:
            loops = [t for t in threading.enumerate() if t.name == f"rpbcast-{a.node_id}"]
            assert len(loops) == 1
            with open(f"/proc/self/task/{loops[0].native_id}/status") as f:
                allowed = [ln.split(":")[1].strip() for ln in f if ln.startswith("Cpus_allowed_list")]
            assert allowed == [str(cpu)]
            assert os.sched_getaffinity(0) == before
            a.publish(b"pinned")
            m = b.receive(timeout=5)
            assert m is not None and bytes(m.payload) == b"pinned"
        finally:
            close(a, b)


@pytest.mark.parametrize("bad", [-1, "0", True, 1 << 20, 1.0])
def test_loop_cpu_is_validated(bad):
    with pytest.raises(ConfigError, match="loop_cpu"):
        Config(node_id=1, loop_cpu=bad).validate()


@needs_ns
def test_a_waiting_receive_reads_only_the_socket_that_is_readable():
    """Lone messages 2 ms apart to a thread waiting in receive(): it reads
    each from the socket ppoll said is readable -- about one recvmmsg per
    message -- instead of trying both sockets before and after every sleep
    (three calls of four found nothing: app_rx_empty)."""
    n = 200
    with netns.namespace() as ns, netns.entered(ns):
        a, b, _ = pair()
        try:
            time.sleep(0.1)
            l0 = b.stats()["loop"]
            got = {}
            t = threading.Thread(target=lambda: got.update(receive_all(b, n)))
            t.start()
            time.sleep(0.05)
            for k in range(n):
                a.publish(b"m%d" % k)
                time.sleep(0.002)
            t.join()
            l1 = b.stats()["loop"]
            assert sorted(got) == [(1, k) for k in range(n)]
            read = l1["app_rx_dgrams"] - l0["app_rx_dgrams"]
            empty = l1["app_rx_empty"] - l0["app_rx_empty"]
            assert read >= 0.8 * n, read
            assert empty <= 0.3 * read, f"{empty} empty recvmmsg calls for {read} datagrams read"
        finally:
            close(a, b)
