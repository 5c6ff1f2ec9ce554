"""Cost of tracing: the C data plane's receive path with tracing on vs off,
and the Parquet writer's throughput.

    python bench/bench_trace.py [--json out.json] [--rounds 9] [--writer-events 4000000]

1. Receive + deliver per message (datagrams through Node.rx_batch, 1024 at
   a time, each batch followed by Node.recv_batch, as in bench_engine.py)
   with ``node.enable_trace()`` against the same work with tracing off,
   interleaved in one process (harness.compare: medians of the fastest of
   `reps` calls per round); ratio = on / off.  Each message records two
   events (recv, deliver), plus one per gap, into the default 64 Ki-event
   buffer, drained into NumPy columns (take_trace) after every batch, as a
   writer does.  Events of consecutive ids that share everything else
   (a batch shares its time) extend one row (csrc/trace.h); the rows per
   message are reported too.
2. TraceWriter: events/s from NumPy columns (as take_trace() returns them)
   into zstd Parquet row groups on local disk, and bytes per event.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_engine import N, datagrams  # noqa: E402
from harness import compare, machine, report  # noqa: E402

from rpbcast.core.node import Node  # noqa: E402


def rx_case(buf, offs, lens, srcs, n, trace, drain=True, chunk=1024):
    """Receive the datagrams `chunk` at a time, delivering after each chunk
    (and, with drain, taking the trace columns as the writer thread would)."""
    out = bytearray(64 << 20)
    cap = (1 << 16) if drain else 4 * N + 1024       # without draining, room for the whole run
    parts = [(offs[i:i + chunk], lens[i:i + chunk], srcs[i:i + chunk]) for i in range(0, len(offs), chunk)]

    def case():
        r = Node(1, 2, 1, mtu=1472, store_bytes=1 << 29, store_entries=1 << 20)
        if trace:
            r.enable_trace(cap)
        got = events = 0
        for o, ln, sr in parts:
            r.rx_batch(buf, o, ln, sr, 0)
            while True:
                k = r.recv_batch(65536, out, 0)[0]
                if not k:
                    break
                got += k
            if drain:
                t = r.take_trace()
                if t:
                    events += int(t["count"].sum())     # a row stands for `count` ids
                    rows[0] += len(t["t_ns"])
        assert got == n
        if trace:
            assert r.counters()["trace_dropped"] == 0
            assert not drain or events >= 2 * n
            runs.append(rows[0] / n)
            rows[0] = 0
    runs = []
    rows = [0]
    case.rows_per_msg = runs
    return case


def traced_columns():
    """Event columns from a real traced receive (recv, deliver, gap)."""
    rng = np.random.default_rng(3)
    buf, offs, lens, srcs, n = datagrams(64, rng.random(N) >= 0.01)
    r = Node(1, 2, 1, mtu=1472, store_bytes=1 << 29, store_entries=1 << 20)
    r.enable_trace(4 * N)
    r.rx_batch(buf, offs, lens, srcs, 0)
    out = bytearray(64 << 20)
    while r.recv_batch(65536, out, 0)[0]:
        pass
    return r.take_trace()


def writer_throughput(events, rounds=5):
    from rpbcast.analysis.tracefile import TraceWriter
    base = traced_columns()
    reps = -(-events // len(base["t_ns"]))
    cols = {k: np.tile(v, reps)[:events] for k, v in base.items()}
    cols["t_ns"] = np.arange(events, dtype=np.int64) * 1000 + 1_000_000_000     # a realistic clock
    batch = 1 << 16                                                            # take_trace() sized batches
    rates, size = [], 0
    for _ in range(rounds):
        d = tempfile.mkdtemp(prefix="bench-trace-")
        try:
            t0 = time.perf_counter()
            w = TraceWriter(d, "bench", 1)
            for i in range(0, events, batch):
                w.add({k: v[i:i + batch] for k, v in cols.items()})
            w.close()
            dt = time.perf_counter() - t0
            rates.append(events / dt)
            size = os.path.getsize(w.path)
        finally:
            shutil.rmtree(d)
    return {"name": "TraceWriter: NumPy columns -> zstd Parquet", "events": events,
            "events_per_s": round(statistics.median(rates)), "min_events_per_s": round(min(rates)),
            "bytes_per_event": round(size / events, 2), "rounds": rounds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--writer-events", type=int, default=4_000_000)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    res = []
    for size in (64, 1024):
        for label, keep in (("in order", np.ones(N, bool)), ("1% loss", rng.random(N) >= 0.01)):
            buf, offs, lens, srcs, n = datagrams(size, keep)
            off = rx_case(buf, offs, lens, srcs, n, trace=False)
            on = rx_case(buf, offs, lens, srcs, n, True)
            res.append(compare(f"rx+deliver {size} B, {label}: trace on", on, off, n, rounds=a.rounds, reps=3))
            res[-1]["trace_rows_per_msg"] = round(statistics.median(on.rows_per_msg), 4)
    report(res, "bench_trace (receive path, tracing on vs off; baseline = tracing off)")
    w = writer_throughput(a.writer_events)
    print(f"  {w['name']:<44} {w['events_per_s']:>12,} events/s  (min {w['min_events_per_s']:,}; "
          f"{w['bytes_per_event']} B/event on disk, {w['events']:,} events x {w['rounds']})")
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "argv": sys.argv, "results": res, "writer": w}, f, indent=1)


if __name__ == "__main__":
    main()
