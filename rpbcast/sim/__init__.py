"""A deterministic discrete-event network simulator that drives the protocol
engines (docs/simulator.md).

    from rpbcast.sim import run_one
    r = run_one({"loss": 0.01, "total_rate": 360})

Modules: ``topology`` (graphs, the transit-stub and balanced-tree
generators, shortest-path routing), ``network`` (queues, multicast and
unicast forwarding, host costs; the event loop is ``_core``), ``loss``
(uniform, Gilbert-Elliott), ``workload`` (Poisson senders), ``protocols``
(engine factories by name), ``run`` (``Simulation``, ``run_one``; ``api``
re-exports them for ``rpbcast sweep``), ``cli`` (``rpbcast sim``), ``scale``
(the run-time growth measurements).
"""
from rpbcast.sim.params import DEFAULTS
from rpbcast.sim.run import Simulation, run_one

__all__ = ["DEFAULTS", "Simulation", "run_one"]
