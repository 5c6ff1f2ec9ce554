"""Gossip on a topology: RTT matrices (a balanced tree, points in a square),
the engine's selection weights over them as contact matrices, initial holder
sets (random, or a region the multicast missed) and the recurrence's rounds
averaged over those sets (Fig. 4-2 (b), (c))."""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from rpbcast.experiments.convergence.chain import EPS_THESIS
from rpbcast.experiments.convergence.recurrences import initial, recurrence_rounds

# the engine's selection kinds (Config.selection), least to most biased
KINDS = ("uniform", "linear", "quadratic")


def tree_rtts(n: int, degree: int = 4, hop: float = 0.005) -> np.ndarray:
    """RTTs between the n nodes of a balanced tree in which every node is a
    member (node 0 the root, node v's parent (v - 1) // (degree - 1) once the
    root has `degree` children): 2 x hops x hop latency."""
    parent = [-1]
    kids = {0: 0}
    q = [0]
    for v in range(1, n):
        while kids[q[0]] >= (degree if q[0] == 0 else degree - 1):
            q.pop(0)
        p = q[0]
        parent.append(p)
        kids[p] += 1
        kids[v] = 0
        q.append(v)
    depth = [0] * n
    for v in range(1, n):
        depth[v] = depth[parent[v]] + 1
    anc = []
    for v in range(n):
        a, x = [], v
        while x >= 0:
            a.append(x)
            x = parent[x]
        anc.append({x: i for i, x in enumerate(a)})
    R = np.zeros((n, n))
    for u in range(n):
        for v in range(u + 1, n):
            x, d = v, 0
            while x not in anc[u]:
                x = parent[x]
                d += 1
            R[u, v] = R[v, u] = 2 * hop * (d + anc[u][x])
    return R


def geometric_rtts(n: int, seed: int = 1, scale: float = 0.1) -> np.ndarray:
    """RTTs of n members placed uniformly in a unit square: scale x distance."""
    xy = np.random.default_rng(seed).random((n, 2))
    return scale * np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1))


def topology_contact(rtts: np.ndarray, kind: str) -> np.ndarray:
    """C(i, j) from the engine's own selection weights
    (rpbcast.protocol.selection.contact_matrix: self excluded, weight
    (1 - r/(1.25 r_max))^p, p = 0, 1, 2)."""
    from rpbcast.protocol.selection import contact_matrix
    return np.array(contact_matrix(np.asarray(rtts).tolist(), kind))


def initial_sets(rtts: np.ndarray, n0: int, how: str, count: int, seed: int = 1) -> List[np.ndarray]:
    """`count` initial holder sets of size n0: 'random' (uniform subsets) or
    'clustered' (the n - n0 members nearest a random member missed the
    multicast: a loss near the edge of the tree takes out a region)."""
    n = rtts.shape[0]
    rng = np.random.default_rng([seed, n0, 0 if how == "random" else 1])
    out = []
    for _ in range(count):
        if how == "random":
            out.append(np.sort(rng.choice(n, n0, replace=False)))
        elif how == "clustered":
            c = int(rng.integers(n))
            order = np.lexsort((rng.random(n), rtts[c]))
            out.append(np.sort(order[n - n0:]))
        else:
            raise ValueError(f"how must be 'random' or 'clustered', got {how!r}")
    return out


def topology_rounds(rtts: np.ndarray, n0s: Sequence[int], eps: float = EPS_THESIS, subsets: int = 20,
                    hows: Sequence[str] = ("random", "clustered"), seed: int = 1) -> List[Dict]:
    """Recurrence rounds for pull and push with the engine's uniform, linear
    and quadratic selection on a topology, averaged over initial sets (the
    same sets for every selection kind)."""
    n = rtts.shape[0]
    Cs = {k: topology_contact(rtts, k) for k in KINDS}
    rows = []
    for how in hows:
        for n0 in n0s:
            sets = initial_sets(rtts, n0, how, subsets, seed)
            row = {"how": how, "n0": n0, "fraction": n0 / n}
            for mode in ("pull", "push"):
                for k, C in Cs.items():
                    r = [recurrence_rounds(C, initial(n, h), eps, mode) for h in sets]
                    row[f"{mode}_{k}_mean"] = float(np.mean(r))
                    row[f"{mode}_{k}_max"] = int(np.max(r))
            rows.append(row)
    return rows
