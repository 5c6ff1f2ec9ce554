"""What the atomic layer hands the application: the outcome of a proposal
(to its sender) and a committed message (to every member that voted YES)."""
from __future__ import annotations

from typing import NamedTuple

from rpbcast.protocol.atomic import records


class AtomicOutcome(NamedTuple):
    """publish_atomic's result.  committed: every member of the snapshot
    had the message on disk and will deliver it; otherwise nobody delivers
    it, and reason says why."""
    committed: bool
    seq: int                  # the proposal's seq in the sender's stream
    reason: str               # "" when committed
    snapshot: int             # members whose YES it needed
    latency: float            # seconds from publication to the decision

    @classmethod
    def of(cls, seq, outcome, reason, snapshot, latency_ns):
        return cls(outcome == records.COMMIT, seq, records.reason_text(reason) if outcome != records.COMMIT else "",
                   snapshot, latency_ns / 1e9)


class AtomicMessage(NamedTuple):
    """A committed atomic message, handed to the application once."""
    sender: int
    inc: int
    seq: int
    payload: bytes
    committed_at: int          # ns, when this member learned the decision
