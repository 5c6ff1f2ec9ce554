"""A member's side of atomic delivery: hold, vote, learn, hand over.

A proposal found in a sender's stream is appended to the journal; once a
sync covers it the member votes YES (NO if the log refused it).  The vote
is repeated, backing off, until the member learns the decision: from the
sender's DECIDE record (in the stream: repaired like data), from an answer
to a question, or from the sender's FENCE after it restarted.  Past the
deadline a member that voted YES is *in doubt*: it asks the sender and
other members what was decided, and never decides for itself -- the sender
may have committed, so aborting alone could split the group (docs/atomic.md,
"The sender crashes").  A COMMIT hands the message to the application once
(exactly once: the journal's delivered/ says what it got), provided this
member voted YES before it learned the decision; an ABORT drops it.
"""
from __future__ import annotations

import collections
from typing import Dict, Tuple

from rpbcast.core import wire
from rpbcast.core.logstore import LogError
from rpbcast.protocol.atomic import records
from rpbcast.protocol.atomic.outcome import AtomicMessage

T = wire.MsgType
Key = Tuple[int, int, int]
MAX_ATTEMPT = 16
KEEP = 1 << 18                 # decisions and delivered ids remembered at most (besides the retention)


class Held:
    """A proposal this member holds (logged) and has not seen decided."""
    __slots__ = ("key", "payload", "scheme", "fanout", "deadline", "voted", "attempt", "asked", "t_recv",
                 "ordinal", "acked", "direct")

    def __init__(self, key, prop: records.Propose, t_recv: int):
        self.key = key
        self.payload = prop.payload
        self.scheme = prop.scheme
        self.fanout = prop.fanout
        self.t_recv = t_recv
        self.deadline = t_recv + prop.timeout_ns
        self.voted = False          # a YES went out: the record is durable here
        self.attempt = 0
        self.asked = 0
        self.ordinal = 0            # the journal's record count a sync must reach (0: from disk)
        self.acked = False          # tree: an aggregator (or the sender) said it has our YES
        self.direct = False         # a YES went to the sender itself


class Participant:
    def __init__(self, ext):
        self.x = ext
        self.ctx = ext.ctx
        self.held: Dict[Key, Held] = {}
        self.decided: "collections.OrderedDict[Key, tuple]" = collections.OrderedDict()  # -> (outcome, reason, t)
        self.ready = collections.deque()              # AtomicMessage, committed, not yet taken
        self.delivered: "collections.OrderedDict[Key, int]" = collections.OrderedDict()
        self.to_vote = []                             # logged in this scan, waiting for the sync
        self.fences = []                              # (sender, fence inc, fence seq, below inc)
        self.fenced_below: Dict[int, int] = {}        # sender -> incarnations below this are fenced
        self.joined_after: Dict[int, int] = {}        # booter -> seq of the BOOT we answered

    # ------------------------------------------------------------------ proposals
    def on_propose(self, key: Key, prop: records.Propose, raw: bytes, now: int):
        x = self.x
        if key in self.decided or key in self.held:
            h = self.held.get(key)
            if h is not None and h.voted:
                self._vote(h, now)              # a second copy (a restarted member): vote again
            return
        s, i, q = key
        if i < self.fenced_below.get(s, 0):
            return                              # a dead incarnation's proposal, after its fence
        h = Held(key, prop, now)
        self.held[key] = h
        try:
            h.ordinal = x.journal.add_proposal(key, raw, now)
        except (LogError, ValueError):
            x.count("log_errors")
            self._vote_no(h, records.R_LOG)
            return
        self.to_vote.append(h)

    def flush_votes(self, now: int):
        """After a scan: one sync covers every proposal it logged, then
        their YES votes go out (a YES means: on disk here)."""
        if not self.to_vote:
            return
        batch, self.to_vote = self.to_vote, []
        try:
            self.x.journal.sync()
        except LogError:
            self.x.count("log_errors")
            for h in batch:
                self._vote_no(h, records.R_LOG)
            return
        for h in batch:
            if h.key in self.held:
                h.voted = True
                self.x.count("voted_yes")
                self._vote(h, now)

    def _vote_no(self, h: Held, reason: int):
        s, i, q = h.key
        self.held.pop(h.key, None)
        addr = self.x.view.addr_of(s)
        if addr is not None:
            self.x.send(addr, h.key, wire.ATOMIC_NO, reason)
            self.x.count("votes_no")

    def _vote(self, h: Held, now: int):
        """Send (or repeat) this member's YES and schedule what follows.

        Flat (paper 004): to the sender, repeated with back-off until the
        decision arrives -- nothing else tells a voter its YES arrived.
        Tree: to its aggregator, which answers HAVE; unanswered twice it goes
        to the sender (which answers HAVE too).  Once answered the voter
        waits for the decision (an aggregator that dies carrying it costs an
        abort at the deadline, never a wrong decision).  Past the deadline
        it asks what was decided."""
        x = self.x
        s, i, q = h.key
        a = h.attempt
        h.attempt += 1
        tree = h.scheme == records.TREE
        if tree and a < 2 and not h.acked:
            agg = x.view.aggregator(s, h.fanout)
            if agg == self.ctx.id:
                x.aggregator.add(h.key, s, [self.ctx.id], now, h.fanout)
                h.acked = True
            else:
                self._send_yes(h, agg)
        else:
            h.direct = True
            self._send_yes(h, s)
        if tree and h.acked:
            x.timers.at(h.deadline, self._ask, h.key, 0)
            return
        wait = x.retry_ns(s) << min(a, 6)
        if now + wait < h.deadline + x.retry_ns(s):
            x.timers.at(now + wait, self._retry, h.key, h.attempt)
        else:
            x.timers.at(max(now + wait, h.deadline), self._ask, h.key, 0)

    def _send_yes(self, h: Held, to: int):
        addr = self.x.view.addr_of(to)
        if addr is not None:
            self.x.send(addr, h.key, wire.ATOMIC_YES)
            self.x.count("votes_sent")

    def _retry(self, now: int, key: Key, attempt: int):
        h = self.held.get(key)
        if h is not None and h.voted and h.attempt == attempt and attempt < MAX_ATTEMPT and not h.acked:
            self._vote(h, now)

    def on_have(self, key: Key):
        """Tree: our YES is in an aggregator's (or the sender's) hands."""
        h = self.held.get(key)
        if h is not None and h.voted and not h.acked:
            h.acked = True
            self.x.timers.at(max(self.ctx.now, h.deadline), self._ask, key, 0)

    # ------------------------------------------------------------------ in doubt
    def _ask(self, now: int, key: Key, asked: int):
        """Past the deadline without a decision: ask the sender, and every
        other time a member of the view (anyone who learned the decision
        answers), backing off."""
        h = self.held.get(key)
        if h is None or h.asked != asked:
            return
        x = self.x
        if asked == 0:
            x.count("in_doubt")
        h.asked += 1
        s = key[0]
        target = s
        if asked % 2 == 1:
            others = [m for m in x.view.with_self() if m not in (s, self.ctx.id)]
            if others:
                target = others[self.ctx.rng.randrange(len(others))]
        addr = x.view.addr_of(target)
        if addr is not None:
            x.send(addr, key, wire.ATOMIC_ASK)
            x.count("asked")
        wait = min(x.retry_ns(s) << min(h.asked + 1, 12), x.ask_max_ns)
        x.timers.at(now + wait, self._ask, key, h.asked)

    def in_doubt(self):
        """Proposals voted YES, past their deadline, not decided here."""
        now = self.ctx.now
        return [k for k, h in self.held.items() if h.voted and now >= h.deadline]

    # ------------------------------------------------------------------ decisions
    def learn(self, key: Key, outcome: int, reason: int, now: int) -> bool:
        """A decision, from any source; the first one counts (they agree:
        only the sender decides)."""
        if key in self.decided:
            return False
        self.decided[key] = (outcome, reason, now)
        self.x.aggregator.drop(key)
        h = self.held.pop(key, None)
        if h is None or not h.voted:
            return True
        x = self.x
        try:
            x.journal.add_decision(key, outcome, reason, now)
        except (LogError, ValueError):
            x.count("log_errors")
        if outcome == records.COMMIT:
            if key not in self.delivered:
                self.ready.append(AtomicMessage(key[0], key[1], key[2], h.payload, now))
            x.count("committed_here")
        else:
            x.count("aborted_here")
        x.finished(key, now)
        return True

    def on_decide(self, sender: int, decisions, now: int):
        for d in decisions:
            self.learn((sender, d.inc, d.seq), d.outcome, d.reason, now)

    def decision(self, key: Key):
        """(outcome, reason) if known here."""
        d = self.decided.get(key)
        return None if d is None else d[:2]

    # ------------------------------------------------------------------ fences
    def on_fence(self, sender: int, fence_inc: int, fence_seq: int, below_inc: int, now: int):
        self.fences.append((sender, fence_inc, fence_seq, below_inc))
        self.check_fences(now)

    def check_fences(self, now: int):
        """A FENCE applies once every earlier record of its stream is here
        (the restarted sender re-announced its commits before it): what is
        still undecided of the incarnations below it is aborted."""
        if not self.fences:
            return
        node = self.ctx.node
        keep = []
        for f in self.fences:
            sender, finc, fseq, below = f
            slot = node.find_peer(sender, finc)
            if slot is None or node.peer_contiguous(slot) <= fseq:
                keep.append(f)
                continue
            self.fenced_below[sender] = max(self.fenced_below.get(sender, 0), below)
            for key in [k for k in self.held if k[0] == sender and k[1] < below]:
                self.learn(key, records.ABORT, records.R_FENCED, now)
        self.fences = keep

    # ------------------------------------------------------------------ booting
    def on_boot(self, booter: int, rec_seq: int, booted, now: int):
        x = self.x
        for node_id, inc in booted:
            if node_id == self.ctx.id:
                # Booted while alive: the correcting join (paper 004 §5).
                if self.joined_after.get(booter, -1) < rec_seq:
                    self.joined_after[booter] = rec_seq
                    x.announce_join(now)
            elif x.view.boot(node_id, inc, now):
                x.coordinator.abort_waiting_on({node_id}, records.R_BOOTED, now)

    # ------------------------------------------------------------------ the application
    def take(self, max_n: int):
        out = []
        while self.ready and len(out) < max_n:
            m = self.ready.popleft()
            key = (m.sender, m.inc, m.seq)
            if key in self.delivered:
                continue
            self.delivered[key] = m.committed_at
            out.append(m)
        return out

    def untake(self, msgs):
        for m in reversed(msgs):
            self.delivered.pop((m.sender, m.inc, m.seq), None)
            self.ready.appendleft(m)

    # ------------------------------------------------------------------ restart
    def recovered(self, key: Key, raw: bytes, decision, delivered: bool, now: int):
        """A proposal the journal held when this member started."""
        parsed = records.maybe(raw)
        if parsed is None or parsed[0] != records.PROPOSE:
            return
        prop = parsed[1]
        if delivered:
            self.delivered[key] = now
        if decision is not None:
            self.decided[key] = (decision[0], decision[1], now)
            if decision[0] == records.COMMIT and not delivered:
                self.ready.append(AtomicMessage(key[0], key[1], key[2], prop.payload, now))
            self.x.finished(key, now)
            return
        # Voted YES before the crash (it is durable): still in doubt.  Say
        # YES again (the sender may still be counting) and start asking.
        h = Held(key, prop._replace(timeout_ns=0), now)
        h.voted = True
        self.held[key] = h
        self.x.count("recovered_pending")
        self._vote(h, now)

    def gc(self, horizon: int):
        for d in (self.decided, self.delivered):
            while d:
                k, v = next(iter(d.items()))
                t = v[2] if isinstance(v, tuple) else v
                if t >= horizon and len(d) <= KEEP:
                    break
                d.popitem(last=False)
