"""Atomic (all-or-none) delivery over the reliable layer (paper 004, and past
it): docs/atomic.md.

    from rpbcast.protocol.atomic import AtomicDelivery
    engine.add_extension(AtomicDelivery("/var/lib/app/atomic"))
    p = engine.extensions[-1].propose(b"order 42", timeout=2.0)   # p.result() once decided

On real sockets: Config(atomic=True, state_dir=...), then
Node.publish_atomic / apublish_atomic and Node.receive_atomic / areceive_atomic.

Modules: records (what travels in the stream), journal (the crash-safe log),
view (who votes; booting), coordinator (the sender's two-phase commit),
participant (a member's votes, decisions, doubts and deliveries),
aggregator (tree votes), timers, outcome, extension (the wiring).
"""
from rpbcast.protocol.atomic.extension import AtomicDelivery
from rpbcast.protocol.atomic.outcome import AtomicMessage, AtomicOutcome
from rpbcast.protocol.atomic.records import ATOMIC_LABEL

__all__ = ["AtomicDelivery", "AtomicMessage", "AtomicOutcome", "ATOMIC_LABEL"]
