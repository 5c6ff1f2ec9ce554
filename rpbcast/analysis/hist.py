"""Log-linear latency histograms and the percentiles read from them.

A value v >= 0 falls in the bin whose lower edge keeps the top ``bits``
significant bits of v (values below 2**bits have a bin of their own), so a
bin is at most 2**-(bits-1) of its values wide -- HdrHistogram's layout,
computed with built-in shifts.  The histograms of every dimension are
counted in one aggregation (grouping sets over the dimensions and the bin;
partial aggregation keeps only the occupied bins per task).
Percentiles are read from the cumulative counts on the driver (the
histograms are small): the p-quantile reported is the largest value in the
bin that holds the ceil(p*n)-th smallest value -- an observed value, at
least the exact quantile (NumPy's ``inverted_cdf``), and less than
2**-(bits-1) of it above.  Negative values (clock skew between hosts) are
binned by magnitude with the sign kept.

Counting bins costs a hash aggregation, unlike sketches, and histograms
merge: the bins are written out and add up across runs.
"""
from __future__ import annotations

from typing import Sequence

QUANTILES = (0.5, 0.9, 0.99, 0.999)
QNAMES = ("p50", "p90", "p99", "p99_9")
DEFAULT_BITS = 8


def bin_expr(col: str, bits: int = DEFAULT_BITS) -> str:
    """SQL expression: the lower edge of col's bin (same sign as col)."""
    a = f"abs({col})"
    e0 = f"cast(floor(log2({a})) as int)"
    # log2 on doubles can be off by one next to powers of two: correct it.
    e = (f"(CASE WHEN shiftright({a}, {e0}) = 0 THEN {e0} - 1 "
         f"WHEN shiftright({a}, {e0} + 1) > 0 THEN {e0} + 1 ELSE {e0} END)")
    k = f"({e} - {bits - 1})"
    lo = f"CASE WHEN {a} < {1 << bits} THEN {a} ELSE shiftleft(shiftright({a}, {k}), {k}) END"
    return f"CASE WHEN {col} IS NULL THEN NULL WHEN {col} < 0 THEN -({lo}) ELSE {lo} END"


def histograms(df, value: str, dims: Sequence[str], key_type: str = "bigint", bits: int = DEFAULT_BITS,
               fixed: Sequence[str] = ()):
    """Histogram rows ([fixed..,] by, key, lo, n, vmin, vmax, vsum) of
    df[value] over all rows (by='all') and by each column in dims (by=<dim>,
    key=its value), as a DataFrame; columns in `fixed` split every histogram
    (they are in every grouping set).  Rows with a null value are left out."""
    from pyspark.sql import functions as F
    fixed = list(fixed)
    x = df.where(F.col(value).isNotNull()).select(*fixed, *dims, F.col(value).alias("v"),
                                                  F.expr(bin_expr(value, bits)).alias("lo"))
    sets = [fixed + [d, "lo"] for d in dims] + [fixed + ["lo"]]
    g = x.groupingSets(sets, *fixed, *dims, "lo").agg(
        F.count(F.lit(1)).alias("n"), F.min("v").alias("vmin"), F.max("v").alias("vmax"),
        F.sum(F.col("v").cast("double")).alias("vsum"), *[F.grouping(d).alias("_g_" + d) for d in dims])
    by = F.lit("all")
    for d in reversed(dims):
        by = F.when(F.col("_g_" + d) == 0, F.lit(d)).otherwise(by)
    key = F.coalesce(*[F.col(d) for d in dims]).cast(key_type) if dims else F.lit(None).cast(key_type)
    return g.select(*fixed, by.alias("by"), key.alias("key"), "lo", "n", "vmin", "vmax", "vsum")


def percentiles(hist, quantiles=QUANTILES, names=QNAMES, fixed: Sequence[str] = ()):
    """Percentile rows ([fixed..,] by, key, n, mean, min, max, p..) from
    histogram rows (an Arrow table of histograms()).  The histograms are
    small (groups x occupied bins), so the cumulative counts are read on the
    driver."""
    import numpy as np
    import pyarrow as pa
    fixed = list(fixed)
    cols = {k: hist.column(k).to_numpy(zero_copy_only=False) for k in ("lo", "n", "vmin", "vmax", "vsum")}
    gcols = [hist.column(c).to_pylist() for c in fixed + ["by", "key"]]
    groups = {}
    for i, g in enumerate(zip(*gcols)):
        groups.setdefault(g, []).append(i)
    rows = []
    for g, idx in sorted(groups.items(), key=lambda x: tuple((v is None, v) for v in x[0])):
        idx = np.array(idx)
        order = idx[np.argsort(cols["lo"][idx], kind="stable")]
        n = cols["n"][order].astype(np.int64)
        cum = np.cumsum(n)
        tot = int(cum[-1])
        r = dict(zip(fixed, g[:len(fixed)]))
        r.update({"by": g[-2], "key": g[-1], "n": tot, "mean": float(cols["vsum"][order].sum() / tot),
             "min": int(cols["vmin"][order].min()), "max": int(cols["vmax"][order].max())})
        for q, nm in zip(quantiles, names):
            rank = max(1, int(np.ceil(tot * q)))
            r[nm] = int(cols["vmax"][order][np.searchsorted(cum, rank)])
        rows.append(r)
    kt = hist.schema.field("key").type
    schema = pa.schema([(c, hist.schema.field(c).type) for c in fixed] +
                       [("by", pa.string()), ("key", kt), ("n", pa.int64()), ("mean", pa.float64()),
                        ("min", pa.int64()), ("max", pa.int64())] + [(nm, pa.int64()) for nm in names])
    return pa.Table.from_pylist(rows, schema=schema)
