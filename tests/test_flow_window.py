"""The flow window on real sockets (Config.flow_window, csrc/flowack.h): the
receiver's loop thread acknowledges in the data plane, so the sender's
window moves with no Python timer in the path -- here the receivers'
Python reports come once a minute and the send buffer is held for them,
yet a sender bounded to a small window keeps going.  Multicast inside a
network namespace each test creates."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from rpbcast.config import Config, ConfigError, MemberSpec
from rpbcast.tools import netns

PORT = 27720


def _cfg(i, port, **kw):
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in (1, 2)],
                  bind=f"127.0.0.1:{port + i}", group_addr=f"239.255.77.11:{port}", gossip_interval=0.02,
                  linger=0.0, **kw)


@pytest.mark.parametrize("key,bad", [("flow_window", -1), ("flow_window", 2**32 + 1), ("flow_window", "4096"),
                                     ("flow_window", True), ("flow_ack_every", -3), ("flow_ack_every", 1.5),
                                     ("flow_ack_timeout", 0), ("flow_ack_timeout", "1"),
                                     ("flow_ack_timeout", 1e9), ("flow_window_bytes", -1),
                                     ("flow_window_bytes", 2**40 + 1), ("flow_window_bytes", 1.5),
                                     ("flow_window_bytes", True)])
def test_bad_flow_window_keys_are_config_errors_naming_them(key, bad):
    with pytest.raises(ConfigError, match=key):
        Config(node_id=1, **{key: bad})


def test_flow_window_keys_load_from_a_dict():
    c = Config.from_dict({"node_id": 1, "flow_window": 2048, "flow_ack_every": 64, "flow_ack_timeout": 0.5})
    assert (c.flow_window, c.flow_ack_every, c.flow_ack_timeout) == (2048, 64, 0.5)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_the_data_plane_ack_moves_a_bounded_window_without_the_python_reports():
    from rpbcast import Node
    W, TOTAL = 1024, 200_000
    kw = dict(flow_control="receivers", flow_report_interval=60.0, send_window=0, flow_window=W,
              flow_ack_timeout=30.0, store_entries=1 << 20)
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT, **kw)), Node(_cfg(2, PORT, **kw))
        got, stop = [0], threading.Event()

        def consume():
            while not stop.is_set():
                if rx.wait(0.05):
                    got[0] += rx.recv_batch().count
                    # a consumer slower than the sender, so that the window
                    # binds whatever the scheduling (an unpaced consumer kept
                    # up often enough on a loaded machine that the refusals
                    # counted below were a race: 33 of the 48 asked once)
                    time.sleep(0.0005)

        th = threading.Thread(target=consume)
        th.start()
        try:
            time.sleep(0.2)
            lens, buf = np.full(256, 64, np.uint32), np.zeros(256 * 64, np.uint8)
            sent, refused, t0 = 0, 0, time.monotonic()
            while sent < TOTAL and time.monotonic() - t0 < 60:
                k = tx.publish_batch(buf, lens)
                sent += k
                st = tx.engine.node.flow_stats()
                assert st["room"] is not None and tx.engine.node.next_seq - st["front"] <= W
                if k < len(lens):
                    refused += 1
                    tx.wait_writable(0.01)
            assert sent >= TOTAL, f"stuck at {sent} of {TOTAL}"
            st = tx.engine.node.flow_stats()
            # the window bound the sender many times, and only FLOWACKs moved it:
            # no receiver report, so the send buffer released nothing
            assert refused >= TOTAL // W // 4, refused
            assert st["acks_received"] >= TOTAL // W and st["acks_rejected"] == 0
            assert tx.engine.node.acked == 0
            deadline = time.monotonic() + 10
            while got[0] < sent and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got[0] == sent
        finally:
            stop.set()
            th.join()
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_stopped_receiver_holds_the_flow_window_until_it_acks_again():
    from rpbcast import Node
    W = 512
    kw = dict(flow_control="loggers", flow_window=W, flow_ack_timeout=30.0)
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 10, **kw)), Node(_cfg(2, PORT + 10, **kw))
        try:
            time.sleep(0.2)
            rx.transport.stop()
            lens, buf = np.full(128, 64, np.uint32), np.zeros(128 * 64, np.uint8)
            took = 0
            for _ in range(20):
                took += tx.publish_batch(buf, lens)
            assert took == W                       # nothing else holds a loggerless "loggers" sender
            with pytest.raises(BlockingIOError):
                tx.publish(b"x" * 64)
            rx.transport.start()
            got, deadline = 0, time.monotonic() + 10     # its application takes what arrives
            while got < W and time.monotonic() < deadline:
                if rx.wait(0.05):
                    got += rx.recv_batch().count
            assert got == W
            assert tx.wait_writable(10.0)
            assert tx.publish(b"y" * 64) == W
        finally:
            rx.close(report=False)
            tx.close(report=False)


def _fill_window(tx, rx, W, batch):
    """Publish until the window of W refuses, then wait until the receiver's
    node holds all W (none taken by its application)."""
    lens, buf = np.full(batch, 64, np.uint32), np.zeros(batch * 64, np.uint8)
    took = sum(tx.publish_batch(buf, lens) for _ in range(2 * W // batch))
    assert took == W
    deadline = time.monotonic() + 10
    while rx.transport.pending() < W and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rx.transport.pending() == W               # all of it at the receiver's node


def _take_all(rx, W, how):
    if how == "recv_batch":
        assert rx.recv_batch(W).count == W
        return
    for _ in range(W):       # Node.receive's lone-message path (plain ints, not arrays)
        assert rx.receive(timeout=5) is not None


@pytest.mark.netns
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["recv_batch", "receive"])
def test_the_flow_window_bounds_what_the_application_has_not_taken_and_a_take_reopens_it(how):
    """The whole path from publish to the receiving application is in
    flight: a receiver whose node has every message but whose application
    has taken none holds the sender at the window (main acknowledged what
    the loop received, so the window reopened while the messages queued up
    in the receiver -- the latency the window is for).  The take itself
    sends the acknowledgment (no loop turn, no timer): the sender's
    wait_writable returns -- by recv_batch and by Node.receive, whose lone
    message takes a path of its own (without the acknowledgment a
    subscriber reading with receive() held its sender for good)."""
    from rpbcast import Node
    W = 512
    kw = dict(flow_control="loggers", flow_window=W, flow_ack_timeout=30.0)
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 20, **kw)), Node(_cfg(2, PORT + 20, **kw))
        try:
            time.sleep(0.2)
            _fill_window(tx, rx, W, 128)
            assert not tx.wait_writable(0.5)                 # ... still in flight: not taken
            with pytest.raises(BlockingIOError, match="flow window is full .*Config.flow_window"):
                tx.publish(b"x" * 64)                        # the error names the window that is full
            before = rx.engine.node.flow_stats()["acks_sent"]
            _take_all(rx, W, how)
            assert rx.engine.node.flow_stats()["acks_sent"] > before   # sent by the take itself
            assert tx.wait_writable(10.0)
            assert tx.publish(b"y" * 64) == W
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_the_flow_window_is_on_by_default():
    """Config's default window (4096, issue 15): a publisher whose
    subscriber's application takes nothing is held at 4096 messages, with
    an error naming Config.flow_window; what the application then takes
    reopens it.  (Before, the default was off: the publisher ran on to the
    send window, 131,072 messages of queueing.)"""
    from rpbcast import Node
    assert Config(node_id=1).flow_window == 4096
    kw = dict(flow_ack_timeout=30.0)
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 40, **kw)), Node(_cfg(2, PORT + 40, **kw))
        try:
            time.sleep(0.2)
            _fill_window(tx, rx, 4096, 512)
            with pytest.raises(BlockingIOError, match="flow window is full \\(4,096 .*Config.flow_window"):
                tx.publish(b"x" * 64)
            _take_all(rx, 4096, "recv_batch")
            assert tx.wait_writable(10.0)
            assert tx.publish(b"y" * 64) == 4096
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_the_byte_bound_holds_large_messages_to_bytes_not_seqs():
    """Config.flow_window_bytes: with a window of 4096 seqs, messages of
    1,000 B would have 4 MB out; a byte bound of 64 KiB holds the sender
    at 66 of them (the last crosses it) with an error naming the key; the
    account counts every byte of every seq, fragments of a large message
    too; what the application takes reopens it."""
    from rpbcast import Node
    kw = dict(flow_control="loggers", flow_window=4096, flow_window_bytes=65536, flow_ack_timeout=30.0)
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 60, **kw)), Node(_cfg(2, PORT + 60, **kw))
        try:
            time.sleep(0.2)
            lens, buf = np.full(100, 1000, np.uint32), np.zeros(100 * 1000, np.uint8)
            assert tx.publish_batch(buf, lens) == 66          # 65 x 1000 < 65,536 <= 66 x 1000
            out = tx.engine.node.flow_stats()
            assert out["limit_bytes"] == 65536 and 66000 <= out["bytes_out"] < 66000 + 66 * 64
            with pytest.raises(BlockingIOError, match="flow window is full .*65,536 bytes.*flow_window_bytes"):
                tx.publish(b"x" * 1000)
            assert not tx.wait_writable(0.3)                  # nothing taken: still out
            got, deadline = 0, time.monotonic() + 10
            while got < 66 and time.monotonic() < deadline:
                rx.wait(0.5)
                got += rx.recv_batch(100).count
            assert got == 66
            assert tx.wait_writable(10.0)
            # one message larger than the bound goes whole once there is room (its fragments
            # are seqs of their own), and then holds the sender until it is taken
            assert tx.engine.node.flow_stats()["bytes_out"] == 0
            seq = tx.publish(b"L" * 200_000)
            assert tx.engine.node.flow_stats()["bytes_out"] >= 200_000
            with pytest.raises(BlockingIOError, match="flow_window_bytes"):
                tx.publish(b"y")
            m = rx.receive(timeout=10)
            assert m is not None and m.seq == seq and len(m.payload) == 200_000
            assert tx.wait_writable(10.0)
        finally:
            rx.close(report=False)
            tx.close(report=False)
