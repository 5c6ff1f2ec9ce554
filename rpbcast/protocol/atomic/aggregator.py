"""Tree votes: past the paper's flat scheme (docs/atomic.md, "Aggregated votes").

With scheme TREE a voter sends its YES not to the sender but to the first
member of its group of `fanout` consecutive ids in the view (AtomicView.
aggregator).  That member collects the group's votes and sends the sender
one ATOMIC message carrying their ids (flag VOTERS): once the whole group
is in, or `delay` after the first vote of a batch, and again, cumulatively,
when more arrive and while the proposal stays undecided (its digest may be
lost).  The sender then receives about n / fanout messages per proposal
instead of n, each vote crosses one hop more, and a member's acknowledgment
bytes -- its vote plus its share of a digest -- no longer depend on n.

Every hop is acknowledged (HAVE): the aggregator answers each voter, the
sender answers each list (echoing its number), so nobody repeats blindly
and the repeats that loss does cause stay on the short hop they repair.
Any member that receives a vote aggregates it, so members that disagree
slightly on the view cost a hop, never a vote; a voter whose vote went
unanswered twice sends it to the sender itself (its aggregator may be
down).
"""
from __future__ import annotations

from typing import Dict, Tuple

from rpbcast.core import wire

Key = Tuple[int, int, int]
MAX_FLUSHES = 8


class _Batch:
    __slots__ = ("sender", "voters", "sent", "flush_at", "flushes", "group", "number", "acked")

    def __init__(self, sender, group):
        self.sender = sender
        self.voters = set()
        self.sent = 0            # voters in the last list sent
        self.flush_at = None
        self.flushes = 0         # repeats of the current list
        self.group = group
        self.number = 0          # of the last list sent (its HAVE echoes it)
        self.acked = True        # the sender has everything sent so far


class Aggregator:
    def __init__(self, ext, delay_ns: int):
        self.x = ext
        self.delay_ns = delay_ns
        self.batches: Dict[Key, _Batch] = {}

    def add(self, key: Key, sender: int, voters, now: int, fanout: int = 0, src=None):
        """YES votes for a proposal of another sender, to pass on; src (the
        voter's address) is told HAVE: its vote is in our hands now."""
        if self.x.participant.decision(key) is not None:
            return
        if src is not None:
            self.x.send(src, key, wire.ATOMIC_HAVE)
        b = self.batches.get(key)
        if b is None:
            group = self.x.view.group_of(sender, fanout) if fanout else ()
            b = self.batches[key] = _Batch(sender, frozenset(group))
        before = len(b.voters)
        b.voters.update(voters)
        if len(b.voters) == before:
            return
        b.acked = False
        b.flushes = 0
        if b.group and b.group <= b.voters:
            self._flush(now, key)           # the whole group is in
        elif b.flush_at is None or b.flush_at > now + self.delay_ns:
            # new votes go out within `delay`, not at the next repeat
            b.flush_at = now + self.delay_ns
            self.x.timers.at(b.flush_at, self._due, key)

    def _due(self, now: int, key: Key):
        b = self.batches.get(key)
        if b is not None and not b.acked and b.flush_at is not None and now >= b.flush_at:
            self._flush(now, key)

    def on_have(self, key: Key, number: int):
        """The sender holds our list `number`: no more repeats of it."""
        b = self.batches.get(key)
        if b is not None and number == b.number and b.sent == len(b.voters):
            b.acked = True
            b.flush_at = None

    def _flush(self, now: int, key: Key):
        """One digest to the sender: every voter collected so far (cumulative:
        a lost digest is repaired by the next).  Repeated, backing off, while
        the proposal is undecided here."""
        b = self.batches.get(key)
        if b is None:
            return
        x = self.x
        b.flush_at = None
        addr = x.view.addr_of(b.sender)
        if addr is None:
            return
        ids = sorted(b.voters)
        if b.sent != len(ids):
            b.number = (b.number + 1) & 0xFF
        per = max(1, (x.ctx.cfg.mtu - wire.DG_HDR - wire.MSG_HDR) // 4)
        for k in range(0, len(ids), per):
            x.send(addr, key, wire.ATOMIC_YES, b.number, body=wire.voter_ids(ids[k:k + per]), flags=wire.F_VOTERS)
            x.count("digests_sent")
        b.sent = len(ids)
        b.flushes += 1
        if b.flushes < MAX_FLUSHES:
            again = now + (x.retry_ns(b.sender) << b.flushes)
            b.flush_at = again
            x.timers.at(again, self._due, key)

    def drop(self, key: Key):
        self.batches.pop(key, None)

    def __len__(self):
        return len(self.batches)
