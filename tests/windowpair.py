"""A sender and a receiver on real sockets with a small flow window, for the
tests of how a publisher waits for room (test_window_wake.py,
test_publish_spin.py): their configuration, a window filled to the brim,
and a receiver's take of what was sent."""
from __future__ import annotations

import threading
import time

import numpy as np

from rpbcast.config import Config, MemberSpec

W = 512


def window_cfg(i, port, group, **kw):
    # no gossip to speak of: the sender's socket carries the FLOWACKs alone
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in (1, 2)],
                  bind=f"127.0.0.1:{port + i}", group_addr=f"{group}:{port}", gossip_interval=5.0,
                  linger=0.0, flow_control="loggers", flow_window=W, flow_ack_timeout=30.0, **kw)


def fill(tx):
    """Publish until the window is full: exactly W messages, then a refusal."""
    lens, buf = np.full(128, 64, np.uint32), np.zeros(128 * 64, np.uint8)
    took = sum(tx.publish_batch(buf, lens) for _ in range(8))
    assert took == W
    assert tx.publish_batch(buf, lens) == 0             # full
    return buf, lens


def take(rx, n):
    """Take n messages within 10 s."""
    got, deadline = 0, time.monotonic() + 10
    while got < n and time.monotonic() < deadline:
        if rx.wait(0.05):
            got += rx.recv_batch().count
    assert got == n


def wait_for_the_take(tx, rx, timeout, settle=0.2):
    """A thread blocks in wait_writable on tx's full window; this one takes
    everything `settle` s later (the take sends the FLOWACKs).  Returns how
    long the wait took after the take began, the loop's window counters
    before and after, and the filled batch (to publish again)."""
    buf, lens = fill(tx)
    before = tx.stats()["loop"]
    woke = {}

    def wait():
        woke["ok"] = tx.transport.wait_writable(timeout)
        woke["at"] = time.monotonic()

    th = threading.Thread(target=wait)
    th.start()
    time.sleep(settle)
    assert "ok" not in woke                             # still waiting: nothing taken
    t_take = time.monotonic()
    take(rx, W)
    th.join(10)
    assert woke.get("ok") is True
    return woke["at"] - t_take, before, tx.stats()["loop"], (buf, lens)
