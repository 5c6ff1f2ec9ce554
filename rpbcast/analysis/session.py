"""SparkSession factory with settings that work here and on a cluster.

* master: ``local[*]`` unless given (``--master``, or ``RPBCAST_SPARK_MASTER``);
  any Spark master URL (``spark://host:7077``, ``yarn``, ``k8s://...``) works
  with no code change.
* local mode binds to 127.0.0.1 (``SPARK_LOCAL_IP`` unless already set), so a
  machine with no resolvable host name or no network still works.
* ``PYSPARK_PYTHON`` is the running interpreter (in local mode always; on a
  cluster unless already set), so workers run the same Python as the driver.
* no web UI, no console progress bar, no ``spark.jars.packages`` (works
  offline: nothing is downloaded), UTC session time zone.
* local mode: few shuffle partitions (the default 200 only adds scheduling
  cost on one machine) and a driver heap large enough for 10^8-event traces.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Dict, Optional

from rpbcast.analysis import require_spark

DEFAULT_MASTER = "local[*]"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster")


def local_cores(master: str) -> int:
    m = re.match(r"local\[(\d+|\*)", master)
    if not m or m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1))


def settings(master: Optional[str] = None, conf: Optional[Dict[str, str]] = None,
             driver_memory: Optional[str] = None) -> Dict[str, str]:
    """The Spark configuration get_session() uses (without starting Spark)."""
    master = master or os.environ.get("RPBCAST_SPARK_MASTER") or DEFAULT_MASTER
    c = {
        "spark.master": master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Traces can have very many small groups; keep the default broadcast
        # threshold modest and let AQE coalesce shuffle partitions.
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
    }
    if is_local(master):
        cores = local_cores(master)
        c["spark.sql.shuffle.partitions"] = str(max(4, 4 * cores))
        # Split trace files into more tasks than cores (row groups are 1 Mi
        # events, about 5 MB): the last wave of a scan does not idle cores.
        c["spark.sql.files.maxPartitionBytes"] = str(32 << 20)
        c["spark.default.parallelism"] = str(max(4, 4 * cores))
        c["spark.driver.host"] = "127.0.0.1"
        c["spark.driver.bindAddress"] = "127.0.0.1"
        c["spark.driver.memory"] = driver_memory or os.environ.get("RPBCAST_SPARK_DRIVER_MEMORY", "4g")
    elif driver_memory:
        c["spark.driver.memory"] = driver_memory
    c.update(conf or {})
    c.pop("spark.jars.packages", None)      # offline: never resolve packages
    if "spark.driver.extraJavaOptions" not in c:
        c["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j2_file()}"
    return c


LOG4J2 = """\
# rpbcast: Spark driver logging -- errors only, on stderr
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# the PySpark shell level: equal to the root's, so no "Setting default log level" banner
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def log4j2_file() -> str:
    """A log4j2 configuration for the driver that keeps Spark quiet (start-up
    banners and warnings) unless something fails."""
    import tempfile
    path = os.path.join(tempfile.gettempdir(), f"rpbcast-log4j2-{os.getuid()}.properties")
    try:
        with open(path) as f:
            if f.read() == LOG4J2:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(LOG4J2)
    os.replace(tmp, path)
    return path


def set_environment(master: str):
    """Environment variables Spark reads when it starts (set before the JVM)."""
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def get_session(master: Optional[str] = None, app: str = "rpbcast", conf: Optional[Dict[str, str]] = None,
                driver_memory: Optional[str] = None, log_level: str = "ERROR"):
    """A SparkSession (the running one if this process already has one)."""
    require_spark()
    import warnings
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    c = settings(master, conf, driver_memory)
    set_environment(c["spark.master"])
    from pyspark.sql import SparkSession
    b = SparkSession.builder.appName(app)
    for k, v in c.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def parse_conf(pairs) -> Dict[str, str]:
    """``["k=v", ...]`` from repeated ``--conf`` options."""
    out = {}
    for p in pairs or ():
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ValueError(f"--conf expects KEY=VALUE, got {p!r}")
        out[k.strip()] = v.strip()
    return out
