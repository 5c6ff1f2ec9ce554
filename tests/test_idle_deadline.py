"""The idle heartbeat's deadline is the UDP loop's (issue 15, the round
trip's p99).

A sender that falls silent for idle_after sends one idle HEARTBEAT
(thesis §5.1; rpbcast.protocol.heartbeats).  Its deadline was a
control-plane timer -- the last publish + idle_after -- which every message
moved: while a stream lasted the loop called the control plane every
idle_after to find it not due yet, tens of microseconds inline in a
spinning receiver (a scheduler trace and a count of the timers due showed
these calls as half of the spinning ping-pong's control turns).  Now the
loop keeps that deadline itself (csrc/loop.c, idle_due) and calls the
control plane only when the silence has come."""
import time

import pytest

import nodepair
from nodepair import close

pytestmark = pytest.mark.timeout(120)

IDLE = 0.005


def pair(**kw):
    return nodepair.pair("unicast", group="239.255.96", gossip_interval=10.0, idle_after=IDLE, **kw)


def _heartbeats_sent(node):
    return node.stats()["traffic"].get("heartbeat", (0, 0, 0, 0))[2]


def test_a_stream_does_not_call_the_control_plane_every_idle_after():
    """A message every 0.5 ms for 0.5 s: the publisher's control plane ran a
    few times (its own timers), not once per idle_after (100) to find the
    idle deadline moved."""
    a, b = pair()
    try:
        time.sleep(0.3)
        c0 = a.stats()["loop"]["control_calls"]
        t0 = time.monotonic()
        k = 0
        while time.monotonic() - t0 < 0.5:
            a.publish(b"m%d" % k)
            k += 1
            time.sleep(0.0005)
        calls = a.stats()["loop"]["control_calls"] - c0
        assert calls <= 30, calls
    finally:
        close(a, b)


def test_each_silence_still_gets_its_idle_heartbeat():
    """Ten bursts with 20 ms of silence between them: each silence gets its
    idle heartbeat (and its tail probe), sent within the silence."""
    a, b = pair()
    try:
        time.sleep(0.3)
        h0 = _heartbeats_sent(a)
        for burst in range(10):
            for k in range(20):
                a.publish(b"b%d-%d" % (burst, k))
            time.sleep(0.02)
        sent = _heartbeats_sent(a) - h0
        assert sent >= 10 * 2, sent         # a probe and an idle heartbeat per silence
        assert sent <= 10 * 2 + 4, sent     # and no more than that, for a silence
    finally:
        close(a, b)
