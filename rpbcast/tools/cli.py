"""The ``rpbcast`` command line.

Each command family lives in its own module and registers its subcommands
with ``add_parsers(subparsers)``; a family whose optional dependencies are
missing still registers, and says how to install them when run.
"""
import argparse
import importlib
import sys

# (module, what it adds)
FAMILIES = [
    ("rpbcast.tools.commands", "node, logger, pub, sub, stat, selfcheck"),
    ("rpbcast.tools.stress.cli", "stress: the main job"),
    ("rpbcast.analysis.cli", "analyze, sweep (Spark)"),
    ("rpbcast.sim.cli", "sim: experiments in the simulator"),
    ("rpbcast.experiments.cli", "experiment: the papers' figures and tables"),
]


def build_parser():
    p = argparse.ArgumentParser(prog="rpbcast", description="Reliable multicast for pub/sub and trading feeds.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for mod, _ in FAMILIES:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("rpbcast"):
                continue            # that family is not part of this build
            raise
        m.add_parsers(sub)
    return p


def main(argv=None):
    from rpbcast.config import ConfigError
    from rpbcast.core.logstore import LogError
    args = build_parser().parse_args(argv)
    try:
        rc = args.func(args)
    except ConfigError as e:
        print(f"rpbcast {args.cmd}: configuration error: {e}", file=sys.stderr)
        return 2
    except LogError as e:
        # the log cannot be opened, written or read: say so in one line
        print(f"rpbcast {args.cmd}: log error: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
