"""Spinning receives (issue 15): Config.receive_mode = "spin" makes a waiting
Node.receive()/wait() retry the sockets without ever sleeping (no poll
wait, no eventfd), with the loop thread parked until its own timers;
Config.busy_poll_us sets SO_BUSY_POLL on the sockets.  Timing is the
bench's (bench/pingpong.py --receive-mode spin); these tests check what
the mode must keep: every message exactly once (also while the loop thread
takes control messages off the spinning thread, and under loss), the wait's
timeout, close() and signals ending a wait that never sleeps, the loop
thread left alone while the application spins, and bad values named."""
import signal
import threading
import time


import pytest

from rpbcast import Config, ConfigError
from rpbcast.tools import netns
import nodepair
from nodepair import close, take

pytestmark = pytest.mark.timeout(120)
needs_ns = pytest.mark.netns


def pair(transport="multicast", **kw):
    return nodepair.pair(transport, group="239.255.92", **kw)


@pytest.mark.parametrize("kw,key", [
    ({"receive_mode": "busy"}, "receive_mode"),
    ({"receive_mode": 1}, "receive_mode"),
    ({"receive_mode": "spin", "app_receive": False}, "receive_mode"),
    ({"receive_mode": "spin", "busy_poll": True}, "receive_mode"),
    ({"busy_poll_us": -1}, "busy_poll_us"),
    ({"busy_poll_us": 2_000_000}, "busy_poll_us"),
    ({"busy_poll_us": 2.5}, "busy_poll_us"),
    ({"busy_poll_us": True}, "busy_poll_us"),
])
def test_bad_spin_options_name_the_key(kw, key):
    with pytest.raises(ConfigError, match=key):
        Config(node_id=1, **kw).validate()


def test_spin_options_load_from_a_dict():
    c = Config.from_dict({"node_id": 1, "receive_mode": "spin", "busy_poll_us": 50}).validate()
    assert (c.receive_mode, c.busy_poll_us) == ("spin", 50)
    assert Config(node_id=1).validate().receive_mode == "wait"


@needs_ns
def test_a_spinning_receiver_gets_every_message_exactly_once_itself():
    """Bursts and pauses, multicast in a namespace: every message once, read
    by the spinning application thread itself (no eventfd hop from the loop
    for data), which spun rather than slept."""
    n = 3000
    with netns.namespace() as ns, netns.entered(ns):
        a, b = pair(receive_mode="spin", gossip_interval=0.2)
        try:
            got = {}

            def receiver():
                end = time.monotonic() + 40
                while len(got) < n and time.monotonic() < end:
                    take(b, got, 0.5)

            t = threading.Thread(target=receiver)
            t.start()
            time.sleep(0.05)
            for k in range(n):
                a.publish(b"m%d" % k)
                if k % 50 == 49:
                    time.sleep(0.003)
            t.join()
            assert got == {k: 1 for k in range(n)}, f"missing {n - len(got)}"
            lp = b.stats()["loop"]
            assert lp["app_spins"] > 0
            # (most: the loop thread reads while this thread is in Python
            # between messages and the burst is in full batches -- more so
            # on a loaded machine)
            assert lp["app_rx_dgrams"] >= n * 0.5, lp
            assert lp["app_signals"] <= n * 0.3, lp
        finally:
            close(a, b)


@needs_ns
def test_spinning_exactly_once_under_kernel_loss_with_repairs_handed_to_the_loop():
    """5 % kernel loss: the spinning thread reads gossip and repairs too and
    hands the control messages to the loop thread (woken), which answers;
    every message arrives once."""
    n = 3000
    with netns.namespace(loss=0.05) as ns, netns.entered(ns):
        a, b = pair(receive_mode="spin")
        try:
            got = {}

            def send():
                for k in range(n):
                    a.publish(b"m%d" % k)
                    if k % 20 == 19:
                        time.sleep(0.002)

            t = threading.Thread(target=send)
            t.start()
            end = time.monotonic() + 60
            while len(got) < n and time.monotonic() < end:
                take(b, got, 0.05)
            t.join()
            assert set(got) == set(range(n)) and max(got.values()) == 1, f"missing {n - len(got)}"
            assert netns.loss_counters(ns)[0] > 0
            st = b.stats()
            assert st["loop"]["app_handoffs"] > 0
            assert st["repairs_peer"] > 0
        finally:
            close(a, b)


def test_spinning_exactly_once_with_in_process_loss():
    """Unicast with in-process drops on both ends: the spinning receiver
    and the loop thread share the node; no message twice, none missing."""
    n = 1500
    a, b = pair(transport="unicast", receive_mode="spin", drop_rate=0.03)
    try:
        got = {}
        for k in range(n):
            a.publish(b"m%d" % k)
            if k % 100 == 99:
                while take(b, got, 0) is not None:
                    pass
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            take(b, got, 0.05)
        assert got == {k: 1 for k in range(n)}, f"missing {sorted(set(range(n)) - set(got))[:10]}"
    finally:
        close(a, b)


def test_a_spinning_wait_keeps_its_timeout_and_parks_the_loop_thread():
    """An idle spinning wait: it ends at its timeout (returning to Python in
    slices), and meanwhile the loop thread wakes only for its timers --
    not every millisecond to look at sockets the application is watching,
    as it does while the application sleeps in a wait."""
    wakes = {}
    for mode in ("spin", "wait"):
        a, b = pair(transport="unicast", receive_mode=mode, gossip_interval=1.0)
        try:
            time.sleep(0.2)                     # the start-up's traffic is over
            w0 = b.stats()["loop"]["wakeups"]
            t0 = time.monotonic()
            assert b.receive(timeout=0.3) is None
            dt = time.monotonic() - t0
            assert 0.3 <= dt < 2.0, dt
            wakes[mode] = b.stats()["loop"]["wakeups"] - w0
            if mode == "spin":
                assert b.stats()["loop"]["app_spins"] > 1000      # it never slept
                a.publish(b"m0")
                got = {}
                assert take(b, got, 5.0) is not None and got == {0: 1}
        finally:
            close(a, b)
    # sleeping in a wait, the loop looks every 1 ms (~300 times); spinning, only at timers
    assert wakes["spin"] * 3 < wakes["wait"], wakes


def test_close_ends_a_spinning_receive_waiting_forever():
    a, b = pair(transport="unicast", receive_mode="spin")
    out = {}

    def wait():
        try:
            out["msg"] = b.receive()
        except RuntimeError as e:
            out["err"] = e

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    close(b)
    t.join(5)
    assert not t.is_alive(), "receive() still spinning after close()"
    assert "closed" in str(out.get("err")), out
    close(a)


def test_a_signal_reaches_python_while_a_receive_spins_forever():
    """A spinning wait makes no system call that a signal would end: it
    returns to Python between slices, so the handler runs."""
    class Woken(Exception):
        pass

    def handler(signum, frame):
        raise Woken()

    a, b = pair(transport="unicast", receive_mode="spin")
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Woken):
            b.receive()
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        close(a, b)


def test_busy_poll_us_is_set_on_the_sockets():
    """As root SO_BUSY_POLL takes any value; the node reports what the
    kernel holds (getsockopt), and messages still arrive."""
    a, b = pair(transport="unicast", busy_poll_us=50)
    try:
        assert b.transport.busy_poll_us == 50
        a.publish(b"m0")
        got = {}
        assert take(b, got, 5.0) is not None and got == {0: 1}
    finally:
        close(a, b)
    a, b = pair(transport="unicast")
    try:
        assert b.transport.busy_poll_us == 0
    finally:
        close(a, b)


def test_a_lone_message_and_a_batch_give_the_same_message_fields():
    """receive() hands a lone message over as plain ints (no arrays of one
    entry: ~3 us a message, docs/performance.md); it must carry what the
    batched path carries -- sender, incarnation, seq, label (None for
    none), stream, rx_time, payload -- and keep its buffer while the payload
    lives.  (A guard for the fast path: main's receive gives the same.)"""
    a, b = pair(transport="unicast", receive_mode="spin")
    try:
        b.subscribe(0)
        b.subscribe(7)
        seen = []
        for k, (label, stream) in enumerate([(None, 0), (5, 7), (None, 7)]):
            a.publish(b"m%d" % k, label=label, stream=stream)
            m = b.receive(timeout=5)                    # one at a time: the lone-message path
            seen.append(m)
        for k, (label, stream) in enumerate([(None, 0), (5, 7), (None, 7)]):
            a.publish(b"m%d" % (k + 3), label=label, stream=stream)
        end = time.monotonic() + 5
        while b.transport.pending() < 3 and time.monotonic() < end:
            time.sleep(0.01)
        batched = [b.receive(timeout=5) for _ in range(3)]   # three at once: the batch path
        for lone, many in zip(seen, batched):
            assert (lone.sender, lone.inc, lone.label, lone.stream) == (many.sender, many.inc, many.label,
                                                                        many.stream)
            assert many.seq == lone.seq + 3
            assert isinstance(lone.seq, int) and isinstance(lone.rx_time, int) and lone.rx_time > 0
        assert [bytes(m.payload) for m in seen + batched] == [b"m%d" % k for k in range(6)]
        assert [m.label for m in seen] == [None, 5, None] and [m.stream for m in seen] == [0, 7, 7]
    finally:
        close(a, b)
