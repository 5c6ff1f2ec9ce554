"""The per-message table the exactly-once check starts from.

One aggregation keyed by message id (sender, inc, seq) over the ``send``,
``deliver`` and ``lost`` events (``lost`` ranges expanded to ids), with
fixed-width aggregates only (no per-message arrays, so Spark's code-generated
hash aggregation does the work):

=============  ========================================================
sender, inc,   the message id
seq
t_send         time of the ``send`` event (null: never recorded as sent)
n_send         number of ``send`` events for the id (1 unless broken)
n_dl           ``deliver`` events for the id, at all nodes together
t_dl_max       last delivery
d0, d1, ...    bitsets of the nodes that delivered it (64 nodes a word)
l0, l1, ...    bitsets of the nodes that recorded it ``lost`` (0 when the
               run has no ``lost`` event)
e0, e1, ...    bitsets of its expected receivers (run.json, below)
=============  ========================================================

Nodes are numbered for the bitsets by Layout: directly by id when the ids
are dense (1..n, the usual case), else through a small broadcast table.
"""
from __future__ import annotations

import math
from typing import List, Optional


class Layout:
    """Bit positions of the nodes in the per-message bitsets."""

    def __init__(self, ids):
        self.ids = sorted(set(int(i) for i in ids)) or [0]
        lo, hi = self.ids[0], self.ids[-1]
        dense_words = math.ceil((hi - lo + 1) / 64)
        need = math.ceil(len(self.ids) / 64)
        # Positions are id - base when that costs at most twice the words.
        self.direct = dense_words <= 2 * need
        self.base = lo
        self.words = dense_words if self.direct else need
        self.pos = {i: (i - lo if self.direct else k) for k, i in enumerate(self.ids)}

    def positions(self, spark, df):
        """df with a column ``_pos`` (the row's node position)."""
        from pyspark.sql import functions as F
        if self.direct:
            return df.withColumn("_pos", (F.col("node") - F.lit(self.base)).cast("int"))
        t = spark.createDataFrame([(i, p) for i, p in self.pos.items()], "node long, _pos int")
        return df.join(F.broadcast(t), "node", "left")

    def node_of(self, pos):
        """Column: node id at position `pos` (a Column)."""
        from pyspark.sql import functions as F
        if self.direct:
            return (pos + F.lit(self.base)).cast("long")
        return F.element_at(F.array(*[F.lit(i).cast("long") for i in self.ids]), pos + 1)

    def masks(self, nodes) -> List[int]:
        """Bitset words (signed 64-bit ints) of a set of node ids."""
        w = [0] * self.words
        for n in nodes:
            p = self.pos.get(int(n))
            if p is not None:
                w[p >> 6] |= 1 << (p & 63)
        return [x - (1 << 64) if x >= 1 << 63 else x for x in w]


def layout(run, trace_nodes=()) -> Layout:
    return Layout([n["id"] for n in run.nodes] + [int(x) for x in trace_nodes] + list(run.senders))


def _bit(F, j):
    return F.expr(f"CASE WHEN shiftright(_pos, 6) = {j} THEN shiftleft(1L, _pos & 63) ELSE 0L END")


def per_message(spark, ev, run, lay: Layout, has_lost: bool = True):
    """The per-message DataFrame (module docstring), with expected-receiver
    words e0.. and t_send etc.  has_lost=False skips looking for ``lost``
    events (when the event counts show none: one scan fewer)."""
    from pyspark.sql import functions as F
    e = F.col("event")
    single = ev.where(e.isin("send", "deliver")).select(
        "sender", "inc", "seq", "node", F.col("t_ns").alias("t"), F.when(e == "send", 0).otherwise(1).alias("k"))
    u = single
    if has_lost:
        lost = ev.where(e == "lost").select(
            "sender", "inc",
            F.explode(F.sequence(F.col("seq"), F.col("seq") + F.greatest(F.col("size"), F.lit(1)).cast("long")
                                 - F.lit(1))).alias("seq"),
            "node", F.col("t_ns").alias("t"), F.lit(4).alias("k"))
        u = u.unionByName(lost)
    u = lay.positions(spark, u)
    k = F.col("k")
    # As few aggregates as the checks need: this aggregation sees every
    # send and delivery of the run.
    aggs = [
        F.min(F.when(k == 0, F.col("t"))).alias("t_send"),
        F.count(F.when(k == 0, 1)).alias("n_send"),
        F.count(F.when(k == 1, 1)).alias("n_dl"),
        F.max(F.when(k == 1, F.col("t"))).alias("t_dl_max"),
    ]
    for j in range(lay.words):
        aggs.append(F.bit_or(F.when(k == 1, _bit(F, j))).alias(f"d{j}"))
    if has_lost:
        for j in range(lay.words):
            aggs.append(F.bit_or(F.when(k == 4, _bit(F, j))).alias(f"l{j}"))
    m = u.groupBy("sender", "inc", "seq").agg(*aggs)
    m = m.fillna({f"d{j}": 0 for j in range(lay.words)})
    if has_lost:
        m = m.fillna({f"l{j}": 0 for j in range(lay.words)})
    else:
        for j in range(lay.words):
            m = m.withColumn(f"l{j}", F.lit(0).cast("long"))
    sent = F.col("t_send").isNotNull()
    for j, w in enumerate(expected_words(run, lay)):
        m = m.withColumn(f"e{j}", F.when(sent, w).otherwise(F.lit(0).cast("long")))
    return m


def expected_words(run, lay: Layout):
    """Columns e0.. : bitsets of the receivers of the row's id
    (run.json roles and ``members_at_send``, see data.Run.receivers)."""
    from pyspark.sql import functions as F
    explicit, members = run.receivers()
    out = []
    for j in range(lay.words):
        def word(nodes, j=j):
            return lay.masks(nodes)[j]
        # default: every member except the sender
        default = F.lit(word(members)).cast("long")
        per_sender = {}
        for s in set(members):
            pos = lay.pos.get(s)
            if pos is not None and pos >> 6 == j:
                per_sender[s] = word([m for m in members if m != s])
        col: Optional[object] = None
        for s, v in sorted(per_sender.items()):
            col = (F.when(F.col("sender") == s, F.lit(v).cast("long")) if col is None
                   else col.when(F.col("sender") == s, F.lit(v).cast("long")))
        expr = default if col is None else col.otherwise(default)
        if explicit:
            ex = None
            for s, rows in sorted(explicit.items()):
                w = F.lit(0).cast("long")
                whole = word([n for n, lo, hi in rows if lo is None and hi is None])
                if whole:
                    w = F.lit(whole).cast("long")
                for n, lo, hi in rows:
                    if lo is None and hi is None:
                        continue
                    bit = word([n])
                    if not bit:
                        continue
                    cond = F.lit(True)
                    if lo is not None:
                        cond = cond & (F.col("seq") >= int(lo))
                    if hi is not None:
                        cond = cond & (F.col("seq") <= int(hi))
                    w = w.bitwiseOR(F.when(cond, F.lit(bit).cast("long")).otherwise(F.lit(0).cast("long")))
                ex = F.when(F.col("sender") == s, w) if ex is None else ex.when(F.col("sender") == s, w)
            expr = ex.otherwise(expr)
        out.append(expr)
    return out


def popcount(cols):
    """Column: total set bits over the given long columns."""
    from pyspark.sql import functions as F
    total = None
    for c in cols:
        b = F.bit_count(c).cast("long")
        total = b if total is None else total + b
    return total if total is not None else F.lit(0).cast("long")
