"""Delivery and repair latency.

* delivery latency of a delivery = its ``deliver`` time minus the id's
  ``send`` time (same clock: one host's CLOCK_MONOTONIC, or virtual time);
  over all deliveries, per sender, per receiver, and per time bucket (by send
  time, from the first send of the run).  Receive latency is the same for
  the first receipt (``recv``): what the network and the repairs cost,
  without the application's (or FIFO order's) wait before delivery.  Both
  are joined with the sends in one pass -- a broadcast hash join while the
  sends fit comfortably in memory, else a shuffled join;
* all-receivers latency of a message = last delivery minus send, over ids
  delivered at every expected receiver (thesis §7.3: "the time between a
  sender multicasting a packet and all receivers receiving the packet");
* repair latency of a gap = ``deliver`` of the missing id at the node that
  detected the gap minus the ``gap`` time there, by how the id arrived
  (``recv`` aux: a repair from a logger, from a peer, or the original late);
  ``arrive_ns`` = the filling ``recv`` minus the gap (loggers deliver nothing).

Each is a histogram (hist.py: bins at most 2**-(bits-1) wide, relative) and
percentiles p50/p90/p99/p99.9 read from it, plus n, mean, min, max (exact).
"""
from __future__ import annotations

from rpbcast.analysis import hist

from rpbcast.analysis.session import broadcast_rows

# bytes a row of a broadcast join side takes in its hash table: how many
# sends / gap ids may be broadcast follows from the heap (session.broadcast_rows)
SEND_ROW_BYTES = 64
GAP_ROW_BYTES = 160

KEYS = ["sender", "inc", "seq"]


def deliveries(ev, t0, bucket_ns, n_sends=0, dedupe_sends=False):
    """One row per ``deliver`` (what='deliver') and per first receipt,
    ``recv`` (what='receive'), of a sent id: what, sender, node, t_send,
    lat_ns, bucket.  Both kinds are joined with the sends in one pass."""
    from pyspark.sql import functions as F
    e = F.col("event")
    s = ev.where(e == "send").select(*KEYS, F.col("t_ns").alias("t_send"))
    if dedupe_sends:
        s = s.groupBy(*KEYS).agg(F.min("t_send").alias("t_send"))
    d = ev.where(e.isin("deliver", "recv")).select(
        F.when(e == "deliver", "deliver").otherwise("receive").alias("what"), "node", *KEYS, F.col("t_ns").alias("t"))
    small = n_sends <= broadcast_rows(ev.sparkSession, SEND_ROW_BYTES)
    j = d.join(F.broadcast(s) if small else s, KEYS)
    return j.select("what", "sender", "node", "t_send", (F.col("t") - F.col("t_send")).alias("lat_ns"),
                    F.floor((F.col("t_send") - F.lit(t0)) / F.lit(bucket_ns)).cast("long").alias("bucket"))


def _both(h, fixed=()):
    """(percentiles, histogram) Arrow tables from a histogram DataFrame."""
    t = h.orderBy(*fixed, "by", "key", "lo").toArrow()
    return hist.percentiles(t, fixed=fixed), t


def delivery(ev, t0, bucket_ns, n_sends=0, dedupe_sends=False, bits=hist.DEFAULT_BITS):
    """Delivery and receive latency by ('all', 'sender', 'node', 'bucket'):
    (percentiles, histogram) Arrow tables with a column what ('deliver',
    'receive'); key = sender / node id / bucket number."""
    return _both(hist.histograms(deliveries(ev, t0, bucket_ns, n_sends, dedupe_sends), "lat_ns",
                                 ["sender", "node", "bucket"], bits=bits, fixed=["what"]), fixed=["what"])


def all_receivers(ma, bits=hist.DEFAULT_BITS):
    """Thesis §7.3 latency (last delivery - send) over complete messages,
    overall and per sender: (percentiles, histogram)."""
    from pyspark.sql import functions as F
    done = ma.where(F.col("t_send").isNotNull() & (F.col("n_exp") > 0)
                    & (F.col("n_missing") + F.col("n_lost") == 0))
    lat = (F.col("t_dl_max") - F.col("t_send")).alias("lat_ns")
    return _both(hist.histograms(done.select("sender", lat), "lat_ns", ["sender"], bits=bits))


def repairs(ev, n_gap_ids=0, cached=None):
    """One row per (node, id) that a node detected missing: node, sender, inc,
    seq, t_gap, t_deliver, t_arrive, aux of the filling recv, source,
    repair_ns (deliver - gap), arrive_ns (fill recv - gap)."""
    from pyspark.sql import functions as F
    e, aux = F.col("event"), F.col("aux")
    g = ev.where(e == "gap").select(
        "node", "sender", "inc",
        F.explode(F.sequence(F.col("seq"), F.col("seq") + F.greatest(F.col("size"), F.lit(1)).cast("long")
                             - F.lit(1))).alias("seq"),
        F.col("t_ns").alias("t"), F.lit(0).alias("k"), F.lit(0).alias("a"))
    x = ev.where((e == "deliver") | ((e == "recv") & (aux.bitwiseAND(3) != 0))).select(
        "node", *KEYS, F.col("t_ns").alias("t"), F.when(e == "deliver", 1).otherwise(2).alias("k"),
        aux.alias("a"))
    small = n_gap_ids <= broadcast_rows(ev.sparkSession, GAP_ROW_BYTES)
    if small and cached is not None:
        g = g.cache()              # read the gaps once, for the join and the union
        cached.append(g)
    keys = g.select("node", *KEYS)
    x = x.join(F.broadcast(keys) if small else keys.distinct(), ["node", *KEYS], "left_semi")
    k = F.col("k")
    r = g.unionByName(x).groupBy("node", *KEYS).agg(
        F.min(F.when(k == 0, F.col("t"))).alias("t_gap"),
        F.min(F.when(k == 1, F.col("t"))).alias("t_deliver"),
        F.min(F.when(k == 2, F.col("t"))).alias("t_arrive"),
        F.coalesce(F.bit_or(F.when(k == 2, F.col("a"))), F.lit(0)).alias("aux"))
    r = r.where(F.col("t_gap").isNotNull())
    src = (F.when(F.col("aux").bitwiseAND(4) != 0, "logger").when(F.col("aux").bitwiseAND(2) != 0, "peer")
           .when(F.col("aux").bitwiseAND(1) != 0, "original").otherwise("none"))
    return r.select("*", src.alias("source"), (F.col("t_deliver") - F.col("t_gap")).alias("repair_ns"),
                    (F.col("t_arrive") - F.col("t_gap")).alias("arrive_ns"))


def repair(ev, n_gap_ids=0, bits=hist.DEFAULT_BITS):
    """Repair latency: (percentiles, histogram) of repair_ns by ('all',
    'source'), and counts per source (source, gaps, delivered, arrived)."""
    from pyspark.sql import functions as F
    cached = []
    r = repairs(ev, n_gap_ids, cached).cache()
    try:
        pct, h = _both(hist.histograms(r, "repair_ns", ["source"], key_type="string", bits=bits))
        counts = (r.groupBy("source").agg(F.count(F.lit(1)).alias("gaps"), F.count("t_deliver").alias("delivered"),
                                          F.count("t_arrive").alias("arrived"))
                  .orderBy("source").toArrow())
    finally:
        r.unpersist()
        for c in cached:
            c.unpersist()
    return pct, h, counts
