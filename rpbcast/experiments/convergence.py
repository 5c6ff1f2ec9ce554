"""Convergence rate of gossip repair (thesis §4.2, Fig. 4-2, §7.5).

"A message m converges in k rounds with probability p": after the initial
multicast reached n0 of the n members, every member contacts one member per
gossip round; how many rounds until all n hold m, except with probability
eps?  Five ways to answer, from exact to real:

``pull_chain`` / ``push_chain`` (§4.2.1)
    The Markov chain on the number of holders.  From i holders, each of the
    n - i non-holders pulls from a holder with probability s_i = i / n (uniform
    contact over all n members, self included, as the thesis's quadratic
    recurrence implies) times (1 - q)^2 if the request or the repair can be
    lost with probability q each, so

        p_{i,j} = C(n-i, j-i) s_i^(j-i) (1 - s_i)^(n-j)        i <= j,
        p_{i,j} = 0                                          j < i.

    (The thesis prints the zero case as "i < j"; it is j < i.  Its binomial
    has the exponents the right way round: j - i successes with probability
    i/n each, n - j failures with probability (n-i)/n each.)  For push the
    thesis says the chain "does not generalise", but under *uniform*
    selection the count is still a Markov state: the i holders each hit one
    target, and the gain is the number of distinct non-holders hit, an
    occupancy distribution computed by dynamic programming.  ``absorption_times``
    solves (I - Q) t = 1; ``failure_curve`` gives 1 - r_{i,n}(k) for every i
    and k (f_k = P f_{k-1}, which keeps full relative precision down to
    1e-300, where 1 - r would cancel); ``k_step`` is the plain matrix power.

``recurrence`` (§4.2.2), any contact matrix C(i, j)
    P_i(k) = P_i(k-1) + (1 - P_i(k-1)) get_i(k) with
    pull: get_i(k) = s * sum_{j != i} C(i,j) P_j(k-1),
    push: get_i(k) = 1 - prod_{j != i} (1 - s P_j(k-1) C(j,i)),
    s = (1-q)^2 for pull (request, repair) and (1-q)^3 for push (digest,
    request, repair), and P(converged by k) ~= prod_i P_i(k).  The product
    treats members as independent, which they are not: the holders at round
    k are one random set, so "i lacks m" and "j lacks m" are positively
    correlated (both likely when the spread stalled).  For pull that makes
    the recurrence exact for the first round from a known initial set, and
    for every round when one member is missing; beyond that it is slightly
    pessimistic in the bulk of the distribution and optimistic in its tail,
    badly so when few members start with m (it cannot see the chance that
    the spread stalls for a round or two at the start: from one holder no
    non-holder finds it with probability (1 - 1/n)^(n-1) ~= e^-1).
    ``compare_uniform_pull`` puts numbers on it.  The thesis's crude bound ``crude_bound`` = 1 - ln(2 n0 eps /
    (n (n - n0))) is, despite being called a lower bound, a sufficient
    number of rounds (an upper bound on the rounds needed): every exact
    answer here lies below it.

``monte_carlo``
    The same round-synchronous process, simulated exactly with NumPy (many
    trials at once, any contact matrix, push or pull, optional loss); the
    per-trial round of convergence, from which P(converged by k) with a
    Wilson interval and the mean with its standard error.

``monte_carlo_async``
    Uniform pull with the engine's timing instead of lock-step rounds (each
    member's rounds at its own phase, +- 10 % jitter, repairs a round trip
    late): what the engine should do if it implements §4.2's process.

``engine_monte_carlo``
    The real rpbcast engine (rpbcast.sim when it runs, else rpbcast.drivers.memnet):
    one message whose DATA reached only a chosen subset, no loggers, no
    immediate NACKs, uniform selection, and per member the number of gossip
    rounds in which it still lacked the message.

``reproduce`` / ``python -m rpbcast.experiments.convergence --out DIR`` regenerate
Fig. 4-2 (n = 100, eps = 1e-6) for uniform, linear and quadratic selection
and write the CSV tables, the PNGs and a JSON summary
(docs/reproduction/convergence.md).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

EPS_THESIS = 1e-6
N_THESIS = 100


# ============================================================ Markov chain (§4.2.1)
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


def _others(n: int, self_contact: bool) -> int:
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
    m = _others(n, self_contact)
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
    m = _others(n, self_contact)
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


def _below(x, eps):
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
        hit = (need < 0) & _below(f, eps)
        hit[0] = False
        need[hit] = k
        if (need[1:] >= 0).all():
            return need
    raise RuntimeError(f"not every state converges below {eps} within {max_rounds} rounds")


# ============================================================ recurrence (§4.2.2)
def uniform_contact(n: int, self_contact: bool = True) -> np.ndarray:
    """C(i, j) for uniform selection: 1/n over everyone (the thesis's model)
    or 1/(n-1) over the others (rpbcast.protocol.selection.contact_matrix, the
    engine)."""
    m = _others(n, self_contact)
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


def _check_contact(C) -> np.ndarray:
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
    C = _check_contact(C)
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
    C = _check_contact(C)
    Mk = 1.0 - np.asarray(p0, dtype=float)
    k = 0
    while True:
        if _below(recurrence_failure(Mk[None, :])[0], eps):
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


# ============================================================ contact matrices on a topology
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


# ============================================================ Monte-Carlo (abstract process)
def _draw_targets(rng, T: int, n: int, C: Optional[np.ndarray], cum: Optional[np.ndarray],
                  self_contact: bool) -> np.ndarray:
    if C is None:
        if self_contact:
            return rng.integers(0, n, (T, n))
        t = rng.integers(0, n - 1, (T, n))
        return t + (t >= np.arange(n))
    u = rng.random((T, n))
    t = np.empty((T, n), dtype=np.int64)
    for i in range(n):
        t[:, i] = np.searchsorted(cum[i], u[:, i], side="right")
    return np.minimum(t, n - 1)


def monte_carlo(n: int, holders, mode: str = "pull", trials: int = 10_000, C=None,
                self_contact: bool = True, q: float = 0.0, max_rounds: int = 200, seed: int = 1,
                chunk: int = 20_000) -> np.ndarray:
    """Round-synchronous gossip, simulated exactly: each round every member
    contacts one member (C None: uniform, over everyone or over the others;
    else row i of C); pull: a non-holder that contacts a holder gets the
    message (with probability (1-q)^2); push: a holder's target gets it
    (with probability (1-q)^3).  What a member gets in round k it can pass
    on from round k + 1.  Returns each trial's round of convergence
    (max_rounds + 1 if not by then)."""
    if mode not in ("pull", "push"):
        raise ValueError(f"mode must be 'pull' or 'push', got {mode!r}")
    rng = np.random.default_rng(seed)
    p0 = initial(n, holders) > 0.5
    cum = None
    if C is not None:
        C = _check_contact(C)
        cum = np.cumsum(C, axis=1)
        cum[:, -1] = 1.0 + 1e-12
    s = (1.0 - q) ** (2 if mode == "pull" else 3)
    out = np.full(trials, max_rounds + 1, dtype=np.int64)
    for lo in range(0, trials, chunk):
        T = min(chunk, trials - lo)
        H = np.tile(p0, (T, 1))
        idx = np.arange(T)
        if p0.all():
            out[lo:lo + T] = 0
            continue
        for k in range(1, max_rounds + 1):
            tgt = _draw_targets(rng, len(idx), n, C, cum, self_contact)
            ok = rng.random(H.shape) < s if s < 1.0 else None
            if mode == "pull":
                got = np.take_along_axis(H, tgt, axis=1)
                if ok is not None:
                    got &= ok
                H = H | got
            else:
                src = H if ok is None else H & ok
                r, c = np.nonzero(src)
                Hn = H.copy()
                Hn[r, tgt[r, c]] = True
                H = Hn
            done = H.all(axis=1)
            if done.any():
                out[lo + idx[done]] = k
                H = H[~done]
                idx = idx[~done]
            if not len(idx):
                break
    return out


def monte_carlo_async(n: int, holders, trials: int = 10_000, jitter: float = 0.1, delay: float = 0.0,
                      self_contact: bool = False, max_rounds: int = 30, seed: int = 1,
                      chunk: int = 2_000) -> np.ndarray:
    """Uniform gossip pull with the engine's timing instead of lock-step
    rounds: member i pulls at phase_i + sum of its intervals, phase uniform
    in [0, 1) and each interval 1 +- U(jitter) rounds (Engine.handle_timer:
    gossip_interval +- 10 %), in time order, so a member repaired early in a
    round can serve later pullers of the same round; a repair lands `delay`
    rounds after its request.  Returns per trial the most pulls any member
    made while it lacked the message (the quantity engine_monte_carlo
    measures; for lock-step rounds it is the round of convergence)."""
    rng = np.random.default_rng(seed)
    p0 = initial(n, holders) > 0.5
    out = np.full(trials, max_rounds + 1, dtype=np.int64)
    if p0.all():
        out[:] = 0
        return out
    m = _others(n, self_contact)
    for lo in range(0, trials, chunk):
        T = min(chunk, trials - lo)
        steps = 1.0 + rng.uniform(-jitter, jitter, (T, n, max_rounds))
        steps[:, :, 0] = rng.random((T, n))                     # the first pull: a uniform phase
        times = np.cumsum(steps, axis=2).reshape(T, n * max_rounds)
        order = np.argsort(times, axis=1)
        ev_t = np.take_along_axis(times, order, axis=1)
        ev_m = order // max_rounds
        got = np.where(p0, -np.inf, np.inf)[None, :].repeat(T, 0)
        count = np.zeros((T, n), dtype=np.int64)
        rows = np.arange(T)
        for e in range(n * max_rounds):
            mm = ev_m[:, e]
            t = ev_t[:, e]
            if e % n == 0 and (got < np.inf).all():
                break
            lack = got[rows, mm] > t
            if not lack.any():
                continue
            g = rng.integers(0, m, T)
            if not self_contact:
                g = g + (g >= mm)
            count[rows, mm] += lack
            ok = lack & (got[rows, g] <= t)
            got[rows[ok], mm[ok]] = np.minimum(got[rows[ok], mm[ok]], t[ok] + delay)
        done = (got < np.inf).all(axis=1)
        res = count.max(axis=1)
        res[~done] = max_rounds + 1
        out[lo:lo + T] = res
    return out


def wilson(successes, trials: int, z: float = 1.96):
    """Wilson score interval for a binomial proportion (works at 0 and 1)."""
    x = np.asarray(successes, dtype=float)
    p = x / trials
    d = 1.0 + z * z / trials
    c = (p + z * z / (2 * trials)) / d
    h = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / d
    return np.maximum(c - h, 0.0), np.minimum(c + h, 1.0)


def empirical_failure(rounds: np.ndarray, kmax: int) -> np.ndarray:
    """P(not converged by k), k = 0..kmax, from per-trial convergence rounds."""
    r = np.asarray(rounds)
    return np.array([(r > k).mean() for k in range(kmax + 1)])


# ============================================================ the real engine
def _engine_trial(n: int, n0: int, seed: int, gossip_interval: float, gc_limit: int,
                  latency: float, driver: str, timeout_rounds: int) -> Dict:
    """One run of the real engine: n members (node 1 the sender, 2..n
    receivers), the sender publishes one message whose DATA reaches only
    n0 - 1 receivers chosen at random; no loggers, immediate NACKs off,
    uniform selection.  Per member, the gossip rounds during which it
    lacked the message (a wrapper around Engine.repair.gossip_round asks the
    data plane before each round; the count includes the round whose pull
    brought the message)."""
    rng = random.Random(f"conv/{seed}")
    receivers = list(range(2, n + 1))
    holders = set(rng.sample(receivers, n0 - 1))
    rounds = {v: 0 for v in range(1, n + 1)}
    state = {"t_pub": None, "inc": None}
    cfg = dict(selection="uniform", immediate_nack=False, gossip_interval=gossip_interval,
               gc_limit=gc_limit, incarnation=1)

    def wrap(v, e):
        orig = e.repair.gossip_round

        def counted(now, orig=orig, v=v, e=e):
            if state["t_pub"] is not None and v != 1:
                slot = e.node.find_peer(1, state["inc"])
                if slot is not None and e.node.peer_missing_count(slot) > 0:
                    rounds[v] += 1
            return orig(now)
        e.repair.gossip_round = counted

    if driver == "sim":
        from rpbcast.sim import Simulation
        from rpbcast.sim.loss import Uniform
        p = dict(topology="tree", nodes=n, degree=4, latency=latency, logger=None, senders=[1],
                 messages=1, start_delay=2 * gossip_interval, seed=seed, loss_applies="data",
                 linger=timeout_rounds * gossip_interval, check_payload=False, **cfg)
        sim = Simulation(p)
        for v in receivers:
            if v not in holders:
                sim.net.set_rx_loss(v, Uniform(1.0))     # only first-multicast DATA ("data" class)
        for v, e in sim.engines.items():
            wrap(v, e)
        engines = sim.engines
        state["inc"] = engines[1].inc
        state["t_pub"] = 0              # count from the start: nobody lacks anything before the publish
        sim.run()
        complete = all(sim.per_node[v]["missing"] == 0 for v in receivers)
    else:
        from rpbcast.config import Config
        from rpbcast.drivers.memnet import NS, MemNet
        net = MemNet(seed=seed, latency=latency, jitter=latency / 4)
        specs = MemNet.member_specs(range(1, n + 1))
        engines = {}
        for v in range(1, n + 1):
            engines[v] = net.add(Config(node_id=v, members=specs, **cfg))
        _warm_start(engines)
        for v, e in engines.items():
            wrap(v, e)
        state["inc"] = engines[1].inc
        t0 = net.now + int(2 * gossip_interval * NS)

        def publish(net):
            net.drop_filter = lambda src, dst, data: (src == 1 and dst not in holders and _is_data(data))
            engines[1].publish(b"m", now=net.now)
            net.flush(1)
            net.drop_filter = None
            state["t_pub"] = net.now

        net.at(t0, publish)
        got_at = {}

        def done(net):
            if state["t_pub"] is None:
                return False
            for v in receivers:
                if v in got_at:
                    continue
                e = engines[v]
                slot = e.node.find_peer(1, state["inc"])
                if slot is not None and e.node.peer_contiguous(slot) >= 1:
                    got_at[v] = net.now
            return len(got_at) == len(receivers)

        complete = net.run_until_true(done, timeout=2 * gossip_interval + timeout_rounds * gossip_interval,
                                      check_every=gossip_interval / 50)
    r = [rounds[v] for v in receivers]
    return {"n": n, "n0": n0, "seed": seed, "complete": bool(complete),
            "rounds": max(r) if complete else None, "per_member": r, "driver": driver}


def _is_data(data: bytes) -> bool:
    """The datagram carries DATA."""
    from rpbcast.core import wire
    return wire.first_type(data) == wire.MsgType.DATA


def _warm_start(engines):
    """Every engine knows every other member's current table entry, as if the
    group had been running (same as rpbcast.sim's warm start): no membership
    exchange storm before the experiment."""
    import dataclasses
    entries = {v: e.self_entry() for v, e in engines.items()}
    for v, e in engines.items():
        for w, m in entries.items():
            if w != v:
                e.members.upsert(dataclasses.replace(m))


def engine_driver() -> str:
    """'sim' when rpbcast.sim runs a one-message, logger-less job here, else
    'memnet'."""
    try:
        r = _engine_trial(8, 4, 1, 0.25, 60, 0.001, "sim", 40)
        if r["complete"]:
            return "sim"
    except Exception:                       # the simulator is not there or not ready
        pass
    return "memnet"


def engine_monte_carlo(n: int, n0: int, trials: int, gossip_interval: float = 0.25, gc_limit: int = 60,
                       latency: float = 0.0005, driver: Optional[str] = None, seed: int = 1,
                       timeout_rounds: int = 60, processes: int = 1) -> Dict:
    """`trials` runs of the real engine (see _engine_trial).  Returns the
    per-trial rounds to converge and the driver used."""
    driver = driver or engine_driver()
    args = [(n, n0, seed * 100_003 + t, gossip_interval, gc_limit, latency, driver, timeout_rounds)
            for t in range(trials)]
    if trials <= 4:
        out = [_engine_trial(*a) for a in args]
    else:
        # Worker processes, replaced every 16 runs: each simulated run leaves
        # ~10 MB behind in the process (rpbcast.sim at the time of writing), and
        # a figure takes ~1000 of them.
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(processes, maxtasksperchild=16) as pool:
            out = pool.starmap(_engine_trial, args, chunksize=4)
    rounds = np.array([r["rounds"] if r["complete"] else timeout_rounds + 1 for r in out])
    return {"n": n, "n0": n0, "driver": driver, "rounds": rounds,
            "complete": int(sum(r["complete"] for r in out)), "gc_limit": gc_limit,
            "gossip_interval": gossip_interval}


# ============================================================ comparisons
def compare_uniform_pull(n: int = N_THESIS, eps: float = EPS_THESIS, self_contact: bool = True) -> List[Dict]:
    """Per n0: rounds from the exact chain and from the recurrence (uniform
    pull), and both failure probabilities at the chain's answer minus one."""
    P = pull_chain(n, self_contact=self_contact)
    need = chain_rounds(P, eps)
    C = uniform_contact(n, self_contact)
    F = failure_curve(P, int(need[1:].max()) + 2)
    rows = []
    for n0 in range(1, n + 1):
        M = recurrence(C, initial(n, n0), F.shape[0] - 1)
        fr = recurrence_failure(M)
        k = max(int(need[n0]) - 1, 0)
        rows.append({"n0": n0, "chain": int(need[n0]), "recurrence": recurrence_rounds(C, initial(n, n0), eps),
                     "k": k, "chain_fail_k": float(F[k, n0]), "recurrence_fail_k": float(fr[k])})
    return rows


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


KINDS = ("uniform", "linear", "quadratic")


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


# ============================================================ regenerating the figures
def _write_csv(path: str, rows: List[Dict]):
    if not rows:
        return
    keys = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def figure_4_2_table(n: int = N_THESIS, eps: float = EPS_THESIS) -> List[Dict]:
    """Fig. 4-2's data, n0 = 1..n-1: uniform selection in the thesis's model
    (self-contact allowed) and in the engine's (others only)."""
    rows = []
    Pp, Ph = pull_chain(n), push_chain(n)
    Pp2, Ph2 = pull_chain(n, self_contact=False), push_chain(n, self_contact=False)
    pull, push = chain_rounds(Pp, eps), chain_rounds(Ph, eps)
    pull2, push2 = chain_rounds(Pp2, eps), chain_rounds(Ph2, eps)
    tp, th = absorption_times(Pp), absorption_times(Ph)
    C, C2 = uniform_contact(n), uniform_contact(n, False)
    for n0 in range(1, n):
        p0 = initial(n, n0)
        rows.append({
            "n0": n0, "fraction": n0 / n,
            "pull_markov": int(pull[n0]), "pull_recurrence": recurrence_rounds(C, p0, eps, "pull"),
            "push_markov": int(push[n0]), "push_recurrence": recurrence_rounds(C, p0, eps, "push"),
            "crude_bound": crude_bound(n, n0, eps),
            "pull_mean_rounds": float(tp[n0]), "push_mean_rounds": float(th[n0]),
            "pull_markov_others": int(pull2[n0]), "pull_recurrence_others": recurrence_rounds(C2, p0, eps, "pull"),
            "push_markov_others": int(push2[n0]), "push_recurrence_others": recurrence_rounds(C2, p0, eps, "push"),
        })
    return rows


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_figure_4_2(rows: List[Dict], topo_rows: List[Dict], path: str, n: int, eps: float, topo_name: str):
    plt = _plt()
    fig, ax = plt.subplots(1, 3, figsize=(18, 5.2))
    x = [r["fraction"] for r in rows]
    a = ax[0]
    a.step(x, [r["pull_markov"] for r in rows], where="mid", color="C0", lw=2, label="pull, Markov chain (exact)")
    a.step(x, [r["pull_recurrence"] for r in rows], where="mid", color="C0", ls="--", label="pull, recurrence")
    a.step(x, [r["push_markov"] for r in rows], where="mid", color="C3", lw=2, label="push, Markov chain (exact)")
    a.step(x, [r["push_recurrence"] for r in rows], where="mid", color="C3", ls="--", label="push, recurrence")
    a.plot(x, [r["crude_bound"] for r in rows], color="gray", ls=":", label="§4.2.2 crude bound")
    a.set_title(f"(a) Fig. 4-2: uniform selection, {n} members, error < {eps:g}", fontsize=10)
    for i, mode in ((1, "pull"), (2, "push")):
        b = ax[i]
        for k, c in zip(KINDS, ("C0", "C1", "C2")):
            for how, ls in (("random", "-"), ("clustered", "--")):
                rr = [r for r in topo_rows if r["how"] == how]
                b.plot([r["fraction"] for r in rr], [r[f"{mode}_{k}_mean"] for r in rr], color=c, ls=ls, marker=".",
                       label=f"{k}, {how} initial set")
        b.set_title(f"({'bc'[i - 1]}) {mode} (recurrence), engine's selection on {topo_name}"
                    + ("\n(optimistic for clustered sets: see mc_check.png)" if mode == "pull" else ""), fontsize=10)
    for a in ax:
        a.set_xlabel("fraction of members the initial multicast reached")
        a.set_ylabel("rounds to converge")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _scaled(n: int, fractions: Sequence[float]) -> List[int]:
    """Initial set sizes for these fractions of n members (1..n-1)."""
    return sorted({min(max(1, round(f * n)), n - 1) for f in fractions})


def _first_below(curve, eps) -> Optional[int]:
    """First k with curve[k] < eps (None if it never gets there)."""
    k = np.flatnonzero(_below(curve, eps))
    return int(k[0]) if len(k) else None


def mc_check(n: int = N_THESIS, trials: int = 100_000, biased_trials: int = 20_000, seed: int = 7,
             n0s: Optional[Sequence[int]] = None, rtts: Optional[np.ndarray] = None) -> Dict:
    """The abstract Monte-Carlo against the chain and the recurrence: per
    setting and round k, P(not converged by k) from each, the Monte-Carlo's
    Wilson 95 % interval and its deviation from the chain in standard errors
    of the chain's own probability; mean rounds (chain absorption time vs
    Monte-Carlo mean +- SE).  Biased selection (no exact chain): the
    recurrence vs Monte-Carlo."""
    curves, means = [], []
    n0s = n0s or _scaled(n, (0.01, 0.1, 0.5, 0.9))
    chains = {"pull": pull_chain(n), "push": push_chain(n)}
    C = uniform_contact(n)
    for mode in ("pull", "push"):
        P = chains[mode]
        t = absorption_times(P)
        for i, n0 in enumerate(n0s):
            r = monte_carlo(n, n0, mode, trials, seed=seed + 17 * i + (0 if mode == "pull" else 1000))
            kmax = int(min(r.max(), 80))
            F = failure_curve(P, kmax)[:, n0]
            fr = recurrence_failure(recurrence(C, initial(n, n0), kmax, mode))
            emp = empirical_failure(r, kmax)
            lo, hi = wilson(emp * trials, trials)
            se = np.sqrt(np.maximum(F * (1 - F), 1e-300) / trials)
            for k in range(kmax + 1):
                curves.append({"selection": "uniform", "mode": mode, "n0": n0, "k": k, "trials": trials,
                               "markov": float(F[k]), "recurrence": float(fr[k]), "mc": float(emp[k]),
                               "mc_lo": float(lo[k]), "mc_hi": float(hi[k]),
                               "z": float((emp[k] - F[k]) / se[k]) if F[k] * (1 - F[k]) > 0 else 0.0})
            means.append({"selection": "uniform", "mode": mode, "n0": n0, "trials": trials,
                          "markov_mean": float(t[n0]), "mc_mean": float(r.mean()),
                          "mc_se": float(r.std(ddof=1) / math.sqrt(trials)),
                          "z": float((r.mean() - t[n0]) / (r.std(ddof=1) / math.sqrt(trials))),
                          "markov_rounds_1e-3": _first_below(F, 1e-3), "recurrence_rounds_1e-3": _first_below(fr, 1e-3),
                          "mc_rounds_1e-3": _first_below(emp, 1e-3)})
    if rtts is not None and biased_trials:
        for kind in KINDS[1:]:
            Cb = topology_contact(rtts, kind)
            for mode in ("pull", "push"):
                for n0 in _scaled(n, (0.1, 0.5)):
                    h = initial_sets(rtts, n0, "clustered", 1, seed)[0]
                    r = monte_carlo(n, h, mode, biased_trials, C=Cb, seed=seed + n0 + len(kind))
                    kmax = int(min(r.max(), 120))
                    fr = recurrence_failure(recurrence(Cb, initial(n, h), kmax, mode))
                    emp = empirical_failure(r, kmax)
                    lo, hi = wilson(emp * biased_trials, biased_trials)
                    for k in range(kmax + 1):
                        curves.append({"selection": kind, "mode": mode, "n0": n0, "k": k, "trials": biased_trials,
                                       "markov": float("nan"), "recurrence": float(fr[k]), "mc": float(emp[k]),
                                       "mc_lo": float(lo[k]), "mc_hi": float(hi[k]), "z": float("nan")})
                    means.append({"selection": kind, "mode": mode, "n0": n0, "trials": biased_trials,
                                  "markov_mean": float("nan"), "mc_mean": float(r.mean()),
                                  "mc_se": float(r.std(ddof=1) / math.sqrt(biased_trials)), "z": float("nan"),
                                  "markov_rounds_1e-3": None, "recurrence_rounds_1e-3": _first_below(fr, 1e-3),
                                  "mc_rounds_1e-3": _first_below(emp, 1e-3)})
    return {"curves": curves, "means": means}


def plot_mc_check(chk: Dict, path: str):
    plt = _plt()
    sels = [k for k in KINDS if any(r["selection"] == k for r in chk["curves"])]
    fig, axs = plt.subplots(2, len(sels), figsize=(5 * len(sels), 8), squeeze=False)
    for col, sel in enumerate(sels):
        for row, mode in enumerate(("pull", "push")):
            a = axs[row][col]
            rows = [r for r in chk["curves"] if r["selection"] == sel and r["mode"] == mode]
            if not rows:
                a.set_visible(False)
                continue
            for i, n0 in enumerate(sorted({r["n0"] for r in rows})):
                rr = [r for r in rows if r["n0"] == n0]
                k = np.array([r["k"] for r in rr])
                c = f"C{i}"
                if sel == "uniform":
                    a.semilogy(k, [r["markov"] for r in rr], color=c, lw=1.5, label=f"n0={n0} chain")
                a.semilogy(k, [r["recurrence"] for r in rr], color=c, ls="--", lw=1, label=f"n0={n0} recurrence")
                mc = np.array([r["mc"] for r in rr])
                lo = np.array([r["mc_lo"] for r in rr])
                hi = np.array([r["mc_hi"] for r in rr])
                m = mc > 0
                a.errorbar(k[m], mc[m], yerr=[mc[m] - lo[m], hi[m] - mc[m]], fmt="o", ms=3, color=c, capsize=2)
            a.set_ylim(1e-6, 1.5)
            what = "" if sel == "uniform" else ", clustered initial set on the tree"
            a.set_title(f"{mode}, {sel} selection{what}\n(dots: Monte-Carlo, {rows[0]['trials']} trials, 95 % CI)",
                        fontsize=9)
            a.set_xlabel("round k")
            a.set_ylabel("P(not converged by k)")
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def engine_check(n: int = N_THESIS, n0s: Optional[Sequence[int]] = None, trials: int = 200,
                 gc_limit: int = 60, gossip_interval: float = 0.25, latency: float = 0.0005,
                 model_trials: int = 20_000, seed: int = 11, driver: Optional[str] = None,
                 gc_limits: Sequence[int] = (10, 4), gc_trials: int = 100) -> Dict:
    """The real engine against the models (uniform pull, others only, n
    members of which n0 -- the sender and n0 - 1 receivers -- got the
    initial multicast).  Per n0: the engine's distribution of rounds, the
    lock-step chain's and the asynchronous Monte-Carlo's; mean rounds with
    standard errors.  Then, at the smallest n0, the GC limits in gc_limits
    (the thesis's 10, and a short one): a member that pulls from a peer that
    already collected the message gets a GcNOTE and, without loggers, gives
    up (a 'lost' event), so the run may never complete."""
    driver = driver or engine_driver()
    n0s = n0s or sorted({max(2, x) for x in _scaled(n, (0.02, 0.1, 0.5, 0.9))})
    P = pull_chain(n, self_contact=False)
    # a repair lands one round trip after its request: on the simulator's
    # tree that is 2 x hops x latency, in memnet 2 x latency
    rtt = float(tree_rtts(n, 4, latency)[np.triu_indices(n, 1)].mean()) if driver == "sim" else 2 * latency
    delay = rtt / gossip_interval
    tabs, dists = [], []
    t_eng = 0.0
    for i, n0 in enumerate(n0s):
        t0 = time.perf_counter()
        eng = engine_monte_carlo(n, n0, trials, gossip_interval, gc_limit, latency, driver, seed + i)
        t_eng += time.perf_counter() - t0
        er = eng["rounds"]
        ar = monte_carlo_async(n, n0, model_trials, seed=seed + 100 + i, delay=delay)
        kmax = int(max(er.max(), ar.max(), 1))
        F = failure_curve(P, kmax)[:, n0]
        t = absorption_times(P)[n0]
        ef, af = empirical_failure(er, kmax), empirical_failure(ar, kmax)
        lo, hi = wilson(ef * trials, trials)
        for k in range(kmax + 1):
            dists.append({"n0": n0, "k": k, "engine_fail": float(ef[k]), "engine_lo": float(lo[k]),
                          "engine_hi": float(hi[k]), "async_fail": float(af[k]), "sync_chain_fail": float(F[k])})
        se_e = float(er.std(ddof=1) / math.sqrt(trials))
        se_a = float(ar.std(ddof=1) / math.sqrt(model_trials))
        tabs.append({"n0": n0, "trials": trials, "complete": eng["complete"], "gc_limit": gc_limit,
                     "engine_mean": float(er.mean()), "engine_se": se_e,
                     "async_mean": float(ar.mean()), "async_se": se_a,
                     "sync_chain_mean": float(t),
                     "engine_minus_async": float(er.mean() - ar.mean()),
                     "z_engine_async": float((er.mean() - ar.mean()) / math.hypot(se_e, se_a)),
                     "engine_max": int(er.max()), "async_p999": float(np.quantile(ar, 0.999)),
                     "sync_chain_rounds_1e-2": int(chain_rounds(P, 1e-2)[n0])})
    gc = []
    for gl in gc_limits:
        n0 = min(n0s)
        eng = engine_monte_carlo(n, n0, gc_trials, gossip_interval, gl, latency, driver, seed + 99 + gl)
        er = eng["rounds"]
        ar = monte_carlo_async(n, n0, model_trials, seed=seed + 200 + gl, delay=delay)
        ok = er[er <= 60]
        gc.append({"n0": n0, "gc_limit": gl, "trials": gc_trials, "complete": eng["complete"],
                   "incomplete_fraction": 1 - eng["complete"] / gc_trials,
                   "async_p_beyond_gc_limit": float((ar > gl).mean()),
                   "mean_rounds_complete": float(ok.mean()) if len(ok) else None})
    return {"driver": driver, "n": n, "gossip_interval": gossip_interval, "latency": latency,
            "repair_delay_rounds": delay, "table": tabs, "dist": dists, "gc": gc, "engine_wall_s": t_eng}


def plot_engine(chk: Dict, path: str):
    plt = _plt()
    n0s = sorted({r["n0"] for r in chk["dist"]})
    fig, axs = plt.subplots(1, len(n0s), figsize=(4 * len(n0s), 3.8), squeeze=False)
    for a, n0 in zip(axs[0], n0s):
        rr = [r for r in chk["dist"] if r["n0"] == n0]
        k = np.array([r["k"] for r in rr])
        cdf = lambda key: 1 - np.array([r[key] for r in rr])
        a.step(k, cdf("sync_chain_fail"), where="post", color="C0", label="lock-step chain (§4.2.1)")
        a.step(k, cdf("async_fail"), where="post", color="C1", label="asynchronous Monte-Carlo")
        e = cdf("engine_fail")
        lo = 1 - np.array([r["engine_hi"] for r in rr])
        hi = 1 - np.array([r["engine_lo"] for r in rr])
        a.errorbar(k, e, yerr=[e - lo, hi - e], fmt="o", color="k", ms=3, capsize=2, label=f"engine ({chk['driver']})")
        a.set_title(f"n0 = {n0} of {chk['n']} hold it after the multicast", fontsize=9)
        a.set_xlabel("gossip rounds until every member has it")
        a.set_ylabel("P(converged)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reproduce(out: str, n: int = N_THESIS, eps: float = EPS_THESIS, mc_trials: int = 100_000,
              biased_trials: int = 20_000, engine_trials: int = 200, subsets: int = 20,
              engine: bool = True, driver: Optional[str] = None, log=print) -> Dict:
    """Everything in docs/reproduction/convergence.md: fig4_2.{png,csv},
    topology.csv, mc_check.{png,csv}, mc_means.csv, engine.{png,csv},
    engine_dist.csv, summary.json in `out`."""
    os.makedirs(out, exist_ok=True)
    t_all = time.perf_counter()
    summary = {"n": n, "eps": eps}
    rows = figure_4_2_table(n, eps)
    _write_csv(os.path.join(out, "fig4_2.csv"), rows)
    tree = tree_rtts(n)
    n0s = _scaled(n, (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99))
    topo = topology_rounds(tree, n0s, eps, subsets)
    _write_csv(os.path.join(out, "topology_tree.csv"), topo)
    geo = topology_rounds(geometric_rtts(n), n0s, eps, subsets)
    _write_csv(os.path.join(out, "topology_geometric.csv"), geo)
    plot_figure_4_2(rows, topo, os.path.join(out, "fig4_2.png"), n, eps, "a degree-4 tree")
    log(f"fig4_2: {time.perf_counter() - t_all:.1f} s")
    summary["fig4_2"] = {str(r["n0"]): {k: r[k] for k in ("pull_markov", "pull_recurrence", "push_markov",
                                                          "push_recurrence", "crude_bound")}
                         for r in rows if r["n0"] in n0s}
    t = time.perf_counter()
    chk = mc_check(n, mc_trials, biased_trials, rtts=tree)
    _write_csv(os.path.join(out, "mc_check.csv"), chk["curves"])
    _write_csv(os.path.join(out, "mc_means.csv"), chk["means"])
    plot_mc_check(chk, os.path.join(out, "mc_check.png"))
    zs = [abs(r["z"]) for r in chk["curves"] if r["selection"] == "uniform" and r["markov"] > 0 and r["markov"] < 1]
    summary["mc_check"] = {"trials": mc_trials, "max_abs_z_curve": max(zs) if zs else None,
                           "means": chk["means"], "wall_s": time.perf_counter() - t}
    log(f"mc_check: {time.perf_counter() - t:.1f} s, max |z| {summary['mc_check']['max_abs_z_curve']:.2f}")
    if engine:
        t = time.perf_counter()
        e = engine_check(n, trials=engine_trials, driver=driver)
        _write_csv(os.path.join(out, "engine.csv"), e["table"])
        _write_csv(os.path.join(out, "engine_dist.csv"), e["dist"])
        plot_engine(e, os.path.join(out, "engine.png"))
        summary["engine"] = {k: v for k, v in e.items() if k != "dist"}
        summary["engine"]["wall_s"] = time.perf_counter() - t
        log(f"engine ({e['driver']}): {time.perf_counter() - t:.1f} s")
    summary["wall_s"] = time.perf_counter() - t_all
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=float)
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rpbcast.experiments.convergence",
                                 description="Regenerate thesis Fig. 4-2 and check the convergence models "
                                             "against Monte-Carlo runs (docs/reproduction/convergence.md).")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--members", type=int, default=N_THESIS)
    ap.add_argument("--eps", type=float, default=EPS_THESIS)
    ap.add_argument("--mc-trials", type=int, default=100_000, help="abstract Monte-Carlo trials per setting")
    ap.add_argument("--biased-trials", type=int, default=20_000)
    ap.add_argument("--engine-trials", type=int, default=200, help="real-engine runs per initial set size")
    ap.add_argument("--subsets", type=int, default=20, help="initial sets averaged on a topology")
    ap.add_argument("--no-engine", action="store_true", help="skip the real-engine runs")
    ap.add_argument("--driver", choices=("sim", "memnet"), default=None,
                    help="engine driver (default: rpbcast.sim if it works here, else memnet)")
    a = ap.parse_args(argv)
    s = reproduce(a.out, a.members, a.eps, a.mc_trials, a.biased_trials, a.engine_trials, a.subsets,
                  not a.no_engine, a.driver)
    print(f"wrote {a.out} in {s['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
