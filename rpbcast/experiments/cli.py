"""`rpbcast experiment`: reproduce one figure or table of the papers.

    rpbcast experiment --list
    rpbcast experiment fig7-2 --out results/      # results/fig7-2/{results.csv,results.md,plot.png,meta.json}
    rpbcast experiment fig7-2 --quick             # fewer points, for a smoke run
"""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

# topic modules; one that is not in this build is skipped
TOPICS = ["rpbcast.experiments.thesis", "rpbcast.experiments.gsgc", "rpbcast.experiments.srb",
          "rpbcast.experiments.atomic"]


def registry() -> dict:
    reg = {}
    for mod in TOPICS:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                continue
            raise
        for name, exp in m.EXPERIMENTS.items():
            if name in reg:
                raise RuntimeError(f"experiment {name!r} defined twice")
            reg[name] = exp
    return reg


def add_parsers(sub):
    p = sub.add_parser("experiment", help="reproduce a figure or table of the papers (docs/reproduction.md)",
                       description="Run one experiment of docs/reproduction.md and write its results table, "
                                   "plot and meta.json into OUT/NAME.")
    p.add_argument("names", nargs="*", metavar="NAME", help="experiment names (see --list); 'all' runs every one")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--out", default="results", help="results folder (default: ./results)")
    p.add_argument("--quick", action="store_true", help="reduced version: fewer points, shorter runs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per CPU)")
    p.set_defaults(func=main)


def main(args):
    reg = registry()
    if args.list or not args.names:
        for name in sorted(reg):
            print(f"{name:16s} {reg[name].help}")
        return 0
    names = sorted(reg) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in reg]
    if unknown:
        print(f"rpbcast experiment: unknown experiment(s) {', '.join(unknown)}; "
              f"known: {', '.join(sorted(reg))}", file=sys.stderr)
        return 2
    import os
    jobs = args.jobs or os.cpu_count() or 1
    for name in names:
        out = Path(args.out) / name
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        table = reg[name].run(out, args.quick, args.seed, jobs)
        from rpbcast.experiments import results
        results.write(out, name, table, {"quick": args.quick, "seed": args.seed, "jobs": jobs,
                                         "seconds": round(time.time() - t0, 1)})
        print(table.markdown())
        print(f"{name}: {out}/ ({time.time() - t0:.0f} s)")
    return 0
