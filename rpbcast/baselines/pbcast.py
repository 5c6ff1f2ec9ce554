"""pbcast (Bimodal Multicast, Birman et al. 1999, thesis ref. [9]) on the
rpbcast data plane, as the thesis implemented it for its comparison (§7.4):

* Data goes out once by unreliable multicast (the shared data plane).
* Every gossip round (``Config.gossip_interval``, 0.25 s in Table 7.1) a
  member sends one target, chosen with the selection distribution
  (``Config.selection``, linear bias by RTT in Table 7.1), a *positive*
  digest of its buffer: per stream, the ids it holds, as intervals (the
  thesis's interval representation, §7.4).
* The target compares the digest with its own state and *solicits* what it
  lacks from the gossiper (an RTX, unicast); the gossiper retransmits from
  its buffer (REPAIR, unicast).
* Messages are garbage collected ``Config.gc_limit`` rounds after they
  arrived (10 in Table 7.1), by age (``Node.round``).  No loggers, no
  GcNOTE: what nobody holds any more is never delivered (thesis Fig. 7-5).
  Ids missing for ``give_up_rounds`` rounds are given up and reported as
  ``("lost", sender, inc, lo, hi)`` events (the slides' "report an
  unrecoverable loss if a gap persists for so long that recovery is deemed
  impractical").

Wire: the digest travels in GOSSIP messages as sections of kind
``SEC_HAVE`` (16), data = u32 sender, u32 inc, interval digest of held ids
(the MISSING layout with the opposite meaning).  Kind 16 is in the range
v1 decoders skip, so an rpbcast node ignores it.  The solicitation is an RTX
with MISSING sections, the retransmission a REPAIR.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Optional

from rpbcast.core import wire
from rpbcast.config import ConfigError
from rpbcast.core.digest import DigestError, decode as digest_decode
from rpbcast.core.node import PHASE_ALL, PHASE_NEW
from rpbcast.protocol.pings import PingReplies, Pings
from rpbcast.protocol.send_buffer import NoHold
from rpbcast.protocol.serving import missing_intervals
from rpbcast.protocol.trace_events import EV_GOSSIP_IN, EV_GOSSIP_OUT, EV_LOST, EV_RTX_REQ

from rpbcast.baselines.common import (
    T, BaselineEngine, Candidates, ProtocolPart, iv_count, iv_intersect, iv_subtract, iv_union, ns)

SEC_HAVE = 16          # GOSSIP section: ids the gossiper holds (positive digest)
_GOSSIP_HEAD_MASK = 2 ** 64 - 1


@dataclass
class PbcastParams:
    give_up_rounds: Optional[int] = None   # missing this many rounds: lost (None: 3 x gc_limit; 0: never)
    max_gossip_msgs: int = 8                # GOSSIP messages per round (digests of many streams)


class PbcastEngine(BaselineEngine):
    """pbcast: RTT probes (with a biased selection) and pbcast's gossip;
    nothing held beyond the gossip buffer, no loggers."""

    protocol = "pbcast"
    Params = PbcastParams
    STATS = ("gossip_sent", "solicitations", "solicited_ids", "lost_ids")

    def _check_config(self, cfg):
        if cfg.role == "logger":
            raise ConfigError("pbcast has no loggers (role must be 'member')")
        super()._check_config(cfg)

    def _protocol_parts(self, now):
        self.send_buffer = NoHold(self)          # the gossip buffer is the only buffer
        self.send_buffer.update_hold()
        self.pbcast = Pbcast(self, now)
        # RTT probes for the biased selection, as rpbcast does (Table 7.1:
        # linear bias for both); none with uniform selection.
        if self.cfg.selection != "uniform":
            self.pings = Pings(self, now, self.pbcast.candidates.members_at)
        else:
            self.pings = PingReplies(self)
        return [self.pings, self.pbcast]


class Pbcast(ProtocolPart):
    """pbcast's gossip rounds, digests, solicitations and GC by age."""

    def __init__(self, engine, now):
        super().__init__(engine)
        self.gc_limit = self.cfg.gc_limit
        p = self.params
        self.give_up = 3 * self.gc_limit if p.give_up_rounds is None else p.give_up_rounds
        if self.give_up and self.give_up <= self.gc_limit:
            raise ConfigError(f"pbcast give_up_rounds must exceed gc_limit ({self.gc_limit}), or be 0 "
                              f"(never give up); got {self.give_up}")
        self.candidates = Candidates(engine.group, self.cfg.selection, self.rng)
        self._round_ns = ns(self.cfg.gossip_interval)
        self.next_round = now + self.rng.randrange(max(self._round_ns, 1))
        self.gossip_seq = 0
        # Per stream, the state at the start of each of the last gc_limit + 1
        # rounds: (next, missing intervals).  What arrived since the oldest
        # one is exactly what the store still holds (GC is by arrival round).
        self._snaps = {}
        self._own_snaps = collections.deque(maxlen=self.gc_limit + 1)
        self._next_hist = {}                 # slot -> deque of next, for giving up
        self._base = {}
        self._rot = 0

    def handlers(self):
        return {T.GOSSIP: self.on_gossip, T.RTX: self.on_rtx}

    def forget_slots(self, slots):
        """Retired streams (Engine._forget_retired)."""
        for s in slots:
            self._snaps.pop(s, None)
            self._next_hist.pop(s, None)
            self._base.pop(s, None)

    # ------------------------------------------------------------------ timers
    def get_timer(self):
        return self.next_round

    def on_timer(self, now):
        if now >= self.next_round:
            self._round(now)
            jitter = self._round_ns // 10
            self.next_round = max(self.next_round + self._round_ns + self.rng.randint(-jitter, jitter),
                                  now + 1)

    def after_rx(self, now):
        # gaps are found by the digests, not acted on when seen
        self.node.clear_nack()

    def _round(self, now):
        node = self.node
        node.round(self.gc_limit, self.cfg.gossip_buffer_bytes)
        node.clear_inflight()                # solicit again what was not repaired
        node.clear_nack()
        self._snapshot()
        if self.give_up:
            self._give_up_old(now)
        target = self.candidates.pick(now)
        if target is not None:
            self._gossip_to(target, now)

    def _snapshot(self):
        node = self.node
        self._own_snaps.append(node.next_seq)
        for slot, pid, pinc in node.peer_ids():
            d = self._snaps.get(slot)
            if d is None:
                d = self._snaps[slot] = collections.deque(maxlen=self.gc_limit + 1)
                self._base[slot] = node.peer_info(slot)["base"]
            nxt = node.peer_next(slot)
            miss = self.missing(slot, PHASE_ALL) if node.peer_missing_count(slot, PHASE_ALL) else []
            d.append((nxt, miss))

    def _give_up_old(self, now):
        node = self.node
        for slot, pid, pinc in node.peer_ids():
            h = self._next_hist.get(slot)
            if h is None:
                h = self._next_hist[slot] = collections.deque(maxlen=self.give_up + 1)
            h.append(node.peer_next(slot))
            if len(h) <= self.give_up or not h[0] or not node.peer_missing_count(slot, PHASE_ALL):
                continue
            gone = self.missing(slot, PHASE_ALL, 0, h[0] - 1)
            if not gone:
                continue
            for lo, hi in gone:
                node.forget(slot, lo, hi)
                self.events.append(("lost", pid, pinc, lo, hi))
                node.trace_event(now, EV_LOST, pid, pinc, lo, hi - lo + 1, 0, 0)
            self.bump("lost_ids", iv_count(gone))
            # Forgotten ids look received to the tracker: never advertise them.
            snaps = self._snaps.get(slot, ())
            for k in range(len(snaps)):
                nxt, miss = snaps[k]
                snaps[k] = (nxt, iv_subtract(miss, gone) if miss else miss)
            # (Later snapshots no longer list them as missing, and they lie
            # below every later window's start: never advertised.)

    # ------------------------------------------------------------------ gossip
    def held(self):
        """[(sender, inc, intervals, frm, upto)]: what this node's buffer holds,
        per stream, inside the window the digest covers."""
        node = self.node
        out = []
        full = self.gc_limit + 1
        if node.next_seq:
            hi = node.next_seq - 1
            lo = self._own_snaps[0] if len(self._own_snaps) == full else 0
            if lo <= hi:
                out.append((self.id, self.inc, [(lo, hi)], lo, hi))
        for slot, pid, pinc in node.peer_ids():
            nxt = node.peer_next(slot)
            if not nxt:
                continue
            hi = nxt - 1
            snaps = self._snaps.get(slot)
            if snaps is not None and len(snaps) == full:
                lo, miss_then = snaps[0]
            else:
                lo, miss_then = self._base.get(slot, 0), []
            # Held = arrived since the oldest snapshot = (ids not yet seen
            # then, or missing then) and received now.
            window = iv_union([(lo, hi)] if lo <= hi else [], miss_then)
            if not window:
                continue
            frm = window[0][0]
            have = window
            if node.peer_missing_count(slot, PHASE_ALL):
                have = iv_subtract(have, self.missing(slot, PHASE_ALL, frm, hi))
            if have:
                out.append((pid, pinc, have, frm, hi))
        return out

    def _gossip_to(self, target, now):
        streams = self.held()
        if streams:
            k = self._rot % len(streams)
            streams = streams[k:] + streams[:k]
            self._rot += 1
        head = wire.gossip_body(0, 0, now & _GOSSIP_HEAD_MASK)
        self.gossip_seq += 1
        if not streams:
            self.emit(target.addr, T.GOSSIP, head, seq=self.gossip_seq)
            nmsg, nbytes = 1, len(head)
        else:
            nmsg, nbytes = self.send_sections(target.addr, T.GOSSIP, SEC_HAVE, streams, head,
                                               self.params.max_gossip_msgs, seq=self.gossip_seq)
        self.bump("gossip_sent", nmsg)
        self.node.trace_event(now, EV_GOSSIP_OUT, 0, 0, self.gossip_seq, nbytes, target.node_id, 0)

    def on_gossip(self, msg, now):
        body, source, src = msg[6], msg[7], msg[9]
        node = self.node
        node.trace_event(now, EV_GOSSIP_IN, 0, 0, msg[5], len(body), source, 0)
        try:
            _, _, _, secs = wire.read_gossip(body)
        except Exception:
            return
        want = []
        for kind, _, data in secs:
            if kind != SEC_HAVE or len(data) < 9:
                continue
            s, i, d = wire.read_missing(data)
            if s == self.id and i == self.inc:
                continue
            try:
                iv, frm, upto, _ = digest_decode(d)
            except DigestError:
                continue
            if not len(iv):
                continue
            have = [tuple(r) for r in iv.tolist()]
            slot = node.find_peer(s, i)
            if slot is None:
                slot = node.peer(s, i, 0)
            top = have[-1][1]
            if top >= node.peer_next(slot):
                node.heartbeat(slot, top, False, now)      # it has ids we never saw
            if not node.peer_missing_count(slot, PHASE_ALL):
                continue
            need = iv_intersect(self.missing(slot, PHASE_NEW, frm, upto), have)
            if need:
                want.append((s, i, need, need[0][0], need[-1][1]))
                for lo, hi in need:
                    node.mark_inflight(slot, lo, hi)
        if want:
            nmsg, nbytes = self.send_sections(src, T.RTX, wire.Section.MISSING, want)
            n = sum(iv_count(w[2]) for w in want)
            self.bump("solicited_ids", n)
            self.bump("solicitations", nmsg)
            node.trace_event(now, EV_RTX_REQ, 0, 0, 0, n, source, 0)

    def on_rtx(self, msg, now):
        """A solicitation: retransmit what the buffer still holds."""
        src = msg[9]
        for s, i, iv in missing_intervals(msg[6]):
            self.node.serve(s, i, iv, src, False, now, False)


# For rpbcast.sim (rpbcast/sim/protocols.py): engine factory and whether the
# protocol has a logger.  Bind parameters with rpbcast.baselines.factory.
SIM_PROTOCOL = {"factory": lambda config, now, rng, log=None: PbcastEngine(config, now, rng, log),
                "uses_logger": False}
