"""Where an experiment's results go: one folder per experiment with the
table (CSV for tools, Markdown for people), the plot and what produced them.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Optional


@dataclasses.dataclass
class Experiment:
    """``run(out, quick, seed, jobs) -> Table``; ``out`` exists already.

    ``quick`` is a reduced version (fewer points, shorter runs) for tests and
    smoke runs; the full version is what docs/reproduction.md reports."""
    run: Callable
    help: str


@dataclasses.dataclass
class Table:
    columns: list
    rows: list                      # lists, in column order
    title: str = ""
    notes: str = ""                 # printed under the Markdown table

    def column(self, name):
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def where(self, **eq):
        idx = {k: self.columns.index(k) for k in eq}
        return [r for r in self.rows if all(r[i] == eq[k] for k, i in idx.items())]

    def markdown(self) -> str:
        def fmt(v):
            if isinstance(v, float):
                return f"{v:.4g}"
            return "" if v is None else str(v)
        out = []
        if self.title:
            out += [f"### {self.title}", ""]
        out.append("| " + " | ".join(self.columns) + " |")
        out.append("|" + "|".join("---:" if self.rows and isinstance(self.rows[0][i], (int, float)) else "---"
                                  for i in range(len(self.columns))) + "|")
        for r in self.rows:
            out.append("| " + " | ".join(fmt(v) for v in r) + " |")
        if self.notes:
            out += ["", self.notes]
        return "\n".join(out) + "\n"


def write(out: Path, name: str, table: Table, meta: Optional[dict] = None):
    """results.csv, results.md and meta.json into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(table.columns)
        w.writerows(table.rows)
    (out / "results.md").write_text(table.markdown())
    m = {"experiment": name, "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
         "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    m.update(meta or {})
    (out / "meta.json").write_text(json.dumps(m, indent=2, default=str) + "\n")


def pyplot():
    """matplotlib on the file backend, or a clear error."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise SystemExit("plots need matplotlib: pip install 'rpbcast[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read(out: Path) -> Table:
    """A table written by :func:`write` (numbers come back as numbers)."""
    with open(Path(out) / "results.csv", newline="") as f:
        r = csv.reader(f)
        cols = next(r)
        rows = [[_num(v) for v in row] for row in r]
    return Table(cols, rows)


def _num(v):
    if v == "":
        return None
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v
