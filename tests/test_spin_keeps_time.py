"""A spinning receiver runs its node's control plane itself (issue 15, the
round trip's and the one way's p99).

With Config.receive_mode = "spin" the application thread spins on its own
CPU and its loop thread shares that CPU (docs/api.md, "The low-latency
setup").  The loop thread still woke for every timer -- with
flow_control = "receivers" a flow report every flow_report_interval -- and
for every control message or gap the spinner read (a hand-off): each
wake-up preempted the spinner for a control turn, and a spinner that had
handed control messages over spun, not reading its sockets, until the
loop thread got the CPU back.  A trace of the spinning round trip showed
that turn every 2 ms as its p99 (docs/performance.md).  Now the spinning
wait runs the due timers, the control messages and the gaps itself, under
the node lock as the loop would, and the loop thread sleeps while it does;
an application that stops waiting has its timers run by the loop again.
Timing is the bench's (bench/pingpong_modes.sh); these tests check who ran
the control plane, and that nothing is lost, doubled or left unreleased."""
import threading
import time

import pytest

import nodepair
from nodepair import close, take

pytestmark = pytest.mark.timeout(120)


def pair(**kw):
    return nodepair.pair("unicast", group="239.255.94", gossip_interval=1.0, flow_control="receivers",
                         flow_report_interval=0.001, **kw)


def _stream(a, n, every_s, first=0):
    def run():
        for k in range(first, first + n):
            a.publish(b"m%d" % k)
            time.sleep(every_s)
    t = threading.Thread(target=run)
    t.start()
    return t


def _delta(st, st0, key):
    return st["loop"].get(key, 0) - st0["loop"].get(key, 0)


def _loop_control(st, st0):
    """Control-plane calls the loop thread ran (all, less the spinner's):
    its own look every 10 ms, and what it read after a full batch handed it
    the sockets (a stream: app_busy) -- not a turn per report or control
    message, as before."""
    return _delta(st, st0, "control_calls") - _delta(st, st0, "app_control")


def _receive_all(b, got, n, seconds=30):
    end = time.monotonic() + seconds
    while len(got) < n and time.monotonic() < end:
        take(b, got, 0.5)


def test_the_spinning_wait_runs_the_timers_and_control_messages_the_loop_sleeps():
    """A message every millisecond for ~0.4 s, the flow report's tick every
    1-16 ms, and control messages coming in (the publisher's reports on
    the receiver's own stream): the spinning receiver runs them all itself
    -- the loop thread ran a few of them at most, and woke about once per
    10 ms instead of once per tick.  Every message is delivered
    once, and the publisher's send buffer is released by the reports the
    spinner sent."""
    n = 400
    a, b = pair(receive_mode="spin")
    try:
        b.publish(b"from b")                # a reports on b's stream: control messages to b
        time.sleep(0.2)                     # the start-up's traffic is over
        got = {}
        take(b, got, 0.01)                  # the spinner is the receiver from here on
        st0 = b.stats()
        t0 = time.monotonic()
        t = _stream(a, n, 0.001)
        _receive_all(b, got, n)
        t.join()
        elapsed = time.monotonic() - t0
        st = b.stats()
        assert got == {k: 1 for k in range(n)}, f"missing {n - len(got)}"
        ran = _delta(st, st0, "app_control")
        # the flow report's ticks alone: one per 1-16 ms of the run
        assert ran >= 10, (ran, st["loop"])
        assert _loop_control(st, st0) <= 0.3 * ran, st["loop"]
        woke = _delta(st, st0, "wakeups")
        # the loop's own look every 10 ms while the application spins
        # (before: one wake-up per report, >= n)
        assert woke <= elapsed / 0.01 + 20, (woke, elapsed, st["loop"])
        assert a.flush(timeout=5), a.send_buffer()
    finally:
        close(a, b)


def test_gaps_found_by_the_spinning_wait_are_pulled_without_the_loop_thread():
    """5 % of the datagrams dropped at the receiver: the spinner finds the
    gaps and runs the pulls itself (the loop thread runs few control calls),
    and gets every message exactly once."""
    n = 300
    a, b = pair(receive_mode="spin", drop_rate=0.05)
    try:
        time.sleep(0.2)
        got = {}
        take(b, got, 0.01)
        st0 = b.stats()
        t = _stream(a, n, 0.001)
        _receive_all(b, got, n)
        t.join()
        st = b.stats()
        assert got == {k: 1 for k in range(n)}, f"missing {sorted(set(range(n)) - set(got))[:10]}"
        ran = _delta(st, st0, "app_control")
        assert ran > 0, st["loop"]
        assert _loop_control(st, st0) <= 0.3 * ran, st["loop"]
    finally:
        close(a, b)


def test_the_loop_runs_the_timers_again_when_the_spinner_stops_waiting():
    """The application stops receiving for 0.5 s while the publisher goes
    on: the loop thread runs the timers again (and reads the sockets), so
    the receiver's flow reports still release the publisher's send buffer
    meanwhile; the messages are all there, once, when it comes back."""
    n = 100
    a, b = pair(receive_mode="spin")
    try:
        time.sleep(0.2)
        got = {}
        take(b, got, 0.01)                  # it waited (and kept time), then went away
        t = _stream(a, n, 0.001)
        t.join()
        assert a.flush(timeout=0.4), a.send_buffer()    # released while b does not wait
        _receive_all(b, got, n)
        assert got == {k: 1 for k in range(n)}, f"missing {n - len(got)}"
    finally:
        close(a, b)


def test_the_sleeping_wait_still_hands_control_to_the_loop():
    """Only the spinning wait keeps time: a receiver with the default wait
    leaves its timers and control messages to the loop thread (it sleeps
    in its wait, nothing of the control plane runs in it)."""
    n = 200
    a, b = pair()
    try:
        b.publish(b"from b")
        time.sleep(0.2)
        got = {}
        st0 = b.stats()
        t = _stream(a, n, 0.001)
        _receive_all(b, got, n)
        t.join()
        st = b.stats()
        assert got == {k: 1 for k in range(n)}
        assert _delta(st, st0, "app_control") == 0, st["loop"]
        assert _delta(st, st0, "control_calls") >= 10, st["loop"]
    finally:
        close(a, b)


def test_an_application_that_takes_without_waiting_has_its_timers_run_by_the_loop():
    """After one spinning wait the application only takes (recv_batch in a
    loop, never waiting: a consumer draining a stream).  A take keeps the
    sockets its own, but it runs no timers: the loop thread must, or the
    receiver's flow reports stop and its publisher's send buffer is never
    released (a sender then stalls at its send window)."""
    n = 200
    a, b = pair(receive_mode="spin")
    try:
        time.sleep(0.2)
        got = {}
        take(b, got, 0.01)                  # a wait that kept time, then takes only
        t = _stream(a, n, 0.001)
        buf = bytearray(1 << 16)
        taken = 0
        released = False
        end = time.monotonic() + 5
        while time.monotonic() < end and not (released and taken >= n):
            taken += b.recv_batch(64, buf).count
            if not t.is_alive() and not released:
                released = bool(a.send_buffer())
        t.join()
        assert taken == n
        assert released, a.send_buffer()
    finally:
        close(a, b)
