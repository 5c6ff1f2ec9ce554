"""The ``rpbcast`` command line.

Each command family lives in its own module and registers its subcommands
with ``add_parsers(subparsers)``; a family whose optional dependencies are
missing still registers, and says how to install them when run.
"""
import argparse
import importlib
import logging
import os
import sys

# (module, what it adds)
FAMILIES = [
    ("rpbcast.tools.commands", "node, logger, pub, sub, stat, doctor, selfcheck"),
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
    _log_warnings_to_stderr(args.cmd)
    try:
        rc = args.func(args)
    except ConfigError as e:
        print(f"rpbcast {args.cmd}: configuration error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `rpbcast stat | head`: the reader went away; that is not an error,
        # and Python must not report it again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except LogError as e:
        # the log cannot be opened, written or read: say so in one line
        print(f"rpbcast {args.cmd}: log error: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0 if rc is None else int(rc)


class _ToStderr(logging.Handler):
    """The library's warnings as 'rpbcast CMD: warning: ...' on whatever
    sys.stderr is when they happen."""

    def __init__(self, cmd):
        super().__init__(logging.WARNING)
        self.cmd = cmd

    def emit(self, record):
        try:
            print(f"rpbcast {self.cmd}: {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr,
                  flush=True)
        except (OSError, ValueError):
            pass


def _log_warnings_to_stderr(cmd):
    """The library's warnings (unreachable members, a publisher waiting on
    an absent logger, undrained messages at close) as one line each."""
    lg = logging.getLogger("rpbcast")
    for h in list(lg.handlers):
        if isinstance(h, _ToStderr):
            lg.removeHandler(h)
    lg.addHandler(_ToStderr(cmd))
    if lg.level == logging.NOTSET or lg.level > logging.WARNING:
        lg.setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
