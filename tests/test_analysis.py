"""Trace analysis on Spark (rpbcast.analysis): exactly-once verification,
latency, repair, load and overhead figures checked against values computed
by hand (NumPy) from the same generated traces; ``rpbcast sweep``; the
message when the 'spark' extra is missing.

Spark runs in local mode (local[2]) in one session shared by the module."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rpbcast.analysis import session as spark_session
from rpbcast.analysis import sweep

from rpbcast.analysis import hist, report, synth, verify
from rpbcast.analysis.data import Run, read_events
from rpbcast.analysis.messages import layout, per_message
from rpbcast.analysis.tracefile import EVENT_CODES

HERE = os.path.dirname(os.path.abspath(__file__))

SEND, DELIVER, GAP, RECV, RTX = (EVENT_CODES[e] for e in ("send", "deliver", "gap", "recv", "rtx_served"))


def read_parquet(path):
    import pyarrow.parquet as pq
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="needs the 'spark' extra: pip install 'rpbcast[spark]'")
    pytest.importorskip("pyarrow")
    s = spark_session.get_session("local[2]", app="rpbcast tests", driver_memory="1g",
                                  conf={"spark.sql.shuffle.partitions": "4"})
    yield s
    s.stop()


PARAMS = dict(nodes=6, loggers=1, senders=3, msgs_per_sender=400, rate=2000.0, size=200, loss=0.03,
              logger_share=0.3, gossip_interval=0.05, seed=3)


@pytest.fixture(scope="module")
def base():
    """A clean synthetic run in memory: (meta, {node: columns}, counters)."""
    pytest.importorskip("pyarrow")
    return synth.generate(synth.Params(**PARAMS))


def write(tmp_path, base, edit=None, meta_edit=None):
    meta, cols, counters = base
    meta = json.loads(json.dumps(meta))
    cols = {n: {k: v.copy() for k, v in c.items()} for n, c in cols.items()}
    if edit:
        edit(cols)
    if meta_edit:
        meta_edit(meta)
    d = str(tmp_path)
    synth.write(d, meta, cols, counters)
    return d


def verify_only(spark, run_dir):
    """(sorted issue tuples, summary dict) -- the verifier alone."""
    run = Run(run_dir)
    ev = read_events(spark, run)
    lay = layout(run, [int(p.split("node=")[1].split("/")[0]) for p in run.trace_files()])
    ma = verify.annotate(per_message(spark, ev, run, lay), lay).cache()
    s = ma.agg(*verify.summary_columns()).collect()[0].asDict()
    rows = sorted(tuple(r) for r in verify.issues(spark, ma, ev, lay, s).collect())
    ma.unpersist()
    return rows, s


def find(c, event, sender, seq):
    k = np.flatnonzero((c["event"] == event) & (c["sender"] == sender) & (c["seq"] == seq))
    assert len(k) == 1
    return int(k[0])


def drop_row(c, i):
    for k in c:
        c[k] = np.delete(c[k], i)


def add_row(c, **vals):
    for k in c:
        c[k] = np.append(c[k], np.array([vals.get(k, 0)], c[k].dtype))


# -- hand-computed reference values -------------------------------------------------

def sends(cols):
    t = {}
    for c in cols.values():
        k = c["event"] == SEND
        for s, q, ts in zip(c["sender"][k], c["seq"][k], c["t_ns"][k]):
            t[(int(s), int(q))] = int(ts)
    return t


def deliveries(cols):
    """[(node, sender, seq, t_send, latency)] of every deliver event."""
    ts = sends(cols)
    out = []
    for n, c in cols.items():
        k = c["event"] == DELIVER
        for s, q, t in zip(c["sender"][k], c["seq"][k], c["t_ns"][k]):
            t0 = ts[(int(s), int(q))]
            out.append((n, int(s), int(q), t0, int(t) - t0))
    return out


def check_quantiles(row, values):
    values = np.asarray(values)
    assert row["n"] == len(values)
    assert row["min"] == values.min() and row["max"] == values.max()
    assert row["mean"] == pytest.approx(values.mean(), rel=1e-9)
    present = set(values.tolist())
    for q, nm in zip(hist.QUANTILES, hist.QNAMES):
        exact = int(np.quantile(values, q, method="inverted_cdf"))
        got = row[nm]
        # an observed value, >= the exact quantile, within one bin (2^-7 relative)
        assert got in present
        assert exact <= got <= exact + abs(exact) / 2 ** (hist.DEFAULT_BITS - 1), (row["by"], row["key"], nm)


# -- settings -------------------------------------------------------------------------

def test_settings_local_and_cluster():
    c = spark_session.settings("local[2]")
    assert c["spark.master"] == "local[2]"
    assert c["spark.ui.enabled"] == "false"
    assert c["spark.driver.host"] == "127.0.0.1"
    assert int(c["spark.sql.shuffle.partitions"]) <= 16
    assert "spark.jars.packages" not in spark_session.settings("local[2]", conf={"spark.jars.packages": "x:y:1"})
    cl = spark_session.settings("spark://somewhere:7077")
    assert "spark.driver.host" not in cl and "spark.sql.shuffle.partitions" not in cl
    assert spark_session.parse_conf(["a.b=1", "c = x=y"]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(ValueError):
        spark_session.parse_conf(["nonsense"])


def test_session_runs_offline_on_loopback_with_this_interpreter(spark):
    sc = spark.sparkContext
    assert sc.master == "local[2]"
    assert sc.getConf().get("spark.ui.enabled") == "false"
    assert sc.uiWebUrl is None
    assert sc.getConf().get("spark.jars.packages") is None
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    # a Python worker really runs this interpreter
    assert sc.parallelize([0], 1).map(lambda _: sys.executable).collect() == [sys.executable]


def test_histogram_bins_are_exact_below_2_to_bits_and_narrow_above(spark):
    vals = [0, 1, 255, 256, 257, 511, 512, 1023, 1024, 1025, (1 << 20) - 1, 1 << 20, (1 << 40) + 12345,
            (1 << 62) - 1, -1, -300, -(1 << 30)]
    df = spark.createDataFrame([(v,) for v in vals], "v long")
    got = [r[0] for r in df.selectExpr(hist.bin_expr("v", 8)).collect()]
    for v, lo in zip(vals, got):
        a, b = abs(v), abs(lo)
        if a < 256:
            assert lo == v
        else:
            assert (lo < 0) == (v < 0)
            assert b <= a < b + max(1, b >> 7), (v, lo)
            assert bin(b).rstrip("0").__len__() - 2 <= 8       # at most 8 significant bits


# -- a clean run through the whole analysis -------------------------------------------------

@pytest.fixture(scope="module")
def clean(spark, base, tmp_path_factory):
    d = write(tmp_path_factory.mktemp("clean"), base)
    s = report.analyze(spark, d, bucket_s=0.05, make_plots=True, quiet=True)
    return d, s


def out(d, name):
    return read_parquet(os.path.join(d, "analysis", name))


def test_clean_run_is_exactly_once_with_the_right_counts(clean, base):
    d, s = clean
    meta, cols, _ = base
    members = [n["id"] for n in meta["nodes"] if n["role"] == "member"]
    n_msgs = PARAMS["senders"] * PARAMS["msgs_per_sender"]
    assert s["exactly_once"] is True
    assert s["messages_sent"] == n_msgs
    assert s["expected_deliveries"] == n_msgs * (len(members) - 1) == s["deliveries"]
    assert s["missing"] == s["duplicate"] == s["unsent"] == s["lost"] == s["outside"] == 0
    assert s["events"] == sum(len(c["t_ns"]) for c in cols.values())
    assert s["data_bytes"] == n_msgs * PARAMS["size"]
    assert out(d, "exactly_once_issues.parquet") == []
    for png in ("latency_over_time.png", "latency_by_sender_receiver.png", "repair_latency.png",
                "retransmission_load.png", "overhead.png"):
        with open(os.path.join(d, "analysis", png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(d, "analysis", "summary.json")) as f:
        assert json.load(f)["messages_sent"] == n_msgs


def test_delivery_latency_percentiles_match_numpy(clean, base):
    d, _ = clean
    dl = deliveries(base[1])
    rows = out(d, "latency.parquet")
    by = {(r["by"], r["key"]): r for r in rows if r["what"] == "deliver"}
    check_quantiles(by[("all", None)], [x[4] for x in dl])
    senders = sorted({x[1] for x in dl})
    nodes = sorted({x[0] for x in dl})
    assert sorted(k for b, k in by if b == "sender") == senders
    assert sorted(k for b, k in by if b == "node") == nodes
    for s in senders:
        check_quantiles(by[("sender", s)], [x[4] for x in dl if x[1] == s])
    for n in nodes:
        check_quantiles(by[("node", n)], [x[4] for x in dl if x[0] == n])


def test_receive_latency_is_first_receipt_minus_send(clean, base):
    d, _ = clean
    ts = sends(base[1])
    rx = []
    for n, c in base[1].items():
        k = c["event"] == RECV
        rx += [(n, int(t) - ts[(int(s), int(q))]) for s, q, t in zip(c["sender"][k], c["seq"][k], c["t_ns"][k])]
    by = {(r["by"], r["key"]): r for r in out(d, "latency.parquet") if r["what"] == "receive"}
    check_quantiles(by[("all", None)], [x[1] for x in rx])
    for n in (1, 6):                       # a member and the logger (loggers receive, never deliver)
        check_quantiles(by[("node", n)], [x[1] for x in rx if x[0] == n])


def test_latency_over_time_buckets_match_numpy(clean, base):
    d, s = clean
    dl = deliveries(base[1])
    assert s["bucket_ns"] == 50_000_000
    t0 = min(sends(base[1]).values())
    b = np.array([(x[3] - t0) // s["bucket_ns"] for x in dl])
    lat = np.array([x[4] for x in dl])
    rows = {r["key"]: r for r in out(d, "latency.parquet") if r["by"] == "bucket" and r["what"] == "deliver"}
    assert sorted(rows) == sorted(set(b.tolist()))
    for k, r in rows.items():
        check_quantiles(r, lat[b == k])
        assert r["bucket_start_s"] == pytest.approx(k * 0.05)


def test_all_receivers_latency_is_last_delivery_minus_send(clean, base):
    d, _ = clean
    last = {}
    for n, s, q, t0, lat in deliveries(base[1]):
        last[(s, q)] = max(last.get((s, q), lat), lat)
    rows = {(r["by"], r["key"]): r for r in out(d, "latency_all_receivers.parquet")}
    check_quantiles(rows[("all", None)], list(last.values()))
    check_quantiles(rows[("sender", 2)], [v for (s, q), v in last.items() if s == 2])


def test_repair_latency_matches_gap_to_deliver_by_source(clean, base):
    d, _ = clean
    cols = base[1]
    by_src = {"peer": [], "logger": []}
    gaps = {"peer": 0, "logger": 0}
    for n, c in cols.items():
        k = c["event"] == DELIVER
        dl = {(int(s), int(q)): int(t) for s, q, t in zip(c["sender"][k], c["seq"][k], c["t_ns"][k])}
        rk = (c["event"] == RECV) & ((c["aux"] & 2) != 0)
        src = {(int(s), int(q)): ("logger" if a & 4 else "peer") for s, q, a in
               zip(c["sender"][rk], c["seq"][rk], c["aux"][rk])}
        g = c["event"] == GAP
        for s, q, t in zip(c["sender"][g], c["seq"][g], c["t_ns"][g]):
            key = (int(s), int(q))
            gaps[src[key]] += 1
            if key in dl:
                by_src[src[key]].append(dl[key] - int(t))
    rows = {r["key"]: r for r in out(d, "repair_latency.parquet")}
    assert by_src["logger"] and by_src["peer"]
    for src in ("peer", "logger"):
        assert rows[src]["gaps"] == gaps[src]
        assert rows[src]["delivered"] == len(by_src[src])
        check_quantiles(rows[src], by_src[src])
    check_quantiles(rows["all"], by_src["peer"] + by_src["logger"])


def test_retransmission_load_and_logger_share(clean, base):
    d, s = clean
    meta, cols, _ = base
    loggers = {n["id"] for n in meta["nodes"] if n["role"] == "logger"}
    served = {n: int((c["event"] == RTX).sum()) for n, c in cols.items()}
    as_logger = {n: int(((c["event"] == RTX) & (c["aux"] == 1)).sum()) for n, c in cols.items()}
    total = sum(served.values())
    rows = {r["node"]: r for r in out(d, "load.parquet")}
    for n in cols:
        assert rows[n]["rtx_served"] == served[n]
        assert rows[n]["served_as_logger"] == as_logger[n]
        assert rows[n]["role"] == ("logger" if n in loggers else "member")
    share = sum(served[n] for n in loggers) / total
    assert 0.15 < share < 0.5                      # the generator's logger_share = 0.3 of member repairs
    assert s["load"]["served_by_logger_role"] == pytest.approx(share)
    assert s["load"]["served_as_logger"] == pytest.approx(share)
    assert s["load"]["rtx_served"] == total


def test_overhead_per_data_byte_by_message_type(clean, base):
    d, s = clean
    counters = base[2]
    data_bytes = PARAMS["senders"] * PARAMS["msgs_per_sender"] * PARAMS["size"]
    bo = {}
    for c in counters.values():
        for typ, v in c["traffic"].items():
            bo[typ] = bo.get(typ, 0) + v[3]
    rows = {r["type"]: r for r in out(d, "overhead.parquet")}
    for typ in ("data", "gossip", "repair", "rtx"):
        assert rows[typ]["bytes_out"] == bo[typ]
        assert rows[typ]["bytes_per_data_byte"] == pytest.approx(bo[typ] / data_bytes)
    assert rows["data"]["bytes_per_data_byte"] == pytest.approx((PARAMS["size"] + synth.HDR) / PARAMS["size"])
    assert rows["non_repair"]["bytes_out"] == bo["gossip"] + bo["rtx"]
    assert s["non_repair_overhead_per_data_byte"] == pytest.approx((bo["gossip"] + bo["rtx"]) / data_bytes)


def test_several_runs_compare_overhead_against_the_varying_parameter(clean, tmp_path, capsys):
    """Thesis Figs. 7-6/7-7 from several runs: one point per run against the
    run parameter that varies."""
    _, s = clean
    other = json.loads(json.dumps(s))
    other.update(run_id="other", non_repair_overhead_per_data_byte=0.5)
    other["params"]["loss"] = 0.05
    pts = report.compare([s, other], None, str(tmp_path))
    assert [(p["x"], p["non_repair_per_data_byte"]) for p in pts] == \
        [(PARAMS["loss"], s["non_repair_overhead_per_data_byte"]), (0.05, 0.5)]
    assert "runs compared against loss" in capsys.readouterr().out
    assert len(read_parquet(os.path.join(tmp_path, "compare.parquet"))) == 2
    assert os.path.getsize(os.path.join(tmp_path, "overhead_vs_loss.png")) > 1000


# -- the verifier on broken traces ------------------------------------------------

def test_removed_delivery_is_reported_as_missing_with_its_ids(spark, base, tmp_path):
    d = write(tmp_path, base, edit=lambda cols: drop_row(cols[4], find(cols[4], DELIVER, 2, 17)))
    rows, s = verify_only(spark, d)
    assert rows == [("missing", 4, 2, 1, 17, 0)]
    assert s["missing"] == 1 and s["deliveries"] == s["expected_deliveries"] - 1
    assert not verify.verdict(s)


def test_duplicated_delivery_is_reported_with_its_ids(spark, base, tmp_path):
    def edit(cols):
        c = cols[5]
        i = find(c, DELIVER, 1, 100)
        add_row(c, **dict({k: c[k][i] for k in c}, t_ns=c["t_ns"][i] + 5000))
    rows, s = verify_only(spark, write(tmp_path, base, edit=edit))
    assert rows == [("duplicate", 5, 1, 1, 100, 2)]
    assert s["ids_with_extra_deliveries"] == 1 and s["extra_deliveries"] == 1 and s["missing"] == 0
    assert not verify.verdict(s)


def test_ids_recorded_lost_are_reported_separately(spark, base, tmp_path):
    def edit(cols):
        c = cols[4]
        drop_row(c, find(c, DELIVER, 3, 50))
        add_row(c, t_ns=c["t_ns"].max() + 1, event=EVENT_CODES["lost"], sender=3, inc=1, seq=49, size=3, aux=0)
    rows, s = verify_only(spark, write(tmp_path, base, edit=edit))
    assert rows == [("lost", 4, 3, 1, 50, 0)]
    assert s["lost"] == 1 and s["missing"] == 0
    assert verify.verdict(s)


def test_unsent_and_membership_ranges(spark, base, tmp_path):
    """A delivery of an id nobody sent; members_at_send with a receiver that
    left after seq 99 (its later deliveries are not expected: one it still
    made is reported as outside the membership)."""
    def edit(cols):
        c = cols[5]
        add_row(c, t_ns=c["t_ns"].max() + 1, event=DELIVER, sender=1, inc=1, seq=10_000, size=10)
        c4 = cols[4]
        k = (c4["event"] == DELIVER) & (c4["sender"] == 2) & (c4["seq"] >= 100) & (c4["seq"] != 150)
        for kk in c4:
            c4[kk] = c4[kk][~k]
        drop_row(cols[1], find(cols[1], DELIVER, 2, 5))

    def meta_edit(meta):
        meta["members_at_send"] = {"2": [1, 3, {"node": 4, "from": 0, "to": 99}, 5]}

    rows, s = verify_only(spark, write(tmp_path, base, edit=edit, meta_edit=meta_edit))
    assert rows == [("missing", 1, 2, 1, 5, 0), ("outside", 4, 2, 1, 150, 1), ("unsent", 5, 1, 1, 10_000, 1)]
    assert (s["missing"], s["unsent"], s["outside"], s["extra_deliveries"]) == (1, 1, 1, 0)


def relabel(base, mapping):
    """The run with node ids renamed (node, sender and peer columns, run.json)."""
    meta, cols, counters = base
    meta = json.loads(json.dumps(meta))
    for n in meta["nodes"]:
        n["id"] = mapping[n["id"]]
    meta["senders"] = [mapping[s] for s in meta["senders"]]
    f = np.vectorize(lambda x: mapping.get(int(x), int(x)))
    out = {}
    for n, c in cols.items():
        c = dict(c)
        c["sender"] = f(c["sender"]).astype(np.uint32)
        c["peer"] = f(c["peer"]).astype(np.uint64)
        out[mapping[n]] = c
    return meta, out, {mapping[n]: v for n, v in counters.items()}


def test_layout_bitsets():
    from rpbcast.analysis.messages import Layout
    dense = Layout(range(1, 71))
    assert dense.direct and dense.words == 2 and dense.masks([1, 2, 65, 70]) == [3, 1 | (1 << 5)]
    assert Layout([0, 63]).masks([63]) == [-(1 << 63)]          # bit 63 is the sign bit
    sparse = Layout([7, 1_000_000, 4_000_000_000])
    assert not sparse.direct and sparse.words == 1 and sparse.masks([4_000_000_000]) == [4]


def test_sparse_node_ids_and_more_than_64_nodes(spark, tmp_path):
    """Node ids far apart (bit positions through a broadcast table), and a
    70-node group (two bitset words): the ids are still reported exactly."""
    big = synth.generate(synth.Params(nodes=70, loggers=2, senders=2, msgs_per_sender=30, loss=0.02, seed=5))

    def edit(cols):
        drop_row(cols[68], find(cols[68], DELIVER, 2, 7))       # node 68: bit 3 of the second word
        c = cols[3]
        i = find(c, DELIVER, 1, 29)
        add_row(c, **{k: c[k][i] for k in c})
    rows, s = verify_only(spark, write(tmp_path / "big", big, edit=edit))
    assert rows == [("duplicate", 3, 1, 1, 29, 2), ("missing", 68, 2, 1, 7, 0)]
    assert s["expected_deliveries"] == 60 * 67

    small = synth.generate(synth.Params(nodes=4, loggers=1, senders=2, msgs_per_sender=50, loss=0.05, seed=6))
    ids = {1: 10, 2: 3_000_000_000, 3: 77_777, 4: 5}
    rows, s = verify_only(spark, write(tmp_path / "sparse", relabel(small, ids),
                                       edit=lambda cols: drop_row(cols[77_777], find(cols[77_777], DELIVER,
                                                                                     3_000_000_000, 11))))
    assert rows == [("missing", 77_777, 3_000_000_000, 1, 11, 0)]
    assert s["expected_deliveries"] == 2 * 50 * 2


def test_cli_prints_the_ids_and_fails(spark, base, tmp_path, capsys):
    from rpbcast.tools.cli import main

    def edit(cols):
        drop_row(cols[4], find(cols[4], DELIVER, 2, 17))
        c = cols[5]
        i = find(c, DELIVER, 1, 100)
        add_row(c, **{k: c[k][i] for k in c})
    d = write(tmp_path, base, edit=edit)
    rc = main(["analyze", d, "--master", "local[2]", "--no-plots"])
    o = capsys.readouterr().out
    assert rc == 1
    assert "exactly-once: VIOLATED" in o
    assert "missing (first 1 of 1): node 4 <- (2,1,17)" in o
    assert "duplicate (first 1 of 1): node 5 <- (1,1,100) x2" in o
    issues = sorted(tuple(r.values()) for r in read_parquet(os.path.join(d, "analysis", "exactly_once_issues.parquet")))
    assert issues == [("duplicate", 5, 1, 1, 100, 2), ("missing", 4, 2, 1, 17, 0)]


def test_real_protocol_trace_from_the_engine(spark, tmp_path):
    """Events recorded by the C core and the engine on a lossy MemNet group
    verify exactly-once, and agree with the group's own counts."""
    sys.path.insert(0, HERE)
    import analysis_memnet
    d = str(tmp_path)
    res = analysis_memnet.run({"nodes": 5, "senders": 2, "msgs": 150, "loss": 0.05, "seed": 4, "run_dir": d})
    assert res["complete"] and res["duplicates"] == 0 and res["repairs_peer"] > 0
    rows, s = verify_only(spark, d)
    assert rows == []
    assert s["messages_sent"] == 300 and s["deliveries"] == s["expected_deliveries"] == res["delivered"]
    run = Run(d)
    from rpbcast.analysis import load
    nodes = load.per_node(load.event_counts(read_events(spark, run)), run.roles)
    assert sum(x["repairs_in_peer"] + x["repairs_in_logger"] for x in nodes) == \
        res["repairs_peer"] + res["repairs_logger"]
    assert sum(x["rtx_served"] for x in nodes) >= res["repairs_peer"]


@pytest.mark.parametrize("extra", [[], ["--kill-receiver", "0.6"]], ids=["plain", "killed-receiver"])
def test_stress_traces_verify_exactly_once(spark, tmp_path, extra):
    """The real thing end to end: `rpbcast stress --trace` (separate
    processes, real sockets, loss) and then the Spark verifier on its
    traces.  Two senders, so every node both sends and receives ids it must
    not be expected to deliver; with a receiver killed mid-run its first
    life's trace is quarantined and it is left out of the check."""
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet", "--trace",
                        "--run-dir", str(run), "--senders", "2", "--receivers", "2", "--loggers", "1",
                        "--rate", "3000", "--duration", "1.5", "--loss", "0.02", *extra],
                       capture_output=True, text=True, timeout=240)
    summary = json.loads(r.stdout)
    assert r.returncode == 0 and summary["exactly_once"], (summary.get("problems"), r.stderr[-2000:])
    meta = json.load(open(run / "run.json"))
    assert set(meta["members_at_send"]) == {str(x) for x in meta["senders"]}
    rows, s = verify_only(spark, str(run))
    verified = meta["members_at_send"][str(meta["senders"][0])]
    # nothing but (for the killed receiver) information: its deliveries lie
    # outside the receivers the check covers
    assert [r for r in rows if r[0] in verify.VIOLATIONS] == []
    assert {r[1] for r in rows} <= set(meta.get("unverified_receivers", []))
    assert bool(rows) == bool(extra)
    assert s["messages_sent"] == summary["sent"]
    assert s["deliveries"] - s["outside"] == s["expected_deliveries"] == summary["sent"] * len(verified)
    if extra:
        assert meta["unverified_receivers"] and len(verified) == 1


def test_trace_writer_never_overwrites_an_earlier_life_and_broken_files_are_quarantined(tmp_path):
    """A restarted node writes the next part file; a file left without its
    footer by a killed writer is renamed so Spark does not choke on it."""
    pytest.importorskip("pyarrow")
    from rpbcast.analysis.tracefile import TraceWriter, quarantine_broken
    cols = {k: np.arange(5, dtype=np.int64) for k in ("t_ns", "sender", "inc", "seq", "peer")}
    cols.update(event=np.zeros(5, np.int8), size=np.zeros(5, np.int32), aux=np.zeros(5, np.int32))
    paths = []
    for life in range(2):
        w = TraceWriter(str(tmp_path), "r1", 7)
        w.add(cols)
        w.close()
        paths.append(w.path)
    assert len(set(paths)) == 2 and all(read_parquet(p) for p in paths)
    w = TraceWriter(str(tmp_path), "r1", 7, rows_per_group=4)
    w.add(cols)                                   # a row group written, no footer yet
    assert w.path not in paths and os.path.getsize(w.path) > 0
    broken = quarantine_broken(str(tmp_path))     # as if its process had been killed here
    assert broken == [os.path.relpath(w.path, tmp_path)]
    assert os.path.exists(w.path + ".broken") and all(os.path.exists(p) for p in paths)
    w2 = TraceWriter(str(tmp_path), "r1", 7)
    assert w2.path not in paths + [w.path]


# -- without the extra ------------------------------------------------------------------

BLOCK = textwrap.dedent("""
    import sys, importlib.abc
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("pyspark", "pyarrow"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Block())
    from rpbcast.tools.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("cmd", [["analyze", "RUN"], ["sweep", "--grid", "g.json", "--out", "o"]])
def test_without_pyspark_the_commands_say_how_to_install_it(tmp_path, cmd):
    (tmp_path / "run.json").write_text("{}")
    cmd = [str(tmp_path) if c == "RUN" else c for c in cmd]
    # the package under test, whatever the installed copy points at
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1]))
    p = subprocess.run([sys.executable, "-c", BLOCK] + cmd, capture_output=True, text=True, cwd=tmp_path,
                       timeout=60, env=env)
    assert p.returncode == 3, p.stderr
    assert "pip install 'rpbcast[spark]'" in p.stderr
    assert "pyspark" in p.stderr
    # the rest of the command line still works without it
    p = subprocess.run([sys.executable, "-c", BLOCK, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and "analyze" in p.stdout and "sweep" in p.stdout


# -- sweep ----------------------------------------------------------------------------

def test_grid_expansion():
    g = {"fixed": {"msgs": 10}, "grid": {"loss": [0.0, 0.1], "nodes": [3, 4, 5]}, "repeat": 2}
    cs = sweep.expand(g)
    assert len(cs) == 2 * 3 * 2
    assert cs[0] == {"msgs": 10, "loss": 0.0, "nodes": 3, "seed": 0}
    assert {(c["loss"], c["nodes"], c["seed"]) for c in cs} == \
        {(a, b, s) for a in (0.0, 0.1) for b in (3, 4, 5) for s in (0, 1)}
    cs = sweep.expand({"grid": {"x": [1, 2]}, "seeds": [7, 9], "seed_key": "rng", "cases": [{"p": "a"}, {"p": "b"}]})
    assert len(cs) == 8 and {c["rng"] for c in cs} == {7, 9} and {c["p"] for c in cs} == {"a", "b"}
    with pytest.raises(ValueError):
        sweep.expand({"grdi": {}})


def test_sweep_runs_one_simulation_per_task_and_collects_results(spark, tmp_path, capsys):
    sys.path.insert(0, HERE)
    grid = {"fixed": {"nodes": 4, "msgs": 40}, "grid": {"loss": [0.0, 0.1]}, "repeat": 2,
            "cases": [{}, {"fail": True}]}
    configs = sweep.expand(grid)
    res = sweep.run_sweep(spark, configs, "analysis_memnet:run", str(tmp_path))
    assert res["configs"] == 8 and res["ok"] == 4 and res["failed"] == 4
    t = read_parquet(os.path.join(tmp_path, "results.parquet"))
    assert [r["config_id"] for r in t] == list(range(8))
    ok = [r for r in t if r["_ok"]]
    assert all(r["complete"] and r["delivered"] == r["expected"] == 2 * 40 and r["duplicates"] == 0 for r in ok)
    assert {(r["loss"], r["seed"]) for r in ok} == {(0.0, 0), (0.0, 1), (0.1, 0), (0.1, 1)}
    assert all(r["gaps"] == 0 for r in ok if r["loss"] == 0.0)
    assert any(r["gaps"] > 0 for r in ok if r["loss"] == 0.1)
    bad = [r for r in t if not r["_ok"]]
    assert all("fails on purpose" in r["_error"] for r in bad)
    # each simulation ran as its own task, in Python workers, not in the driver
    assert all(r["_pid"] != os.getpid() for r in t)
    o = capsys.readouterr().out
    assert "8 simulations" in o and "4 ok, 4 failed" in o


def test_sweep_cli_dry_run_and_bad_function(tmp_path, capsys):
    from rpbcast.tools.cli import main
    g = tmp_path / "g.toml"
    g.write_text('repeat = 3\n[grid]\nloss = [0.0, 0.01]\n')
    assert main(["sweep", "--grid", str(g), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert "6 configurations" in capsys.readouterr().out
    rc = main(["sweep", "--grid", str(g), "--out", str(tmp_path / "o"), "--function", "no_such_module_xyz:run"])
    assert rc == 2
    assert "cannot load the simulation function" in capsys.readouterr().err


# -- the first hour on a cluster (issue 16) -------------------------------------------

def test_cluster_sizing_from_what_a_standalone_master_offers(monkeypatch):
    """Executors get most of what a worker has free (not Spark's 1 GB
    default), a few shuffle partitions per core, the driver a reachable
    address; read from the master's status page (served here on 127.0.0.1)."""
    import http.server
    import threading
    state = {"status": "ALIVE", "aliveworkers": 1, "workers": [
        {"id": "w1", "host": "127.0.0.1", "cores": 2, "coresfree": 2, "memory": 4096, "memoryfree": 4096,
         "state": "ALIVE"}]}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(state).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("RPBCAST_SPARK_MASTER_UI", f"http://127.0.0.1:{srv.server_port}")
        res = spark_session.cluster_resources("spark://127.0.0.1:7077")
    finally:
        srv.shutdown()
    assert res["workers"][0]["memoryfree"] == 4096
    c = spark_session.settings("spark://127.0.0.1:7077", resources=res)
    assert spark_session.memory_mb(c["spark.executor.memory"]) == 3072          # 75 % of the 4 GB offered
    assert c["spark.sql.shuffle.partitions"] == "8" and c["spark.driver.host"] == "127.0.0.1"
    assert c["spark.driver.memory"] == "4g" and c[spark_session.HEAP_KEY] == "3072"
    # --conf wins; a worker smaller than Spark's default gets all it has
    assert spark_session.settings("spark://127.0.0.1:7077", conf={"spark.executor.memory": "2g"},
                                  resources=res)[spark_session.HEAP_KEY] == "2048"
    small = {"workers": [dict(state["workers"][0], memory=768, memoryfree=768)]}
    assert spark_session.cluster_sizing(small)["spark.executor.memory"] == "768m"
    assert spark_session.cluster_resources("local[2]") is None
    assert spark_session.memory_mb("1g") == 1024 and spark_session.memory_mb("512m") == 512


def test_broadcast_joins_are_sized_from_the_heap(spark):
    """A broadcast hash table cannot spill: 12 M sends fit a 4 GB local
    driver (the old fixed limit), a default 1 GB executor takes about 2 M."""
    class Conf:
        def __init__(self, mb):
            self.mb = mb

        def get(self, key):
            assert key == spark_session.HEAP_KEY
            return str(self.mb)

    class S:
        def __init__(self, mb):
            self.conf = Conf(mb)

    from rpbcast.analysis import latency
    assert 11_000_000 <= spark_session.broadcast_rows(S(4096), latency.SEND_ROW_BYTES) <= 13_000_000
    assert 1_500_000 <= spark_session.broadcast_rows(S(1024), latency.SEND_ROW_BYTES) <= 2_500_000
    assert spark_session.broadcast_rows(S(300), latency.SEND_ROW_BYTES) == 0
    assert int(spark.conf.get(spark_session.HEAP_KEY)) == 1024      # the module's session: driver_memory 1g


def test_a_failed_analysis_exits_4_with_one_line(spark, base, tmp_path, capsys):
    """Exit 1 means "exactly-once violated"; a Spark failure used to exit 1
    too, after a 246-line Py4J traceback.  Now: 4, one line, the traceback
    in OUT/error.log."""
    from rpbcast.tools.cli import main
    d = write(tmp_path, base)
    victim = sorted(pathlib.Path(d, "traces").rglob("*.parquet"))[0]
    victim.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")          # a trace file Spark cannot read
    rc = main(["analyze", d, "--master", "local[2]", "--no-plots"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 4, err
    assert len(lines) == 1 and lines[0].startswith("rpbcast analyze: analysis failed: "), err
    assert "Traceback" not in err
    assert "Traceback" in open(os.path.join(d, "analysis", "error.log")).read()


def test_failure_line_names_memory_and_what_to_do():
    from rpbcast.analysis.cli import failure_line

    class JavaExc:
        def __init__(self, text, cause=None):
            self.text, self.cause = text, cause

        def getCause(self):
            return self.cause

        def toString(self):
            return self.text

    e = RuntimeError("An error occurred while calling o869.getResult.\n" + "\tat x\n" * 200)
    e.java_exception = JavaExc("org.apache.spark.SparkException: Job aborted",
                               JavaExc("java.lang.OutOfMemoryError: Java heap space\n\tat y"))
    line = failure_line(e)
    assert "\n" not in line and line.startswith("out of memory (java.lang.OutOfMemoryError: Java heap space)")
    assert "spark.executor.memory" in line
    # anything else: the exception's kind and the first line of its message
    # (a bare KeyError's message is only the key)
    assert failure_line(ValueError("bad\nthing")) == "ValueError: bad"


def test_the_logger_is_in_every_table_also_without_a_trace(spark, base, tmp_path, capsys):
    """A logger that wrote no trace (the stress logger did not) vanished from
    the retransmission table and the per-node latency tables; its counters
    still know what it served."""
    from rpbcast.tools.cli import main
    meta, cols, counters = base
    (lg,) = [n["id"] for n in meta["nodes"] if n["role"] == "logger"]
    counters = json.loads(json.dumps({str(k): v for k, v in counters.items()}))
    counters = {int(k): v for k, v in counters.items()}
    counters[lg].update(served=123, rx_new=4000, gap_ids=7, delivered=0)
    cols = {n: c for n, c in cols.items() if n != lg}
    d = str(tmp_path)
    synth.write(d, meta, cols, counters)
    rc = main(["analyze", d, "--master", "local[2]", "--no-plots"])
    o = capsys.readouterr().out
    assert rc == 0
    assert f"NOTE: node {lg} (logger) wrote no trace" in o
    load_rows = {r["node"]: r for r in read_parquet(os.path.join(d, "analysis", "load.parquet"))}
    assert load_rows[lg]["source"] == "counters" and load_rows[lg]["rtx_served"] == 123
    assert load_rows[lg]["recv"] == 4000 and load_rows[lg]["role"] == "logger"
    table = o[o.index("retransmissions:"):]
    assert any(x.split()[:3] == [str(lg), "logger", "counters"] for x in table.splitlines())
    assert o.count(f"node {lg} (logger)") >= 2                     # delivery and receive latency tables


def test_receipts_stamped_before_their_send_are_flagged(spark, base, tmp_path, capsys):
    from rpbcast.tools.cli import main

    def edit(cols):
        c = cols[3]
        i = int(np.flatnonzero(c["event"] == RECV)[5])
        s = sends(cols)[(int(c["sender"][i]), int(c["seq"][i]))]
        c["t_ns"][i] = s - 2_000_000                          # 2 ms before its send
    d = write(tmp_path, base, edit=edit)
    rc = main(["analyze", d, "--master", "local[2]", "--no-plots"])
    o = capsys.readouterr().out
    assert rc == 0
    assert "WARNING: 1 first receipts" in o and "before their send, by up to 2.00 ms" in o
    s = json.load(open(os.path.join(d, "analysis", "summary.json")))
    assert s["receive_before_send"]["n"] == 1 and s["receive_before_send"]["worst_ns"] == -2_000_000
