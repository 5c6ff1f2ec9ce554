"""Immediate pulls (thesis §4.1: request on detection) and their retries.

When the data plane flags a gap, the missing ids go out at once in a pull
(a GOSSIP with MISSING sections only) instead of waiting for the next gossip
round, at most one pull per nack_min_interval.  A pull or its repair can be
lost too: until its ids arrive, each pull is asked again on its own clock
with the wait doubled, and left to the gossip rounds once the wait reaches
the gossip interval -- that wait is what sets the tail latency under loss.
"""
from __future__ import annotations

import collections

from rpbcast.core import wire
from rpbcast.core.digest import decode as digest_decode
from rpbcast.core.node import PHASE_GOSSIP, PHASE_NEW
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE

NS = 1_000_000_000
NEVER = 1 << 62
ACTIVE = (MEMBER, PENDING_LEAVE)


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class Pulls:
    def __init__(self, engine, repair):
        cfg = engine.cfg
        self.e = engine
        self.node = engine.node
        self.members = engine.members
        self.repair = repair
        self.last_nack = -(1 << 62)
        self.next_nack = NEVER          # a deferred pull (nack_min_interval)
        self.next_retry = NEVER
        # Outstanding pulls: [due, backoff, [(slot, lo, hi)]], each retried
        # on its own clock, only for what is still missing.
        self._retries = collections.deque()
        self._immediate = cfg.immediate_nack
        self._min_gap_ns = _ns(cfg.nack_min_interval)
        self._retry_ns = _ns(cfg.nack_retry)
        self._gossip_ns = _ns(cfg.gossip_interval)
        self._target_mode = cfg.nack_target
        self._sender_max = cfg.nack_sender_max
        self._budget = repair.gossip_budget

    def get_timer(self):
        return min(self.next_nack, self.next_retry)

    def after_rx(self, now):
        if self.node.nack_pending and self._immediate:
            due = self.last_nack + self._min_gap_ns
            if now >= due:
                self.pull(now)
            elif self.next_nack == NEVER:
                self.next_nack = due

    def on_timer(self, now):
        if now >= self.next_nack:
            self.next_nack = NEVER
            self.pull(now)
        if now >= self.next_retry:
            self.retry(now)

    def pull(self, now):
        """Pull the ids of gaps just seen."""
        node = self.node
        node.clear_nack()
        if self.e.group.status not in ACTIVE:
            return
        spans = []
        secs, nids = self.repair.missing_sections(PHASE_NEW, self._budget, rotate=False, from_start=True,
                                                  spans=spans)
        if not secs:
            return
        target = self._target(node.peer_key(spans[0][0])[0], now)
        if target is None:
            return
        self.repair.send_gossip(target, secs, now, nids)
        self.last_nack = now
        rto = self._rto(target)
        self._retries.append([now + rto, rto, spans])
        if now + rto < self.next_retry:
            self.next_retry = now + rto

    def _target(self, sender, now):
        """Whom to pull from; sender: the stream of the first section.

        In a small group ask the sender: it holds every message it sent
        until a logger has it, so one round trip repairs.  In a large group
        that is an implosion (every receiver behind a shared loss asks at
        once): pull from a random peer, as the thesis does."""
        mode = self._target_mode
        if mode == "auto":
            mode = "sender" if len(self.members) <= self._sender_max else "random"
        if mode == "sender":
            m = self.members.get(sender)
            if m is not None and m.status in ACTIVE:
                return m
        return self.e.group.pick_target(now)

    def _rto(self, target):
        # Wait at least nack_retry, and twice the measured round trip to the
        # target: asking again before a repair could be back only
        # duplicates it (every retry of an id costs a repair).
        rto = self._retry_ns
        rtt = target.rtt if target.rtt is not None else self.e.pings.rtt_hint   # not probed yet: a neighbour's
        if rtt is not None:
            rto = max(rto, int(2 * rtt * NS))
        return min(rto, self._gossip_ns)

    def retry(self, now):
        """Ask again for the ids of due pulls that are still missing (and
        still in the gossip phase), with the wait doubled; a pull whose
        wait reaches the gossip interval is left to the gossip rounds."""
        node = self.node
        budget = self._budget
        secs, used, nids, later = [], 0, 0, []
        first = None                     # the stream of the first section
        q = self._retries
        while q and q[0][0] <= now:
            due, backoff, spans = q.popleft()
            left = []
            for slot, lo, hi in spans:
                room = budget - used - 12
                if room < 8:
                    left.append((slot, lo, hi))      # no room: next time
                    continue
                d, cov, k = node.missing_digest(slot, PHASE_GOSSIP, room, lo, hi)
                if not d:
                    continue
                pid, pinc = node.peer_key(slot)
                if first is None:
                    first = pid
                secs.append(wire.missing_section(pid, pinc, d))
                used += 12 + len(d)
                nids += k
                node.mark_inflight(slot, lo, cov)
                left.append((slot, int(digest_decode(d)[0][0][0]), hi))   # what is still out
            backoff *= 2
            if left and backoff < self._gossip_ns:
                later.append([now + backoff, backoff, left])
        if secs and self.e.group.status in ACTIVE:
            target = self._target(first, now)
            if target is not None:
                self.repair.send_gossip(target, secs, now, nids)
        for e in later:
            # keep the deque ordered by due time
            if not q or e[0] >= q[-1][0]:
                q.append(e)
            else:
                i = next(k for k, x in enumerate(q) if x[0] > e[0])
                q.insert(i, e)
        self.next_retry = q[0][0] if q else NEVER
