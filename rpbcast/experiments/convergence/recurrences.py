"""The per-member recurrence of thesis §4.2.2, for any contact matrix
C(i, j), and the thesis's closed form and crude bound.

P_i(k) = P_i(k-1) + (1 - P_i(k-1)) get_i(k) with
pull: get_i(k) = s * sum_{j != i} C(i,j) P_j(k-1),
push: get_i(k) = 1 - prod_{j != i} (1 - s P_j(k-1) C(j,i)),
s = (1-q)^2 for pull (request, repair) and (1-q)^3 for push (digest,
request, repair), and P(converged by k) ~= prod_i P_i(k).  The product
treats members as independent, which they are not: the holders at round k
are one random set, so "i lacks m" and "j lacks m" are positively correlated
(both likely when the spread stalled).  For pull that makes the recurrence
exact for the first round from a known initial set, and for every round when
one member is missing; beyond that it is slightly pessimistic in the bulk of
the distribution and optimistic in its tail, badly so when few members start
with m (it cannot see the chance that the spread stalls for a round or two at
the start: from one holder no non-holder finds it with probability
(1 - 1/n)^(n-1) ~= e^-1).  ``checks.compare_uniform_pull`` puts numbers on
it.  The thesis's crude bound ``crude_bound`` = 1 - ln(2 n0 eps /
(n (n - n0))) is, despite being called a lower bound, a sufficient number of
rounds (an upper bound on the rounds needed): every exact answer here lies
below it.
"""
from __future__ import annotations

import math

import numpy as np

from rpbcast.experiments.convergence.chain import EPS_THESIS, below, contact_pool_size


def uniform_contact(n: int, self_contact: bool = True) -> np.ndarray:
    """C(i, j) for uniform selection: 1/n over everyone (the thesis's model)
    or 1/(n-1) over the others (rpbcast.protocol.selection.contact_matrix, the
    engine)."""
    m = contact_pool_size(n, self_contact)
    C = np.full((n, n), 1.0 / m)
    if not self_contact:
        np.fill_diagonal(C, 0.0)
    return C


def initial(n: int, holders) -> np.ndarray:
    """P_i(0): 1.0 for the members in `holders` (an int n0: the first n0
    members; or indices; or a boolean mask), else 0.0."""
    p = np.zeros(n)
    if isinstance(holders, (int, np.integer)):
        p[:int(holders)] = 1.0
    else:
        h = np.asarray(holders)
        if h.dtype == bool:
            p[h] = 1.0
        else:
            p[h.astype(np.int64)] = 1.0
    return p


def check_contact(C) -> np.ndarray:
    """C as a float array, once it is a square matrix of probability rows."""
    C = np.asarray(C, dtype=float)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError("C must be a square matrix")
    if (C < 0).any() or not np.allclose(C.sum(1), 1.0, atol=1e-9):
        raise ValueError("every row of C must be a probability distribution")
    return C


def recurrence(C, p0, rounds: int, mode: str = "pull", q: float = 0.0) -> np.ndarray:
    """M[k, i] = 1 - P_i(k), the probability that member i still lacks the
    message after k rounds, k = 0..rounds (the complement keeps precision
    where P_i is within 1e-16 of 1).  p0 = P_i(0)."""
    C = check_contact(C)
    Coff = C.copy()
    np.fill_diagonal(Coff, 0.0)                # the thesis sums over j != i: a self-contact is wasted
    M = 1.0 - np.asarray(p0, dtype=float)
    out = [M]
    if mode == "pull":
        s = (1.0 - q) ** 2
        for _ in range(rounds):
            get = s * (Coff @ (1.0 - M))
            M = M * (1.0 - np.minimum(get, 1.0))
            out.append(M)
    elif mode == "push":
        s = (1.0 - q) ** 3
        with np.errstate(divide="ignore"):
            for _ in range(rounds):
                x = np.minimum(s * (1.0 - M)[:, None] * Coff, 1.0)
                miss = np.exp(np.log1p(-x).sum(0))          # prod_j (1 - s P_j C(j,i))
                M = M * miss
                out.append(M)
    else:
        raise ValueError(f"mode must be 'pull' or 'push', got {mode!r}")
    return np.array(out)


def recurrence_failure(M: np.ndarray) -> np.ndarray:
    """1 - prod_i P_i(k) for each k, from recurrence()'s M (members taken as
    independent, as the thesis does)."""
    with np.errstate(divide="ignore"):
        return -np.expm1(np.log1p(-np.minimum(M, 1.0)).sum(axis=1))


def recurrence_rounds(C, p0, eps: float = EPS_THESIS, mode: str = "pull", q: float = 0.0,
                      max_rounds: int = 10_000) -> int:
    """Fewest rounds with 1 - prod_i P_i(k) < eps."""
    C = check_contact(C)
    Mk = 1.0 - np.asarray(p0, dtype=float)
    k = 0
    while True:
        if below(recurrence_failure(Mk[None, :])[0], eps):
            return k
        if k >= max_rounds:
            raise RuntimeError(f"the recurrence does not reach {eps} within {max_rounds} rounds")
        Mk = recurrence(C, 1.0 - Mk, 1, mode, q)[1]
        k += 1


def thesis_quadratic(n: int, n0: int, rounds: int) -> np.ndarray:
    """The thesis's closed recurrence for a member that missed the initial
    multicast (uniform pull, self-contact allowed):
    P_k = n0/n + (2(n - n0) - 1)/n P_{k-1} - (n - n0 - 1)/n P_{k-1}^2, P_0 = 0."""
    P = [0.0]
    for _ in range(rounds):
        p = P[-1]
        P.append(n0 / n + (2 * (n - n0) - 1) / n * p - (n - n0 - 1) / n * p * p)
    return np.array(P)


def crude_bound(n: int, n0: int, eps: float = EPS_THESIS) -> float:
    """§4.2.2: k >= 1 - ln(2 n0 eps / (n (n - n0))) (natural log).  Rounds
    that suffice according to the thesis's crude argument; 0 when n0 = n."""
    if n0 >= n:
        return 0.0
    return 1.0 - math.log(2.0 * n0 * eps / (n * (n - n0)))
