"""A publisher that spins on the window (issue 15, the maximum-rate goal):
Config.publish_spin_us makes a publisher waiting for room in the send or
flow window poll its sockets (and the window's eventfd) without blocking
for that long before it sleeps -- in C, without the GIL or the node lock --
so a publisher with a core of its own turns the window without a sleep and
a wake-up per turn.  The tests check what the knob must keep: bad values
named, the room seen within the spin and no sleep counted (and, without
the knob, the sleep that it saves), close() ending a spinning wait, and
every message once in a short windowed stress run with it.  Timing is the
bench's (bench/window_breakdown.py --config ...="--publish-spin-us N").
Real sockets, multicast inside a network namespace each test creates."""
from __future__ import annotations

import threading
import time

import pytest
from stressrun import stress, stress_args

from rpbcast.config import Config, ConfigError
from rpbcast.tools import netns
from windowpair import fill as _fill, wait_for_the_take, window_cfg
from rpbcast.tools.stress.plan import make_plan, worker_spec

PORT = 27860


def _cfg(i, port, **kw):
    return window_cfg(i, port, "239.255.77.13", **kw)


@pytest.mark.parametrize("value", [-1, 1_000_001, 2.5, True, "200"])
def test_a_bad_publish_spin_names_the_key(value):
    with pytest.raises(ConfigError, match="publish_spin_us"):
        Config(node_id=1, publish_spin_us=value)


def test_the_key_defaults_to_no_spin_and_is_read_from_a_dict():
    assert Config(node_id=1).publish_spin_us == 0
    assert Config.from_dict({"node_id": 1, "publish_spin_us": 200}).publish_spin_us == 200
    with pytest.raises(ConfigError, match="publish_spin_us"):
        Config.from_dict({"node_id": 1, "publish_spin_us": -5})


def test_the_stress_option_reaches_the_sender_only(tmp_path):
    args = stress_args("--publish-spin-us", "200", "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    assert worker_spec(args, plan, plan.senders[0], "sender")["config"]["publish_spin_us"] == 200
    for i in plan.receivers:
        assert "publish_spin_us" not in worker_spec(args, plan, i, "receiver")["config"]
    args = stress_args("--run-dir", str(tmp_path / "run2"))
    plan = make_plan(args, use_ns=False)
    assert "publish_spin_us" not in worker_spec(args, plan, plan.senders[0], "sender")["config"]


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_spinning_publisher_sees_the_room_without_sleeping():
    """Spin of a second, the take 0.2 s into it: the wait ends on the
    acknowledgment while still spinning -- one wait that found room
    spinning (window_spun), no sleep (window_sleeps unchanged)."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx = Node(_cfg(1, PORT, publish_spin_us=1_000_000))
        rx = Node(_cfg(2, PORT))
        try:
            time.sleep(0.2)
            waited, before, after, _ = wait_for_the_take(tx, rx, 20.0)
            assert waited < 0.8, waited                 # within the spin
            assert after["window_waits"] == before["window_waits"] + 1
            assert after["window_spun"] == before["window_spun"] + 1
            assert after["window_sleeps"] == before["window_sleeps"], (before, after)
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_without_the_spin_the_same_wait_sleeps():
    """The default (publish_spin_us = 0): the same wait sleeps in ppoll
    until the acknowledgment -- the sleep the spin saves."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx, rx = Node(_cfg(1, PORT + 10)), Node(_cfg(2, PORT + 10))
        try:
            time.sleep(0.2)
            waited, before, after, _ = wait_for_the_take(tx, rx, 20.0)
            assert waited < 2.0, waited                 # the acknowledgment, not the timeout
            assert after["window_sleeps"] > before["window_sleeps"]
            assert after["window_spun"] == before["window_spun"] == 0
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_spinning_wait_times_out_after_its_spin_and_a_sleep():
    """Nothing taken: a wait of 0.3 s with a spin of 0.1 s spins, then
    sleeps the rest, and says False after about its timeout."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx = Node(_cfg(1, PORT + 20, publish_spin_us=100_000))
        rx = Node(_cfg(2, PORT + 20))
        try:
            time.sleep(0.2)
            _fill(tx)
            before = tx.stats()["loop"]
            t0 = time.monotonic()
            assert tx.transport.wait_writable(0.3) is False
            assert 0.25 <= time.monotonic() - t0 < 5.0
            after = tx.stats()["loop"]
            assert after["window_sleeps"] > before["window_sleeps"]
            assert after["window_spun"] == before["window_spun"]
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_closing_the_node_ends_a_spinning_wait():
    """A publisher spinning for room (a spin of a second) while the node
    closes returns False well before its spin would have ended."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx = Node(_cfg(1, PORT + 30, publish_spin_us=1_000_000))
        rx = Node(_cfg(2, PORT + 30))
        try:
            time.sleep(0.2)
            _fill(tx)
            woke = {}

            def wait():
                woke["t0"] = time.monotonic()
                woke["ok"] = tx.transport.wait_writable(30.0)
                woke["at"] = time.monotonic()

            th = threading.Thread(target=wait)
            th.start()
            time.sleep(0.15)
            assert "ok" not in woke                     # spinning: nothing taken
            tx.close(report=False)
            th.join(10)
            assert woke.get("ok") is False
            assert woke["at"] - woke["t0"] < 0.9, woke   # the spin (1 s) did not run out
            assert tx.wait_writable(None) is False
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_a_windowed_stress_run_with_the_spin_delivers_every_message_once(tmp_path):
    rc, s = stress("--duration", "1", "--receivers", "1", "--loggers", "0", "--flow-window", "2048",
                   "--publish-spin-us", "200", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    tx = [v for v in s["window_counters"].values() if v["role"] == "sender"]
    assert tx and tx[0]["window_waits"] > 0             # the window did close, and was waited on
    assert tx[0]["window_spun"] + tx[0]["window_sleeps"] > 0


def _loop_wakeups_during_a_wait(port, spin_us):
    """The sender's loop-thread wake-ups in 0.4 s of a publisher's wait for
    room on a full window (nothing taken)."""
    from rpbcast import Node
    with netns.namespace() as ns, netns.entered(ns):
        tx = Node(_cfg(1, port, publish_spin_us=spin_us))
        rx = Node(_cfg(2, port))
        try:
            time.sleep(0.2)
            _fill(tx)
            th = threading.Thread(target=tx.transport.wait_writable, args=(0.6,))
            th.start()
            time.sleep(0.05)
            a = tx.stats()["loop"]["wakeups"]
            time.sleep(0.4)
            b = tx.stats()["loop"]["wakeups"]
            th.join(10)
            return b - a
        finally:
            rx.close(report=False)
            tx.close(report=False)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_the_loop_thread_leaves_the_sockets_to_a_spinning_publisher():
    """While a publisher waits for room the loop thread does not watch the
    sockets; without the spin it looks again every blind_max (1 ms: ~370
    wake-ups in 0.4 s here), each on the core the publisher runs on.  With
    the spin the publisher reads everything itself, so the loop looks only
    every 10 ms (~40)."""
    sleeping = _loop_wakeups_during_a_wait(PORT + 40, 0)
    spinning = _loop_wakeups_during_a_wait(PORT + 50, 1_000_000)
    assert spinning < 120, (spinning, sleeping)
    assert sleeping > 2 * spinning, (spinning, sleeping)
