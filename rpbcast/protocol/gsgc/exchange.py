"""GSGC on the wire: what a member gossips and what it merges (§3.1, §5).

Each step a layer gossips to b targets (b2 among controllers): a control
section (rpbcast.protocol.gsgc.sections), its STABILITY section (round, M,
S, W) and, once armed, its LIVE section (the L counters).  A send rides on
a gossip the engine sends anyway when the target fits, else goes as a
GOSSIP of its own at a random time within the step.  A member that
completes a round may multicast S (STABILITY message, suppressed when
someone was first).  Received sections merge into the layer whose view hash
they carry; a different view merges S only.
"""
from __future__ import annotations

import struct

import numpy as np

from rpbcast.core import wire
from rpbcast.core.node import DEST_MCAST
from rpbcast.protocol.gsgc.layers import CTRL, FLAT, LAYER_NAMES, LOCAL
from rpbcast.protocol.gsgc.sections import CTL_GLOBAL_S, SEC_GSGC, control_section, read_control

T = wire.MsgType


class Exchange:
    """The wire half of GsgcExtension."""

    def _targets(self, layer):
        """Node ids this layer gossips to."""
        if layer.kind != CTRL:
            return [k[0] for i, k in enumerate(layer.keys) if i != layer.me and layer.arr.is_alive(i)]
        zm = self._zone_members()
        out = []
        now = self.ctx.now
        horizon = 4 * layer.K * self._step_len(layer.kind)
        for i, z in enumerate(layer.keys):
            if i == layer.me or not layer.arr.is_alive(i):
                continue
            seen = [c for c, t in self.zone_seen.get(z, {}).items() if now - t <= horizon]
            out += seen or sorted(zm.get(z, []))[:self.cfg.controllers]
        return out

    def _sections(self, layer, now):
        arr = layer.arr
        flags = 0
        extra = b""
        if self.local and layer.kind == LOCAL and len(self.streams):
            flags |= CTL_GLOBAL_S
            extra = wire.stability_body(0, [(s, i, int(v)) for (s, i), v in zip(self.streams, self.gS)])
        epoch, leader = self.step_us_epoch
        step_us = (self.step_ns // 1000) if self.step_ns is not None else 0
        ctl = control_section(layer.hash, layer.kind, flags, step_us, ((epoch & 0xFFFF) << 16) | (leader & 0xFFFF),
                              extra)
        stab = wire.stability_section(arr.round, self.streams, [int(v) for v in arr.M],
                                      [int(v) for v in arr.S], [int(w) for w in arr.W], arr.n)
        out = [ctl, stab]
        if layer.armed:
            out.append(wire.live_section(arr.L))
        return out

    def _count_send(self, layer, target_id, how):
        self.stats["sent_" + how] += 1
        self.stats["sent_" + LAYER_NAMES[layer.kind]] += 1
        if self.local:
            m = self.ctx.members.get(target_id)
            me = self.ctx.members.get(self.ctx.id)
            same = m is not None and self._zone_of(m) == self._zone_of(me)
            self.stats["sent_intra_zone" if same else "sent_inter_zone"] += 1

    def gossip_sections(self, target, budget, now):
        """Ride on a gossip the engine sends anyway: one pending send per
        layer whose targets include this one."""
        if not self.layers or not self._active() or not self.pending_sends:
            return []
        out = []
        for s in sorted(self.pending_sends):
            if s[2]:
                continue
            layer = self.layers.get(s[1])
            if layer is None or now < layer.quiet_until or target.node_id in layer.used:
                continue
            if target.node_id not in self._targets(layer):
                continue
            secs = self._sections(layer, now)
            size = sum(len(x) for x in secs)
            if size > budget:
                continue
            budget -= size
            out += secs
            s[2] = True
            layer.used.add(target.node_id)
            self._count_send(layer, target.node_id, "piggyback")
        return out

    def _send_due(self, now):
        if not self._active():
            return
        ctx = self.ctx
        for s in self.pending_sends:
            if s[2] or s[0] > now:
                continue
            s[2] = True
            layer = self.layers.get(s[1])
            if layer is None or now < layer.quiet_until:
                continue
            cands = [t for t in self._targets(layer) if t not in layer.used and t != ctx.id]
            if not cands:
                continue
            tid = cands[self.rng.randrange(len(cands))]
            m = ctx.members.get(tid)
            if m is None or not m.addr:
                continue
            try:
                ctx.send_gossip(m, self._sections(layer, now), now)
            except ValueError:
                self.stats["too_big"] += 1      # m * 24 + n / 8 beyond the MTU: see docs/gsgc.md
                continue
            layer.used.add(tid)
            self._count_send(layer, tid, "standalone")

    def _multicast(self, now):
        t, kind, rnd = self.mcast
        self.mcast = None
        layer = self.layers.get(kind)
        if layer is None or not self._active():
            return
        S = layer.arr.S
        body = wire.stability_body(layer.arr.round - 1,
                                   [(s, i, int(v)) for (s, i), v in zip(self.streams, S)])
        self.ctx.emit(DEST_MCAST, T.STABILITY, body)
        self.stats["multicast_sent"] += 1

    # ------------------------------------------------------------------ receiving
    def after_rx(self, now):
        self.ctl = None

    def on_section(self, source, kind, data, now):
        # self.ctl: [source, view hash, layer, matched] of the control section
        # just read; the STABILITY and LIVE sections after it belong to it.
        if kind == SEC_GSGC:
            c = read_control(data)
            if c is None:
                return
            self.ctl = [source, c.view_hash, c.layer, None]
            if c.flags & CTL_GLOBAL_S and c.extra:
                try:
                    r, entries = wire.read_stability_body(c.extra)
                except struct.error:
                    entries = []
                if self._active() and self.local:
                    self._merge_global(entries, now)
            self._adopt_step(c.step_us, c.epoch >> 16, c.epoch & 0xFFFF, now)
            return
        if kind == wire.Section.STABILITY:
            if not self._active():
                return
            ctl = self.ctl if self.ctl is not None and self.ctl[0] == source else None
            r, senders, M, S, W, n = wire.read_stability(bytes(data))
            self.stats["sections_rx"] += 1
            matched = self._on_stability(ctl, source, r, senders, M, S, W, n, now)
            if ctl is not None:
                ctl[3] = matched
            return
        if kind == wire.Section.LIVE:
            ctl = self.ctl if self.ctl is not None and self.ctl[0] == source else None
            if ctl is None or not ctl[3]:
                return
            layer = self.layers.get(ctl[2])
            if layer is None or layer.hash != ctl[1] or not self.cfg.failure_detection:
                return
            L = wire.read_live(bytes(data))
            if len(L) != layer.n:
                return
            L = np.asarray(L, np.uint32)
            layer.arr.fd_merge(L)
            if not layer.armed:
                layer.armed = True
                self.stats["fd_armed"] += 1
            self._fd_eval(layer, now)

    def _layer_index(self, layer, source):
        if layer.kind != CTRL:
            return layer.ids.get(source)
        m = self.ctx.members.get(source)
        if m is None:
            return None
        return layer.pos.get(self._zone_of(m))

    def _full(self, senders, values):
        """Per-stream array in local order from (sender, inc) entries;
        streams an entry list does not name count as 0."""
        idx = [self._stream(tuple(k)) for k in senders]
        out = np.zeros(len(self.streams), np.uint64)
        if idx:
            out[idx] = np.asarray(values, np.uint64)
        return out

    def _on_stability(self, ctl, source, r, senders, M, S, W, n, now):
        self._sync_views(now)
        kind = ctl[2] if ctl is not None else FLAT
        if self.local and kind == FLAT:
            kind = LOCAL
        if kind == CTRL and self.local:
            m = self.ctx.members.get(source)
            if m is not None:
                self.zone_seen[self._zone_of(m)][source] = now
        layer = self.layers.get(kind)
        Mf = self._full(senders, M)
        Sf = self._full(senders, S)
        if layer is None:
            if kind == CTRL:
                self._merge_global_arr(Sf, now)      # not a controller (any more): S only
            return False
        src = self._layer_index(layer, source)
        if src is None:
            self.stats["foreign"] += 1
            if kind != LOCAL:
                layer.arr.merge_S(Sf, layer.arr.round)
                self._after_merge(layer, 0, now)
            return False
        h = ctl[1] if ctl is not None else None
        if (h is not None and h != layer.hash and layer.pending is not None and h == layer.pending_hash):
            self._switch(layer, layer.pending, now, "peer")     # a peer already admitted them
            src = self._layer_index(layer, source)
        self._refresh_R(layer)
        matched = h == layer.hash and n == layer.n
        if matched:
            Wa = np.asarray(W, np.uint64)
            flags = layer.arr.merge(Mf, Wa, Sf, r)
            self.stats["merged"] += 1
        else:
            flags = layer.arr.merge_S(Sf, r)
            layer.mismatch += 1
            self.stats["view_mismatch"] += 1
        self._heard(layer, src)
        self._after_merge(layer, flags, now)
        return matched

    def on_message(self, msg, now):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if type_ != T.STABILITY:
            return False
        self.stats["multicast_rx"] += 1
        if not self._active():
            return True
        r, entries = wire.read_stability_body(body)
        Sf = self._full([(s, i) for s, i, _ in entries], [v for _, _, v in entries])
        if self.mcast is not None and self.mcast[2] <= r:
            self.mcast = None                   # somebody was first: suppress ours
            self.stats["multicast_suppressed"] += 1
        if self.local:
            self._merge_global_arr(Sf, now)
            layer = self.layers.get(CTRL)
        else:
            layer = self.layers.get(FLAT)
        if layer is not None:
            flags = layer.arr.merge_S(Sf, r + 1)
            i = self._layer_index(layer, source)
            if i is not None:
                self._heard(layer, i)
            self._after_merge(layer, flags, now)
        return True

    def _merge_global(self, entries, now):
        Sf = self._full([(s, i) for s, i, _ in entries], [v for _, _, v in entries])
        self._merge_global_arr(Sf, now)

    def _merge_global_arr(self, Sf, now):
        if len(Sf) and (Sf > self.gS[:len(Sf)]).any():
            self.gS[:len(Sf)] = np.maximum(self.gS[:len(Sf)], Sf)
            self._release(now)
