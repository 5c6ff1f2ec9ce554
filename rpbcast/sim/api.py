"""The simulator's entry points for other tools: ``rpbcast sweep`` calls
``rpbcast.sim.api:run_one(params) -> dict`` (docs/simulator.md)."""
from rpbcast.sim.run import DEFAULTS, Simulation, resolve, run_one

__all__ = ["DEFAULTS", "Simulation", "resolve", "run_one"]
