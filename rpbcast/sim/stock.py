"""Workloads for the simulator and `rpbcast stress`.

Stock trading (Peinl et al., used by the FIFO-SRB paper §3.2): 875 items,
25 of them taking 50% of the updates, 100 taking 40%, 750 taking 10%.  A
message's label is its item, so later updates obsolete earlier ones.
"""
from __future__ import annotations

import numpy as np

STOCK_TIERS = ((25, 0.50), (100, 0.40), (750, 0.10))


class StockWorkload:
    def __init__(self, seed: int = 0, tiers=STOCK_TIERS):
        self.rng = np.random.default_rng(seed)
        self.sizes = np.array([n for n, _ in tiers])
        self.probs = np.array([p for _, p in tiers], dtype=float)
        if abs(self.probs.sum() - 1.0) > 1e-9:
            raise ValueError("tier frequencies must add up to 1")
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)[:-1]))
        self.items = int(self.sizes.sum())

    def labels(self, n: int) -> np.ndarray:
        """Item (label) of each of the next n updates, as uint64."""
        tier = self.rng.choice(len(self.sizes), size=n, p=self.probs)
        within = (self.rng.random(n) * self.sizes[tier]).astype(np.int64)
        return (self.offsets[tier] + within).astype(np.uint64)


def obsolete_fraction(labels: np.ndarray, window: int) -> float:
    """Share of messages made obsolete by a later message with their label
    within `window` messages: the part FIFO-SRB can purge from a window of
    that size."""
    last = {}
    n = len(labels)
    obsolete = 0
    for i, l in enumerate(labels.tolist()):
        j = last.get(l)
        if j is not None and i - j <= window:
            obsolete += 1
        last[l] = i
    return obsolete / n if n else 0.0
