"""The receive path (issue 15, step 2): a waiting Node.receive() reads the
sockets and runs the data plane in the application thread itself, the loop
thread keeps timers and the control plane and receives while nobody waits.
Both threads receive under the node lock, so whoever reads a datagram, the
node sees it once: these tests check exactly-once across the handoff, under
kernel loss (namespace, iptables) and in-process loss, and that the new path
really takes the loop -> application eventfd hop off the way."""
import threading
import time

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rpbcast import Config, ConfigError
from rpbcast.tools import netns
from nodepair import close, pair, take

pytestmark = pytest.mark.timeout(120)
needs_ns = pytest.mark.netns


def loop_rx(node):
    """(datagrams the application thread received, all received, app_fd writes)."""
    st_ = node.stats()
    return st_["loop"]["app_rx_dgrams"], st_["sock"]["rx_dgrams"], st_["loop"]["app_signals"]


@needs_ns
def test_a_waiting_receive_gets_each_message_without_the_loop_threads_hop():
    """A receiver thread waiting in receive(), messages 2 ms apart: the
    application thread reads (nearly) every one itself and the loop writes
    the application's eventfd for (nearly) none.  With app_receive off, the
    old path: the loop receives and signals about once per message."""
    n = 300
    with netns.namespace() as ns, netns.entered(ns):
        for app_receive in (True, False):
            # gossip as by default (every 0.2 s), not every 20 ms: control
            # messages are what the loop still signals for
            a, b = pair(app_receive=app_receive, gossip_interval=0.2)
            try:
                got = {}
                app0, rx0, sig0 = loop_rx(b)

                def receiver():
                    end = time.monotonic() + 30
                    while len(got) < n and time.monotonic() < end:
                        take(b, got, 0.5)

                t = threading.Thread(target=receiver)
                t.start()
                time.sleep(0.05)
                for k in range(n):
                    a.publish(b"m%d" % k)
                    time.sleep(0.002)
                t.join()
                app1, rx1, sig1 = loop_rx(b)
                assert got == {k: 1 for k in range(n)}
                if app_receive:
                    assert app1 - app0 >= n * 0.8, (app1 - app0, rx1 - rx0)
                    assert sig1 - sig0 <= n * 0.2, f"{sig1 - sig0} eventfd hops for {n} messages"
                else:
                    assert app1 == app0 == 0
                    assert sig1 - sig0 >= n * 0.5
            finally:
                close(a, b)


@needs_ns
def test_exactly_once_with_the_application_and_the_loop_receiving_by_turns_under_loss():
    """5 % kernel loss; the receiver alternates receive() (its thread reads
    the sockets) with pauses (the loop thread reads them, deliveries queue):
    every message exactly once, both threads received, control traffic of the
    application's batches went to the loop thread."""
    n = 4000
    with netns.namespace(loss=0.05) as ns, netns.entered(ns):
        a, b = pair()
        stop = threading.Event()

        def send():
            for k in range(n):
                a.publish(b"m%d" % k)
                if k % 20 == 19:
                    time.sleep(0.002)
            stop.set()

        try:
            t = threading.Thread(target=send)
            t.start()
            got = {}
            end = time.monotonic() + 40
            turn = 0
            while len(got) < n and time.monotonic() < end:
                turn += 1
                if turn % 2:
                    phase_end = time.monotonic() + 0.03
                    while time.monotonic() < phase_end and len(got) < n:
                        take(b, got, 0.01)
                else:
                    time.sleep(0.03)
            t.join()
            assert len(got) == n, f"missing {n - len(got)}"
            assert set(got) == set(range(n)) and max(got.values()) == 1
            dropped, _ = netns.loss_counters(ns)
            assert dropped > 0
            st_ = b.stats()
            lp = st_["loop"]
            assert lp["app_rx_dgrams"] > 0
            assert st_["sock"]["rx_dgrams"] - lp["app_rx_dgrams"] > 0      # the loop's share
            assert lp["app_handoffs"] > 0
            assert st_["repairs_peer"] > 0
        finally:
            stop.set()
            close(a, b)


class Handoff(RuleBasedStateMachine):
    """Over random interleavings of publishing, receiving (application thread)
    and not receiving (loop thread), with in-process loss on both paths: no
    message twice, none that was not published, and at the end all of them."""

    def __init__(self):
        super().__init__()
        self.a, self.b = pair(transport="unicast", drop_rate=0.03)
        self.published = 0
        self.got = {}

    @rule(k=st.integers(1, 40))
    def publish(self, k):
        for _ in range(k):
            self.a.publish(b"m%d" % self.published)
            self.published += 1

    @rule(k=st.integers(1, 30), spin=st.sampled_from([0.0, 0.0005]))
    def receive_in_app(self, k, spin):
        self.b._spin = spin
        for _ in range(k):
            if take(self.b, self.got, 0.005) is None:
                break

    @rule(ms=st.integers(1, 15))
    def leave_it_to_the_loop(self, ms):
        time.sleep(ms / 1000)

    @invariant()
    def once_and_only_published(self):
        assert all(v == 1 for v in self.got.values()), self.got
        assert all(0 <= s < self.published for s in self.got)

    def teardown(self):
        try:
            end = time.monotonic() + 15
            while len(self.got) < self.published and time.monotonic() < end:
                take(self.b, self.got, 0.05)
            assert self.got == {s: 1 for s in range(self.published)}, \
                f"missing {sorted(set(range(self.published)) - set(self.got))[:10]}"
        finally:
            close(self.a, self.b)


Handoff.TestCase.settings = settings(max_examples=8, stateful_step_count=20, deadline=None,
                                     suppress_health_check=list(HealthCheck))
test_handoff_state_machine = Handoff.TestCase


def test_receive_timeout_is_kept_and_spin_is_bounded():
    a, b = pair(transport="unicast", receive_spin_us=2000)
    try:
        t0 = time.monotonic()
        assert b.receive(timeout=0) is None
        assert time.monotonic() - t0 < 0.5
        t0 = time.monotonic()
        assert b.receive(timeout=0.05) is None
        dt = time.monotonic() - t0
        assert 0.05 <= dt < 1.0, dt
        spins = b.stats()["loop"]["app_spins"]
        assert spins > 0                        # it spun before sleeping
        a.publish(b"m0")
        got = {}
        assert take(b, got, 5.0) is not None and got == {0: 1}
    finally:
        close(a, b)
    a, b = pair(transport="unicast")            # the default: no spin
    try:
        assert b.receive(timeout=0.02) is None
        assert b.stats()["loop"]["app_spins"] == 0
    finally:
        close(a, b)


def test_close_wakes_a_receiver_waiting_forever():
    a, b = pair(transport="unicast")
    out = {}

    def wait():
        t0 = time.monotonic()
        try:
            out["msg"] = b.receive()            # no timeout
        except RuntimeError as e:
            out["err"] = e
        out["after"] = time.monotonic() - t0

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    close(b)
    t.join(5)
    assert not t.is_alive(), "receive() still waiting after close()"
    assert "closed" in str(out.get("err")), out
    close(a)


@pytest.mark.parametrize("key,value", [("receive_spin_us", -1), ("receive_spin_us", 2_000_000),
                                       ("receive_spin_us", 1.5), ("app_receive", "yes")])
def test_bad_receive_options_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key):
        Config(node_id=1, **{key: value}).validate()


def test_a_signal_reaches_python_while_receive_waits_forever():
    """SIGTERM/Ctrl-C must not wait for a message: the receive wait in C ends
    on EINTR so the handler runs (`rpbcast sub` ends on SIGTERM this way)."""
    import signal

    class Woken(Exception):
        pass

    def handler(signum, frame):
        raise Woken()

    a, b = pair(transport="unicast")
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Woken):
            b.receive()                         # no timeout
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        close(a, b)
