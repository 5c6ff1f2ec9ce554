"""The simulator's entry points for other tools: ``rpbcast sweep`` calls
``rpbcast.sim.api:run_one(params) -> dict`` (docs/simulator.md)."""
from rpbcast.sim.params import DEFAULTS, resolve
from rpbcast.sim.run import Simulation, run_one

__all__ = ["DEFAULTS", "Simulation", "resolve", "run_one"]
