"""Which engine a simulation runs: protocol name -> engine factory.

The simulator never implements a protocol; it builds one engine per member
with a factory and drives it through the sans-IO interface:

    engine = factory(config, now, rng, log=None)
    engine.receive_datagram(data, addr, now) / handle_timer(now) / get_timer()
    engine.datagrams_to_send() -> [(dest, bytes)]   (dest DEST_MCAST = the group)
    engine.publish(payload, now=now) -> seq
    engine.recv_batch(max_n, buf, now) -> (k, senders, incs, seqs, labels, rx_times, offs, lens)
    engine.counters(), engine.traffic(), engine.inc

``config`` is an ``rpbcast.config.Config`` (node_id = address = the node's
number, the static member list, role "logger" with a log_dir for loggers).

A baseline registers itself with ``register(name, factory, uses_logger=...,
**config_defaults)``, or ``rpbcast.baselines.<name>`` defines ``SIM_PROTOCOL``
(a ``Protocol`` or a dict of its fields); ``get(name)`` imports it on first
use.

Engines on the shared C data plane are driven like the UDP transport drives
rpbcast (no Python call per data datagram: ~2 us saved per datagram, most of
a large run) when their ``driver_needs`` allow it (the driver contract,
docs/architecture.md);
``tests/test_sim.py::test_fast_receive_path_is_equivalent_to_receive_datagram``
checks the equivalence for every protocol.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Dict


@dataclass
class Protocol:
    name: str
    factory: Callable                          # (config, now, rng, log=None) -> engine
    uses_logger: bool = True                   # members of role "logger" exist
    config: Dict[str, object] = field(default_factory=dict)   # Config defaults for this protocol


def _rpbcast_factory(config, now, rng, log=None):
    from rpbcast.protocol.engine import Engine
    return Engine(config, now, rng, log=log)


REGISTRY: Dict[str, Protocol] = {
    "rpbcast": Protocol("rpbcast", _rpbcast_factory, uses_logger=True),
}


def register(name: str, factory: Callable, uses_logger: bool = True, **config) -> Protocol:
    p = Protocol(name, factory, uses_logger, dict(config))
    REGISTRY[name] = p
    return p


def get(name: str) -> Protocol:
    p = REGISTRY.get(name)
    if p is not None:
        return p
    try:
        mod = importlib.import_module(f"rpbcast.baselines.{name}")
    except ModuleNotFoundError as e:
        if e.name and (e.name == f"rpbcast.baselines.{name}" or e.name == "rpbcast.baselines"):
            raise ValueError(f"unknown protocol {name!r} (known: {', '.join(sorted(REGISTRY))})") from None
        raise
    spec = getattr(mod, "SIM_PROTOCOL", None)
    if spec is None:
        raise ValueError(f"rpbcast.baselines.{name} defines no SIM_PROTOCOL for the simulator")
    if not isinstance(spec, Protocol):
        spec = Protocol(name, **spec) if isinstance(spec, dict) else Protocol(name, spec)
    REGISTRY[name] = spec
    return spec
