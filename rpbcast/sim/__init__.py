"""A deterministic discrete-event network simulator that drives the protocol
engines (docs/simulator.md).

    from rpbcast.sim import run_one
    r = run_one({"loss": 0.01, "total_rate": 360})

The C core (``_core.Core`` and its pieces: ``events``, ``packets``,
``channel``, ``links``, ``routes``, ``hosts``, ``inputq``, ``forwarding``,
``driver``, ``deliveries``; ``spt`` for routes) holds the network model and
the event loop.  In Python: ``topology`` (graphs, generators, routes),
``loss`` (the models), ``network`` (``Network``), ``workload`` and
``stock``, ``protocols`` (engine factories by name), ``params``
(``DEFAULTS``), ``build``, ``tracking``, ``consumers``, ``results`` and
``rundir`` (the parts of a run), ``run`` (``Simulation``, ``run_one``;
``api`` re-exports them for ``rpbcast sweep``), ``cli`` (``rpbcast sim``),
``scale`` (the run-time growth measurements).  docs/simulator.md, "Code".
"""
from rpbcast.sim.params import DEFAULTS
from rpbcast.sim.run import Simulation, run_one

__all__ = ["DEFAULTS", "Simulation", "run_one"]
