"""Running `rpbcast stress` from tests: the command as a user runs it, its
JSON summary back, and its options parsed without running anything."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys


def stress(*args, tmp_path, timeout=240):
    """(exit code, JSON summary) of `rpbcast stress --json --quiet ARGS`."""
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--json", "--quiet",
                        "--run-dir", str(tmp_path / "run"), *args],
                       capture_output=True, text=True, timeout=timeout)
    try:
        summary = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"no summary; exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r.returncode, summary


def stress_args(*argv):
    """The parsed options of `rpbcast stress ARGV`."""
    from rpbcast.tools.stress import cli as stress_cli
    p = argparse.ArgumentParser()
    stress_cli.add_parsers(p.add_subparsers(dest="cmd"))
    return p.parse_args(["stress", *argv])
