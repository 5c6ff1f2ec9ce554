"""``rpbcast sweep``: simulator configurations as Spark tasks.

A grid file (TOML or JSON) names the parameters::

    function = "rpbcast.sim.api:run_one"    # optional (or --function)
    repeat = 5                              # seeds 0..4 (or: seeds = [1, 7, 9])
    seed_key = "seed"                       # parameter name of the seed axis
    [fixed]                                 # the same in every configuration
    duration = 10.0
    [grid]                                  # cartesian product of these
    protocol = ["rpbcast", "pbcast", "lbrm"]
    senders = [1, 2, 4, 8, 18]
    loss = [0.001, 0.01, 0.05]
    # [[cases]] tables: explicit parameter sets, crossed with the grid

Each configuration is one Spark task (``parallelize(configs,
numSlices=len(configs)).map(run)``): the task imports the function, calls
it with the parameter dict, and returns a flat dict (nested dicts flattened
with dots; a raised exception is recorded, not fatal).  The driver collects
the rows into OUT/results.parquet and prints a summary.  The function must
be importable on the executors: an installed package, or a single-file
module (shipped automatically when it is not part of an installed package),
or files given with --py-file.
"""
from __future__ import annotations

import importlib
import itertools
import json
import math
import os
import socket
import sys
import time
from typing import Dict, List

DEFAULT_FUNCTION = "rpbcast.sim.api:run_one"
META = ("config_id", "_ok", "_error", "_seconds", "_host", "_pid")


def load_grid(path: str) -> dict:
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".json"):
        g = json.loads(raw)
    else:
        try:
            import tomllib
        except ImportError:              # Python 3.10
            try:
                import tomli as tomllib
            except ImportError:
                raise ValueError("reading TOML on Python 3.10 needs tomli (pip install tomli), "
                                 "or give the grid as .json") from None
        try:
            g = tomllib.loads(raw.decode())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: {e}") from None
    if not isinstance(g, dict):
        raise ValueError(f"{path}: the grid must be a table/object")
    return g


def expand(grid: dict) -> List[dict]:
    """The configurations of a grid, in a deterministic order."""
    known = {"grid", "fixed", "repeat", "seeds", "seed_key", "cases", "function"}
    unknown = set(grid) - known
    if unknown:
        raise ValueError(f"unknown grid keys {sorted(unknown)} (known: {sorted(known)})")
    axes = grid.get("grid") or {}
    if not isinstance(axes, dict):
        raise ValueError("'grid' must map parameter names to lists of values")
    names = list(axes)
    values = [v if isinstance(v, list) else [v] for v in axes.values()]
    if any(len(v) == 0 for v in values):
        raise ValueError("a grid axis has no values")
    fixed = dict(grid.get("fixed") or {})
    cases = grid.get("cases") or [{}]
    seed_key = grid.get("seed_key", "seed")
    if "seeds" in grid:
        seeds = list(grid["seeds"])
    elif "repeat" in grid:
        seeds = list(range(int(grid["repeat"])))
    else:
        seeds = [None]
    out = []
    for case in cases:
        for combo in itertools.product(*values):
            for seed in seeds:
                p = dict(fixed)
                p.update(case)
                p.update(zip(names, combo))
                if seed is not None:
                    p[seed_key] = seed
                out.append(p)
    return out


def resolve(spec: str):
    """The callable named by 'module:attr' (cwd is importable, as with python -m)."""
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"expected module:callable, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    obj = importlib.import_module(mod)
    for a in attr.split("."):
        obj = getattr(obj, a)
    if not callable(obj):
        raise ValueError(f"{spec} is not callable")
    return obj


def _flat(d, prefix="", out=None):
    out = {} if out is None else out
    for k, v in (d or {}).items():
        k = f"{prefix}{k}"
        if isinstance(v, dict):
            _flat(v, k + ".", out)
        else:
            if hasattr(v, "item") and not isinstance(v, (list, tuple)):
                try:
                    v = v.item()
                except (ValueError, TypeError):
                    v = str(v)
            elif isinstance(v, (list, tuple, set)):
                v = json.dumps(list(v), default=str)
            elif v is not None and not isinstance(v, (bool, int, float, str)):
                v = str(v)
            out[k] = v
    return out


class _Timeout(Exception):
    pass


def run_task(item):
    """Executed on an executor: one simulation.  item = (config_id, params,
    function spec, timeout seconds or None)."""
    cid, params, spec, timeout = item
    row = {"config_id": cid}
    row.update(_flat(params))
    t = time.perf_counter()
    old = None
    import threading
    if threading.current_thread() is not threading.main_thread():
        timeout = None                  # signals only work in the main thread
    try:
        if timeout:
            import signal

            def _alarm(*_):
                raise _Timeout(f"timed out after {timeout} s")
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        res = resolve(spec)(dict(params))
        if not isinstance(res, dict):
            raise TypeError(f"{spec} returned {type(res).__name__}, not a dict")
        for k, v in _flat(res).items():
            if k not in row:
                row[k] = v
            elif row[k] != v:          # a parameter the simulation resolved differently
                row["out_" + k] = v
        row["_ok"], row["_error"] = True, None
    except BaseException as e:          # noqa: BLE001 -- a failed simulation is a result
        if isinstance(e, (KeyboardInterrupt, SystemExit)) and not isinstance(e, _Timeout):
            raise
        row["_ok"], row["_error"] = False, f"{type(e).__name__}: {e}"
    finally:
        if timeout:
            import signal
            signal.setitimer(signal.ITIMER_REAL, 0)
            if old is not None:
                signal.signal(signal.SIGALRM, old)
    row["_seconds"] = round(time.perf_counter() - t, 4)
    row["_host"], row["_pid"] = socket.gethostname(), os.getpid()
    return row


def _ship(sc, spec, py_files):
    for f in py_files:
        sc.addPyFile(os.path.abspath(f))
    mod = spec.partition(":")[0]
    m = sys.modules.get(mod) or importlib.import_module(mod)
    path = getattr(m, "__file__", None)
    if "." not in mod and path and path.endswith(".py") and "site-packages" not in path \
            and not mod.startswith("rpbcast"):
        sc.addPyFile(path)           # a single-file module next to the user: ship it


def to_table(rows: List[dict]):
    """Arrow table from result rows (union of keys; a column whose values
    have mixed types is stored as JSON strings)."""
    import pyarrow as pa
    keys: Dict[str, None] = {}
    for r in rows:
        for k in r:
            keys.setdefault(k, None)
    cols = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        try:
            cols[k] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            cols[k] = pa.array([None if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in vals],
                               pa.string())
    return pa.table(cols)


def run_sweep(spark, configs: List[dict], spec: str, out_dir: str, py_files=(), timeout=None,
              out=None, metrics=None) -> dict:
    """Run every configuration as one Spark task; write OUT/results.parquet."""
    out = out or sys.stdout
    import pyarrow.parquet as pq
    sc = spark.sparkContext
    os.makedirs(out_dir, exist_ok=True)
    _ship(sc, spec, py_files)
    items = [(i, c, spec, timeout) for i, c in enumerate(configs)]
    with open(os.path.join(out_dir, "configs.json"), "w") as f:
        json.dump({"function": spec, "configs": configs}, f, indent=1, default=str)
    t = time.perf_counter()
    sc.setJobDescription(f"sweep: {len(items)} simulations of {spec}")
    rows = sc.parallelize(items, numSlices=max(1, len(items))).map(run_task).collect()
    sc.setJobDescription(None)
    wall = time.perf_counter() - t
    rows.sort(key=lambda r: r["config_id"])
    table = to_table(rows)
    pq.write_table(table, os.path.join(out_dir, "results.parquet"))
    failed = [r for r in rows if not r["_ok"]]
    busy = sum(r["_seconds"] for r in rows)
    summary = {"function": spec, "configs": len(rows), "ok": len(rows) - len(failed), "failed": len(failed),
               "wall_s": round(wall, 3), "task_s": round(busy, 3),
               "parallelism": round(busy / wall, 2) if wall else None, "master": sc.master,
               "errors": [{"config_id": r["config_id"], "error": r["_error"]} for r in failed[:20]]}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print_summary(rows, configs, summary, out_dir, out, metrics=metrics)
    return summary


def _num(v):
    return isinstance(v, (int, float)) and math.isfinite(v)


def print_summary(rows, configs, s, out_dir, out=None, max_metrics=6, metrics=None):
    out = out or sys.stdout
    p = lambda *a: print(*a, file=out)       # noqa: E731
    p(f"sweep: {s['configs']} simulations of {s['function']} on {s['master']}: {s['ok']} ok, {s['failed']} failed; "
      f"{s['wall_s']:.1f} s wall, {s['task_s']:.1f} s of simulation ({s['parallelism']}x)")
    for e in s["errors"][:5]:
        p(f"  config {e['config_id']}: {e['error']}")
    params = set()
    for c in configs:
        params |= set(c)
    # axes = parameters that vary, except the seed-like ones
    varying = [k for k in sorted(params) if len({json.dumps(c.get(k), default=str) for c in configs}) > 1
               and k not in ("seed", "seeds")]
    if not metrics:
        # the first numeric (or boolean) results that differ between runs
        metrics, seen = [], {}
        for r in rows:
            for k, v in r.items():
                if k in params or k in META or k.startswith("out_") or not _num(v):
                    continue
                seen.setdefault(k, set()).add(v)
        metrics = [k for k, vals in seen.items() if len(vals) > 1][:max_metrics]
    groups: Dict[tuple, list] = {}
    for r in rows:
        if r["_ok"]:
            groups.setdefault(tuple(json.dumps(r.get(k), default=str) for k in varying), []).append(r)
    if groups and metrics:
        hdr = varying + ["n"] + [f"mean {m}" for m in metrics]
        table = []
        for key in sorted(groups):
            rs = groups[key]
            vals = []
            for m in metrics:
                xs = [r[m] for r in rs if _num(r.get(m))]
                vals.append(f"{sum(xs) / len(xs):.4g}" if xs else "-")
            table.append([json.loads(k) for k in key] + [len(rs)] + vals)
        w = [max(len(str(h)), *(len(str(t[i])) for t in table)) for i, h in enumerate(hdr)]
        p("  " + "  ".join(str(h).rjust(w[i]) for i, h in enumerate(hdr)))
        for t in table[:60]:
            p("  " + "  ".join(str(c).rjust(w[i]) for i, c in enumerate(t)))
        if len(table) > 60:
            p(f"  ... {len(table) - 60} more groups in results.parquet")
    p(f"results: {os.path.join(out_dir, 'results.parquet')}")
