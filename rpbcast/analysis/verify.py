"""Exactly-once verification.

Every (sender, inc, seq) that was sent must be delivered exactly once at
every node that was a receiver when it was sent (run.json roles and
``members_at_send``; docs/traces.md).  From the per-message table
(messages.py), with bitset arithmetic per id:

* ``missing``   expected receivers with no ``deliver`` and no ``lost`` record;
* ``lost``      expected receivers with no ``deliver`` that recorded the id as
  ``lost`` (given up, purged, unwanted) -- reported separately, not a violation;
* ``duplicate`` nodes that delivered the id more than once (``count`` = times);
* ``unsent``    nodes that delivered an id with no ``send`` event (``count``);
* ``send_duplicated`` the id has several ``send`` events (``count``; node =
  the sender);
* ``outside``   deliveries at nodes that were not receivers of the id
  (information: e.g. a member that joined early; ``count`` = times).

Violations are missing, duplicate, unsent and send_duplicated.  Ids are
listed from the bitsets; the per-node counts of the few ids with extra
deliveries come from a second, small join of those ids with the deliveries.
"""
from __future__ import annotations

from rpbcast.analysis.session import broadcast_rows
from rpbcast.analysis.messages import Layout, popcount

VIOLATIONS = ("missing", "duplicate", "unsent", "send_duplicated")
KINDS = VIOLATIONS + ("lost", "outside")
PROBLEM_ROW_BYTES = 384         # a problem id's row in a broadcast hash table (session.broadcast_rows)


def annotate(m, lay: Layout):
    """Add the verification columns to the per-message table."""
    from pyspark.sql import functions as F
    sent = F.col("t_send").isNotNull()
    for j in range(lay.words):
        e, d, lo = F.col(f"e{j}"), F.col(f"d{j}"), F.col(f"l{j}")
        a = e.bitwiseAND(F.bitwise_not(d))
        m = m.withColumn(f"mi{j}", a.bitwiseAND(F.bitwise_not(lo))).withColumn(f"lr{j}", a.bitwiseAND(lo)) \
             .withColumn(f"o{j}", F.when(sent, d.bitwiseAND(F.bitwise_not(e))).otherwise(F.lit(0).cast("long")))
    w = range(lay.words)
    return (m.withColumn("n_exp", popcount([f"e{j}" for j in w]))
             .withColumn("n_distinct", popcount([f"d{j}" for j in w]))
             .withColumn("n_missing", popcount([f"mi{j}" for j in w]))
             .withColumn("n_lost", popcount([f"lr{j}" for j in w]))
             .withColumn("n_outside", popcount([f"o{j}" for j in w]))
             .withColumn("extra", F.col("n_dl") - F.col("n_distinct"))
             .withColumn("unsent", (~sent) & (F.col("n_dl") > 0)))


def summary_columns():
    """Aggregate columns for the one-pass summary over the annotated table."""
    from pyspark.sql import functions as F
    sent = F.col("t_send").isNotNull()

    def total(c):
        return F.coalesce(F.sum(c), F.lit(0)).cast("long")

    return [
        F.count(F.when(sent, 1)).alias("messages_sent"),
        total("n_exp").alias("expected_deliveries"),
        total("n_dl").alias("deliveries"),
        total("n_missing").alias("missing"),
        total("n_lost").alias("lost"),
        total("extra").alias("extra_deliveries"),
        F.count(F.when(F.col("extra") > 0, 1)).alias("ids_with_extra_deliveries"),
        F.count(F.when(F.col("unsent"), 1)).alias("unsent_ids"),
        total(F.when(F.col("unsent"), F.col("n_dl"))).alias("unsent"),
        F.count(F.when(F.col("n_send") > 1, 1)).alias("send_duplicated"),
        total("n_outside").alias("outside"),
        F.count(F.when(sent & (F.col("n_missing") + F.col("n_lost") == 0) & (F.col("extra") == 0)
                       & (F.col("n_exp") > 0), 1)).alias("complete"),
        F.min("t_send").alias("t_first_send"),
        F.max("t_send").alias("t_last_send"),
        F.max("t_dl_max").alias("t_last_deliver"),
    ]


def _positions(F, lay, prefix):
    """Column: array of the node positions set in words prefix0..."""
    parts = [f"transform(filter(sequence(0, 63), b -> (shiftright({prefix}{j}, b) & 1) = 1), b -> b + {64 * j})"
             for j in range(lay.words)]
    return F.expr(parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})")


def issues(spark, ma, ev, lay: Layout, s: dict):
    """One row per (kind, node, id) problem: kind, node, sender, inc, seq,
    count, as a DataFrame (empty when the summary s shows none)."""
    from pyspark.sql import functions as F
    cols = ["kind", "node", "sender", "inc", "seq", "count"]
    parts = []
    if s["missing"] or s["lost"]:
        f = ma.where((F.col("n_missing") > 0) | (F.col("n_lost") > 0))
        for kind, prefix in (("missing", "mi"), ("lost", "lr")):
            x = f.select("sender", "inc", "seq", F.explode(_positions(F, lay, prefix)).alias("p"))
            parts.append(x.select(F.lit(kind).alias("kind"), lay.node_of(F.col("p")).alias("node"),
                                  "sender", "inc", "seq", F.lit(0).cast("long").alias("count")))
    if s["send_duplicated"]:
        parts.append(ma.where(F.col("n_send") > 1).select(
            F.lit("send_duplicated").alias("kind"), F.col("sender").alias("node"), "sender", "inc", "seq",
            F.col("n_send").cast("long").alias("count")))
    if s["extra_deliveries"] or s["unsent"] or s["outside"]:
        p = ma.where((F.col("extra") > 0) | F.col("unsent") | (F.col("n_outside") > 0)).select(
            "sender", "inc", "seq", "unsent", *[F.col(f"o{j}") for j in range(lay.words)])
        n = p.count()
        d = ev.where(F.col("event") == "deliver").select("node", "sender", "inc", "seq")
        small = n <= broadcast_rows(spark, PROBLEM_ROW_BYTES + 8 * lay.words)
        j = d.join(F.broadcast(p) if small else p, ["sender", "inc", "seq"])
        c = lay.positions(spark, j.groupBy("node", "sender", "inc", "seq", "unsent",
                                           *[f"o{w}" for w in range(lay.words)]).count())
        word = ("CASE " + " ".join(f"WHEN shiftright(_pos, 6) = {w} THEN o{w}" for w in range(lay.words))
                + " ELSE 0L END")
        outside = F.expr(f"_pos IS NOT NULL AND (shiftright({word}, _pos & 63) & 1) = 1")
        kind = (F.when(F.col("unsent"), "unsent").when(outside, "outside")
                .when(F.col("count") > 1, "duplicate"))
        parts.append(c.select(kind.alias("kind"), "node", "sender", "inc", "seq",
                              F.col("count").cast("long").alias("count")).where(F.col("kind").isNotNull()))
    if not parts:
        return spark.createDataFrame([], "kind string, node long, sender long, inc long, seq long, count long")
    out = parts[0]
    for x in parts[1:]:
        out = out.unionByName(x)
    return out.select(*cols)


def verdict(s: dict) -> bool:
    """True if the summary shows no violation."""
    return all(int(s.get(k, 0) or 0) == 0 for k in ("missing", "extra_deliveries", "unsent", "send_duplicated"))
