"""FIFO Semantically Reliable Broadcast on rpbcast (Pereira et al.).

Messages carry an optional label; m is obsoleted by m' when both come from
the same sender with the same label and m was sent first.  The data plane
already drops a queued message when a newer one with its label is queued
(TP4) and infers purges from the sender window (§2.5).  This extension
supplies what needs knowledge of other members:

* receive frontiers: every gossip carries LASTSEEN (our contiguous frontier
  per stream), and each receiver also reports to the senders it hears from
  every `srb_report_interval`;
* per stream, the **safe** frontier -- the (f+1)-th highest frontier among
  the members, the sender counting as one holder: every seq below it has been
  received by more than f members -- and the **stable** frontier, the lowest
  over all current members;
* TP5: obsolete messages leave the sender's buffer and receivers' gossip
  buffers once the message that obsoletes them is safe
  (``Node.srb_safe``), and messages leave the sender window once stable
  (``Node.srb_stable``), so a purged message frees its slot and s + w can go;
* signalling: an idle sender multicasts WINDOW(low) when its window moved,
  and requests for purged ids are answered "purged, superseded by <id>"
  (PURGED, from the data plane) -- handled here on the receiving side.
"""
from __future__ import annotations


from rpbcast.core import wire
from rpbcast.protocol.extension import Extension
from rpbcast.protocol.membership import DISCONNECTED, MEMBER, PENDING_JOIN, PENDING_LEAVE
from rpbcast.core.node import DEST_MCAST, SELF_SLOT

NS = 1_000_000_000
T = wire.MsgType


class FifoSrb(Extension):
    gossip_frontiers = True      # every gossip carries LASTSEEN

    def attach(self, ctx):
        super().attach(ctx)
        cfg = ctx.cfg
        self.f = cfg.srb_f
        self.w = cfg.srb_window
        self.report_ns = int(cfg.srb_report_interval * NS)
        self.next_report = ctx.now + self.report_ns
        self.frontiers = {}          # (sender, inc) -> {member id: frontier}
        self.safe = {}               # (sender, inc) -> safe frontier applied
        self.stable = 0              # own stable frontier applied
        self.window_announced = -1
        self.dirty = False

    # -- frontiers -----------------------------------------------------------
    def on_lastseen(self, source, source_inc, entries, now):
        ctx = self.ctx
        for s, i, frontier in entries:
            d = self.frontiers.setdefault((s, i), {})
            if frontier > d.get(source, 0):
                d[source] = frontier
                self.dirty = True
            if frontier and (s, i) != (ctx.id, ctx.inc):
                self._learn(s, i, frontier, now)
        if self.dirty:
            self._apply(now)

    def _learn(self, s, i, frontier, now):
        """A member holds every seq below `frontier` of (s, i), so those were
        sent: what we have not seen of them is missing here, as a heartbeat
        would say.  Without this a receiver that missed the last messages of
        a sender that then crashed never learns they exist, although other
        correct members delivered them (Agreement, §2.1)."""
        node = self.ctx.node
        slot = node.find_peer(s, i)
        if slot is None:
            if self.ctx.status == PENDING_JOIN:
                return                  # a joiner takes its bases from its sponsors (t_join)
            if any(pid == s and pinc > i for _, pid, pinc in node.peer_ids()):
                return                  # an older incarnation: not wanted
            slot = node.peer(s, i, 0)
        if not node.peer_dead(slot) and node.peer_next(slot) < frontier:
            node.heartbeat(slot, frontier - 1, False, now)

    def _holders(self):
        """Members whose frontiers count (everyone current, not ourselves).
        A DISCONNECTED member still counts: it comes back with the same
        stream state, and receivers infer from the window that whatever
        left it unseen was purged -- had messages left it as 'stable'
        without that member, it would skip them on reconnecting.  So
        stability waits for it (the window then fills with what cannot be
        purged), until it is declared failed and leaves the membership."""
        ctx = self.ctx
        return [m.node_id for m in ctx.members.members.values()
                if m.node_id != ctx.id and m.status in (MEMBER, PENDING_LEAVE, DISCONNECTED)]

    def _apply(self, now):
        ctx = self.ctx
        node = ctx.node
        self.dirty = False
        holders = self._holders()
        # Own stream: safe and stable.
        own = (ctx.id, ctx.inc)
        rep = self.frontiers.get(own, {})
        vals = sorted([node.next_seq] + [rep.get(m, 0) for m in holders], reverse=True)
        safe = vals[self.f] if len(vals) > self.f else 0
        if safe > self.safe.get(own, 0):
            node.srb_safe(SELF_SLOT, safe)
            self.safe[own] = safe
        stable = min((rep.get(m, 0) for m in holders), default=node.next_seq)
        if stable > self.stable:
            node.srb_stable(stable)
            self.stable = stable
        # Peers' streams: purge our gossip buffer's obsolete messages.
        for slot, pid, pinc in node.peer_ids():
            rep = self.frontiers.get((pid, pinc), {})
            mine = node.peer_contiguous(slot)
            # the sender holds all of its own; others report; we have `mine`
            vals = sorted([node.peer_next(slot), mine] + [rep.get(m, 0) for m in holders if m != pid],
                          reverse=True)
            safe = vals[self.f] if len(vals) > self.f else 0
            if safe > self.safe.get((pid, pinc), 0):
                node.srb_safe(slot, safe)
                self.safe[(pid, pinc)] = safe

    # -- timers ----------------------------------------------------------------
    def get_timer(self):
        return self.next_report

    def on_timer(self, now):
        ctx = self.ctx
        self.next_report = now + self.report_ns
        # Report our frontiers to every sender we receive from.
        sent_to = set()
        for slot, pid, pinc in ctx.node.peer_ids():
            m = ctx.members.get(pid)
            if m is None or pid in sent_to or m.status not in (MEMBER, PENDING_LEAVE) or ctx.node.peer_dead(slot):
                continue
            ctx.report_frontiers(m, now)
            sent_to.add(pid)
        self._apply(now)
        # An idle sender announces its empty window (§2.5).
        st = ctx.node.srb_state
        if st is not None:
            low, nxt = st[0], st[1]
            idle = nxt and now - ctx.node.last_publish >= int(ctx.cfg.idle_after * NS)
            if idle and low != self.window_announced and low > 0:
                ctx.emit(DEST_MCAST, T.WINDOW, b"", aux=self.w, seq=low)
                self.window_announced = low

    # -- notices ---------------------------------------------------------------
    def on_message(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        node = self.ctx.node
        if type_ == T.PURGED:
            slot = node.find_peer(sender, inc)
            if slot is not None:
                for s, sup in wire.read_purged_pairs(body):
                    node.srb_purged(slot, s, sup, now)
            return True
        if type_ == T.WINDOW:
            slot = node.find_peer(sender, inc)
            if slot is not None:
                node.srb_window(slot, seq, now)
            return True
        return False

    # -- observability ---------------------------------------------------------
    def state(self):
        return {"safe": dict(self.safe), "stable": self.stable, "window": self.ctx.node.srb_state,
                "frontiers": {k: dict(v) for k, v in self.frontiers.items()}}
