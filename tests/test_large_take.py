"""Large messages at the receiver: what holds a 1 MB stream back on
loopback (docs/performance.md "Large messages (issue 18)").

- The reassembly buffers of whole messages the application has not taken
  yet are kept for the next messages (csrc/frag.c): a receiver whose
  application lags by k messages allocates k buffers once, not one per
  message (a fresh 1 MB allocation is an mmap whose page faults slowed the
  loop thread until its socket overflowed).  Deterministic, in process.
- An application take that waits for the node lock while a torrent of full
  receive batches arrives gets it within a bounded number of the loop's
  batches (csrc/loop.c rp_loop_lock_app): the loop ends its turn and hands
  the lock over instead of retaking it at once for 0.1 s and more.  Real
  sockets in a network namespace.
"""
import threading
import time

import numpy as np
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.core.node import Node as CoreNode
from rpbcast.tools import netns

pytestmark = pytest.mark.timeout(120)

MTU = 1472
MB = 1 << 20


def _carry(a, b):
    for _, d in a.datagrams():
        b.rx(d, 7, 0)


def _take_all(b):
    buf = bytearray(64 * MB)
    n = 0
    while True:
        k = b.recv_batch(4096, buf, 0)[0]
        if not k:
            return n
        n += k


@pytest.mark.parametrize("lag", [8, 20])
def test_reassembly_buffers_of_messages_not_yet_taken_are_reused(lag):
    """The application takes `lag` whole 1 MB messages at a time, for six
    rounds: the receiver allocates `lag` reassembly buffers in all, not
    one per message (main kept four spares: 6 x (lag - 4) fresh ones)."""
    a = CoreNode(1, 1, 1, mtu=MTU, store_bytes=256 * MB)
    b = CoreNode(1, 2, 1, mtu=MTU, store_bytes=256 * MB, reassembly_bytes=128 * MB)
    body = bytes(MB)
    rounds, got = 6, 0
    for _ in range(rounds):
        for _ in range(lag):
            assert a.publish(body) >= 0
            _carry(a, b)
        assert b.frag_stats()["whole"] - got == lag     # all whole, none taken yet
        got += _take_all(b)
    fs = b.frag_stats()
    assert got == rounds * lag and fs["whole"] == got
    assert fs["buffers_allocated"] == lag, fs
    assert fs["spare_bytes"] <= 64 * MB


def test_spare_buffers_are_bounded_in_bytes():
    """More whole messages waiting than the spare bound holds: after the
    take at most 64 MB of buffers stay allocated as spares."""
    a = CoreNode(1, 1, 1, mtu=MTU, store_bytes=512 * MB)
    b = CoreNode(1, 2, 1, mtu=MTU, store_bytes=512 * MB, reassembly_bytes=256 * MB)
    for _ in range(40):
        a.publish(bytes(2 * MB))
        _carry(a, b)
    assert _take_all(b) == 40
    fs = b.frag_stats()
    assert 0 < fs["spare_bytes"] <= 64 * MB, fs


def _cfg(i, port, **kw):
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in (1, 2)],
                  bind=f"127.0.0.1:{port + i}", group_addr=f"239.255.77.13:{port}", gossip_interval=0.02,
                  linger=0.0, **kw)


@pytest.mark.netns
def test_a_waiting_take_gets_the_lock_within_a_few_loop_batches_under_a_1mb_torrent():
    """A 1 MB stream as fast as the sender goes, no flow window: the
    receiver's loop thread has full batches to read all the time.  An
    application thread taking in a tight loop must wait for the lock
    now and then -- and each time gets it after at most yield_batches (2)
    of the loop's batches, unless a hand-over timed out (main: no bound;
    0.1-1 s waits were seen in the bench)."""
    from rpbcast import Node
    port = 27740
    kw = dict(flow_control="receivers", store_bytes=256 * MB, store_entries=1 << 20,
              max_message_size=4 * MB, rcvbuf=32 * MB, sndbuf=8 * MB, gossip_buffer_bytes=128 * MB)
    total = 200
    with netns.namespace() as ns, netns.entered(ns):
        rx = Node(_cfg(2, port, **kw))
        tx = Node(_cfg(1, port, **kw))
        got, stop = [0], threading.Event()

        def consume():
            buf = bytearray(16 * MB)
            while not stop.is_set() and got[0] < total:
                b = rx.recv_batch(4096, buf)
                if not b.count:
                    rx.transport.wait(0.01)
                got[0] += b.count

        th = threading.Thread(target=consume)
        th.start()
        try:
            time.sleep(0.2)
            body, lens = bytearray(4 * MB), np.full(4, MB, np.uint32)
            sent, t0 = 0, time.monotonic()
            while sent < total and time.monotonic() - t0 < 60:
                k = tx.publish_batch(body, lens[:min(4, total - sent)])
                sent += k
                if not k:
                    time.sleep(0.0005)
            deadline = time.monotonic() + 60
            while got[0] < total and time.monotonic() < deadline:
                time.sleep(0.02)
            assert got[0] == total
            loop = rx.transport.stats()["loop"]
        finally:
            stop.set()
            th.join()
            rx.close(report=False)
            tx.close(report=False)
    # the situation arose: takes waited while the loop was receiving ...
    assert loop["app_lock_waits"] > 0, loop
    # ... and none waited through more than the bound of the loop's batches:
    # yield_batches (2), and 2 more for each hand-over that gave up because
    # the take's thread was not scheduled within 2 ms (a loaded machine)
    assert loop["app_wait_batches_max"] <= 2 * (1 + loop["app_handover_timeouts"]), loop
    assert loop["app_yields"] > 0, loop
