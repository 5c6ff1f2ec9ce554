"""The baselines of the thesis's evaluation (chapter 7) and SRM, on the same
framework as rpbcast: each is a sans-IO engine with the rpbcast Engine's
driver interface, built on the same C data plane (``rpbcast.core.node.Node``);
only the control plane differs.  See docs/protocols.md.

    from rpbcast.baselines import make_engine, factory
    e = make_engine("lbrm", config, now, rng)      # or "rpbcast", "pbcast", "srm"
    f = factory("srm", distance=lambda a, b: topo_latency(a, b))
    e = f(config, now, rng)                        # the simulator's factory signature

Each baseline module also defines ``SIM_PROTOCOL`` for ``rpbcast.sim``.
"""
from __future__ import annotations

import random
from typing import Optional

from rpbcast.config import PROTOCOLS, Config, ConfigError


def engine_class(protocol: str):
    if protocol == "rpbcast":
        from rpbcast.protocol.engine import Engine
        return Engine
    if protocol == "pbcast":
        from rpbcast.baselines.pbcast import PbcastEngine
        return PbcastEngine
    if protocol == "lbrm":
        from rpbcast.baselines.lbrm import LbrmEngine
        return LbrmEngine
    if protocol == "srm":
        from rpbcast.baselines.srm import SrmEngine
        return SrmEngine
    raise ConfigError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


def make_engine(protocol: str, config: Config, now: int, rng: Optional[random.Random] = None,
                log=None, mac_counter0=None, **params):
    """An engine for ``protocol`` ("rpbcast", "pbcast", "lbrm" or "srm").

    ``params`` are the protocol's own parameters (``PbcastParams``,
    ``LbrmParams``, ``SrmParams``); rpbcast takes none beyond its Config.
    mac_counter0: a keyed group's first MAC nonce counter (Engine)."""
    cls = engine_class(protocol)
    if protocol == "rpbcast":
        if params:
            raise ConfigError(f"rpbcast takes no protocol parameters (got {', '.join(sorted(params))}); "
                              "use Config")
        return cls(config, now, rng, log, mac_counter0=mac_counter0)
    return cls(config, now, rng, log, mac_counter0=mac_counter0, **params)


def engine_for(config: Config, now: int, log=None, mac_counter0=None):
    """The engine ``config.protocol`` names, with ``config.protocol_params``
    (what ``rpbcast.api.Node`` runs).  A parameter the protocol does not
    know is a ConfigError naming protocol_params."""
    try:
        return make_engine(config.protocol, config, now, None, log, mac_counter0=mac_counter0,
                           **config.protocol_params)
    except TypeError as e:          # a parameter of the wrong type reached a dataclass
        raise ConfigError(f"protocol_params: {e}") from None


def factory(protocol: str, **params):
    """A ``(config, now, rng, log=None) -> engine`` callable with ``params``
    bound (the simulator's factory signature, ``rpbcast.sim.protocols``)."""
    engine_class(protocol)          # fail early on an unknown protocol

    def make(config, now, rng=None, log=None):
        return make_engine(protocol, config, now, rng, log, **params)

    make.__name__ = f"make_{protocol}"
    return make
