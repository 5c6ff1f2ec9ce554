"""One way at a fixed rate through the public API: where the tail comes from.

    bench/oneway_stalls.sh [MODE ...]        (runs both ends in a namespace)
    ip netns exec NS python3 bench/oneway_stalls.py recv SECONDS [--receive-mode spin] [--pin] [--take-wait]
    ip netns exec NS python3 bench/oneway_stalls.py send RATE SECONDS [--pin]
    (either end: [--loop-cpu N] [--loop-nice N | --loop-fifo PRIO]: the node's
    loop thread's CPU and scheduling -- the layouts docs/performance.md compares)

The sender publishes one message at a time when it is due (catching up with
a batch when it fell behind), each stamped with its publish call.  The
receiver waits and takes as a feed application does, and does no per-take
work but a few appends: the takes are written behind each other into one
buffer and decoded after the run, so the measurement does not make the
cycle it measures.  It prints percentiles of

    wire    publish call -> the receiver's data plane read it (rx_time)
    app     rx_time -> the take returned it to the application
    total   publish call -> application
    lag     due time on the sender's schedule -> publish call (how far behind
            the sender was: a catch-up batch's messages are late by this)
    from_due  due time -> application (lag + total: the honest one-way
            figure when the sender falls behind -- no coordinated omission)

and, for the messages over 1 ms (the tail), what each coincided with:

    rx_gap    the receiving thread was away > 0.5 ms between two turns of its
              loop (descheduled, or a stall in a call) when the message came
    tx_gap    the sender's previous publish call was > 0.5 ms before (it was
              descheduled: the message was published late, then crossed slow)
    gc        a Python garbage collection ran in the receiver meanwhile
    control   the node's control plane held the node lock > 0.5 ms (max of
              the run, from Node.stats)

and the receiving process's context switches (voluntary / involuntary, per
thread: a receiving thread that waited for the node lock or the GIL shows
voluntary ones), the takes that waited for the node lock during the run
(app_lock_waits; the longest wait is since the node started) and a
histogram of the receiver's loop gaps."""
import argparse
import gc
import os
import struct
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rpbcast import Config, MemberSpec  # noqa: E402
from rpbcast.api import Node  # noqa: E402

GROUP = "239.192.1.81:17530"
PORTS = {1: 17731, 2: 17732}
STAMP = struct.Struct("<q")      # publish call
GAP_NS = 500_000
TAIL_NS = 1_000_000


def config(node_id, args):
    e = {}
    if getattr(args, "receive_mode", None):
        e["receive_mode"] = args.receive_mode
    if getattr(args, "loop_cpu", None) is not None:
        e["loop_cpu"] = args.loop_cpu
    return Config(node_id=node_id, bind=f"127.0.0.1:{PORTS[node_id]}", group_addr=GROUP,
                  members=[MemberSpec(i, f"127.0.0.1:{p}") for i, p in PORTS.items()],
                  flow_control="receivers", member_timeout=3600, **e)


def pin(args, last):
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1] if last else cpus[0]})


def loop_sched(node, args):
    """--loop-nice / --loop-fifo: the node's loop thread's scheduling (an
    experiment: does a loop thread that is never made to wait by a spinner
    take the tail away?)."""
    import threading
    loops = [t for t in threading.enumerate() if t.name == f"rpbcast-{node.node_id}"]
    for t in loops:
        if getattr(args, "loop_fifo", 0):
            os.sched_setscheduler(t.native_id, os.SCHED_FIFO, os.sched_param(args.loop_fifo))
        elif getattr(args, "loop_nice", None) is not None:
            os.setpriority(os.PRIO_PROCESS, t.native_id, args.loop_nice)


def send(args):
    pin(args, last=False)
    node = Node(config(1, args))
    loop_sched(node, args)
    time.sleep(0.5)
    size, rate, batch = 64, args.rate, 1024
    buf = np.zeros(batch * size, np.uint8)
    stamps = buf.reshape(batch, size)[:, :8].view(np.int64)
    dues = buf.reshape(batch, size)[:, 8:16].view(np.int64)
    lens = np.full(batch, size, np.uint32)
    one = bytearray(size)
    t0 = time.monotonic_ns()
    end = t0 + int(args.seconds * 1e9)
    sent = 0
    period = 1e9 / rate
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        due = int((now - t0) / period) + 1 - sent
        if due <= 0:
            continue
        if due == 1:                    # on time: this message alone, at once
            STAMP.pack_into(one, 0, time.monotonic_ns())
            STAMP.pack_into(one, 8, t0 + int(sent * period))      # when it was due (message i: t0 + i periods)
            try:
                node.publish(one)
                sent += 1
            except BlockingIOError:
                node.wait_writable(0.005)
            continue
        k = min(due, batch)             # behind: catch up in one call
        stamps[:k, 0] = time.monotonic_ns()
        dues[:k, 0] = t0 + (np.arange(sent, sent + k) * period).astype(np.int64)
        n = node.publish_batch(buf[:k * size], lens[:k])
        sent += n
        if n < k:
            node.wait_writable(0.005)
    print(f"SENT {sent} in {args.seconds} s", flush=True)
    time.sleep(1.0)
    node.close(linger=0)


def ctx_switches():
    """{thread name: (voluntary, involuntary)} of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
            out[st["Name"].strip() + "/" + tid] = (int(st["voluntary_ctxt_switches"]),
                                                   int(st["nonvoluntary_ctxt_switches"]))
        except (OSError, KeyError):
            pass
    return out


def _control_max(x):
    """The longest control-plane call so far (us): how long it held the node lock."""
    st = x.stats() if isinstance(x, Node) else x
    return st.get("loop", {}).get("control_max_us", st.get("control_max_us", -1))


def _time_control(node):
    """Time each control-plane call of the node (Python, node lock held):
    [(start, end, what it was called for)]."""
    calls = []
    e = node.engine
    inner = e.on_data_plane

    def timed(now, **why):
        t = time.monotonic_ns()
        try:
            return inner(now, **why)
        finally:
            calls.append((t, time.monotonic_ns(), "+".join(k for k, v in why.items() if v)))
    e.on_data_plane = timed
    return calls


def recv(args):
    if args.loop_cpu is None:
        pin(args, last=True)            # the node's threads inherit it
    node = Node(config(2, args))
    if args.loop_cpu is not None:
        pin(args, last=True)            # this thread only: the loop thread is on loop_cpu
    loop_sched(node, args)
    ctl = _time_control(node) if args.time_control else None
    gcs = []                                     # (start, end) of the receiver's collections
    gc_t = [0]

    def on_gc(phase, info):
        if phase == "start":
            gc_t[0] = time.monotonic_ns()
        else:
            gcs.append((gc_t[0], time.monotonic_ns()))
    gc.callbacks.append(on_gc)
    print("READY", flush=True)
    buf = bytearray(256 << 20)
    view = memoryview(buf)
    pos = 0
    # per take, in preallocated arrays (no Python object kept per take: a
    # list of them made the collector's passes the tail it was measuring)
    cap = 1 << 22
    offs, rxs, tks = (np.zeros(cap, np.int64) for _ in range(3))
    nm = 0
    ntakes = 0
    turns = np.zeros(cap, np.int64)              # start of each loop turn
    nturns = 0
    st0 = node.stats()
    ctl0 = _control_max(st0)
    end = time.monotonic() + args.seconds
    ctx0 = ctx_switches()
    end_ns = int(end * 1e9)
    while True:
        t = time.monotonic_ns()
        turns[nturns] = t
        nturns += 1
        if t >= end_ns or nturns == cap:
            break
        b = node.recv_batch(65536, view[pos:])
        k = b.count
        if k:
            ta = time.monotonic_ns()
            if nm + k > cap:
                break
            offs[nm:nm + k] = b.offs
            offs[nm:nm + k] += pos
            rxs[nm:nm + k] = b.rx_times
            tks[nm:nm + k] = ta
            nm += k
            ntakes += 1
            pos += int(b.offs[k - 1]) + int(b.lens[k - 1])
            if pos > len(buf) - (8 << 20):
                break
        else:
            node.wait(0.01)
    ctx1 = ctx_switches()
    st = node.stats()
    node.close(linger=0)
    gc.callbacks.remove(on_gc)
    if not nm:
        print("RESULT no messages", flush=True)
        return
    mv = np.frombuffer(buf, np.uint8)
    s = mv[offs[:nm, None] + np.arange(8)].copy().view(np.int64).reshape(-1)
    d = mv[offs[:nm, None] + 8 + np.arange(8)].copy().view(np.int64).reshape(-1)
    r, a = rxs[:nm], tks[:nm]
    keep = s >= s[0] + int(0.1 * (s[-1] - s[0]))          # without the first 10 %
    s, d, r, a = s[keep], d[keep], r[keep], a[keep]
    tot = a - s
    cols = {"wire": r - s, "app": a - r, "total": tot}
    if d.any():         # a sender that stamps due times too (this bench's)
        cols.update({"lag": s - d, "from_due": a - d})
    line = f"RESULT n={len(s)} per_take={nm / ntakes:.1f} " + " ".join(
        f"{k}_p50_us={np.median(v) / 1e3:.1f} {k}_p99_us={np.percentile(v, 99) / 1e3:.1f}"
        for k, v in cols.items())
    print(line, flush=True)
    # the receiver's loop gaps
    tn = turns[:nturns]
    tn = tn[(tn >= s[0]) & (tn <= a[-1])]     # while traffic came (not the idle waits after it)
    gaps = np.diff(tn)
    starts = tn[:-1]
    big = gaps > GAP_NS
    g_lo, g_hi = starts[big], starts[big] + gaps[big]
    # the sender's gaps: between consecutive distinct publish stamps
    us = np.unique(s)
    sg = np.diff(us)
    sbig = sg > GAP_NS
    s_hi = us[1:][sbig]                 # the first publish after each gap
    gc_arr = np.asarray(gcs, np.int64).reshape(-1, 2)

    def overlaps(lo, hi, a_lo, a_hi):
        """For each message [lo, hi]: does an interval [a_lo, a_hi] overlap it?"""
        if not len(a_lo):
            return np.zeros(len(lo), bool)
        o = np.argsort(a_lo)
        a_lo, a_hi = a_lo[o], np.maximum.accumulate(a_hi[o])
        j = np.searchsorted(a_lo, hi, "right") - 1       # last interval starting before the message ended
        ok = j >= 0
        res = np.zeros(len(lo), bool)
        res[ok] = a_hi[j[ok]] >= lo[ok]
        return res
    tail = tot > TAIL_NS
    t_lo, t_hi = s[tail], a[tail]
    rxg = overlaps(t_lo, t_hi, g_lo, g_hi)
    txg = np.isin(s[tail], s_hi)                    # published right after a sender gap
    gcg = overlaps(t_lo, t_hi, gc_arr[:, 0], gc_arr[:, 1]) if len(gc_arr) else np.zeros(len(t_lo), bool)
    none = ~(rxg | txg | gcg)
    ctl_max = _control_max(st)
    print(f"TAIL over_1ms={int(tail.sum())} ({tail.mean() * 100:.2f} %) rx_gap={int(rxg.sum())} "
          f"tx_gap={int(txg.sum())} gc={int(gcg.sum())} unexplained={int(none.sum())} "
          f"control_max_us={ctl_max:.0f} (before the run {ctl0:.0f})", flush=True)
    hist = np.histogram(gaps, [0, 20e3, 50e3, 100e3, 500e3, 1e6, 2e6, 5e6, 1e12])[0]
    print("RXGAPS turns=%d  <20us %d  20-50us %d  50-100us %d  0.1-0.5ms %d  0.5-1ms %d  1-2ms %d  2-5ms %d  >5ms %d"
          % (len(gaps), *hist), flush=True)
    print("TXGAPS >0.5ms=%d max_ms=%.2f  GC n=%d max_us=%.0f total_ms=%.1f" % (
        int(sbig.sum()), (sg.max() if len(sg) else 0) / 1e6, len(gc_arr),
        (gc_arr[:, 1] - gc_arr[:, 0]).max() / 1e3 if len(gc_arr) else 0,
        (gc_arr[:, 1] - gc_arr[:, 0]).sum() / 1e6 if len(gc_arr) else 0), flush=True)
    cs = []
    for k, (v1, n1) in ctx1.items():
        v0, n0 = ctx0.get(k, (0, 0))
        cs.append(f"{k.split('/')[0]}:{v1 - v0}/{n1 - n0}")
    if ctl is not None:
        d = np.asarray([x[1] - x[0] for x in ctl if x[0] >= s[0]], np.int64)
        slow = [x for x in ctl if x[0] >= s[0] and x[1] - x[0] > GAP_NS]
        print("CONTROL calls=%d p50_us=%.0f p99_us=%.0f max_us=%.0f over_0.5ms=%d %s" % (
            len(d), np.median(d) / 1e3, np.percentile(d, 99) / 1e3, d.max() / 1e3, len(slow),
            " ".join(f"{(b - a) / 1e3:.0f}us:{w}" for a, b, w in slow[:12])), flush=True)
    print("CTXSW (voluntary/involuntary during the run) " + " ".join(cs), flush=True)
    lp0, lp1 = st0["loop"], st["loop"]
    keys = ("iterations", "wakeups", "control_calls", "app_control", "app_signals", "app_handoffs", "app_rx_dgrams", "tail_probes",
            "app_lock_waits")
    print("LOOP (during the run) " + " ".join(f"{k}={lp1[k] - lp0[k]}" for k in keys if k in lp1)
          + f" rx_dgrams={st['sock']['rx_dgrams'] - st0['sock']['rx_dgrams']}"
          + f" app_lock_wait_max_us={lp1.get('app_lock_wait_max_us', -1):.0f}"
          + f" (before the run {lp0.get('app_lock_wait_max_us', -1):.0f})", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    a = sub.add_parser("send")
    a.add_argument("rate", type=float)
    a.add_argument("seconds", type=float)
    a.add_argument("--loop-cpu", type=int, default=None, help="Config.loop_cpu (the loop thread's CPU)")
    b = sub.add_parser("recv")
    b.add_argument("seconds", type=float)
    b.add_argument("--receive-mode", choices=("wait", "spin"), default=None)
    b.add_argument("--time-control", action="store_true", help="time each control-plane call")
    b.add_argument("--loop-cpu", type=int, default=None, help="Config.loop_cpu (the loop thread's CPU)")
    for p in (a, b):
        p.add_argument("--pin", action="store_true", help="sender on the first CPU, receiver on the last")
        p.add_argument("--loop-nice", type=int, default=None, help="the loop thread's nice value")
        p.add_argument("--loop-fifo", type=int, default=0, help="the loop thread SCHED_FIFO at this priority")
    args = ap.parse_args(argv)
    (send if args.role == "send" else recv)(args)


if __name__ == "__main__":
    sys.exit(main())
