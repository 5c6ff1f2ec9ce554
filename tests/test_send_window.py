"""The send window (Config.send_window, csrc/sendwindow.h): a sender runs at
most send_window messages ahead of what flow control waits for, and feels
back-pressure in every API style -- BlockingIOError / a short
publish_batch, publish(timeout=) raising TimeoutError, and asyncio's
apublish / writable woken by the window's eventfd.  Real sockets, multicast
inside a network namespace each test creates."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from rpbcast.config import Config, ConfigError, MemberSpec
from rpbcast.tools import netns

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

PORT = 27640


def _cfg(i, ids, port=PORT, **kw):
    kw.setdefault("flow_control", "receivers")
    kw.setdefault("flow_window", 0)     # the release window alone (the flow window: test_flow_window.py)
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in ids],
                  bind=f"127.0.0.1:{port + i}", group_addr=f"239.255.77.9:{port}", gossip_interval=0.02,
                  linger=0.0, **kw)


def _fill(node, limit=None):
    """Publish 64-byte messages until the node refuses; how many it took."""
    lens = np.full(1024, 64, np.uint32)
    buf = np.zeros(1024 * 64, np.uint8)
    total = 0
    while limit is None or total < limit:
        k = node.publish_batch(buf, lens)
        total += k
        if k < len(lens):
            break
    return total


class Pair:
    """A sender (1) and a receiver (2) with receiver flow control; the
    receiver's loop thread stopped, so it reports nothing and the window
    cannot move until it runs again."""

    def __init__(self, port, **kw):
        from rpbcast import Node
        self.tx = Node(_cfg(1, [1, 2], port, **kw))
        self.rx = Node(_cfg(2, [1, 2], port, **kw))
        self.rx.transport.stop()

    def resume_receiver(self):
        self.rx.transport.start()

    def close(self):
        self.rx.close(report=False)
        self.tx.close(report=False)


@pytest.mark.parametrize("bad", [-1, 2**32 + 1, "1000", 1.5, True])
def test_a_bad_send_window_is_a_config_error_naming_it(bad):
    with pytest.raises(ConfigError, match="send_window"):
        Config(node_id=1, send_window=bad)


def test_the_default_window_bounds_the_store_not_its_million_entries():
    """A publisher outrunning a stopped receiver stops at the window: not
    after store_entries (2**20) messages, seconds of backlog at line rate."""
    with netns.namespace() as ns, netns.entered(ns):
        p = Pair(PORT)
        try:
            limit = Config(node_id=1).send_window
            assert 0 < limit <= Config(node_id=1).store_entries // 8
            took = _fill(p.tx)
            assert took == limit, (took, limit)
            st = p.tx.transport.window_state()
            assert st["in_flight"] == limit and st["closed"] >= 1
            with pytest.raises(BlockingIOError, match="send_window"):
                p.tx.publish(b"x" * 64)
            assert p.tx.publish_batch([b"y" * 64] * 10) == 0        # a short (empty) batch, no error
        finally:
            p.close()


def test_publish_timeout_raises_timeout_error_then_succeeds_once_acks_come():
    with netns.namespace() as ns, netns.entered(ns):
        p = Pair(PORT + 10, send_window=256)
        try:
            assert _fill(p.tx) == 256
            t0 = time.monotonic()
            with pytest.raises(TimeoutError, match="no room"):
                p.tx.publish(b"z" * 64, timeout=0.3)
            assert time.monotonic() - t0 >= 0.29
            # The receiver runs again: its reports reopen the window and
            # the waiting publish goes out, woken by the window's eventfd.
            done = {}

            def waiter():
                done["seq"] = p.tx.publish(b"w" * 64, timeout=10.0)
                done["t"] = time.monotonic()

            th = threading.Thread(target=waiter)
            th.start()
            time.sleep(0.2)
            assert "seq" not in done                    # still blocked: nothing acknowledged
            t1 = time.monotonic()
            p.resume_receiver()
            th.join(10)
            assert done.get("seq") == 256
            assert done["t"] - t1 < 5.0
            assert p.tx.transport.window_state()["opened"] >= 1
        finally:
            p.close()


def test_apublish_and_writable_wait_for_the_window_without_polling():
    with netns.namespace() as ns, netns.entered(ns):
        p = Pair(PORT + 20, send_window=128)
        try:
            assert _fill(p.tx) == 128

            async def main():
                w = asyncio.ensure_future(p.tx.writable())
                a = asyncio.ensure_future(p.tx.apublish(b"a" * 64))
                await asyncio.sleep(0.3)
                assert not w.done() and not a.done()   # the window is shut: both wait
                p.resume_receiver()
                await asyncio.wait_for(w, 5.0)
                seq = await asyncio.wait_for(a, 5.0)
                await asyncio.wait_for(p.tx.writable(), 1.0)   # open now: resolves at once
                return seq

            assert asyncio.run(main()) == 128
            # one wake-up of the window's eventfd, not a timer loop
            assert p.tx.transport.window_state()["opened"] >= 1
        finally:
            p.close()


@pytest.mark.parametrize("flow_window,loss", [(0, 0.05), (512, 0.05), (512, 0.01)])
def test_exactly_once_under_the_window_with_kernel_loss(flow_window, loss):
    """5 % of datagrams dropped by the kernel (iptables in the namespace;
    on loopback a GSO datagram of many messages crosses whole, so 60 k
    messages are a few hundred packets: at 1 % a run without a single drop
    happened), and 1 % under a small flow window (its many short sends are
    many more packets): the windows hold the sender back, repairs fill the
    gaps, and each of two receivers gets every message exactly once.  The
    flow window counts what each receiving application has taken: the
    repairs of a gap hold it until they arrived and were taken."""
    count = 60_000
    with netns.namespace(loss=loss) as ns, netns.entered(ns):
        from rpbcast import Node
        port = PORT + 30 + (3 if flow_window else 0) + (3 if loss < 0.05 else 0)
        ids = [1, 2, 3]
        kw = dict(send_window=2048, flow_window=flow_window, flow_ack_timeout=30.0)
        tx = Node(_cfg(1, ids, port, **kw))
        rxs = [Node(_cfg(i, ids, port, **kw)) for i in (2, 3)]
        got = {2: [], 3: []}

        def drain(node, out):
            deadline = time.monotonic() + 60
            n = 0
            while n < count and time.monotonic() < deadline:
                b = node.recv_batch()
                if b.count:
                    out.append(b.seqs[:b.count].copy())
                    n += b.count
                else:
                    node.transport.wait(0.05)

        ths = [threading.Thread(target=drain, args=(r, got[r.node_id])) for r in rxs]
        try:
            time.sleep(0.2)
            for t in ths:
                t.start()
            lens = np.full(512, 64, np.uint32)
            buf = np.zeros(512 * 64, np.uint8)
            sent = 0
            top = 0
            while sent < count:
                k = tx.publish_batch(buf[:min(512, count - sent) * 64], lens[:min(512, count - sent)])
                sent += k
                top = max(top, tx.transport.window_state()["in_flight"])
                if not k:
                    tx._wait_for_room(1.0)
            for t in ths:
                t.join(70)
            assert top <= 2048
            st = tx.transport.window_state()
            assert st["closed"] > 0                      # the window did hold the sender back
            if flow_window:
                fs = tx.engine.node.flow_stats()
                assert fs["acks_received"] > count // flow_window and fs["stale"] == 0
            for i in (2, 3):
                seqs = np.concatenate(got[i]) if got[i] else np.zeros(0, np.uint64)
                assert len(seqs) == count, (i, len(seqs))
                assert len(np.unique(seqs)) == count and int(seqs.max()) == count - 1
            assert netns.loss_counters(ns)[0] > 0       # the kernel did drop datagrams
        finally:
            for r in rxs:
                r.close(report=False)
            tx.close(report=False)


class WindowModel:
    """The window's reference model: in flight, who waits, the signal."""

    def __init__(self, limit):
        self.limit, self.in_flight, self.waiting, self.signalled = limit, 0, False, False

    def publish(self, k):
        room = self.limit - self.in_flight
        if k > room:
            if not self.waiting:
                self.signalled = False           # a stale signal is cleared
            self.waiting = True
        took = min(k, room)
        self.in_flight += took
        return took

    def ack(self, j):
        self.in_flight -= j
        if self.waiting and self.limit - self.in_flight >= (self.limit + 3) // 4:
            self.waiting, self.signalled = False, True


def _run_control(t):
    """Loop iterations until one ran the control plane (an early wake-up
    by an arriving datagram may not reach the timer)."""
    c0 = t.stats()["loop"]["control_calls"]
    for _ in range(100):
        t.run_once(0.005)
        if t.stats()["loop"]["control_calls"] > c0:
            return
    raise AssertionError("the control plane did not run")


def _readable(fd):
    import select
    return bool(select.select([fd], [], [], 0)[0])


def test_the_window_matches_its_model_under_any_publishes_and_acks():
    """Random publish_batch sizes and acknowledgments against the model:
    how many each publish takes, and when the writability signal is up.
    The node runs inline (start=False) so acknowledgments arrive exactly
    when the test says (node.logger_ack, then one loop iteration that runs
    the control plane, as an arriving LOGACK or report would)."""
    from hypothesis import given, settings, strategies as st
    from rpbcast import Node

    ops = st.lists(st.one_of(st.tuples(st.just("pub"), st.integers(1, 80)),
                             st.tuples(st.just("ack"), st.floats(0, 1))), min_size=1, max_size=25)

    with netns.namespace() as ns, netns.entered(ns):
        # member 2 is configured but never runs: nothing but the test acknowledges
        tx = Node(_cfg(1, [1, 2], PORT + 40, send_window=1), start=False)
        lens = np.full(80, 8, np.uint32)
        buf = np.zeros(80 * 8, np.uint8)
        try:
            @settings(max_examples=60, deadline=None)
            @given(limit=st.integers(1, 64), script=ops)
            def check(limit, script):
                t, node = tx.transport, tx.engine.node
                t.lock()
                try:
                    node.logger_ack(node.next_seq)          # start empty
                finally:
                    t.unlock()
                _run_control(t)
                t.set_window(limit)          # nothing in flight: no one waits any more
                m = WindowModel(limit)
                m.signalled = _readable(t.window_fd)         # (a signal nobody consumed stays up)
                for op, arg in script:
                    if op == "pub":
                        took = tx.publish_batch(buf[:8 * arg], lens[:arg])
                        assert took == m.publish(arg)
                    else:
                        j = int(arg * m.in_flight)
                        t.lock()
                        try:
                            node.logger_ack(node.acked + j)
                        finally:
                            t.unlock()
                        _run_control(t)                      # the control plane runs: poke
                        m.ack(j)
                    st_ = t.window_state()
                    assert st_["in_flight"] == m.in_flight <= limit
                    assert _readable(t.window_fd) == m.signalled, (op, arg, m.__dict__)
            check()
        finally:
            tx.close(report=False)
