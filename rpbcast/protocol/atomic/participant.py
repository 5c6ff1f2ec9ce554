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

A payload larger than a datagram arrives as PART records before (or, when
repaired, after) its PROPOSE: the parts wait in memory (bounded by
Config.reassembly_bytes) and the PROPOSE waits for its parts; once every
part is here and the digest matches, the parts and the proposal are
journalled together and the member votes as for any proposal.  A digest
or length that does not match is a NO (R_PARTS).
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


class PartSet:
    """The PART records of one large payload seen so far."""
    __slots__ = ("pieces", "nbytes", "t_first")

    def __init__(self, now: int):
        self.pieces: Dict[int, tuple] = {}      # index -> (stream seq, record, data)
        self.nbytes = 0
        self.t_first = now


class Participant:
    def __init__(self, ext):
        self.x = ext
        self.ctx = ext.ctx
        cfg = ext.ctx.cfg
        self.parts: Dict[Tuple[int, int, int], PartSet] = {}     # (sender, inc, nonce) -> parts
        self.parts_bytes = 0
        self.parts_cap = cfg.reassembly_bytes or 2 * cfg.message_cap
        self.waiting: Dict[Tuple[int, int, int], tuple] = {}     # (sender, inc, nonce) -> PROPOSE waiting
        self.part_low: Dict[Key, int] = {}     # a proposal -> its lowest PART seq (the journal keeps from there)
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
        if prop.ref is not None:
            pk = (s, i, prop.ref.nonce)
            if pk in self.waiting:
                return
            self.waiting[pk] = (key, prop, raw, now)
            ps = self.parts.get(pk)
            if ps is not None:
                for k in [k for k in ps.pieces if k >= prop.ref.count]:
                    self._drop_piece(ps, k)     # beyond the count the PROPOSE names: not ours
            if ps is None or len(ps.pieces) < prop.ref.count:
                x.count("proposals_waiting_for_parts")
                return
            self._assembled(pk, now)
            return
        h = Held(key, prop, now)
        self.held[key] = h
        try:
            h.ordinal = x.journal.add_proposal(key, raw, now)
        except (LogError, ValueError):
            x.count("log_errors")
            self._vote_no(h, records.R_LOG)
            return
        self.to_vote.append(h)

    def on_part(self, key: Key, part: records.Part, raw: bytes, now: int):
        """A PART record found at key = (sender, inc, its seq)."""
        s, i, q = key
        x = self.x
        if i < self.fenced_below.get(s, 0):
            return
        pk = (s, i, part.nonce)
        w = self.waiting.get(pk)
        if w is not None and part.index >= w[1].ref.count:
            x.count("parts_refused")
            return
        ps = self.parts.get(pk)
        if ps is None:
            ps = self.parts[pk] = PartSet(now)
        if part.index in ps.pieces:
            return
        if self.parts_bytes + len(part.data) > self.parts_cap:
            # bounded: the proposal this part belongs to cannot complete here
            # now; its sender's deadline aborts it (counted, never raised)
            x.count("parts_dropped_over_cap")
            return
        ps.pieces[part.index] = (q, raw, part.data)
        ps.nbytes += len(part.data)
        self.parts_bytes += len(part.data)
        x.count("parts_received")
        if w is not None and len(ps.pieces) == w[1].ref.count:
            self._assembled(pk, now)

    def _drop_piece(self, ps: PartSet, index: int):
        q, raw, data = ps.pieces.pop(index)
        ps.nbytes -= len(data)
        self.parts_bytes -= len(data)

    def _forget_parts(self, pk):
        ps = self.parts.pop(pk, None)
        if ps is not None:
            self.parts_bytes -= ps.nbytes

    def _assembled(self, pk, now: int):
        """Every part of a waiting PROPOSE is here: check, journal, vote."""
        x = self.x
        key, prop, raw, t_recv = self.waiting.pop(pk)
        ps = self.parts.get(pk)
        self._forget_parts(pk)
        if key in self.decided or key in self.held:
            return
        payload = records.assemble(prop.ref, {k: v[2] for k, v in ps.pieces.items()})
        h = Held(key, prop._replace(payload=payload or b""), t_recv)
        self.held[key] = h
        if payload is None:
            x.count("parts_mismatch")
            self._vote_no(h, records.R_PARTS)
            return
        try:
            for k in range(prop.ref.count):
                q, praw, _ = ps.pieces[k]
                x.journal.add_part((key[0], key[1], q), praw, now)
            h.ordinal = x.journal.add_proposal(key, raw, now)
        except (LogError, ValueError):
            x.count("log_errors")
            self._vote_no(h, records.R_LOG)
            return
        self.part_low[key] = min(v[0] for v in ps.pieces.values())
        x.count("large_proposals")
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
    def recovered(self, key: Key, raw: bytes, decision, delivered: bool, now: int, parts=None):
        """A proposal the journal held when this member started; parts:
        (sender, inc, nonce) -> {index: (seq, data)} of the journal's PART
        records (a large payload's pieces)."""
        parsed = records.maybe(raw)
        if parsed is None or parsed[0] != records.PROPOSE:
            return
        prop = parsed[1]
        if prop.ref is not None:
            pieces = (parts or {}).get((key[0], key[1], prop.ref.nonce), {})
            payload = records.assemble(prop.ref, {k: v[1] for k, v in pieces.items()})
            if payload is None:
                self.x.count("recovered_parts_missing")     # a damaged journal: not handed over
                return
            prop = prop._replace(payload=payload)
            self.part_low[key] = min(v[0] for v in pieces.values())
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
        # parts no PROPOSE claimed (a sender that crashed or gave up between
        # its parts and its PROPOSE), and PROPOSEs whose parts never came
        for pk in [pk for pk, ps in self.parts.items() if ps.t_first < horizon and pk not in self.waiting]:
            self._forget_parts(pk)
            self.x.count("parts_orphaned")
        for pk in [pk for pk, w in self.waiting.items() if w[0] in self.decided or w[3] < horizon]:
            self.waiting.pop(pk)
            self._forget_parts(pk)
        if self.part_low:
            live = set(self.held) | {(m.sender, m.inc, m.seq) for m in self.ready}
            for k in [k for k in self.part_low if k not in live]:
                del self.part_low[k]
        for d in (self.decided, self.delivered):
            while d:
                k, v = next(iter(d.items()))
                t = v[2] if isinstance(v, tuple) else v
                if t >= horizon and len(d) <= KEEP:
                    break
                d.popitem(last=False)
