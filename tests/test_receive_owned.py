"""A spinning receiver owns its sockets between waits too (issue 15, one
way at 100 k msgs/s).  With Config.receive_mode = "spin" the application
thread reads the sockets itself; between two waits (the microseconds it
spends on the message it took) the loop thread used to watch the sockets
and was woken for each datagram that arrived then -- on the core the
application spins on, one context switch per message at 100 k msgs/s
(docs/performance.md, "One way at 100 k msgs/s").  Now the loop leaves the
sockets to the application for 10 ms after it last received; an
application away longer (busy, or no longer receiving) has them read by
the loop again.  Timing is the bench's (bench/oneway_stalls.sh); these
tests check who read the datagrams and that nothing is lost or doubled."""
import threading
import time

import pytest

import nodepair
from nodepair import close, take

pytestmark = pytest.mark.timeout(120)


def pair(**kw):
    return nodepair.pair("unicast", group="239.255.93", gossip_interval=1.0, **kw)


def _loop_read(st):
    """Datagrams the loop thread read (all read, less the application's)."""
    return st["sock"]["rx_dgrams"] - st["loop"]["app_rx_dgrams"]


def _stream(a, n, every_s):
    def run():
        for k in range(n):
            a.publish(b"m%d" % k)
            time.sleep(every_s)
    t = threading.Thread(target=run)
    t.start()
    return t


def test_datagrams_arriving_between_spinning_waits_are_left_to_the_application():
    """A message every ~0.5 ms; the application spends ~0.3 ms on each one
    it takes, so most arrive while it is between waits.  The loop thread
    used to read many of those and hand them over (40-50 % of the
    datagrams, before this change); now the application reads nearly all
    of them itself, each message once."""
    n = 400
    # the receiver's flow reports wake its loop every millisecond (as at
    # 100 k msgs/s): each wake-up that finds the application between waits
    # used to leave the loop watching the sockets
    a, b = pair(receive_mode="spin", flow_control="receivers", flow_report_interval=0.001)
    try:
        time.sleep(0.2)                     # the start-up's traffic is over
        st0 = b.stats()
        got = {}
        t = _stream(a, n, 0.0005)
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            if take(b, got, 0.5) is not None:
                time.sleep(0.0003)          # the application's work on it (the GIL free for the sender)
        t.join()
        assert got == {k: 1 for k in range(n)}, f"missing {n - len(got)}"
        st = b.stats()
        by_loop = _loop_read(st) - _loop_read(st0)
        by_app = st["loop"]["app_rx_dgrams"] - st0["loop"]["app_rx_dgrams"]
        # (the rest: control datagrams, and batches of 8 or more the
        # application read after a stall, which hand the sockets back)
        assert by_loop <= 0.25 * (by_app + by_loop), (by_app, by_loop, st["loop"])
    finally:
        close(a, b)


def test_the_loop_reads_again_when_a_spinning_application_stays_away():
    """The application stops receiving for 0.3 s while messages arrive: the
    loop thread takes the sockets back (it reads them, the socket is not
    left to fill), and the application then gets every message once."""
    n = 200
    a, b = pair(receive_mode="spin")
    try:
        time.sleep(0.2)
        got = {}
        assert take(b, got, 0.01) is None           # it waited once, then went away
        st0 = b.stats()
        t = _stream(a, n, 0.001)
        time.sleep(0.3)
        by_loop = _loop_read(b.stats()) - _loop_read(st0)
        assert by_loop >= 100, by_loop
        t.join()
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            take(b, got, 0.5)
        assert got == {k: 1 for k in range(n)}, f"missing {n - len(got)}"
    finally:
        close(a, b)


def test_the_default_wait_mode_keeps_the_loop_reading_between_waits():
    """Only the spinning mode owns the sockets: a sleeping-wait receiver's
    loop thread still reads what arrives while the application works (the
    two-thread pipeline the default's throughput rests on)."""
    n = 300
    a, b = pair()
    try:
        assert not b.transport.owns_receive
        time.sleep(0.2)
        st0 = b.stats()
        got = {}
        t = _stream(a, n, 0.0002)
        end = time.monotonic() + 30
        while len(got) < n and time.monotonic() < end:
            if take(b, got, 0.5) is not None:
                time.sleep(0.0002)
        t.join()
        assert got == {k: 1 for k in range(n)}
        assert _loop_read(b.stats()) - _loop_read(st0) >= n * 0.2
    finally:
        close(a, b)


def test_a_node_driven_by_poll_keeps_watching_its_sockets_in_spin_mode():
    """Without a loop thread (Node(start=False), Node.poll) nobody is to be
    parked: the node's own loop turn reads the sockets after every take
    (owning them would blind Node.poll's wait for 10 ms after each take)."""
    from rpbcast.api import Node
    a, _b = pair()
    cfg = _b.config.replace(receive_mode="spin")
    close(_b)
    b = Node(cfg, start=False)
    try:
        assert not b.transport.owns_receive
        got = {}
        n = 100
        buf = bytearray(1 << 20)
        for k in range(n):
            a.publish(b"m%d" % k)
            end = time.monotonic() + 5
            while k not in got and time.monotonic() < end:
                bt = b.poll(0.05, 64, buf)
                for i in range(bt.count):
                    got[int(bt.seqs[i])] = got.get(int(bt.seqs[i]), 0) + 1
        assert got == {k: 1 for k in range(n)}
    finally:
        close(a, b)
