"""The atomic view: who an atomic message must reach (paper 004 §5).

The group state is the engine's member table (joins, leaves, sponsors:
rpbcast.protocol.group), so the paper's JOIN and LEAVE messages are the
membership protocol's.  What the atomic layer adds is *booting*: a member
that stays silent while a proposal waits for its vote is taken out of the
view (a BOOT record in the booter's stream tells everyone), so later
proposals do not wait for it; if it is alive after all, it learns from the
stream that it was booted and answers with a JOIN record (the paper's
"correcting join").  The boot period adapts to the round-trip time, so a
slow path does not boot a member that is merely far away.

The view of a proposal's sender at send time is that proposal's snapshot:
the voters it waits for.  Loggers are infrastructure, not voters.
"""
from __future__ import annotations

import bisect
from typing import Dict, Optional, Tuple

from rpbcast.protocol.membership import MEMBER

NS = 1_000_000_000


class AtomicView:
    def __init__(self, ctx, boot_after_ns: int):
        self.ctx = ctx
        self.boot_after_ns = boot_after_ns
        self.booted: Dict[int, Tuple[int, int]] = {}      # node id -> (inc booted, time)
        self.heard: Dict[int, int] = {}                   # node id -> last vote heard (ns)
        self.version = 0
        self._cache = None

    # ------------------------------------------------------------------ the view
    def voters(self) -> Tuple[int, ...]:
        """Sorted ids of the members whose votes a proposal sent now waits
        for (not this member, not loggers, not booted)."""
        ctx = self.ctx
        key = (ctx.members.version, self.version)
        if self._cache is None or self._cache[0] != key:
            ids = tuple(sorted(m.node_id for m in ctx.members.members.values()
                               if m.node_id != ctx.id and m.status == MEMBER and not m.is_logger
                               and m.node_id not in self.booted))
            self._cache = (key, ids)
        return self._cache[1]

    def with_self(self) -> Tuple[int, ...]:
        """The view including this member (what a voter orders aggregators by)."""
        ids = self.voters()
        me = self.ctx.id
        if self.ctx.status != MEMBER or me in ids:
            return ids
        return tuple(sorted(ids + (me,)))

    # ------------------------------------------------------------------ liveness
    def note_heard(self, node_id: int, now: int):
        """A vote of node_id arrived (directly or in an aggregator's list)."""
        self.heard[node_id] = now

    def boot_after(self, node_id: int) -> int:
        """How long node_id may stay silent while a proposal waits for it:
        the configured period, at least 8 round trips to it (paper 004 §5:
        adapted to the RTT, so a far member is not booted for being far)."""
        m = self.ctx.members.get(node_id)
        rtt = m.rtt if m is not None and m.rtt else 0.0
        return max(self.boot_after_ns, int(8 * rtt * NS))

    def silent_since(self, node_id: int, since: int) -> int:
        """The last time node_id was heard from, counting from `since` at
        the earliest (a proposal's start: a member quiet before it is not
        silent towards it)."""
        m = self.ctx.members.get(node_id)
        last = max(self.heard.get(node_id, 0), m.last_heard if m is not None else 0)
        return max(last, since)

    # ------------------------------------------------------------------ booting
    def boot(self, node_id: int, inc: int, now: int) -> bool:
        if node_id in self.booted or node_id == self.ctx.id:
            return False
        self.booted[node_id] = (inc, now)
        self.version += 1
        return True

    def unboot(self, node_id: int) -> bool:
        if self.booted.pop(node_id, None) is None:
            return False
        self.version += 1
        return True

    def inc_of(self, node_id: int) -> int:
        m = self.ctx.members.get(node_id)
        return m.inc if m is not None else 0

    def addr_of(self, node_id: int) -> Optional[int]:
        m = self.ctx.members.get(node_id)
        return m.addr if m is not None and m.addr else None

    def _order(self, sender: int):
        """(the view with this member, without `sender`, as a list; this
        member's position in it, or None)."""
        ids = self.with_self()
        j = bisect.bisect_left(ids, sender)
        if j < len(ids) and ids[j] == sender:
            ids = ids[:j] + ids[j + 1:]
        me = self.ctx.id
        k = bisect.bisect_left(ids, me)
        return ids, (k if k < len(ids) and ids[k] == me else None)

    def aggregator(self, sender: int, fanout: int) -> int:
        """Tree votes: the member this member's YES goes to for a proposal of
        `sender` -- the first of its group of `fanout` consecutive ids in the
        view (without the sender).  Views differ a little between members;
        any member that gets a vote forwards it, so a different choice costs
        a hop, never a vote."""
        ids, pos = self._order(sender)
        if pos is None:
            return sender
        return ids[(pos // fanout) * fanout]

    def group_of(self, sender: int, fanout: int) -> Tuple[int, ...]:
        """The voters whose YES this member aggregates for `sender` (when it
        is their aggregator): its group of `fanout` in the view."""
        ids, pos = self._order(sender)
        if pos is None:
            return ()
        start = (pos // fanout) * fanout
        return tuple(ids[start:start + fanout])
