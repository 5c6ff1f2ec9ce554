"""GSGC's configuration (docs/gsgc.md, "Configuration")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rpbcast.protocol.gsgc.layers import L_MAX

ADMISSIONS = ("window", "execution", "immediate")


@dataclass
class GsgcConfig:
    b: int = 1                      # gossip sub-group size per step (paper's b)
    step: Optional[float] = None    # seconds; None: one step per engine gossip round
    K: Optional[int] = None         # failure threshold (steps); None: k_threshold(n, b)
    k_factor: float = 2.0           # c in K = c * D + 2
    k_min: int = 6
    k_measured: bool = True         # K >= 1.5 x p99 of observed staleness of live members
    fail_after: float = 1.0         # and K >= this many seconds of steps: a member silent for
                                    # less is never declared failed (an overloaded logger's
                                    # timers ran 0.5 s late; K = 9 steps of 20 ms called it
                                    # failed and recovered a dozen times a second)
    quorum: float = 0.5             # failures are declared only while > quorum * n stay alive
    admission: str = "window"       # joins (§3.3): window | execution | immediate
    admission_window: Optional[float] = None   # seconds after a round start; None: 2 steps
    execution_quiet: Optional[float] = None    # execution control: quiet time; None: 4 steps
    multicast: bool = True          # multicast S when a round completes here (§3.1 optimisation)
    multicast_delay: Optional[float] = None    # suppression delay bound; None: step / 4
    age_limit: Optional[int] = None  # engine gc_limit while GSGC runs; None: auto; 0: leave it
    newcomer: Optional[bool] = None  # start with L "unknown" (joining / restarted); None: engine cfg.join
    failure_detection: bool = True  # False: stability detection alone (no LIVE arrays, nobody declared
                                    # failed), as the paper simulates it (§4)
    # local gossip (§5)
    zones: object = None            # None (flat) | "subnet" | {node_id: zone} | callable(Member)
    subnet_prefix: int = 24
    controllers: int = 2            # G stability controllers per local group
    b2: Optional[int] = None        # sub-group size among controllers; None: b
    step2: Optional[float] = None   # the controllers' step interval (s); None: step (needs step)
    # adaptive step (§4.3); needs step set (own timer), flat layer only
    adaptive: Optional[dict] = None  # OnlineSearch kwargs (a0, b0, g, e, p, ...)

    def validate(self):
        if self.b < 1:
            raise ValueError("b (gossip sub-group size) must be at least 1")
        if self.step is not None and self.step <= 0:
            raise ValueError("step must be a positive number of seconds, or None")
        if self.admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, got {self.admission!r}")
        if not 0 <= self.quorum < 1:
            raise ValueError("quorum must be in [0, 1)")
        if self.fail_after < 0:
            raise ValueError("fail_after must be >= 0 seconds")
        if self.K is not None and not 1 <= self.K <= L_MAX:
            raise ValueError(f"K must be in 1..{L_MAX} (LIVE counters are one byte)")
        if self.controllers < 1:
            raise ValueError("controllers (G) must be at least 1")
        if self.step2 is not None and (self.step is None or self.step2 <= 0):
            raise ValueError("step2 must be a positive number of seconds, and needs step= as well")
        if self.step2 is not None and self.zones is None:
            raise ValueError("step2 is the controllers' step: it needs zones (local gossip)")
        if self.adaptive is not None and self.step is None:
            raise ValueError("adaptive needs step= (the extension's own step timer)")
        if self.adaptive is not None and self.zones is not None:
            raise ValueError("the adaptive step runs on the flat scheme only")
        if not (self.zones is None or self.zones == "subnet" or isinstance(self.zones, dict)
                or callable(self.zones)):
            raise ValueError("zones must be None, 'subnet', a {node_id: zone} dict or a callable(Member)")
        if not 0 < self.subnet_prefix <= 32:
            raise ValueError("subnet_prefix must be 1..32")
        return self
