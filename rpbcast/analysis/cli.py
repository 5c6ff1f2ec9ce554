"""``rpbcast analyze`` and ``rpbcast sweep`` (Spark).

Importing this module needs nothing beyond the standard library; PySpark
and pyarrow are imported when a command runs, and a missing one is reported
with the command that installs it (exit status 3).
"""
from __future__ import annotations

import os
import sys

EXIT_VIOLATION = 1      # analyze: exactly-once violated in some run
EXIT_USAGE = 2
EXIT_MISSING = 3        # the 'spark' extra (or Java) is not installed
EXIT_FAILED = 4         # the analysis itself failed (Spark, memory, unreadable traces): no verdict

MEMORY_SIGNS = ("OutOfMemoryError", "Java heap space", "Could not allocate memory", "GC overhead limit",
                "Container killed", "exceeds the executor memory")


def failure_line(e: BaseException) -> str:
    """One line for an exception from the analysis: the deepest Java cause
    of a Py4J error (with what to do when it is memory), else the message."""
    text = f"{type(e).__name__}: {e}"
    cause = None
    je = getattr(e, "java_exception", None)
    if je is not None:
        try:
            c = je
            while c is not None:
                cause = c
                c = c.getCause()
            text = str(cause.toString())
        except Exception:       # noqa: BLE001 -- the gateway may be gone
            pass
    full = f"{e} {text}"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    if len(first) > 300:
        first = first[:297] + "..."
    if any(sign in full for sign in MEMORY_SIGNS):
        return (f"out of memory ({first}); give the executors more heap, e.g. --conf spark.executor.memory=8g "
                f"(or more shuffle partitions: --conf spark.sql.shuffle.partitions=...)")
    return first


def _failed(args, e: BaseException) -> int:
    """Report a failed analysis in one line; the whole story in a file."""
    import traceback
    from rpbcast.analysis.session import spark_log_file
    d = args.out or (os.path.join(args.run_dir[0], "analysis") if args.run_dir else ".")
    where = None
    try:
        os.makedirs(d, exist_ok=True)
        where = os.path.join(d, "error.log")
        with open(where, "w") as f:
            traceback.print_exception(e, file=f)
    except OSError:
        pass
    print(f"rpbcast analyze: analysis failed: {failure_line(e)} (details: {where or 'none'}; Spark's log: "
          f"{spark_log_file()})", file=sys.stderr)
    return EXIT_FAILED


def _require():
    from rpbcast.analysis import MissingDependency, require_spark
    try:
        require_spark()
    except MissingDependency as e:
        print(f"rpbcast: {e}", file=sys.stderr)
        return False
    return True


def _session(args, app):
    from rpbcast.analysis.session import get_session, parse_conf
    conf = parse_conf(args.conf)
    if getattr(args, "profile", False):
        d = os.path.abspath(args.profile)
        os.makedirs(d, exist_ok=True)
        conf.setdefault("spark.eventLog.enabled", "true")
        conf.setdefault("spark.eventLog.dir", "file://" + d)
        conf.setdefault("spark.eventLog.compress", "false")        # plain JSON lines, one file
        conf.setdefault("spark.eventLog.rolling.enabled", "false")
    return get_session(args.master, app=app, conf=conf, driver_memory=args.driver_memory)


def _analyze(args):
    if not _require():
        return EXIT_MISSING
    for d in args.run_dir:
        if not os.path.exists(os.path.join(d, "run.json")):
            print(f"rpbcast analyze: {d}: no run.json (not a run directory; see docs/traces.md)", file=sys.stderr)
            return EXIT_USAGE
    if args.out and len(args.run_dir) > 1:
        print("rpbcast analyze: --out takes one RUN_DIR; with several, each gets RUN_DIR/analysis "
              "and --compare-out gets the comparison", file=sys.stderr)
        return EXIT_USAGE
    from rpbcast.analysis import report
    try:
        spark = _session(args, "rpbcast analyze")
        summaries = []
        for i, d in enumerate(args.run_dir):
            if i:
                print()
            summaries.append(report.analyze(spark, d, out_dir=args.out, bucket_s=args.bucket,
                                            bits=args.bits, make_plots=not args.no_plots,
                                            max_list=args.list))
        if len(summaries) > 1:
            print()
            report.compare(summaries, args.vs, args.compare_out or os.path.join(os.getcwd(), "analysis-compare"))
    except KeyboardInterrupt:
        raise
    except Exception as e:          # noqa: BLE001 -- any failure is "no verdict", said in one line
        return _failed(args, e)
    if args.profile:
        try:        # let the event log catch up with the last stage
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        except Exception:       # noqa: BLE001 -- internal API; the log is only a little late then
            pass
        stages = report.stage_times(os.path.abspath(args.profile))
        if stages:
            print("\nSpark stages (from the event log):")
            report._table(["job", "stage", "tasks", "wall s", "task s", "input rows", "shuffle MB", "spill MB"],
                          [[s["job"][:44], s["stage"], s["tasks"], f"{s['seconds']:.1f}", f"{s['executor_run_s']:.1f}",
                            f"{s['input_records']:,}", f"{s['shuffle_write_bytes'] / 1e6:.0f}",
                            f"{s['spill_bytes'] / 1e6:.0f}"] for s in stages], sys.stdout)
    return 0 if all(s["exactly_once"] for s in summaries) else EXIT_VIOLATION


def _sweep(args):
    if not _require():
        return EXIT_MISSING
    from rpbcast.analysis import sweep
    try:
        grid = sweep.load_grid(args.grid)
        configs = sweep.expand(grid)
    except (OSError, ValueError) as e:
        print(f"rpbcast sweep: {e}", file=sys.stderr)
        return EXIT_USAGE
    func = args.function or grid.get("function") or sweep.DEFAULT_FUNCTION
    if args.dry_run:
        for c in configs:
            print(c)
        print(f"{len(configs)} configurations, function {func}")
        return 0
    try:
        sweep.resolve(func)
    except (ImportError, AttributeError, ValueError) as e:
        print(f"rpbcast sweep: cannot load the simulation function {func!r}: {e}\n"
              "  give one with --function module:callable (params dict -> result dict)", file=sys.stderr)
        return EXIT_USAGE
    spark = _session(args, "rpbcast sweep")
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    res = sweep.run_sweep(spark, configs, func, args.out, py_files=args.py_file or (), timeout=args.timeout,
                          metrics=metrics)
    return 0 if res["failed"] == 0 else 1


def _common(p):
    p.add_argument("--master", help="Spark master URL (default: local[*], or $RPBCAST_SPARK_MASTER); "
                                    "e.g. local[2], spark://host:7077, yarn")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="extra Spark setting (repeatable)")
    p.add_argument("--driver-memory", help="driver heap (local mode default 4g, or $RPBCAST_SPARK_DRIVER_MEMORY)")


def add_parsers(sub):
    a = sub.add_parser("analyze", help="verify exactly-once and measure latency, repairs, load, overhead of "
                                       "run traces (Spark)",
                       description="Analyse run directories (docs/traces.md) with Spark: exactly-once "
                                   "verification, delivery and repair latency, retransmission load, overhead. "
                                   "Results go to RUN_DIR/analysis/ (Parquet, PNG, summary.json). Exit status: "
                                   "0 ok, 1 exactly-once violated, 2 usage, 3 PySpark/Java missing, 4 the "
                                   "analysis failed (one line on stderr; the details in "
                                   "OUT/error.log).")
    a.add_argument("run_dir", nargs="+", metavar="RUN_DIR")
    _common(a)
    a.add_argument("--out", help="output directory (default RUN_DIR/analysis)")
    a.add_argument("--bucket", type=float, metavar="SECONDS", help="time bucket for latency over time "
                                                                   "(default: about 50 buckets over the run)")
    a.add_argument("--bits", type=int, default=8, choices=range(2, 16), metavar="BITS",
                   help="latency histogram precision: bins at most 2^-(BITS-1) wide (default 8: 0.8%%)")
    a.add_argument("--list", type=int, default=20, metavar="N", help="problem ids to print per kind (default 20)")
    a.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    a.add_argument("--vs", metavar="PARAM", help="several runs: compare against this run.json param "
                                                 "(default: the first that varies)")
    a.add_argument("--compare-out", metavar="DIR", help="several runs: where the comparison goes "
                                                        "(default ./analysis-compare)")
    a.add_argument("--profile", metavar="DIR", help="write a Spark event log to DIR and print time per stage")
    a.set_defaults(func=_analyze)

    s = sub.add_parser("sweep", help="run simulator configurations as Spark tasks, one simulation per task",
                       description="Expand a parameter grid (TOML or JSON: grid = cartesian axes, fixed = "
                                   "constants, repeat/seeds = seed axis) and run one simulation per Spark task; "
                                   "results go to OUT/results.parquet. See docs/analysis.md.")
    s.add_argument("--grid", required=True, help="grid file (.toml or .json)")
    s.add_argument("--function", help="module:callable taking the params dict, returning a flat result dict "
                                      "(default: the grid's 'function', else rpbcast.sim.api:run_one)")
    s.add_argument("--out", required=True, help="output directory")
    _common(s)
    s.add_argument("--py-file", action="append", help="extra .py/.zip to ship to the executors (repeatable)")
    s.add_argument("--timeout", type=float, help="seconds per simulation (reported as failed beyond it)")
    s.add_argument("--metrics", help="comma-separated result columns for the printed summary (default: the "
                                     "first six numeric results that vary)")
    s.add_argument("--dry-run", action="store_true", help="print the expanded configurations and stop")
    s.set_defaults(func=_sweep)
