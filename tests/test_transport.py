"""The engine on real UDP sockets.  Multicast and kernel-loss tests run in a
network namespace each test creates (root only); unicast fan-out runs on
127.0.0.1 anywhere."""
import asyncio
import socket
import time

import numpy as np
import pytest

from rpbcast import Config, ConfigError, MemberSpec

from rpbcast.tools import netns
from rpbcast.api import Node
from ports import free_port

pytestmark = pytest.mark.timeout(120)

needs_ns = pytest.mark.netns


def group(n, transport="multicast", loggers=(), tmp_path=None, **kw):
    ports = {i: free_port() for i in range(1, n + 1)}
    specs = [MemberSpec(i, f"127.0.0.1:{ports[i]}", "logger" if i in loggers else "member") for i in ports]
    nodes = {}
    for i in ports:
        cfg = dict(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs, transport=transport,
                   gossip_interval=0.02, store_bytes=64 << 20, store_entries=1 << 18,
                   group_addr=f"239.255.90.{1 + (ports[1] % 200)}:{ports[1] + 1000}")
        cfg.update(kw)
        if i in loggers:
            cfg.update(role="logger", log_dir=str(tmp_path / f"log{i}"))
        nodes[i] = Node(Config(**cfg))
    return nodes


def collect(node, want, timeout=10.0):
    got = {}
    end = time.time() + timeout
    while len(got) < want and time.time() < end:
        m = node.receive(timeout=0.2)
        if m is not None:
            key = (m.sender, m.seq)
            got[key] = got.get(key, 0) + 1
            assert bytes(m.payload) == b"m%d" % m.seq
    return got


def close_all(nodes):
    for n in nodes.values():
        n.close()


def publish_n(node, n, per=50, pause=0.001):
    for k in range(n):
        node.publish(b"m%d" % k)
        if k % per == per - 1:
            time.sleep(pause)


@needs_ns
def test_multicast_in_a_namespace_exactly_once():
    with netns.namespace() as ns, netns.entered(ns):
        nodes = group(3)
        try:
            publish_n(nodes[1], 2000)
            for i in (2, 3):
                got = collect(nodes[i], 2000)
                assert set(got) == {(1, k) for k in range(2000)}
                assert max(got.values()) == 1
            st = nodes[2].stats()
            assert st["rx_reasons"] == {}
        finally:
            close_all(nodes)


@needs_ns
def test_kernel_loss_five_percent_everything_arrives_once(tmp_path):
    with netns.namespace(loss=0.05) as ns, netns.entered(ns):
        nodes = group(4, loggers=[4], tmp_path=tmp_path)
        try:
            publish_n(nodes[1], 3000, per=20)
            for i in (2, 3):
                got = collect(nodes[i], 3000, timeout=20)
                assert set(got) == {(1, k) for k in range(3000)}, f"node {i} misses {3000 - len(got)}"
                assert max(got.values()) == 1
            dropped, _ = netns.loss_counters(ns)
            assert dropped > 0
            st = nodes[2].stats()
            assert st["repairs_peer"] + st["repairs_logger"] > 0
        finally:
            close_all(nodes)


@needs_ns
def test_idle_sender_with_every_third_packet_dropped(tmp_path):
    """A sender goes idle after each message while the kernel drops every
    third packet (data, heartbeats and gossip alike): heartbeats and
    signatures still get every message everywhere (thesis §5.1)."""
    with netns.namespace() as ns, netns.entered(ns):
        ipt = netns.iptables_bin()
        import subprocess
        nodes = group(3)
        subprocess.run([ipt, "-A", "INPUT", "-p", "udp", "-m", "statistic", "--mode", "nth", "--every", "3",
                        "--packet", "0", "-j", "DROP"], check=True)
        try:
            for k in range(20):
                nodes[1].publish(b"m%d" % k)
                time.sleep(0.02)           # idle after every message
            for i in (2, 3):
                got = collect(nodes[i], 20, timeout=10)
                assert set(got) == {(1, k) for k in range(20)}
        finally:
            close_all(nodes)


def test_unicast_fanout_without_namespace():
    nodes = group(3, transport="unicast")
    try:
        publish_n(nodes[1], 1000)
        for i in (2, 3):
            got = collect(nodes[i], 1000)
            assert set(got) == {(1, k) for k in range(1000)} and max(got.values()) == 1
    finally:
        close_all(nodes)


def test_unicast_with_in_process_loss():
    nodes = group(3, transport="unicast", drop_rate=0.05)
    try:
        publish_n(nodes[1], 1000, per=10)
        for i in (2, 3):
            got = collect(nodes[i], 1000, timeout=20)
            assert set(got) == {(1, k) for k in range(1000)} and max(got.values()) == 1
        assert nodes[2].stats()["loop"]["dropped_in_process"] > 0
    finally:
        close_all(nodes)


def test_kernel_receive_timestamps_are_on_the_engines_monotonic_clock():
    # SO_TIMESTAMPNS gives CLOCK_REALTIME; the engine runs on
    # CLOCK_MONOTONIC.  rx_time must be a monotonic receive moment, never
    # a wall-clock one (they differ by decades).
    nodes = group(2, transport="unicast", timestamps=True)
    try:
        assert nodes[2].transport.sock_info()["timestamps"]
        t0 = time.monotonic_ns()
        publish_n(nodes[1], 200)
        got = []
        end = time.time() + 10
        while len(got) < 200 and time.time() < end:
            m = nodes[2].receive(timeout=0.2)
            if m is not None:
                got.append(m.rx_time)
        t1 = time.monotonic_ns()
        assert len(got) == 200
        assert all(t0 <= t <= t1 for t in got), (t0, min(got), max(got), t1)
    finally:
        close_all(nodes)


def test_conflation_latest_value_per_label_on_real_sockets():
    nodes = group(2, transport="unicast", conflate=2)
    try:
        for k in range(300):
            nodes[1].publish(b"AAPL %d" % k, label=7)
            nodes[1].publish(b"MSFT %d" % k, label=9)
        nodes[1].publish(b"news")                        # unlabelled: delivered as usual
        m = nodes[2].receive(timeout=5)
        assert m is not None and bytes(m.payload) == b"news" and m.label is None
        end = time.time() + 5
        while time.time() < end and (nodes[2].latest(7) or (0, 0, -1))[2] != 598:
            time.sleep(0.01)
        sender, inc, seq, payload, t = nodes[2].latest(7, sender=1)
        assert (sender, seq, payload) == (1, 598, b"AAPL 299")
        assert nodes[2].latest(9)[3] == b"MSFT 299" and nodes[2].latest(8) is None
        snap = nodes[2].snapshot()
        assert {k: v[2] for k, v in snap.items()} == {(1, 7): b"AAPL 299", (1, 9): b"MSFT 299"}
        assert nodes[2].receive(timeout=0.2) is None     # labelled values were never queued
    finally:
        close_all(nodes)
    plain = group(1, transport="unicast")
    try:
        with pytest.raises(ValueError, match="conflation is off"):
            plain[1].latest(7)
    finally:
        close_all(plain)


def test_poll_drives_a_node_from_the_application_thread():
    # Node(start=False) has no loop thread; poll() runs one loop iteration
    # in the caller's thread and returns what it delivered.
    ports = {i: free_port() for i in (1, 2)}
    specs = [MemberSpec(i, f"127.0.0.1:{p}") for i, p in ports.items()]
    mk = lambda i, **kw: Node(Config(node_id=i, bind=f"127.0.0.1:{ports[i]}", members=specs,  # noqa: E731
                                     transport="unicast", gossip_interval=0.02), **kw)
    snd, rcv = mk(1), mk(2, start=False)
    try:
        publish_n(snd, 500)
        got = set()
        end = time.time() + 10
        while len(got) < 500 and time.time() < end:
            b = rcv.poll(0.01)
            for i in range(b.count):
                assert bytes(b.payload(i)) == b"m%d" % int(b.seqs[i])
                got.add(int(b.seqs[i]))
        assert got == set(range(500))
        with pytest.raises(RuntimeError, match="start=False"):
            snd.poll()
    finally:
        snd.close()
        rcv.close()


def test_batch_api_and_gso():
    nodes = group(2, transport="unicast")
    try:
        n = 20000
        payload = np.frombuffer(b"".join(b"m%d" % k for k in range(n)), np.uint8)
        lens = np.array([len(b"m%d" % k) for k in range(n)], np.uint32)
        sent = 0
        while sent < n:
            off = int(lens[:sent].sum())
            sent += nodes[1].publish_batch(payload[off:], lens[sent:])
        got = 0
        buf = bytearray(8 << 20)
        end = time.time() + 10
        seqs = []
        while got < n and time.time() < end:
            b = nodes[2].recv_batch(8192, buf)
            if not b.count:
                nodes[2].transport.wait(0.1)
                continue
            for i in range(b.count):
                assert bytes(b.payload(i)) == b"m%d" % b.seqs[i]
            seqs.extend(b.seqs.tolist())
            got += b.count
        assert sorted(seqs) == list(range(n))
        sock = nodes[1].stats()["sock"]
        assert sock["gso"] in (0, 1)
        if sock["gso"] == 1:
            assert sock["tx_gso_sends"] > 0 and sock["tx_dgrams"] > sock["tx_calls"]
    finally:
        close_all(nodes)


def test_asyncio_receive():
    nodes = group(2, transport="unicast")

    async def main():
        got = []
        async def consume():
            async for m in nodes[2]:
                got.append(m.seq)
                if len(got) == 100:
                    return
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        for k in range(100):
            nodes[1].publish(b"m%d" % k)
        await asyncio.wait_for(task, 10)
        return got

    try:
        assert sorted(asyncio.run(main())) == list(range(100))
    finally:
        close_all(nodes)


def test_callbacks():
    nodes = group(2, transport="unicast")
    got = []
    try:
        nodes[2].on_message(lambda m: got.append(m.seq))
        for k in range(50):
            nodes[1].publish(b"m%d" % k)
        end = time.time() + 5
        while len(got) < 50 and time.time() < end:
            time.sleep(0.01)
        assert sorted(got) == list(range(50))
    finally:
        close_all(nodes)


def test_port_in_use_says_what_to_fix():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        with pytest.raises(ConfigError, match="already in use"):
            Node(Config(node_id=1, bind=f"127.0.0.1:{port}", transport="unicast"))
    finally:
        s.close()


def test_bad_addresses_and_interfaces():
    with pytest.raises(ConfigError, match="is not an IPv4 address"):
        Config(bind="localhost:1")
    with pytest.raises(ConfigError, match="multicast address"):
        Config(group_addr="10.0.0.1:7000")
    with pytest.raises(ConfigError, match="not on this host"):
        Node(Config(node_id=1, bind="10.255.255.1:0", transport="unicast"))
    with pytest.raises(ConfigError, match="unknown interface 'nosuch0'"):
        Node(Config(node_id=1, interface="nosuch0"))


@needs_ns
def test_missing_multicast_route_says_how_to_add_it():
    name = netns.create()
    try:
        import subprocess
        subprocess.run(["ip", "-n", name, "route", "del", "224.0.0.0/4", "dev", "lo"], check=True)
        with netns.entered(name):
            with pytest.raises(ConfigError, match="ip route add 224.0.0.0/4 dev lo"):
                Node(Config(node_id=1))
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "multicast", "off"], check=True)
        with netns.entered(name):
            with pytest.raises(ConfigError, match="ip link set lo multicast on"):
                Node(Config(node_id=1))
    finally:
        netns.delete(name)
