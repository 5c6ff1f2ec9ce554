"""Gossip target selection (thesis §4.2, §7.5, Table 7.2).

uniform:   every candidate equally likely.
linear:    probability falls linearly as the round-trip time grows.
quadratic: probability falls with the square.

With RTTs r_i and r_max the largest, the weight of candidate i is
(1 - r_i / (r_max * (1 + slack))) ** p with p = 1 (linear) or 2
(quadratic); slack keeps the farthest candidate selectable.  Candidates
without an RTT estimate take the median of the known ones.
"""
from __future__ import annotations

import bisect
import itertools

SLACK = 0.25
POWER = {"uniform": 0, "linear": 1, "quadratic": 2}


def weights(rtts, kind: str):
    p = POWER[kind]
    if p == 0 or not rtts:
        return [1.0] * len(rtts)
    known = sorted(r for r in rtts if r is not None)
    if not known:
        return [1.0] * len(rtts)
    med = known[len(known) // 2]
    vals = [med if r is None else r for r in rtts]
    rmax = max(vals)
    if rmax <= 0:
        return [1.0] * len(rtts)
    return [max(1.0 - r / (rmax * (1 + SLACK)), 1e-9) ** p for r in vals]


def contact_matrix(rtt_matrix, kind: str):
    """C(i, j): probability that member i contacts member j, for the
    convergence recurrence of §4.2.2.  rtt_matrix[i][j] is the RTT."""
    n = len(rtt_matrix)
    out = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        w = weights([rtt_matrix[i][j] for j in others], kind)
        s = sum(w)
        row = [0.0] * n
        for j, wj in zip(others, w):
            row[j] = wj / s
        out.append(row)
    return out


def choose(candidates, rtts, kind: str, rng):
    """One candidate drawn with the selection distribution."""
    if not candidates:
        return None
    if kind == "uniform":
        return candidates[rng.randrange(len(candidates))]
    w = weights(rtts, kind)
    cum = list(itertools.accumulate(w))
    x = rng.random() * cum[-1]
    return candidates[min(bisect.bisect_right(cum, x), len(candidates) - 1)]
