"""Extensions: protocol features that ride on the engine's gossip and timers
without living in engine.py (GSGC stability, FIFO-SRB purge signalling, ...).

An extension overrides what it needs; the engine calls every extension at
these points, always from the control plane (under the node lock when on real
sockets).
"""
from __future__ import annotations

from typing import List, Optional


class Extension:
    engine = None
    # True when after_rx must run after every received batch, even one that
    # queued no control message and flagged no gap (Engine.driver_needs).
    needs_every_rx = False

    def attach(self, engine):
        """Called once by Engine.add_extension."""
        self.engine = engine

    def get_timer(self) -> Optional[int]:
        """Next time (ns) on_timer must run, or None."""
        return None

    def on_timer(self, now: int):
        pass

    def on_round(self, now: int):
        """Once per gossip round, before the round's gossip is built."""

    def gossip_sections(self, target, budget: int, now: int) -> List[bytes]:
        """Extra sections for a gossip to `target` (a Member), within budget bytes."""
        return []

    def on_section(self, source: int, kind: int, data: bytes, now: int):
        """A gossip section of a kind the engine does not handle."""

    def on_message(self, msg, now: int) -> bool:
        """A control message of a type the engine does not handle (msg is the
        tuple from Node.take_control()).  Return True if handled."""
        return False

    def on_lastseen(self, source: int, entries, now: int):
        """Receive frontiers a member reported: [(sender, inc, frontier)],
        frontier = every seq below it was received by `source`."""

    def after_rx(self, now: int):
        """After a batch of datagrams was processed."""

    def on_member(self, node_id: int, status: str, now: int):
        """A membership change ('joined', 'left', 'failed', ...)."""
