"""How often a receiver reports its frontier (flow_control = "receivers"),
on the in-memory network's virtual clock (issue 15, the round trip's p99).

A receiver reported every flow_report_interval (2 ms) to each sender whose
stream moved: a control turn on both ends per report, tens of microseconds
inline in a spinning receiver -- at a 20 us round trip, one round trip in a
hundred, the p99.  The report exists so that a sender can release its send
buffer before its send window fills.  So a stream still flowing is now
reported once it moved send_window / 64 messages (or every 16 intervals),
at the first tick after it pauses, and the ticks themselves stretch (up to
4 intervals) while the fastest stream moves slowly; a fast stream is
reported every interval, as before."""
from groups import Group
from rpbcast.core import wire
from rpbcast.drivers.memnet import NS

T = wire.MsgType
REPORT = 0.002


def reports_from(g, receiver, sender):
    """Count the GOSSIPs `receiver` sends `sender` (its frontier reports) on
    the wire, through the network's drop filter (dropping nothing)."""
    count = {"n": 0}

    def look(src, dst, data):
        if src == receiver and dst == sender:
            count["n"] += sum(1 for m in wire.parse(data)[1] if m.type == T.GOSSIP)
        return False
    g.net.drop_filter = look
    return count


def group(**cfg):
    return Group(2, senders=[1], flow_control="receivers", flow_report_interval=REPORT,
                 gossip_interval=10.0, **cfg)


def test_a_slow_stream_is_reported_rarely_and_released_soon_after_it_pauses():
    """One message a millisecond for 0.4 s: the receiver reported a few
    times, not once per 2 ms tick (200); once the stream pauses, the sender's
    send buffer is released within a stretched tick."""
    g = group()
    g.net.run(0.05)
    count = reports_from(g, 2, 1)
    g.publish_stream(400, per_tick=1, tick=0.001)
    g.net.run(0.4)
    assert count["n"] <= 200 // 8, count["n"]
    g.net.run(0.04)                                 # it ends ~10 ms in; its pause: the next tick (<= 8 ms)
    node = g.E[1].node
    assert node.acked == node.next_seq == 400, (node.acked, node.next_seq)
    assert g.run_until_complete(timeout=2)


def test_a_fast_stream_is_reported_every_interval():
    """64 messages every 0.5 ms against a send window of 4096: the stream
    moves past send_window / 64 between two ticks, so every tick reports,
    and the sender is never held at its window waiting for one."""
    g = group(send_window=4096, store_entries=1 << 16)
    g.net.run(0.05)
    count = reports_from(g, 2, 1)
    t0 = g.net.now
    g.publish_stream(40000, per_tick=64, tick=0.0005)
    assert g.run_until_complete(timeout=5)
    ticks = (g.net.now - t0) / NS / REPORT
    assert count["n"] >= 0.8 * ticks, (count["n"], ticks)


def test_an_idle_receiver_ticks_every_4_intervals():
    """Nothing to report: the tick (a control turn) comes every 4 report
    intervals, not every one."""
    g = group()
    g.publish_stream(10, per_tick=10)
    assert g.run_until_complete(timeout=2)
    g.net.run(0.1)
    e = g.E[2]
    t0 = g.net.now
    calls = {"n": 0}
    inner = e.handle_timer

    def counting(now):
        calls["n"] += 1
        return inner(now)
    e.handle_timer = counting
    g.net.run(0.32)
    assert calls["n"] <= 0.32 / REPORT / 3, (calls["n"], (g.net.now - t0) / NS)


def test_a_closing_receiver_reports_what_it_has_before_it_goes():
    """A receiver that closes right after it got a stream sends its frontier
    first: its periodic report may be waiting for the stream's pause (here:
    not due for a second), and its sender would hold those messages until
    it declared the receiver failed."""
    import nodepair
    a, b = nodepair.pair("unicast", group="239.255.97", gossip_interval=10.0, flow_control="receivers",
                         flow_report_interval=1.0)
    try:
        import time
        time.sleep(0.2)
        for k in range(50):
            a.publish(b"m%d" % k)
        got, end = 0, time.monotonic() + 10
        buf = bytearray(1 << 16)
        while got < 50 and time.monotonic() < end:
            if b.wait(0.1):
                got += b.recv_batch(64, buf).count
        assert got == 50
        b.close(linger=0)
        assert a.flush(timeout=0.5), a.send_buffer()
    finally:
        nodepair.close(a)
