"""Receive timestamps are never earlier than the send (issue 16).

A receiving loop used to read the clock once when epoll returned and stamp
every datagram of that iteration with it -- also those that arrived while it
waited for the node mutex (which the application holds in publish,
recv_batch, stats) or while the control plane ran between recvmmsg batches.
`rpbcast analyze` then showed first receipts before their send, by up to
360 ms.  Here the application holds the receiver's mutex while a message is
sent: its receipt must still be stamped after its send."""
import socket
import time

import numpy as np
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.api import Node
from rpbcast.core.node import TraceEvent

pytestmark = pytest.mark.timeout(60)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pair(**kw):
    ports = {1: free_port(), 2: free_port()}
    specs = [MemberSpec(i, f"127.0.0.1:{p}") for i, p in ports.items()]
    return [Node(Config(node_id=i, bind=f"127.0.0.1:{p}", members=specs, transport="unicast", **kw),
                 trace=1 << 14) for i, p in ports.items()]


def events(node, code):
    tr = node.take_trace()
    k = tr["event"] == int(code)
    return {int(q): int(t) for q, t in zip(tr["seq"][k], tr["t_ns"][k])}


@pytest.mark.parametrize("timestamps", [False, True], ids=["loop-clock", "kernel-timestamps"])
def test_a_receipt_is_never_stamped_before_its_send(timestamps):
    pub, rcv = pair(timestamps=timestamps)
    try:
        pub.publish(b"hello")
        assert rcv.receive(timeout=5) is not None            # the two can talk
        rcv.transport.lock()                                   # the application holds the node
        try:
            pub.publish(b"wakes the receiving loop")           # which now waits for the mutex
            time.sleep(0.2)
            pub.publish(b"sent while it waits")
            time.sleep(0.05)
        finally:
            rcv.transport.unlock()
        got = {}
        end = time.time() + 5
        while len(got) < 2 and time.time() < end:
            m = rcv.receive(timeout=0.5)
            if m is not None:
                got[m.seq] = m.rx_time
        assert sorted(got) == [1, 2]
        sent = events(pub, TraceEvent.SEND)
        received = events(rcv, TraceEvent.RECV)
        for seq in (1, 2):
            assert received[seq] >= sent[seq], (seq, (received[seq] - sent[seq]) / 1e6, "ms")
            assert got[seq] >= sent[seq]
        assert np.all(np.diff([received[1], received[2]]) >= 0)
    finally:
        pub.close()
        rcv.close()
