"""GSGC views: the participants of each layer, from the member table (§3.3).

Every member derives its layers' views from its member table: members in
status MEMBER or PENDING_LEAVE (itself by its own status), grouped into
zones for local gossip.  A joiner enters under the admission policy:
"window" (only within an admission window after a round start; later ones
wait for the next round), "execution" (at once, the round restarts and the
layer stays quiet for a while), or "immediate".  Removals and new
incarnations apply at once.  K, the failure threshold, follows the view's
size (and the observed staleness, and fail_after).
"""
from __future__ import annotations

import collections
import math

import numpy as np

from rpbcast.protocol.gsgc.layers import CTRL, FLAT, L_MAX, LOCAL, Layer, k_threshold, view_hash
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE

NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class Views:
    """The view half of GsgcExtension."""

    def _eligible(self):
        # Our own entry by the engine's status: the table's self entry can
        # lag it (a joiner's entry keeps PENDING_JOIN after _become).
        ctx = self.ctx
        return [m for m in ctx.members.entries()
                if (m.status in (MEMBER, PENDING_LEAVE) if m.node_id != ctx.id else self._active())]

    def _candidates(self):
        """{layer kind: (keys, self key)} this node's member table implies."""
        ctx = self.ctx
        el = self._eligible()
        if not self.local:
            return {FLAT: (sorted((m.node_id, m.inc) for m in el), (ctx.id, ctx.inc))}
        me = ctx.members.get(ctx.id)
        myzone = self._zone_of(me)
        local = sorted((m.node_id, m.inc) for m in el if self._zone_of(m) == myzone)
        zones = sorted({self._zone_of(m) for m in el}, key=repr)
        out = {LOCAL: (local, (ctx.id, ctx.inc))}
        if self._in_phase2():
            out[CTRL] = (zones, myzone)
        return out

    def _zone_members(self):
        z = collections.defaultdict(list)
        for m in self._eligible():
            z[self._zone_of(m)].append(m.node_id)
        return z

    def _in_phase2(self):
        """A stability controller gossips among the controllers once its
        zone has a local stability array (§5: "after the local stability
        arrays are constructed, the SCs start the second phase").  Before
        that its R (the zone's S) is empty, and a controller round it
        started could only conclude S = 0 while loading the links the local
        rounds need."""
        lay = self.layers.get(LOCAL)
        return lay is not None and lay.arr.round >= 1 and self._is_controller()

    def _is_controller(self):
        lay = self.layers.get(LOCAL)
        if lay is None:
            return False
        alive = sorted(self_id for self_id, _ in lay.alive_keys())
        return self.ctx.id in alive[:self.cfg.controllers]

    def _sync_views(self, now):
        """Bring the layers in line with the member table (§3.3 joins under
        the configured admission policy; removals and new incarnations at
        once)."""
        ctx = self.ctx
        if not self._active():
            return
        if ctx.members.version == self.members_version and (not self.local or self._ctrl_ok()):
            return
        self.members_version = ctx.members.version
        cand = self._candidates()
        if any(kind not in self.layers for kind in cand):
            # A new layer starts its round with M := R, so it must know the
            # streams the data plane already has; otherwise (a gossip heard
            # before this node's first step) they enter later with M = 0 and
            # the whole first round concludes S = 0 for them.
            self._discover_streams(now)
        for kind in list(self.layers):
            if kind not in cand:
                del self.layers[kind]           # no longer a stability controller
        for kind, (keys, me) in cand.items():
            layer = self.layers.get(kind)
            if layer is None:
                # A newcomer has heard of nobody yet: its L starts "unknown"
                # and it declares nothing (and sends no L) until it merged a
                # live array, or it would revive crashed members everywhere.
                # A controller layer always starts so: its controllers enter
                # phase 2 at different times (and replacements later still),
                # so zeros would be guesses; it arms when a round completes
                # here (every zone was heard from) or from a peer's live array.
                newcomer = self.cfg.newcomer if self.cfg.newcomer is not None else bool(ctx.cfg.join)
                late = newcomer or kind == CTRL or not self.cfg.failure_detection
                layer = Layer(kind, keys, me, len(self.streams), now, unknown_L=late)
                layer.K = self._K(layer)
                self.layers[kind] = layer
                self._refresh_R(layer)
                layer.arr.start_round()
                continue
            if keys == layer.keys:
                layer.pending = layer.pending_hash = None
                continue
            have = {layer._id(k) for k in layer.keys}
            base = [k for k in keys if layer._id(k) in have]
            added = [layer._id(k) for k in keys if layer._id(k) not in have]
            pol = self.cfg.admission
            if not added or pol == "immediate":
                self._switch(layer, keys, now, "immediate" if added else "update")
                continue
            if pol == "execution":
                self._switch(layer, keys, now, "execution")
                layer.arr.start_round()
                layer.quiet_until = now + self._quiet_ns(kind)
                continue
            # admission window
            if now - layer.round_t <= self._window_ns(kind):
                self._switch(layer, keys, now, "window")
            else:
                if base != layer.keys:
                    self._switch(layer, base, now, "update")
                layer.pending = keys
                layer.pending_hash = view_hash(kind, keys)

    def _ctrl_ok(self):
        return (CTRL in self.layers) == self._in_phase2()

    def _window_ns(self, kind=None):
        w = self.cfg.admission_window
        return _ns(w) if w is not None else 2 * self._step_len(kind)

    def _quiet_ns(self, kind=None):
        q = self.cfg.execution_quiet
        return _ns(q) if q is not None else 4 * self._step_len(kind)

    def _switch(self, layer, keys, now, how):
        old = {layer._id(k) for k in layer.keys}
        added = [layer._id(k) for k in keys if layer._id(k) not in old]
        flags = layer.remap(keys, now)
        layer.K = self._K(layer)
        if layer.pending is not None and view_hash(layer.kind, keys) == layer.pending_hash:
            layer.pending = layer.pending_hash = None
        if added:
            layer.admissions.append((now, layer.arr.round, how, added, now - layer.round_t))
        self.stats["view_changes"] += 1
        self._after_merge(layer, flags, now)

    def _K(self, layer):
        if self.cfg.K is not None:
            return self.cfg.K
        b = self.cfg.b if layer.kind != CTRL else (self.cfg.b2 or self.cfg.b)
        k = k_threshold(layer.n, b, self.cfg.k_factor, self.cfg.k_min)
        if self.cfg.k_measured and len(layer.stale) >= 16:
            q = float(np.percentile(np.asarray(layer.stale), 99))
            k = max(k, math.ceil(1.5 * q))
        k = max(k, self._k_floor(layer.kind))
        return int(min(L_MAX, k))

    def _k_floor(self, kind=None):
        """Steps (of that layer) in fail_after seconds."""
        return math.ceil(self.cfg.fail_after * NS / max(self._step_len(kind), 1)) if self.cfg.fail_after else 0
