"""Receive timestamps are never earlier than the send (issue 16).

A receiving loop used to read the clock once when epoll returned and stamp
every datagram of that iteration with it -- also those that arrived while it
waited for the node mutex (which the application holds in publish,
recv_batch, stats) or while the control plane ran between recvmmsg batches.
`rpbcast analyze` then showed first receipts before their send, by up to
360 ms.  Here the application holds the receiver's mutex while a message is
sent: its receipt must still be stamped after its send."""
import time

import numpy as np
import pytest

from rpbcast import Config, MemberSpec
from rpbcast.api import Node
from rpbcast.core.node import TraceEvent
from ports import free_port

pytestmark = pytest.mark.timeout(60)


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


def test_no_first_receipt_of_a_stress_run_precedes_its_send(tmp_path):
    """End to end, as `rpbcast analyze` reads it: every `recv` event of a
    traced stress run (real processes, loss, repairs) is stamped at or after
    the `send` event of the same id (one host: one CLOCK_MONOTONIC).  Traces
    from before the fix had ~1 % of first receipts early."""
    import glob
    import json
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from rpbcast.analysis.tracefile import EVENT_CODES
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", "--trace", "--run-dir",
                        str(run), "--duration", "1", "--rate", "20000", "--loss", "0.02"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["exactly_once"]

    def expanded(event):
        ts, keys = [], []
        for f in glob.glob(str(run / "traces" / "*" / "node=*" / "*.parquet")):
            t = pq.read_table(f).to_pydict()
            for i, ev in enumerate(t["event"]):
                if ev == event:
                    for q in range(t["seq"][i], t["seq"][i] + (t["count"][i] or 1)):
                        keys.append((t["sender"][i], t["inc"][i], q))
                        ts.append(t["t_ns"][i])
        return keys, ts

    assert EVENT_CODES["recv"] and EVENT_CODES["send"]
    skeys, sts = expanded("send")
    sent = dict(zip(skeys, sts))
    rkeys, rts = expanded("recv")
    early = [(k, sent[k] - t) for k, t in zip(rkeys, rts) if k in sent and t < sent[k]]
    assert len(rkeys) >= len(sent)
    assert early == [], f"{len(early)} of {len(rkeys)} receipts before their send, e.g. {early[:3]}"
