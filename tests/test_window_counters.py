"""What a window turn costs, counted (issue 15, the maximum-rate goal): the
node counts its application's takes (stats()["loop"]["takes"]), and
`rpbcast stress --json` reports per node the datagrams per receive call,
the messages per take and the publisher's waits for room -- the batching a
flow window may break, read beside the rate it costs."""
from __future__ import annotations

import time

import numpy as np
import pytest

from rpbcast.config import Config, MemberSpec
from rpbcast.tools import netns

PORT = 27860


def _cfg(i, port, **kw):
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{port + j}") for j in (1, 2)],
                  bind=f"127.0.0.1:{port + i}", group_addr=f"239.255.77.12:{port}", gossip_interval=0.02,
                  linger=0.0, **kw)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_the_node_counts_the_takes_that_took_something():
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT)), Node(_cfg(2, PORT))
        try:
            time.sleep(0.2)
            lens, buf = np.full(128, 64, np.uint32), np.zeros(128 * 64, np.uint8)
            assert tx.publish_batch(buf, lens) == 128
            deadline = time.monotonic() + 10
            while rx.transport.pending() < 128 and time.monotonic() < deadline:
                time.sleep(0.01)
            before = rx.stats()["loop"]["takes"]
            for _ in range(4):
                assert rx.recv_batch(32).count == 32
            assert rx.recv_batch(32).count == 0            # an empty take is not a take
            st = rx.stats()
            assert st["loop"]["takes"] - before == 4
            assert tx.stats()["loop"]["takes"] == 0         # the sender took nothing
        finally:
            rx.close(report=False)
            tx.close(report=False)


def test_the_stress_report_gives_each_nodes_batching_and_waits():
    from rpbcast.tools.stress.report import window_counters
    final = {"role": "receiver", "stats": {"delivered": 10_000, "sock": {"rx_calls": 50, "rx_dgrams": 625},
                                           "loop": {"takes": 8, "window_waits": 0, "window_rx": 0,
                                                    "app_rx_calls": 20, "app_rx_dgrams": 300}}}
    c = window_counters(final)
    assert c["role"] == "receiver"
    assert c["dgrams_per_rx_call"] == 12.5 and c["msgs_per_take"] == 1250.0
    assert c["takes"] == 8 and c["app_rx_calls"] == 20
    sender = {"role": "sender", "stats": {"delivered": 0, "sock": {"rx_calls": 0, "rx_dgrams": 0},
                                          "loop": {"takes": 0, "window_waits": 7, "window_rx": 9}}}
    c = window_counters(sender)
    assert c["msgs_per_take"] is None and c["dgrams_per_rx_call"] is None
    assert (c["window_waits"], c["window_rx"]) == (7, 9)


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_a_windowed_stress_run_reports_the_receivers_takes_and_the_senders_waits(tmp_path):
    """End to end: the summary of a real run has a node's counters, and
    they add up -- the receiver's messages per take is what it delivered
    over its takes, and a sender held by a small window waited for room."""
    from stressrun import stress
    rc, s = stress("--receivers", "1", "--loggers", "0", "--flow-window", "1024", "--duration", "1",
                   tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    c = s["window_counters"]
    rx = [v for v in c.values() if v["role"] == "receiver"]
    tx = [v for v in c.values() if v["role"] == "sender"]
    assert len(rx) == 1 and len(tx) == 1
    r = rx[0]
    assert r["delivered"] == s["sent"] and r["takes"] > 0
    assert r["msgs_per_take"] == round(r["delivered"] / r["takes"], 1)
    assert r["rx_calls"] > 0 and r["dgrams_per_rx_call"] >= 1
    assert tx[0]["window_waits"] > 0 and tx[0]["takes"] == 0
