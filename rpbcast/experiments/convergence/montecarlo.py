"""Monte-Carlo of the abstract gossip process, and the statistics its
answers are read with.

``monte_carlo`` simulates the round-synchronous process exactly with NumPy
(many trials at once, any contact matrix, push or pull, optional loss): the
per-trial round of convergence, from which P(converged by k) with a Wilson
interval and the mean with its standard error.

``monte_carlo_async`` is uniform pull with the engine's timing instead of
lock-step rounds (each member's rounds at its own phase, +- 10 % jitter,
repairs a round trip late): what the engine should do if it implements
§4.2's process.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from rpbcast.experiments.convergence.chain import contact_pool_size
from rpbcast.experiments.convergence.recurrences import check_contact, initial


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
        C = check_contact(C)
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
    m = contact_pool_size(n, self_contact)
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
