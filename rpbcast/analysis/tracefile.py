"""Writing run traces as Parquet (schema: docs/traces.md).

Events arrive as column batches (dicts of NumPy arrays from
``Node.take_trace()``); they are buffered and written as Parquet row groups,
one file per node per run.  pyarrow is an optional dependency
(``pip install 'rpbcast[spark]'``).
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

EVENT_NAMES = {
    1: "send", 2: "recv", 3: "recv_dup", 4: "deliver", 5: "gap", 6: "gossip_out",
    7: "gossip_in", 8: "rtx_req", 9: "rtx_served", 10: "gcnote", 11: "heartbeat",
    12: "member", 13: "purge", 14: "lost",
}
EVENT_CODES = {v: k for k, v in EVENT_NAMES.items()}
_DICT = ["?"] + [EVENT_NAMES[k] for k in sorted(EVENT_NAMES)]


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise RuntimeError("writing traces needs pyarrow: pip install 'rpbcast[spark]'") from None
    return pa, pq


def schema():
    pa, _ = _pyarrow()
    return pa.schema([
        ("t_ns", pa.int64()),
        ("event", pa.dictionary(pa.int8(), pa.string())),
        ("sender", pa.int64()),
        ("inc", pa.int64()),
        ("seq", pa.int64()),
        ("size", pa.int32()),
        ("peer", pa.int64()),
        ("aux", pa.int32()),
        ("count", pa.int32()),
    ])


class TraceWriter:
    """Buffers event columns for one node and writes Parquet row groups."""

    def __init__(self, run_dir: str, run_id: str, node_id: int, rows_per_group: int = 1 << 20,
                 addr_to_node: Optional[dict] = None):
        pa, pq = _pyarrow()
        self.pa, self.pq = pa, pq
        self.dir = os.path.join(run_dir, "traces", f"run={run_id}", f"node={node_id}")
        os.makedirs(self.dir, exist_ok=True)
        # A restarted node (a new process, same run) writes the next part
        # file and never overwrites its earlier life's events.
        k = 0
        while any(os.path.exists(os.path.join(self.dir, f"part-{k:05d}{ext}")) for ext in (".parquet", ".parquet.broken")):
            k += 1
        self.path = os.path.join(self.dir, f"part-{k:05d}.parquet")
        self.rows_per_group = rows_per_group
        self.addr_to_node = addr_to_node or {}
        self._cols = []
        self._rows = 0
        self._writer = None
        self.rows_written = 0
        self._dict = pa.array(_DICT, pa.string())

    def add(self, cols: Optional[dict]):
        """Add a batch from Node.take_trace() (None is ignored)."""
        if not cols:
            return
        self._cols.append(cols)
        self._rows += len(cols["t_ns"])
        if self._rows >= self.rows_per_group:
            self.flush()

    def _table(self, cols):
        pa = self.pa
        peer = cols["peer"].astype(np.int64, copy=False)
        if self.addr_to_node:
            # Replace addresses by node ids where we know them.
            keys = np.fromiter(self.addr_to_node.keys(), np.uint64, len(self.addr_to_node))
            vals = np.fromiter(self.addr_to_node.values(), np.int64, len(self.addr_to_node))
            order = np.argsort(keys)
            keys, vals = keys[order], vals[order]
            p = cols["peer"]
            idx = np.clip(np.searchsorted(keys, p), 0, len(keys) - 1)
            hit = keys[idx] == p
            peer = np.where(hit, vals[idx], peer)
        ev = pa.DictionaryArray.from_arrays(pa.array(cols["event"].astype(np.int8, copy=False)), self._dict)
        return pa.Table.from_arrays([
            pa.array(cols["t_ns"].astype(np.int64, copy=False)),
            ev,
            pa.array(cols["sender"].astype(np.int64)),
            pa.array(cols["inc"].astype(np.int64)),
            pa.array(cols["seq"].astype(np.int64)),
            pa.array(cols["size"].astype(np.int32)),
            pa.array(peer),
            pa.array(cols["aux"].astype(np.int32)),
            pa.array(cols["count"].astype(np.int32) if "count" in cols else np.ones(len(cols["t_ns"]), np.int32)),
        ], schema=schema())

    def flush(self):
        if not self._cols:
            return
        merged = {k: np.concatenate([c[k] for c in self._cols]) for k in self._cols[0]}
        self._cols, self._rows = [], 0
        t = self._table(merged)
        if self._writer is None:
            self._writer = self.pq.ParquetWriter(self.path, t.schema, compression="zstd")
        self._writer.write_table(t, row_group_size=self.rows_per_group)
        self.rows_written += t.num_rows

    def close(self):
        self.flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def quarantine_broken(run_dir: str) -> list:
    """Rename trace files that cannot be read (a process killed while
    writing one leaves it without its Parquet footer) to *.broken, so
    readers skip them; returns their paths relative to run_dir."""
    _, pq = _pyarrow()
    bad = []
    for root, _, files in os.walk(os.path.join(run_dir, "traces")):
        for f in sorted(files):
            if not f.endswith(".parquet"):
                continue
            path = os.path.join(root, f)
            try:
                pq.ParquetFile(path)
            except Exception:
                os.replace(path, path + ".broken")
                bad.append(os.path.relpath(path, run_dir))
    return bad


def write_run_json(run_dir: str, meta: dict):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)


def write_counters(run_dir: str, node_id: int, counters: dict):
    d = os.path.join(run_dir, "counters")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"node={node_id}.json"), "w") as f:
        json.dump(counters, f, indent=1, default=str)
