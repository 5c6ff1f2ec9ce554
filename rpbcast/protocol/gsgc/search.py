"""The adaptive step of GSGC (§4.3, Figs. 10 and 11): the search for a step
interval with a near-minimum time per round (TPR), offline on a TPR
function (find_window) or online on measured rounds (OnlineSearch, which
the extension's leader runs when GsgcConfig.adaptive is set).
"""
from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional

NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class Window(NamedTuple):
    s: float            # step interval with a near-minimum TPR (Fig. 10)
    f_s: float          # its TPR
    s1: float           # window of good step intervals (Fig. 11)
    s2: float
    evaluations: dict   # step -> TPR measured/evaluated
    iterations1: int    # Part I loop iterations
    iterations2: int    # Part II loop iterations (bodies executed)


def window_search(a0: float, b0: float, g: float, e: float, p: float, grid: Optional[float] = None):
    """The two-part adaptive algorithm of §4.3 (Figs. 10 and 11) as a
    generator: it yields a step interval x, is sent back f(x) (the average
    TPR measured with that step), and returns a Window.

    Faithful to the figures, with three things the figures leave open:
    e is relative (|f(x) - f(s)| < e * f(s), as the text defines it); the
    Part II loops also stop at a0 and b0 (the figure's upper loop has no
    bound); ``grid`` rounds every evaluated point to a multiple of grid
    (the paper's curves were measured at 1-s steps)."""
    q = (lambda x: x) if not grid else (lambda x: max(grid, round(x / grid) * grid))
    evals = {}

    def f(x):
        x = q(x)
        if x not in evals:
            evals[x] = yield x
        return evals[x]

    a, b = float(a0), float(b0)
    it1 = 0
    while b - a > g:                            # Part I: golden-ratio search
        d = b - a
        m1, m2 = a + 0.382 * d, a + 0.618 * d
        f1 = yield from f(m1)
        f2 = yield from f(m2)
        if f1 >= f2:
            a = m1
        else:
            b = m2
        it1 += 1
    s = q((a + b) / 2)
    fs = yield from f(s)
    tol = e * fs

    def near(v):
        return abs(v - fs) < tol

    it2 = 0
    s1, k = s, 1                                # Part II: lower bound
    while s1 - k * p > a0 and near((yield from f(s1 - k * p))):
        s1 -= k * p
        k *= 2
        it2 += 1
    k //= 2
    while k >= 1 and s1 - k * p > a0 and near((yield from f(s1 - k * p))):
        s1 -= k * p
        k //= 2
        it2 += 1
    s2, k = s, 1                                # upper bound
    while s2 + k * p <= b0 and near((yield from f(s2 + k * p))):
        s2 += k * p
        k *= 2
        it2 += 1
    k //= 2
    while k >= 1 and s2 + k * p <= b0 and near((yield from f(s2 + k * p))):
        s2 += k * p
        k //= 2
        it2 += 1
    return Window(s, fs, q(s1), q(s2), dict(evals), it1, it2)


def find_window(f: Callable[[float], float], a0: float, b0: float, g: float, e: float, p: float,
                grid: Optional[float] = None) -> Window:
    """Run the §4.3 search on a TPR function f(step) (Figs. 10-11)."""
    gen = window_search(a0, b0, g, e, p, grid)
    try:
        x = next(gen)
        while True:
            x = gen.send(float(f(x)))
    except StopIteration as stop:
        return stop.value


class OnlineSearch:
    """The §4.3 search driven by measured rounds (sans-IO).

    ``start(now)`` returns the first step interval to use.  Feed every
    measured time-per-round with ``observe(tpr, now)`` and call
    ``tick(now)`` once per step; both return a new step interval when the
    search moves on (else None).  A probe is the mean of
    ``rounds_per_probe`` rounds after ``warmup`` discarded ones; a probe
    that sees no round within ``probe_timeout(x)`` counts as that long.
    When a search ends the step is set to s and the search runs again
    ``period`` seconds later."""

    def __init__(self, a0, b0, g, e, p, grid=None, rounds_per_probe=4, warmup=1, period=60.0,
                 timeout_steps=60):
        self.args = (a0, b0, g, e, p, grid)
        self.rounds_per_probe = rounds_per_probe
        self.warmup = warmup
        self.period_ns = _ns(period)
        self.timeout_steps = timeout_steps
        self.gen = None
        self.x = None
        self.samples = []
        self.skip = 0
        self.probe_t = 0
        self.next_run = None
        self.windows: List[Window] = []
        self.probes = 0

    @property
    def searching(self):
        return self.gen is not None

    def start(self, now):
        self.gen = window_search(*self.args)
        return self._probe(next(self.gen), now)

    def _probe(self, x, now):
        self.x = x
        self.samples = []
        self.skip = self.warmup
        self.probe_t = now
        self.probes += 1
        return x

    def _feed(self, v, now):
        try:
            return self._probe(self.gen.send(v), now)
        except StopIteration as stop:
            w = stop.value
            self.windows.append(w)
            self.gen = None
            self.x = w.s
            self.next_run = now + self.period_ns
            return w.s

    def observe(self, tpr: float, now: int):
        if self.gen is None:
            return None
        if self.skip > 0:
            self.skip -= 1
            return None
        self.samples.append(tpr)
        if len(self.samples) >= self.rounds_per_probe:
            return self._feed(sum(self.samples) / len(self.samples), now)
        return None

    def tick(self, now: int):
        if self.gen is None:
            if self.next_run is not None and now >= self.next_run:
                self.next_run = None
                return self.start(now)
            return None
        waited = (now - self.probe_t) / NS
        if waited > self.timeout_steps * self.x:
            return self._feed(max(waited, *self.samples) if self.samples else waited, now)
        return None
