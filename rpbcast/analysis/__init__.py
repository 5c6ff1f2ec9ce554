"""Trace analysis on Spark (``rpbcast analyze``, ``rpbcast sweep``).

PySpark, pyarrow and matplotlib are an optional extra
(``pip install 'rpbcast[spark]'``); importing this package, or
``rpbcast.analysis.cli``, does not need them.  Everything on the row path is
built-in Spark SQL (joins, aggregations, higher-order array functions,
``percentile_approx``): no Python UDFs.  See docs/analysis.md.
"""
from __future__ import annotations

import os
import shutil

INSTALL_HINT = "pip install 'rpbcast[spark]'"


class MissingDependency(RuntimeError):
    """An optional dependency of the analysis commands is not installed."""


def require_spark():
    """Raise MissingDependency with install instructions unless PySpark,
    pyarrow and a Java runtime are available."""
    missing = []
    for mod in ("pyspark", "pyarrow"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise MissingDependency(
            f"this command needs {' and '.join(missing)} (the 'spark' extra), which "
            f"{'is' if len(missing) == 1 else 'are'} not installed.\n"
            f"Install it with:\n    {INSTALL_HINT}\n"
            "(plus a Java 17+ runtime, e.g. apt-get install openjdk-17-jre-headless)")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise MissingDependency(
            "Spark needs a Java 17+ runtime and none was found (no JAVA_HOME, no java on PATH).\n"
            "Install one, e.g.:\n    apt-get install openjdk-17-jre-headless")
