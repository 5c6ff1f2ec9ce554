"""The Markov chain on the number of holders (thesis §4.2.1), uniform
selection, pull and push.

From i holders, each of the n - i non-holders pulls from a holder with
probability s_i = i / n (uniform contact over all n members, self included,
as the thesis's quadratic recurrence implies) times (1 - q)^2 if the request
or the repair can be lost with probability q each, so

    p_{i,j} = C(n-i, j-i) s_i^(j-i) (1 - s_i)^(n-j)        i <= j,
    p_{i,j} = 0                                          j < i.

(The thesis prints the zero case as "i < j"; it is j < i.  Its binomial has
the exponents the right way round: j - i successes with probability i/n
each, n - j failures with probability (n-i)/n each.)  For push the thesis
says the chain "does not generalise", but under *uniform* selection the
count is still a Markov state: the i holders each hit one target, and the
gain is the number of distinct non-holders hit, an occupancy distribution
computed by dynamic programming.  ``absorption_times`` solves (I - Q) t = 1;
``failure_curve`` gives 1 - r_{i,n}(k) for every i and k (f_k = P f_{k-1},
which keeps full relative precision down to 1e-300, where 1 - r would
cancel); ``k_step`` is the plain matrix power.
"""
from __future__ import annotations

import math

import numpy as np

# Fig. 4-2's setting: 100 members, converged except with probability 1e-6
EPS_THESIS = 1e-6
N_THESIS = 100


def _binom_pmf(m: int, s: float) -> np.ndarray:
    """Binomial(m, s) probabilities of 0..m successes."""
    out = np.zeros(m + 1)
    if s <= 0.0:
        out[0] = 1.0
        return out
    if s >= 1.0:
        out[m] = 1.0
        return out
    k = np.arange(m + 1)
    lg = np.vectorize(math.lgamma)
    logc = math.lgamma(m + 1) - lg(k + 1) - lg(m - k + 1)
    p = np.exp(logc + k * math.log(s) + (m - k) * math.log1p(-s))
    return p / p.sum()              # lgamma leaves ~1e-14 of error; keep rows stochastic


def contact_pool_size(n: int, self_contact: bool) -> int:
    """How many members a contact is drawn from."""
    if not self_contact and n < 2:
        raise ValueError("a member needs someone else to contact (n >= 2)")
    return n if self_contact else n - 1


def pull_chain(n: int, q: float = 0.0, self_contact: bool = True) -> np.ndarray:
    """Transition matrix of uniform gossip pull, indexed by holder count
    0..n ((n+1) x (n+1); state 0, nobody has the message, is outside the
    thesis's chain and stays put).  Each non-holder contacts one of the n
    members (self_contact=True, the thesis's model) or of the n - 1 others
    (False, what the engine does); a contact with a holder repairs with
    probability (1 - q)^2."""
    if n < 1:
        raise ValueError("n must be >= 1")
    m = contact_pool_size(n, self_contact)
    ok = (1.0 - q) ** 2
    P = np.zeros((n + 1, n + 1))
    P[0, 0] = 1.0
    for i in range(1, n + 1):
        P[i, i:] = _binom_pmf(n - i, ok * i / m)
    return P


def push_chain(n: int, q: float = 0.0, self_contact: bool = True) -> np.ndarray:
    """Transition matrix of uniform gossip push: each of the i holders
    contacts one member uniformly (of n, or of the n - 1 others) and a
    contacted non-holder gets the message with probability (1 - q)^3 (digest,
    request, repair).  The gain is the number of distinct non-holders hit:
    dynamic programming over the holders, O(i (n - i)) per state."""
    if n < 1:
        raise ValueError("n must be >= 1")
    m = contact_pool_size(n, self_contact)
    a = (1.0 - q) ** 3 / m            # P(a given push lands, alive, on a given non-holder)
    P = np.zeros((n + 1, n + 1))
    P[0, 0] = 1.0
    for i in range(1, n + 1):
        u = n - i
        d = np.zeros(u + 1)
        d[0] = 1.0
        new = a * (u - np.arange(u + 1))           # P(next push hits a fresh non-holder | d hit)
        for _ in range(i):
            moved = d * new
            d = d - moved
            d[1:] += moved[:-1]
        P[i, i:] = d
    return P


def absorption_times(P: np.ndarray) -> np.ndarray:
    """Expected rounds to reach state n (all hold it) from each state, by
    solving (I - Q) t = 1 over the transient states 1..n-1.  t[n] = 0,
    t[0] = nan (never)."""
    n = P.shape[0] - 1
    t = np.full(n + 1, np.nan)
    t[n] = 0.0
    if n >= 2:
        Q = P[1:n, 1:n]
        t[1:n] = np.linalg.solve(np.eye(n - 1) - Q, np.ones(n - 1))
    return t


def k_step(P: np.ndarray, k: int) -> np.ndarray:
    """r_{i,j}(k): the k-step transition probabilities (matrix power)."""
    return np.linalg.matrix_power(P, k)


def failure_curve(P: np.ndarray, rounds: int) -> np.ndarray:
    """F[k, i] = 1 - r_{i,n}(k), the probability that a message starting
    with i holders has not reached all n after k rounds, k = 0..rounds.
    Computed as f_k = P f_{k-1} from f_0 = 1 - e_n (no cancellation)."""
    n = P.shape[0] - 1
    f = np.ones(n + 1)
    f[n] = 0.0
    out = [f]
    for _ in range(rounds):
        f = P @ f
        out.append(f)
    return np.array(out)


def below(x, eps):
    """x < eps, where x within a relative 1e-9 of eps counts as equal (0.01**3
    is 1e-6 for the thesis, whatever the floating-point rounding says)."""
    return np.asarray(x) < eps * (1.0 - 1e-9)


def chain_rounds(P: np.ndarray, eps: float = EPS_THESIS, max_rounds: int = 10_000) -> np.ndarray:
    """For each start state i (0..n), the fewest rounds k with
    P(not converged by k) < eps (-1 for state 0, which never converges)."""
    n = P.shape[0] - 1
    need = np.full(n + 1, -1, dtype=np.int64)
    f = np.ones(n + 1)
    f[n] = 0.0
    need[n] = 0
    for k in range(1, max_rounds + 1):
        f = P @ f
        hit = (need < 0) & below(f, eps)
        hit[0] = False
        need[hit] = k
        if (need[1:] >= 0).all():
            return need
    raise RuntimeError(f"not every state converges below {eps} within {max_rounds} rounds")
