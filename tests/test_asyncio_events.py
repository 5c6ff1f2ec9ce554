"""Asyncio is event-driven both ways: areceive is woken by the node's
delivery eventfd through the event loop's reader (no timed polling), and
several tasks may wait on one node at once.  Real sockets, multicast in a
network namespace each test creates."""
from __future__ import annotations

import asyncio
import time

import pytest

from rpbcast.config import Config, MemberSpec
from rpbcast.tools import netns

pytestmark = [pytest.mark.netns, pytest.mark.timeout(60)]

PORT = 27680


def _cfg(i, ids, port):
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in ids],
                  bind=f"127.0.0.1:{port + i}", group_addr=f"239.255.77.10:{port}", gossip_interval=0.02,
                  linger=0.0)


class Counting:
    """Wraps node.receive to count how often areceive looked for a message."""

    def __init__(self, node):
        self.calls = 0
        self.inner = node.receive
        node.receive = self

    def __call__(self, *a, **kw):
        self.calls += 1
        return self.inner(*a, **kw)


def test_areceive_sleeps_until_a_message_and_wakes_once_for_it():
    with netns.namespace() as ns, netns.entered(ns):
        from rpbcast import Node
        tx, rx = Node(_cfg(1, [1, 2], PORT)), Node(_cfg(2, [1, 2], PORT))
        try:
            time.sleep(0.1)
            while rx.receive(timeout=0) is not None:
                pass
            count = Counting(rx)

            async def main():
                loop = asyncio.get_running_loop()
                sent = {}

                def publish():
                    sent["t"] = time.monotonic()
                    tx.publish(b"late")
                loop.call_later(0.6, publish)
                m = await asyncio.wait_for(rx.areceive(), 5.0)
                return m, time.monotonic() - sent["t"]

            m, delay = asyncio.run(main())
            assert bytes(m.payload) == b"late"
            # 0.6 s of idle waiting: a 0.1 s poll looks ~7 times; the
            # eventfd reader looks once before sleeping and once on the
            # wake-up (a stray heartbeat-free signal may add one).
            assert count.calls <= 3, count.calls
            assert delay < 0.09, delay             # and not a poll period late
        finally:
            rx.close(report=False)
            tx.close(report=False)


def test_tasks_waiting_on_one_node_are_all_woken():
    """Two tasks awaiting the same node (areceive and async for): asyncio
    keeps one reader per fd, so the node must share it, not replace it."""
    with netns.namespace() as ns, netns.entered(ns):
        from rpbcast import Node
        tx, rx = Node(_cfg(1, [1, 2], PORT + 10)), Node(_cfg(2, [1, 2], PORT + 10))
        try:
            time.sleep(0.1)

            async def one():
                return bytes((await rx.areceive()).payload)

            async def main():
                loop = asyncio.get_running_loop()
                a, b = asyncio.ensure_future(one()), asyncio.ensure_future(one())
                await asyncio.sleep(0.2)
                loop.call_soon(tx.publish, b"m1")
                loop.call_later(0.05, tx.publish, b"m2")
                return sorted(await asyncio.wait_for(asyncio.gather(a, b), 5.0))

            assert asyncio.run(main()) == [b"m1", b"m2"]
        finally:
            rx.close(report=False)
            tx.close(report=False)


def test_closing_the_node_ends_async_iteration_and_wakes_waiters():
    """Tasks asleep on the node's eventfds (async for, writable) wake when
    the node closes, instead of sleeping forever on a closed fd."""
    with netns.namespace() as ns, netns.entered(ns):
        from rpbcast import Node
        tx, rx = Node(_cfg(1, [1, 2], PORT + 20)), Node(_cfg(2, [1, 2], PORT + 20))
        try:
            time.sleep(0.1)

            async def consume():
                got = []
                async for m in rx:
                    got.append(bytes(m.payload))
                return got

            async def main():
                loop = asyncio.get_running_loop()
                task = asyncio.ensure_future(consume())
                await asyncio.sleep(0.2)
                tx.publish(b"one")
                await asyncio.sleep(0.2)
                loop.call_soon(rx.close)
                return await asyncio.wait_for(task, 2.0)

            assert asyncio.run(main()) == [b"one"]
        finally:
            rx.close(report=False)
            tx.close(report=False)
