"""Who reads the acknowledgment that reopens the flow window (issue 15, the
maximum-rate goal): the publisher itself.  A publish that finds the window
short reads the FLOWACKs already in its socket before refusing, and a
publisher waiting for room (wait_writable, publish(timeout=)) reads its
sockets while it waits -- the acknowledgment wakes it directly, not the
loop thread and then the publisher through the window's eventfd (two
thread wake-ups per window turn on cores the receivers share).  Real
sockets, multicast inside a network namespace each test creates."""
from __future__ import annotations

import threading
import time

import pytest

from rpbcast.tools import netns
from windowpair import W, fill as _fill, take as _take, wait_for_the_take, window_cfg

PORT = 27760


def _cfg(i, port, **kw):
    return window_cfg(i, port, "239.255.77.12", **kw)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_short_publish_reads_the_acknowledgment_itself_with_no_loop_thread_running():
    """The sender's loop thread stopped (as good as descheduled on busy
    cores): the FLOWACK waits in its socket.  Before, only the loop thread
    read it, so the window stayed shut and every publish_batch returned 0;
    now the short publish reads it and goes on."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT)), Node(_cfg(2, PORT))
        try:
            time.sleep(0.2)
            tx.transport.stop()
            buf, lens = _fill(tx)
            _take(rx, W)                                # the take sends the FLOWACK
            time.sleep(0.1)                             # ... now in the sender's socket
            assert tx.engine.node.flow_stats()["room"] == 0     # nobody has read it yet
            k = tx.publish_batch(buf, lens)
            assert k == len(lens), k
            assert tx.stats()["loop"]["window_rx"] >= 1
            _take(rx, k)                                # and it arrived
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_waiting_publisher_is_woken_by_the_acknowledgment_it_reads():
    """A publisher blocked in wait_writable wakes on the FLOWACK without a
    timer tick and without the loop thread reading it: the waiting thread
    read it (window_rx), within a fraction of the wait's timeout."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 10)), Node(_cfg(2, PORT + 10))
        try:
            time.sleep(0.2)
            waited, before, after, (buf, lens) = wait_for_the_take(tx, rx, 20.0, settle=0.3)
            assert waited < 2.0, waited                 # the acknowledgment, not the 20 s timeout
            assert after["window_rx"] > before["window_rx"]     # read by the waiting thread
            assert after["window_waits"] > before["window_waits"]
            assert tx.publish_batch(buf, lens) == len(lens)
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_waiting_for_room_in_an_open_window_returns_at_once_and_a_shut_one_times_out():
    """The transport's wait used to sleep on the window's eventfd whatever
    the window held: with room and no reopening pending it slept its whole
    timeout and said False.  Now it looks at the room first."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 20)), Node(_cfg(2, PORT + 20))
        try:
            time.sleep(0.2)
            t0 = time.monotonic()
            assert tx.transport.wait_writable(2.0) is True
            assert time.monotonic() - t0 < 1.0
            _fill(tx)
            t0 = time.monotonic()
            assert tx.transport.wait_writable(0.3) is False     # nothing taken: no room
            assert 0.25 <= time.monotonic() - t0 < 5.0
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_closing_the_node_ends_a_wait_for_room():
    """A publisher blocked for room while the node closes returns False at
    once, without waiting out its timeout (before, its wait slept on the
    window's eventfd, which closing did not signal)."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 30)), Node(_cfg(2, PORT + 30))
        try:
            time.sleep(0.2)
            _fill(tx)
            woke = {}

            def wait():
                woke["ok"] = tx.transport.wait_writable(30.0)
                woke["at"] = time.monotonic()

            th = threading.Thread(target=wait)
            th.start()
            time.sleep(0.3)
            t_close = time.monotonic()
            tx.close(report=False)
            th.join(10)
            assert woke.get("ok") is False
            assert woke["at"] - t_close < 3.0, woke
            assert tx.wait_writable(None) is False          # the Node's wait: closed, no room to wait for
        finally:
            rx.close(report=False)
            tx.close(report=False)
