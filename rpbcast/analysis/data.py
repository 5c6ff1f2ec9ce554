"""Reading a run directory (layout and schema: docs/traces.md)."""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Dict, List, Optional, Tuple

# Event columns as written by rpbcast.analysis.tracefile, plus the two partition
# columns.  Giving Spark the schema keeps the partition columns typed the
# same way whatever the run ids look like (run=17 stays a string).
COLUMNS = [("t_ns", "long"), ("event", "string"), ("sender", "long"), ("inc", "long"),
           ("seq", "long"), ("size", "int"), ("peer", "long"), ("aux", "int"),
           ("count", "int"), ("run", "string"), ("node", "long")]


def spark_schema():
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType
    t = {"long": LongType(), "int": IntegerType(), "string": StringType()}
    return StructType([StructField(n, t[k], True) for n, k in COLUMNS])


class Run:
    """run.json, the counters files and where the events are."""

    def __init__(self, run_dir: str):
        self.dir = os.path.abspath(run_dir)
        path = os.path.join(self.dir, "run.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{run_dir}: no run.json (not a run directory, see docs/traces.md)")
        with open(path) as f:
            self.meta = json.load(f)
        self.run_id = str(self.meta.get("run_id", os.path.basename(self.dir)))
        self.traces = os.path.join(self.dir, "traces")
        self.nodes = [dict(n) for n in self.meta.get("nodes", [])]
        for n in self.nodes:
            n["id"] = int(n["id"])
            n.setdefault("role", "member")
        self.roles = {n["id"]: n["role"] for n in self.nodes}
        self.loggers = sorted(i for i, r in self.roles.items() if r == "logger")
        self.members = sorted(i for i, r in self.roles.items() if r != "logger")
        self.senders = sorted(int(s) for s in self.meta.get("senders", []))
        self.params = dict(self.meta.get("params", {}))

    # -- receivers -------------------------------------------------------
    def receivers(self) -> Tuple[Dict[int, List[Tuple[int, Optional[int], Optional[int]]]], List[int]]:
        """(explicit, default): explicit[sender] = [(node, first seq, last seq)]
        from ``members_at_send`` (None bounds: the whole stream); senders not
        listed get every member (non-logger node) other than themselves.

        ``members_at_send`` values are lists of node ids, or of objects
        ``{"node": id, "from": seq, "to": seq}`` (inclusive; either bound may
        be left out) for a receiver that joined or left during the run."""
        explicit = {}
        for s, lst in (self.meta.get("members_at_send") or {}).items():
            rows = []
            for r in lst:
                if isinstance(r, dict):
                    rows.append((int(r["node"]), r.get("from"), r.get("to")))
                else:
                    rows.append((int(r), None, None))
            explicit[int(s)] = rows
        return explicit, list(self.members)

    # -- counters ---------------------------------------------------------
    def counters(self) -> Dict[int, dict]:
        out = {}
        for p in sorted(glob.glob(os.path.join(self.dir, "counters", "node=*.json"))):
            m = re.search(r"node=(-?\d+)\.json$", p)
            if not m:
                continue
            with open(p) as f:
                out[int(m.group(1))] = json.load(f)
        return out

    def has_runs(self) -> bool:
        """True if some event stands for more than one id (count > 1), read
        from the Parquet footers' statistics, without scanning the events."""
        import pyarrow.parquet as pq
        for f in self.trace_files():
            md = pq.ParquetFile(f).metadata
            names = [md.schema.column(i).name for i in range(md.num_columns)]
            if "count" not in names:
                continue
            k = names.index("count")
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(k).statistics
                if st is None or not st.has_min_max or st.max > 1:
                    return True
        return False

    def trace_files(self) -> List[str]:
        return sorted(glob.glob(os.path.join(self.traces, f"run={self.run_id}", "node=*", "*.parquet")))


def read_events(spark, run: Run):
    """The run's events as a DataFrame, one row per id (columns: COLUMNS
    without ``count``): an event recorded for a run of ``count``
    consecutive ids is expanded here, with Spark's built-in sequence and
    explode, so every job downstream sees one row per message event.
    Traces without runs (or without the column) skip the expansion."""
    from pyspark.sql import functions as F
    if not run.trace_files():
        raise FileNotFoundError(f"{run.dir}: no trace files under traces/run={run.run_id}/")
    df = spark.read.schema(spark_schema()).parquet(run.traces)
    df = df.where(F.col("run") == F.lit(run.run_id))
    if run.has_runs():
        n = F.coalesce(F.col("count"), F.lit(1)).cast("long")
        df = df.withColumn("seq", F.explode(F.sequence(F.col("seq"), F.col("seq") + n - 1)))
    return df.drop("count")
