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
* a standalone cluster (``spark://host:port``): sized from what it offers,
  read from the master's status page (``http://host:8080/json/``, or
  ``RPBCAST_SPARK_MASTER_UI``): executors get most of the memory a worker
  has free (Spark's default is a 1 GB heap whatever the worker offers, and
  the per-message tables did not fit: 2 runs of 4 died of out-of-memory),
  shuffle partitions a few per core; the driver -- this process -- gets the
  same heap as in local mode and an address the workers can reach.
* every mode: ``spark.rpbcast.heapMb``, the heap a task runs in, from which
  the analysis decides which joins may be broadcast (``broadcast_rows``).
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


HEAP_KEY = "spark.rpbcast.heapMb"       # the heap a task runs in (driver in local mode, executor otherwise)
SPARK_DEFAULT_HEAP_MB = 1024            # spark.executor.memory when nobody sets it
RESERVED_MB = 300                       # Spark's reserved system memory per JVM
# an executor may take this share of the memory a worker has free (the rest:
# JVM overhead beyond the heap, the Python workers, the OS)
EXECUTOR_SHARE = 0.75
MAX_EXECUTOR_MB = 64 << 10


def memory_mb(text: str) -> int:
    """'4g', '512m', '1024' (MB) -> MB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", str(text).lower())
    if not m:
        raise ValueError(f"not a memory size: {text!r} (e.g. 4g, 512m)")
    v, unit = float(m.group(1)), m.group(2) or "m"
    return int(v * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}[unit])


def cluster_resources(master: str, timeout: float = 3.0) -> Optional[dict]:
    """A standalone master's state (its status page's JSON: workers with
    cores, coresfree, memory, memoryfree in MB, state), or None when the
    master is no standalone one or its status page cannot be read."""
    import json
    import urllib.request
    m = re.match(r"spark://([^:/,]+):(\d+)", master)
    if not m:
        return None
    ui = os.environ.get("RPBCAST_SPARK_MASTER_UI")
    urls = [ui] if ui else [f"http://{m.group(1)}:{p}" for p in range(8080, 8084)]
    for u in urls:
        try:
            with urllib.request.urlopen(u.rstrip("/") + "/json/", timeout=timeout) as r:
                st = json.load(r)
        except (OSError, ValueError):
            continue
        if isinstance(st, dict) and "workers" in st:      # (a worker's page has no workers)
            return st
    return None


def cluster_sizing(resources: dict) -> Dict[str, str]:
    """Executor heap and partitioning for a standalone cluster's state."""
    alive = [w for w in resources.get("workers", []) if w.get("state", "ALIVE") == "ALIVE"]
    if not alive:
        return {}
    free_mb = min(int(w.get("memoryfree", w.get("memory", 0))) for w in alive)
    cores = sum(int(w.get("cores", 1)) for w in alive)
    heap = int(min(MAX_EXECUTOR_MB, max(SPARK_DEFAULT_HEAP_MB, free_mb * EXECUTOR_SHARE)))
    if heap > free_mb:
        heap = free_mb              # a small worker: all it has (Spark would not start an executor otherwise)
    parts = max(8, 4 * cores)
    return {"spark.executor.memory": f"{heap}m", "spark.sql.shuffle.partitions": str(parts),
            "spark.default.parallelism": str(parts), "spark.sql.files.maxPartitionBytes": str(32 << 20)}


def _address_towards(host: str) -> Optional[str]:
    """This host's address on the way to `host` (a UDP connect sends nothing)."""
    import socket
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def settings(master: Optional[str] = None, conf: Optional[Dict[str, str]] = None,
             driver_memory: Optional[str] = None, resources: Optional[dict] = None) -> Dict[str, str]:
    """The Spark configuration get_session() uses (without starting Spark);
    ``resources``: a standalone master's state (cluster_resources) to size
    executors from."""
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
    else:
        # the driver is this process (client mode): it collects the small
        # result tables and builds the broadcasts, as in local mode
        c["spark.driver.memory"] = driver_memory or os.environ.get("RPBCAST_SPARK_DRIVER_MEMORY", "4g")
        if resources:
            c.update(cluster_sizing(resources))
            m = re.match(r"spark://([^:/,]+):", master)
            here = _address_towards(m.group(1)) if m else None
            if here:
                c["spark.driver.host"] = here          # where the executors call back
    c.update(conf or {})
    if is_local(c["spark.master"]):
        heap = memory_mb(c["spark.driver.memory"])
    else:
        heap = memory_mb(c.get("spark.executor.memory", f"{SPARK_DEFAULT_HEAP_MB}m"))
    c.setdefault(HEAP_KEY, str(heap))
    c.pop("spark.jars.packages", None)      # offline: never resolve packages
    if "spark.driver.extraJavaOptions" not in c:
        c["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j2_file()}"
    return c


LOG4J2 = """\
# rpbcast: Spark driver logging -- errors only, into a file (rpbcast reports
# a failure on stderr in one line and points here)
rootLogger.level = error
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# the PySpark shell level: equal to the root's, so no "Setting default log level" banner
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def spark_log_file() -> str:
    """Where the driver's Spark errors go (log4j2_file)."""
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"rpbcast-spark-{os.getuid()}.log")


def log4j2_file() -> str:
    """A log4j2 configuration for the driver that keeps Spark quiet (start-up
    banners, warnings, and the errors rpbcast reports itself) and keeps its
    errors in spark_log_file()."""
    import tempfile
    text = LOG4J2.format(path=spark_log_file())
    path = os.path.join(tempfile.gettempdir(), f"rpbcast-log4j2-{os.getuid()}.properties")
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
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
    m = master or os.environ.get("RPBCAST_SPARK_MASTER") or DEFAULT_MASTER
    c = settings(master, conf, driver_memory, resources=None if is_local(m) else cluster_resources(m))
    if not is_local(m) and "spark.executor.memory" not in c:
        print(f"rpbcast: note: could not read what {m} offers (its status page): executors get Spark's "
              f"default 1 GB heap; give them more with --conf spark.executor.memory=...", file=sys.stderr)
    set_environment(c["spark.master"])
    from pyspark.sql import SparkSession
    b = SparkSession.builder.appName(app)
    for k, v in c.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if HEAP_KEY not in (conf or {}):
        # getOrCreate hands back a running session with our runtime keys
        # applied but its JVMs as they were started: the heap is the one
        # the context runs with, not the one asked for
        spark.conf.set(HEAP_KEY, str(running_heap_mb(spark.sparkContext.getConf())))
    return spark


def running_heap_mb(sc_conf) -> int:
    """The heap a task runs in, from a started SparkContext's configuration
    (the driver's in local mode, an executor's otherwise; Spark's 1 GB when
    unset)."""
    key = "spark.driver.memory" if is_local(sc_conf.get("spark.master", "")) else "spark.executor.memory"
    return memory_mb(sc_conf.get(key, f"{SPARK_DEFAULT_HEAP_MB}m"))


def parse_conf(pairs) -> Dict[str, str]:
    """``["k=v", ...]`` from repeated ``--conf`` options."""
    out = {}
    for p in pairs or ():
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ValueError(f"--conf expects KEY=VALUE, got {p!r}")
        out[k.strip()] = v.strip()
    return out


def broadcast_rows(spark, bytes_per_row: int = 64) -> int:
    """How many rows of a join side may be broadcast: a broadcast hash table
    cannot spill and an executor holds it whole, so at most a third of the
    unified memory of the heap a task runs in (spark.rpbcast.heapMb) --
    12 M sends (64 bytes a row) in a 4 GB local driver, 2 M in a
    cluster's default 1 GB executor, where the fixed 12 M of local mode
    died of out-of-memory."""
    try:
        heap = int(spark.conf.get(HEAP_KEY))
    except Exception:       # noqa: BLE001 -- a session not made here
        heap = SPARK_DEFAULT_HEAP_MB
    unified = max(0, heap - RESERVED_MB) * 0.6 * (1 << 20)
    return int(unified / 3 / bytes_per_row)
