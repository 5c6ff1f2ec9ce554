"""Loss models (the decisions are made in C, channel.pyx, with the
network's seeded random.Random).

A model applies to *channels*: each direction of each link (``where="link"``:
a packet crossing k links faces k independent channels) or each receiving
host (``where="receiver"``: every packet that reaches a host, multicast copy
or unicast, after the network carried it — the end-to-end loss rate the
thesis varies from 0.1 % to 5 %).  Each channel has its own state.

``Uniform(p)``: every packet lost independently with probability p.

``GilbertElliott(p_gb, p_bg, loss_good=0, loss_bad=1)``: a two-state Markov
chain per channel.  A packet is lost with probability loss_good in the good
state and loss_bad in the bad one; after each packet the state moves
good -> bad with probability p_gb and bad -> good with p_bg.  In the long run
the chain is bad a fraction pi_bad = p_gb / (p_gb + p_bg) of the time, so the
loss rate is pi_good * loss_good + pi_bad * loss_bad, and a bad period lasts
1 / p_bg packets on average (with loss_bad = 1 that is the mean loss-burst
length).  ``GilbertElliott.from_rate(rate, burst)`` picks p_gb and p_bg for a
target rate and mean burst length (loss_good = 0, loss_bad = 1).  Channels
start in a state drawn from the stationary distribution.

``applies`` restricts a model to packet classes: "all", "data" (first
multicast only), or "data+repair".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rpbcast.sim.channel import KIND_GE, KIND_NONE, KIND_UNIFORM

CLASS_BITS = {"all": 0b111, "data": 0b001, "data+repair": 0b011, "control": 0b100}


def _channel_setter(core, where):
    """Sets channel i: link direction i, or the receiving host i."""
    return core.links.set_loss if where == "link" else core.hosts.set_rx_loss


@dataclass(frozen=True)
class NoLoss:
    def rate(self) -> float:
        return 0.0

    def install(self, core, where, i, classes, rng):
        setter = _channel_setter(core, where)
        setter(i, KIND_NONE, 0.0)


@dataclass(frozen=True)
class Uniform:
    p: float

    def __post_init__(self):
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"loss probability must be in [0, 1], got {self.p}")

    def rate(self) -> float:
        return self.p

    def install(self, core, where, i, classes, rng):
        setter = _channel_setter(core, where)
        setter(i, KIND_UNIFORM if self.p > 0 else KIND_NONE, self.p, 0.0, 0.0, 1.0, classes, 0)


@dataclass(frozen=True)
class GilbertElliott:
    p_gb: float             # P(good -> bad) after a packet
    p_bg: float             # P(bad -> good) after a packet
    loss_good: float = 0.0
    loss_bad: float = 1.0

    def __post_init__(self):
        for name in ("p_gb", "p_bg", "loss_good", "loss_bad"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        if self.p_gb + self.p_bg <= 0:
            raise ValueError("p_gb + p_bg must be > 0")

    @classmethod
    def from_rate(cls, rate: float, burst: float) -> "GilbertElliott":
        """Loss rate `rate` in bursts of `burst` packets on average."""
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"loss rate must be in [0, 1), got {rate}")
        if burst < 1.0:
            raise ValueError(f"mean burst length must be >= 1 packet, got {burst}")
        p_bg = 1.0 / burst
        p_gb = rate * p_bg / (1.0 - rate)
        if p_gb > 1.0:
            raise ValueError(f"rate {rate} with bursts of {burst} needs P(good->bad) > 1")
        return cls(p_gb, p_bg, 0.0, 1.0)

    def pi_bad(self) -> float:
        return self.p_gb / (self.p_gb + self.p_bg)

    def rate(self) -> float:
        b = self.pi_bad()
        return (1.0 - b) * self.loss_good + b * self.loss_bad

    def mean_burst(self) -> float:
        """Mean length of a bad period, in packets."""
        return 1.0 / self.p_bg if self.p_bg > 0 else float("inf")

    def install(self, core, where, i, classes, rng):
        setter = _channel_setter(core, where)
        state = 1 if rng.random() < self.pi_bad() else 0
        setter(i, KIND_GE, self.p_gb, self.p_bg, self.loss_good, self.loss_bad, classes, state)


def make(kind: str = "uniform", rate: float = 0.0, burst: Optional[float] = None):
    """A model from run parameters: kind "uniform" or "gilbert" (alias "ge")."""
    if rate <= 0:
        return NoLoss()
    if kind == "uniform":
        return Uniform(rate)
    if kind in ("gilbert", "ge", "gilbert-elliott"):
        return GilbertElliott.from_rate(rate, burst if burst else 4.0)
    raise ValueError(f"loss model must be 'uniform' or 'gilbert', got {kind!r}")
