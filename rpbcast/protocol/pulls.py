"""Immediate pulls (thesis §4.1: request on detection) and the gossip
phase's requests in flight.

When the data plane flags a gap, the missing ids go out at once in a pull
(a GOSSIP with MISSING sections only) instead of waiting for the next gossip
round, at most one pull per nack_min_interval.

Every id asked of a peer -- by a pull or a gossip round -- is in flight
until it arrives (the data plane drops it from the set), and nobody asks for
it again meanwhile: a repair already on its way would only be served twice.
At most GOSSIP_WINDOW ids of a stream are in flight; as they arrive the next
ones are asked.  What is in flight is asked again only when nothing of the
stream arrived for a while: max(nack_retry, 2 x RTT) at first, doubling
while nothing at all comes (up to the gossip interval) -- a lost pull or a
lost repair costs about one repair, and a member far behind gets each id
about once, at the pace its peers serve and it absorbs.

One exception: the lowest run in flight.  Repairs are served in id order,
so when later ids keep arriving and the lowest run does not for a whole
wait, its repair was lost; it is asked again at once (window or not).
Waiting for the whole stream to go quiet would hold it -- and with it the
receiver's contiguous frontier, flow control, and every large message
that lacks it -- until the sender stops or the gossip phase times out
(2 x gc_limit rounds): seconds under a steady stream with steady loss.
"""
from __future__ import annotations

from rpbcast.core.node import PHASE_GOSSIP, PHASE_NEW
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE

NS = 1_000_000_000
NEVER = 1 << 62
ACTIVE = (MEMBER, PENDING_LEAVE)
GOSSIP_WINDOW = 4096              # gossip-phase ids in flight per stream
REFILL_TICK_NS = 2_000_000        # look at the windows this often while ids are in flight


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
        self.next_retry = NEVER         # the next look at what is in flight
        # slot -> [ids in flight, time of the last arrival (or ask), wait before asking
        #          again, the first wait]
        self._wait = {}
        # slot -> [lowest run in flight (first, last), since when it is the lowest]
        self._head = {}
        self._reask = {}                # slot -> ids of a lost lowest run, asked beyond the window
        self._immediate = cfg.immediate_nack
        self._min_gap_ns = _ns(cfg.nack_min_interval)
        self._retry_ns = _ns(cfg.nack_retry)
        self._gossip_ns = _ns(cfg.gossip_interval)
        self._target_mode = cfg.nack_target
        self._sender_max = cfg.nack_sender_max
        self._budget = repair.gossip_budget

    def get_timer(self):
        return min(self.next_nack, self.next_retry)

    def forget_slots(self, slots):
        """Retired streams (Engine._forget_retired): nothing in flight."""
        for s in slots:
            self._wait.pop(s, None)
            self._head.pop(s, None)
            self._reask.pop(s, None)

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
            self.check(now)

    def room(self, slot):
        """Ids of a stream that may be asked of peers now: the window's room
        once half of it arrived, else none."""
        out = self.node.inflight(slot)
        room = GOSSIP_WINDOW - out if out <= GOSSIP_WINDOW // 2 else 0
        return max(room, self._reask.pop(slot, 0))

    def pull(self, now, anyone=False):
        """Pull the ids of gaps just seen (and of windows with room);
        anyone: from a random peer (what was asked of the usual target did
        not come back -- it may have crashed or collected it)."""
        node = self.node
        node.clear_nack()
        if self.e.group.status not in ACTIVE:
            return
        spans = []
        secs, nids = self.repair.missing_sections(PHASE_NEW, self._budget, rotate=False, from_start=True,
                                                  spans=spans, room=self.room)
        if not secs:
            return
        target = self.e.group.pick_target(now) if anyone else self._target(node.peer_key(spans[0][0])[0], now)
        if target is None:
            for slot, lo, hi in spans:      # not asked after all
                node.clear_inflight_of(slot)
            return
        self.repair.send_gossip(target, secs, now, nids)
        self.last_nack = now
        self.asked(spans, now, target)

    def asked(self, spans, now, target=None):
        """Streams of spans [(slot, first, last)] were just asked of a peer
        (a pull or a gossip round): start, or restart, their wait."""
        rto = self._rto(target)
        for slot, lo, hi in spans:
            w = self._wait.get(slot)
            if w is None:
                self._wait[slot] = [self.node.inflight(slot), now, rto, rto]
            else:
                w[0] = self.node.inflight(slot)
                w[1] = now
            h = self._head.get(slot)
            if h is not None:
                h[2] = self._wait[slot][0]      # what is in flight now: fewer later is an arrival
        t = now + min(rto, REFILL_TICK_NS)
        if t < self.next_retry:
            self.next_retry = t

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
        rtt = None
        if target is not None:
            rtt = target.rtt if target.rtt is not None else self.e.pings.rtt_hint   # not probed yet: a neighbour's
        if rtt is not None:
            rto = max(rto, int(2 * rtt * NS))
        return min(rto, self._gossip_ns)

    def _lost_head(self, slot, out, now):
        """Was the repair of the stream's lowest run in flight lost?  Yes
        when it has been the lowest for a whole wait while other ids in
        flight arrived.  Then it leaves the in-flight set, to be asked
        again by the next pull."""
        node = self.node
        head = node.inflight_first(slot)
        h = self._head.get(slot)
        if head is None:
            self._head.pop(slot, None)
            return False
        if h is None or h[0][0] != head[0]:
            # [the run, lowest since, ids in flight at the last look, arrivals since]
            self._head[slot] = [head, now, out, False]
            return False
        if out < h[2]:
            h[3] = True
        h[0], h[2] = head, out
        if now - h[1] < self._wait[slot][3] or not h[3]:
            return False
        node.uninflight(slot, head[0], head[1])
        self._reask[slot] = head[1] - head[0] + 1
        h[1], h[3] = now, False
        self.e.stats["reasked_heads"] = self.e.stats.get("reasked_heads", 0) + 1
        return True

    def check(self, now):
        """Look at what is in flight: a stream whose ids keep arriving gets
        its next ones asked once half its window is in; a stream from which
        nothing arrived for its wait is asked again (the wait doubling, up
        to the gossip interval, while nothing at all comes back)."""
        node = self.node
        again = stalled = False
        nxt = NEVER
        for slot in list(self._wait):
            w = self._wait[slot]
            out = node.inflight(slot)
            if not out:
                del self._wait[slot]
                self._head.pop(slot, None)
                again = again or node.peer_missing_count(slot, PHASE_GOSSIP) > 0
                continue
            if self._lost_head(slot, out, now):
                again = True
            if out < w[0]:
                w[0], w[1], w[2] = out, now, w[3]               # arriving: keep the pipe full
                again = again or out <= GOSSIP_WINDOW // 2
            elif now - w[1] >= w[2]:
                node.clear_inflight_of(slot)                    # could have arrived by now
                w[0], w[1] = 0, now
                w[2] = min(2 * w[2], self._gossip_ns)
                again = stalled = True
            nxt = min(nxt, w[1] + w[2], now + REFILL_TICK_NS)
        self.next_retry = nxt
        # Without immediate pulls (the thesis' pure gossip) what is cleared
        # waits for the next round: asking between rounds would change the
        # protocol's convergence, not only its cost.
        if again and self._immediate:
            self.pull(now, anyone=stalled)
