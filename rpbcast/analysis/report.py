"""``rpbcast analyze``: run every analysis on one run directory, write the
results as Parquet under RUN_DIR/analysis/, print a summary table, draw PNGs.

Outputs (docs/analysis.md describes every column):

  summary.json                    scalars: counts, verdict, shares, timings
  exactly_once_issues.parquet     one row per (kind, node, message id) problem
  latency.parquet                 delivery latency percentiles: all / sender / node / bucket
  latency_all_receivers.parquet   thesis §7.3 latency (last delivery - send)
  repair_latency.parquet          repair latency percentiles by source
  repair_histogram.parquet        log-binned repair latency counts by source
  load.parquet                    per-node events, retransmissions served, gossip, ...
  overhead.parquet                bytes sent per data byte by message type
  *.png                           plots (matplotlib)
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from typing import Dict, List, Optional

from rpbcast.analysis import latency, load, overhead, plots, verify
from rpbcast.analysis.data import Run, read_events
from rpbcast.analysis.messages import layout, per_message


def nice_bucket_ns(span_ns: int, target: int = 50) -> int:
    """A 1-2-5 bucket width giving about `target` buckets over span_ns."""
    raw = max(1, span_ns // max(1, target))
    e = 10 ** int(math.floor(math.log10(raw)))
    for m in (1, 2, 5, 10):
        if m * e >= raw:
            return m * e
    return 10 * e


def fmt_ns(v) -> str:
    if v is None:
        return "-"
    v = float(v)
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.2f} s"
    if a >= 1e6:
        return f"{v / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{v / 1e3:.1f} us"
    return f"{v:.0f} ns"


def _write_rows(path: str, rows: List[dict], schema=None):
    import pyarrow as pa
    import pyarrow.parquet as pq
    if schema is None and rows:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        rows = [{k: r.get(k) for k in keys} for r in rows]
    t = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(t, path)
    return t


def _write_table(path: str, table):
    import pyarrow.parquet as pq
    pq.write_table(table, path)


class Timer:
    def __init__(self, spark):
        self.sc = spark.sparkContext
        self.phases: Dict[str, float] = {}
        self._t = None
        self._name = None

    def __call__(self, name):
        self._name = name
        return self

    def __enter__(self):
        self.sc.setJobDescription(self._name)
        self._t = time.perf_counter()
        return self

    def __exit__(self, *a):
        self.phases[self._name] = round(time.perf_counter() - self._t, 3)
        self.sc.setJobDescription(None)


def analyze(spark, run_dir: str, out_dir: Optional[str] = None, bucket_s: Optional[float] = None,
            bits: int = 8, make_plots: bool = True, max_list: int = 20, out=None,
            quiet: bool = False) -> dict:
    """Analyse one run; returns the summary dict (also written as summary.json)."""
    out = out or sys.stdout
    from pyspark import StorageLevel

    t_start = time.perf_counter()
    run = Run(run_dir)
    out_dir = out_dir or os.path.join(run.dir, "analysis")
    os.makedirs(out_dir, exist_ok=True)
    timer = Timer(spark)
    ev = read_events(spark, run)
    counters = run.counters()

    with timer("event counts per node"):
        counts = load.event_counts(ev)
    _write_table(os.path.join(out_dir, "event_counts.parquet"), counts)
    crow = counts.to_pylist()
    events_total = sum(int(r["events"]) for r in crow)
    n_sends = sum(int(r["events"]) for r in crow if r["event"] == "send")
    n_gap_ids = sum(int(r["size_sum"] or 0) for r in crow if r["event"] == "gap")
    data_bytes = sum(int(r["size_sum"] or 0) for r in crow if r["event"] == "send")
    lay = layout(run, {int(r["node"]) for r in crow})

    has_lost = any(r["event"] == "lost" for r in crow)
    m = per_message(spark, ev, run, lay, has_lost).persist(StorageLevel.MEMORY_AND_DISK)
    ma = verify.annotate(m, lay)       # cheap bit arithmetic on the cached table
    try:
        with timer("per-message table + exactly-once summary"):
            s = ma.agg(*verify.summary_columns()).collect()[0].asDict()
        s = {k: (int(v) if v is not None else None) for k, v in s.items()}
        s["data_bytes"] = data_bytes          # payload bytes published (send sizes)

        issues_path = os.path.join(out_dir, "exactly_once_issues.parquet")
        examples: Dict[str, list] = {}
        with timer("exactly-once issues"):
            if os.path.isdir(issues_path):
                shutil.rmtree(issues_path)
            elif os.path.exists(issues_path):
                os.remove(issues_path)
            per_kind = {k: 0 for k in verify.KINDS}
            if any(s[k] for k in ("missing", "lost", "extra_deliveries", "unsent", "send_duplicated", "outside")):
                verify.issues(spark, ma, ev, lay, s).write.mode("overwrite").parquet(issues_path)
                wi = spark.read.parquet(issues_path)
                for r in wi.groupBy("kind").count().collect():
                    per_kind[r["kind"]] = int(r["count"])
                for kind in verify.KINDS:
                    if per_kind[kind]:
                        rows = (wi.where(wi.kind == kind).orderBy("node", "sender", "inc", "seq")
                                .limit(max_list).collect())
                        examples[kind] = [r.asDict() for r in rows]
            else:
                import pyarrow as pa
                _write_rows(issues_path, [], pa.schema([("kind", pa.string()), ("node", pa.int64()),
                                                        ("sender", pa.int64()), ("inc", pa.int64()),
                                                        ("seq", pa.int64()), ("count", pa.int64())]))
        # (node, id) pairs per kind, from the issue rows
        s.update({"missing": per_kind["missing"], "lost": per_kind["lost"], "duplicate": per_kind["duplicate"],
                  "unsent": per_kind["unsent"], "outside": per_kind["outside"],
                  "send_duplicated": per_kind["send_duplicated"]})

        with timer("all-receivers latency"):
            allrecv, allrecv_hist = latency.all_receivers(ma, bits)
    finally:
        m.unpersist()
    _write_table(os.path.join(out_dir, "latency_all_receivers.parquet"), allrecv)
    _write_table(os.path.join(out_dir, "latency_all_receivers_histogram.parquet"), allrecv_hist)

    t0 = s["t_first_send"] or 0
    span = max(0, (s["t_last_send"] or 0) - t0)
    bucket_ns = int(bucket_s * 1e9) if bucket_s else nice_bucket_ns(span)
    with timer("delivery latency"):
        lat, lat_hist = latency.delivery(ev, t0, bucket_ns, n_sends, s["send_duplicated"] > 0, bits)
    lat_rows = lat.to_pylist()
    for r in lat_rows:
        r["bucket_start_s"] = r["key"] * bucket_ns / 1e9 if r["by"] == "bucket" else None
    _write_rows(os.path.join(out_dir, "latency.parquet"), lat_rows)
    _write_table(os.path.join(out_dir, "latency_histogram.parquet"), lat_hist)

    with timer("repair latency"):
        rep, rep_hist, rep_counts = latency.repair(ev, n_gap_ids, bits)
    cnt = {r["source"]: r for r in rep_counts.to_pylist()}
    tot = {k: sum(r[k] for r in cnt.values()) for k in ("gaps", "delivered", "arrived")}
    rep_rows = []
    for r in rep.to_pylist():
        c = tot if r["by"] == "all" else cnt.get(r["key"], {})
        rep_rows.append(dict(r, key=r["key"] or "all", gaps=c.get("gaps", 0), delivered=c.get("delivered", 0),
                             arrived=c.get("arrived", 0)))
    for src, c in cnt.items():          # sources with gaps but no delivery at all (e.g. at loggers)
        if not any(r["key"] == src for r in rep_rows):
            rep_rows.append({"by": "source", "key": src, "n": 0, **{k: c[k] for k in ("gaps", "delivered",
                                                                                         "arrived")}})
    _write_rows(os.path.join(out_dir, "repair_latency.parquet"), rep_rows)
    _write_table(os.path.join(out_dir, "repair_histogram.parquet"), rep_hist)

    nodes = load.per_node(counts, run.roles, counters)
    _write_rows(os.path.join(out_dir, "load.parquet"), nodes)
    sh = load.shares(nodes)
    ovh = overhead.per_type(counters, s["data_bytes"], s["messages_sent"])
    _write_rows(os.path.join(out_dir, "overhead.parquet"), ovh)

    trace_dropped = sum(int(c.get("trace_dropped", 0) or 0) for c in counters.values())
    # Expected receivers that delivered nothing at all: a crashed node, or a
    # node that is no receiver (a pure publisher) and run.json does not say so.
    delivered_at = {d["node"] for d in nodes if d["delivered"]}
    explicit, members = run.receivers()
    expected_nodes = {n for rows in explicit.values() for n, _, _ in rows} | \
        {m for m in members if any(x != m for x in run.senders) or not run.senders}
    silent = sorted(n for n in expected_nodes if n not in delivered_at) if s["missing"] else []
    wall = time.perf_counter() - t_start
    summary = {
        "run_id": run.run_id, "run_dir": run.dir, "kind": run.meta.get("kind"),
        "protocol": run.meta.get("protocol"), "clock": run.meta.get("clock"),
        "params": run.params, "nodes": len(run.nodes), "loggers": run.loggers, "senders": run.senders,
        "events": events_total, "exactly_once": verify.verdict(s), **s,
        "bucket_ns": bucket_ns, "histogram_bits": bits, "trace_dropped": trace_dropped,
        "load": sh,
        "non_repair_overhead_per_data_byte": next(r["bytes_per_data_byte"] for r in ovh if r["type"] == "non_repair"),
        "silent_receivers": silent, "examples": examples, "wall_s": round(wall, 3),
        "events_per_s": round(events_total / wall) if wall else None,
        "phases_s": timer.phases, "spark_master": spark.sparkContext.master,
    }
    dl_rows = [r for r in lat_rows if r["what"] == "deliver"]
    rx_rows = [r for r in lat_rows if r["what"] == "receive"]
    summary["latency"] = {r["by"] if r["by"] == "all" else f"{r['by']}={r['key']}":
                          {k: r[k] for k in ("n", "mean", "p50", "p90", "p99", "p99_9", "max")}
                          for r in dl_rows if r["by"] in ("all", "sender", "node")}
    summary["receive_latency"] = {r["by"] if r["by"] == "all" else f"{r['by']}={r['key']}":
                                  {k: r[k] for k in ("n", "mean", "p50", "p90", "p99", "p99_9", "max")}
                                  for r in rx_rows if r["by"] in ("all", "node")}
    summary["receive_before_send"] = before_send(lat_hist)
    summary["untraced_nodes"] = [{"node": d["node"], "role": d["role"], "source": d["source"]}
                                 for d in nodes if d["source"] != "trace"]
    summary["roles"] = {str(k): v for k, v in run.roles.items()}
    summary["latency_all_receivers"] = next((r for r in allrecv.to_pylist() if r["by"] == "all"), None)
    summary["repair_latency"] = {r["key"]: {k: r.get(k) for k in ("gaps", "delivered", "p50", "p99", "max")}
                                 for r in rep_rows}

    pngs = []
    if make_plots and plots.available():
        title = f"run {run.run_id} ({run.meta.get('protocol', '?')}, {run.meta.get('kind', '?')})"
        for p in (plots.latency_over_time(dl_rows, os.path.join(out_dir, "latency_over_time.png"), title, rx_rows),
                  plots.latency_by(dl_rows, os.path.join(out_dir, "latency_by_sender_receiver.png"), title),
                  plots.repair_histogram(rep_hist.to_pylist(), os.path.join(out_dir, "repair_latency.png"), title),
                  plots.retransmission_load(nodes, os.path.join(out_dir, "retransmission_load.png"), title),
                  plots.overhead(ovh, os.path.join(out_dir, "overhead.png"), title)):
            if p:
                pngs.append(os.path.basename(p))
    summary["plots"] = pngs
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    if not quiet:
        print_summary(summary, lat_rows, allrecv.to_pylist(), rep_rows, nodes, ovh, out_dir, out)
    return summary


def before_send(lat_hist) -> dict:
    """First receipts stamped before their send (receive latency < 0): the
    clocks of the nodes disagree -- on one host, an I/O loop that stamped a
    batch with a clock reading taken before it (csrc/loop.c, fixed) --
    counted from the 'receive' histogram over all nodes."""
    n = neg = 0
    worst = None
    for r in lat_hist.to_pylist():
        if r.get("what") != "receive" or r["by"] != "all":
            continue
        n += int(r["n"])
        if r["vmax"] is not None and r["vmax"] < 0:
            neg += int(r["n"])
            worst = r["vmin"] if worst is None else min(worst, r["vmin"])
    return {"n": neg, "share": neg / n if n else 0.0, "worst_ns": worst}


def _table(headers, rows, out):
    w = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    print("  " + "  ".join(str(h).rjust(w[i]) for i, h in enumerate(headers)), file=out)
    for r in rows:
        print("  " + "  ".join(str(c).rjust(w[i]) for i, c in enumerate(r)), file=out)


def print_summary(s, lat_rows, allrecv, rep, nodes, ovh, out_dir, out=None):
    out = out or sys.stdout
    p = lambda *a: print(*a, file=out)       # noqa: E731
    p(f"run {s['run_id']}  ({s['kind']}, {s['protocol']}, clock {s['clock']})  "
      f"{s['nodes']} nodes, loggers {s['loggers']}, senders {s['senders']}")
    p(f"{s['events']:,} events analysed in {s['wall_s']:.1f} s ({s['events_per_s']:,} events/s) "
      f"on {s['spark_master']}")
    if s["trace_dropped"]:
        p(f"WARNING: {s['trace_dropped']:,} events were dropped by full trace buffers: "
          "the verification below is incomplete")
    for u in s.get("untraced_nodes") or []:
        p(f"NOTE: node {u['node']} ({u['role']}) wrote no trace: "
          + ("its rows below come from its final counters (counters/node=" + str(u["node"]) + ".json)"
             if u["source"] == "counters" else "and left no counters: it shows as zeros"))
    bs = s.get("receive_before_send") or {}
    if bs.get("n"):
        p(f"WARNING: {bs['n']:,} first receipts ({bs['share']:.1%}) are stamped before their send, by up to "
          f"{fmt_ns(-bs['worst_ns'])}: the nodes' clocks disagree (traces written before the receive-clock "
          "fix in csrc/loop.c, or nodes on different hosts); receive latency below is not trustworthy")
    if s.get("silent_receivers"):
        p(f"NOTE: node(s) {s['silent_receivers']} delivered nothing at all.  If they are not receivers (pure "
          "publishers), list the receivers in run.json's members_at_send (docs/traces.md).")
    p("")
    ok = "OK" if s["exactly_once"] else "VIOLATED"
    p(f"exactly-once: {ok}  -- {s['messages_sent']:,} messages sent, {s['expected_deliveries']:,} deliveries "
      f"expected, {s['deliveries']:,} delivered")
    _table(["missing", "duplicate", "extra dlv", "unsent", "sent twice", "lost (recorded)", "outside members"],
           [[f"{s[k]:,}" for k in ("missing", "duplicate", "extra_deliveries", "unsent", "send_duplicated", "lost",
                                    "outside")]], out)
    for kind, rows in s["examples"].items():
        n = {"missing": s["missing"], "duplicate": s["duplicate"], "unsent": s["unsent"],
             "send_duplicated": s["send_duplicated"], "lost": s["lost"], "outside": s["outside"]}[kind]
        p(f"  {kind} (first {len(rows)} of {n:,}): " + ", ".join(
            f"node {r['node']} <- ({r['sender']},{r['inc']},{r['seq']})" + (f" x{r['count']}" if r["count"] else "")
            for r in rows))
    p("")
    p("delivery latency (deliver - send)")
    hdr = ["", "n", "mean", "p50", "p90", "p99", "p99.9", "max"]

    def lrow(label, r):
        return [label, f"{r['n']:,}", fmt_ns(r["mean"]), fmt_ns(r["p50"]), fmt_ns(r["p90"]), fmt_ns(r["p99"]),
                fmt_ns(r["p99_9"]), fmt_ns(r["max"])]

    dl = [r for r in lat_rows if r["what"] == "deliver"]
    rx = [r for r in lat_rows if r["what"] == "receive"]
    rows = [lrow("all", r) for r in dl if r["by"] == "all"]
    rows += [lrow(f"sender {r['key']}", r) for r in dl if r["by"] == "sender"]
    roles = {int(k): v for k, v in (s.get("roles") or {}).items()}
    traced = {d["node"] for d in nodes if d["source"] == "trace"}

    def who(kind, n):
        return f"{kind} {n}" + (" (logger)" if roles.get(int(n)) == "logger" else "")

    def absent(label, why):
        return [label, "-", why] + ["-"] * (len(hdr) - 3)

    rows += [lrow(who("receiver", r["key"]), r) for r in dl if r["by"] == "node"]
    shown = {int(r["key"]) for r in dl if r["by"] == "node"}
    rows += [absent(who("node", n), "no trace" if n not in traced else "delivers nothing" if roles.get(n) == "logger"
                    else "delivered nothing") for n in sorted(roles) if n not in shown and n not in s["senders"]]
    rows += [lrow("all receivers", r) for r in allrecv if r["by"] == "all"]
    _table(hdr, rows, out)
    nb = sum(1 for r in dl if r["by"] == "bucket")
    p(f"  (over time: {nb} buckets of {fmt_ns(s['bucket_ns'])} in latency.parquet)")
    p("receive latency (first recv - send: network and repairs, before any wait to deliver)")
    rows = [lrow("all", r) for r in rx if r["by"] == "all"]
    rows += [lrow(who("node", r["key"]), r) for r in rx if r["by"] == "node"]
    shown = {int(r["key"]) for r in rx if r["by"] == "node"}
    rows += [absent(who("node", n), "no trace" if n not in traced else "received nothing")
             for n in sorted(roles) if n not in shown and n not in s["senders"]]
    _table(hdr, rows, out)
    p("")
    p("repair latency (deliver - gap detected), by how the id came")
    _table(["source", "gaps", "delivered", "p50", "p90", "p99", "p99.9", "max"],
           [[r["key"], f"{r['gaps']:,}", f"{r['delivered']:,}", fmt_ns(r.get("p50")), fmt_ns(r.get("p90")),
             fmt_ns(r.get("p99")), fmt_ns(r.get("p99_9")), fmt_ns(r.get("max"))] for r in rep], out)
    p("")
    sh = s["load"]
    p(f"retransmissions: {sh['rtx_served']:,} served; by logger nodes {sh['served_by_logger_role']:.1%}, "
      f"flagged as logger {sh['served_as_logger']:.1%}; repairs received from loggers "
      f"{sh['received_from_logger']:.1%} of {sh['repairs_received']:,}")
    _table(["node", "role", "from", "events", "sent", "delivered", "gap ids", "served", "as logger", "gossip out",
            "gossip B out", "rtx req"],
           [[d["node"], d["role"], d["source"], f"{d['events']:,}", f"{d['sent']:,}", f"{d['delivered']:,}",
             d["gap_ids"], d["rtx_served"], d["served_as_logger"], d["gossip_out"], f"{d['gossip_out_bytes']:,}",
             d["rtx_req"]] for d in nodes], out)
    p("")
    p("overhead: bytes sent per data byte, by message type (traffic counters)")
    _table(["type", "msgs out", "bytes out", "B / data B", "msgs / data msg"],
           [[r["type"], f"{r['msgs_out']:,}", f"{r['bytes_out']:,}",
             "-" if r["bytes_per_data_byte"] is None else f"{r['bytes_per_data_byte']:.4f}",
             "-" if r["msgs_per_data_msg"] is None else f"{r['msgs_per_data_msg']:.4f}"] for r in ovh], out)
    p("")
    p("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in s["phases_s"].items()))
    p(f"results: {out_dir}/ ({', '.join(s['plots']) or 'no plots'})")


def compare(summaries: List[dict], xkey: Optional[str], out_dir: str, out=None) -> List[dict]:
    """Several runs: non-repair overhead (and latency, load) against a run
    parameter -- thesis Figs. 7-6 / 7-7 from real runs."""
    out = out or sys.stdout
    if not xkey:
        keys = set.union(*(set(s["params"]) for s in summaries)) if summaries else set()
        varying = [k for k in sorted(keys) if len({json.dumps(s["params"].get(k), default=str)
                                                    for s in summaries}) > 1]
        xkey = varying[0] if varying else None
    pts = []
    for s in summaries:
        x = s["params"].get(xkey) if xkey else None
        pts.append({"run_id": s["run_id"], "protocol": s.get("protocol") or "?", "x": x,
                    "non_repair_per_data_byte": s["non_repair_overhead_per_data_byte"],
                    "p50_ns": (s["latency"].get("all") or {}).get("p50"),
                    "p99_ns": (s["latency"].get("all") or {}).get("p99"),
                    "logger_share": s["load"]["served_by_logger_role"], "exactly_once": s["exactly_once"]})
    os.makedirs(out_dir, exist_ok=True)
    _write_rows(os.path.join(out_dir, "compare.parquet"),
                [dict(p, x=None if p["x"] is None else str(p["x"])) for p in pts])
    print(f"runs compared against {xkey or '(no varying parameter)'}", file=out)
    _table(["run", "protocol", xkey or "x", "overhead B/B", "p50", "p99", "logger share", "exactly-once"],
           [[p["run_id"], p["protocol"], p["x"], f"{p['non_repair_per_data_byte'] or 0:.4f}", fmt_ns(p["p50_ns"]),
             fmt_ns(p["p99_ns"]), f"{p['logger_share']:.1%}", "OK" if p["exactly_once"] else "VIOLATED"]
            for p in pts], out)
    if xkey and plots.available() and all(isinstance(p["x"], (int, float)) for p in pts):
        plots.overhead_vs(pts, xkey, os.path.join(out_dir, f"overhead_vs_{xkey}.png"), "non-repair overhead")
    return pts


def stage_times(event_log_dir: str) -> List[dict]:
    """Per-stage wall time and task metrics from a Spark event log (written
    with --profile): job description, stage name, tasks, seconds, executor
    run time, input records, shuffle bytes written/read."""
    import glob
    files = sorted((p for p in glob.glob(os.path.join(event_log_dir, "*")) if os.path.isfile(p)
                    and not p.endswith((".zstd", ".lz4", ".snappy", ".lzf", ".crc"))), key=os.path.getmtime)
    if not files:
        return []
    stage_job, out = {}, []
    with open(files[-1]) as f:
        for line in f:
            e = json.loads(line)
            ev = e.get("Event")
            if ev == "SparkListenerJobStart":
                d = (e.get("Properties") or {}).get("spark.job.description") or f"job {e['Job ID']}"
                for sid in e.get("Stage IDs", []):
                    stage_job[sid] = d
            elif ev == "SparkListenerStageCompleted":
                si = e["Stage Info"]
                acc = {a.get("Name"): a.get("Value") for a in si.get("Accumulables", [])}

                def g(k):
                    try:
                        return int(acc.get(k) or 0)
                    except (TypeError, ValueError):
                        return 0

                if si.get("Submission Time") is None or si.get("Completion Time") is None:
                    continue
                out.append({
                    "stage": si["Stage ID"], "job": stage_job.get(si["Stage ID"], "?"),
                    "name": si.get("Stage Name", "").split(" at ")[0], "tasks": si.get("Number of Tasks"),
                    "seconds": (si["Completion Time"] - si["Submission Time"]) / 1000.0,
                    "executor_run_s": g("internal.metrics.executorRunTime") / 1000.0,
                    "input_records": g("internal.metrics.input.recordsRead"),
                    "shuffle_write_bytes": g("internal.metrics.shuffle.write.bytesWritten"),
                    "shuffle_read_records": g("internal.metrics.shuffle.read.recordsRead"),
                    "spill_bytes": g("internal.metrics.diskBytesSpilled"),
                })
    return out
