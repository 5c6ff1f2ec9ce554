"""GSGC: gossip-style stability detection and failure detection (Guo et al.,
CS-TR-97-1656), as an engine extension that decides when messages are stable
and may leave the gossip and send buffers.

    from rpbcast.protocol.gsgc import GsgcExtension
    ext = engine.add_extension(GsgcExtension(b=1))
    ...
    ext.state()        # round, S per stream, failed members, time-to-stable

The extension maps streams to array indices, runs the steps, declares
failures (§3.2), follows rounds and applies S to the buffers; its views
(rpbcast.protocol.gsgc.views) and its exchange on the wire
(rpbcast.protocol.gsgc.exchange) are its two other halves, the layers
(rpbcast.protocol.gsgc.layers) hold the arrays.  The design (ranks, views,
wire, joins, failure threshold, local gossip, adaptive step) is in
``docs/gsgc.md``.
"""
from __future__ import annotations

import collections
import math
import random
from typing import Dict, List, Optional

import numpy as np

from rpbcast.core.node import SELF_SLOT
from rpbcast.core.stability import COMPLETED
from rpbcast.protocol.extension import Extension
from rpbcast.protocol.gsgc.config import GsgcConfig
from rpbcast.protocol.gsgc.exchange import Exchange
from rpbcast.protocol.gsgc.layers import CTRL, FLAT, L_MAX, LAYER_NAMES, LOCAL, Layer, k_threshold
from rpbcast.protocol.gsgc.search import OnlineSearch
from rpbcast.protocol.gsgc.views import Views
from rpbcast.protocol.gsgc.zones import zone_of
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE

NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


class GsgcExtension(Views, Exchange, Extension):
    """GSGC on one engine.  Every member of the group must run it with the
    same layer configuration (flat, or the same zones)."""

    def __init__(self, config: Optional[GsgcConfig] = None, rng: Optional[random.Random] = None, **kw):
        self.cfg = (config or GsgcConfig(**kw)).validate()
        self.rng = rng
        self.layers: Dict[int, Layer] = {}
        self.streams: List[tuple] = []          # (sender, inc) in local order
        self.sidx: Dict[tuple, int] = {}
        self.slot: Dict[tuple, int] = {}
        self.applied: List[int] = []            # S already applied to the buffers
        self.gS = np.zeros(0, np.uint64)        # global S (local-gossip mode)
        self.seen: List[collections.deque] = []
        self.pending_sends = []                 # [time, layer kind, done]
        self.mcast = None                       # (time, layer kind, round)
        self.next_step = None
        self.next_step2 = None                  # the controller layer's own step (GsgcConfig.step2)
        self.step_no = 0
        self.last_step_t = 0
        self.members_version = -1
        self.ctl = None                         # the control section being read (exchange)
        self.step_us_epoch = (0, 0)             # adaptive: (epoch, leader id) of the step in use
        self.tuner = None
        self.zone_seen = collections.defaultdict(dict)   # zone -> {controller id: time}
        self.tts = collections.deque(maxlen=4096)
        self.tts_count = 0
        self.tts_max = 0.0
        self.stats = collections.Counter()
        self.failed_events = []                 # (time, layer, key, "failed" | "recovered")

    # ------------------------------------------------------------------ setup
    def attach(self, ctx):
        super().attach(ctx)
        if self.rng is None:
            self.rng = random.Random(ctx.rng.getrandbits(64))
        cfg = self.cfg
        self.step_ns = _ns(cfg.step) if cfg.step is not None else None
        self.step2_ns = _ns(cfg.step2) if cfg.step2 is not None else None
        if cfg.adaptive is not None:
            a = dict(cfg.adaptive)
            self.tuner = OnlineSearch(**a)
        if cfg.age_limit != 0:
            ecfg = ctx.cfg
            if cfg.age_limit is None:
                n = max(len(ecfg.members), 2)
                k = cfg.K or min(L_MAX, max(k_threshold(n, cfg.b, cfg.k_factor, cfg.k_min), self._k_floor()))
                ratio = (cfg.step / ecfg.gossip_interval) if cfg.step is not None else 1.0
                limit = max(ecfg.gc_limit, math.ceil((2 * k + 16) * ratio))
            else:
                limit = cfg.age_limit
            ctx.set_gc_limit(int(limit))
        if self.step_ns is not None:
            self.next_step = ctx.now + self.rng.randrange(max(self.step_ns, 1))
        if self.step2_ns is not None:
            self.next_step2 = ctx.now + self.rng.randrange(max(self.step2_ns, 1))

    @property
    def local(self):
        return self.cfg.zones is not None

    def _step_len(self, kind=None):
        """A layer's step interval (ns): the controller layer's own with
        step2, else the common one."""
        if kind == CTRL and self.step2_ns is not None:
            return self.step2_ns
        return self.step_ns if self.step_ns is not None else self.ctx.gossip_interval_ns

    def _zone_of(self, m):
        return zone_of(self.cfg.zones, self.cfg.subnet_prefix, m)

    def _active(self):
        return self.ctx.status in (MEMBER, PENDING_LEAVE)

    # ------------------------------------------------------------------ streams
    def _stream(self, key) -> int:
        j = self.sidx.get(key)
        if j is None:
            j = len(self.streams)
            self.streams.append(key)
            self.sidx[key] = j
            self.applied.append(0)
            self.seen.append(collections.deque(maxlen=4096))
            self.gS = np.append(self.gS, np.uint64(0))
            for layer in self.layers.values():
                layer.arr.resize(len(self.streams), layer.n)
        return j

    def on_slots_retired(self, slots, now):
        """Retired streams: their (sender, inc) -> slot entries go (a slot
        may name another stream now; _slot_of looks a key up again)."""
        gone = set(slots)
        for key in [k for k, v in self.slot.items() if v in gone]:
            del self.slot[key]

    def _slot_of(self, key):
        ctx = self.ctx
        if key == (ctx.id, ctx.inc):
            return SELF_SLOT
        s = self.slot.get(key)
        if s is None:
            s = ctx.node.find_peer(*key)
            if s is not None:
                self.slot[key] = s
        return s

    def _discover_streams(self, now):
        ctx = self.ctx
        node = ctx.node
        if node.next_seq:
            self._stream((ctx.id, ctx.inc))
        if node.npeers != len(self.slot):
            for slot, pid, pinc in node.peer_ids():
                self.slot[(pid, pinc)] = slot
                self._stream((pid, pinc))
        for j, key in enumerate(self.streams):
            slot = self._slot_of(key)
            if slot is None:
                continue
            nxt = node.next_seq if slot == SELF_SLOT else node.peer_next(slot)
            dq = self.seen[j]
            if not dq or dq[-1][1] != nxt:
                dq.append((now, nxt))

    def _R(self):
        """This node's R: per stream, the first seq not yet received."""
        node = self.ctx.node
        R = np.zeros(len(self.streams), np.uint64)
        for j, key in enumerate(self.streams):
            slot = self._slot_of(key)
            if slot is None:
                continue
            R[j] = node.next_seq if slot == SELF_SLOT else node.peer_contiguous(slot)
        return R

    def _refresh_R(self, layer):
        if layer.kind == CTRL:
            src = self.layers.get(LOCAL)
            R = src.arr.S if src is not None else np.zeros(len(self.streams), np.uint64)
        else:
            R = self._R()
        for j in range(len(R)):
            layer.arr.set_R(j, int(R[j]))

    # ------------------------------------------------------------------ steps
    def get_timer(self):
        t = []
        if self.next_step is not None:
            t.append(self.next_step)
        if self.next_step2 is not None:
            t.append(self.next_step2)
        for s in self.pending_sends:
            if not s[2]:
                t.append(s[0])
        if self.mcast is not None:
            t.append(self.mcast[0])
        return min(t) if t else None

    def on_round(self, now):
        if self.step_ns is None:
            self._step(now, piggyback=True)

    def on_timer(self, now):
        if self.next_step is not None and now >= self.next_step:
            self._step(now, piggyback=False, ctrl=self.step2_ns is None)
            self.next_step = max(self.next_step + self.step_ns, now + 1)
        if self.next_step2 is not None and now >= self.next_step2:
            self._step(now, piggyback=False, ctrl=True, main=False)
            self.next_step2 = max(self.next_step2 + self.step2_ns, now + 1)
        self._send_due(now)
        if self.mcast is not None and now >= self.mcast[0]:
            self._multicast(now)

    def _step(self, now, piggyback, ctrl=True, main=True):
        """One step of the layers: the flat or local layer when ``main``,
        the controller layer when ``ctrl`` (with step2 it has a timer of
        its own: the paper's controllers step at their own interval, §5)."""
        if main:
            self.step_no += 1
        self._discover_streams(now)
        self._sync_views(now)
        if not self.layers:
            if main:
                self.last_step_t = now
            return
        kinds = [k for k in sorted(self.layers) if (ctrl if k == CTRL else main)]
        for kind in kinds:
            layer = self.layers.get(kind)
            if layer is None:
                continue
            layer.steps += 1
            self._refresh_R(layer)
            layer.arr.fd_step()
            if kind != CTRL:
                self._heard_by_traffic(layer)
            layer.K = self._K(layer)
            self._fd_eval(layer, now)
            self._after_merge(layer, layer.arr.check(), now)
            layer.used = set()
        if main:
            self.last_step_t = now
            if self.local:
                self._sync_views(now)           # controller role may have moved
            self._adaptive_tick(now)
        # schedule this step's sends (b per layer, scattered inside its step)
        self.pending_sends = [s for s in self.pending_sends
                              if not s[2] and s[0] >= now - self._step_len(s[1])]
        if self._active():
            for kind in kinds:
                layer = self.layers.get(kind)
                if layer is None or now < layer.quiet_until:
                    continue
                step = self._step_len(kind)
                b = self.cfg.b if kind != CTRL else (self.cfg.b2 or self.cfg.b)
                for k in range(b):
                    t = now if (piggyback and k == 0 and kind != CTRL) else now + self.rng.randrange(max(step, 1))
                    self.pending_sends.append([t, kind, False])
        self._release(now)

    def _heard_by_traffic(self, layer):
        """L[i] := 0 for members heard from since the last step (Fig. 3:
        any message from them, data included)."""
        ctx = self.ctx
        since = self.last_step_t
        for i, key in enumerate(layer.keys):
            if i == layer.me:
                continue
            m = ctx.members.get(key[0])
            heard = m is not None and m.last_heard > since
            if not heard:
                slot = self._slot_of(key)
                if slot is not None and slot != SELF_SLOT:
                    heard = ctx.node.peer_info(slot)["last_heard"] > since
            if heard:
                self._heard(layer, i)

    def _heard(self, layer, i):
        if i is None or i == layer.me:
            return
        if layer.armed and layer.arr.is_alive(i):
            layer.stale.append(int(layer.arr.L[i]))
        layer.arr.fd_heard(i)

    def _fd_eval(self, layer, now):
        """Declare failed the members with L >= K (§3.2), keeping more than
        quorum * n alive; bring back failed members whose L fell below K/2
        (heard from again, directly or through a fresher live array)."""
        arr = layer.arr
        L = arr.L
        n = layer.n
        alive = [arr.is_alive(i) for i in range(n)]
        changed = False
        back = max(1, layer.K // 2)
        for i in range(n):
            if i != layer.me and not alive[i] and L[i] < back:
                arr.set_alive(i, True)
                alive[i] = True
                key = layer.keys[i]
                layer.failed.discard(key)
                self._member_event(layer, key, "recovered", now)
                changed = True
        if layer.armed:
            cand = sorted((i for i in range(n) if i != layer.me and alive[i] and L[i] >= layer.K),
                          key=lambda i: -int(L[i]))
            room = sum(alive) - (math.floor(self.cfg.quorum * n) + 1)
            for i in cand[:max(room, 0)]:
                arr.set_alive(i, False)
                key = layer.keys[i]
                layer.failed.add(key)
                self._member_event(layer, key, "failed", now)
                changed = True
            if len(cand) > max(room, 0):
                self.stats["quorum_held"] += 1
        if changed:
            self._after_merge(layer, arr.check(), now)

    def _member_event(self, layer, key, what, now):
        self.failed_events.append((now, LAYER_NAMES[layer.kind], key, what))
        self.stats["members_" + what] += 1
        if layer.kind == CTRL:
            self.ctx.post_event("gsgc_zone", key, what)
        else:
            self.ctx.post_event("member", key[0], what)


    def on_member(self, node_id, status, now):
        self.members_version = -1               # re-derive the views at the next use

    # ------------------------------------------------------------------ rounds and S
    def _after_merge(self, layer, flags, now):
        if self.layers.get(layer.kind) is not layer:
            return
        arr = layer.arr
        if arr.round != layer.last_round:
            old, new = layer.last_round, arr.round
            layer.last_round = new
            if new == old + 1:
                layer.tpr.append((now - layer.round_t) / NS)
                layer.steps_per_round.append(layer.steps - layer.round_step)
                if layer.kind == FLAT and self.tuner is not None and self._is_leader(layer):
                    x = self.tuner.observe((now - layer.round_t) / NS, now)
                    if x is not None:
                        self._set_step(x)
            layer.round_t = now
            layer.round_step = layer.steps
            if layer.pending is not None:
                pending = layer.pending
                layer.pending = layer.pending_hash = None
                self._switch(layer, pending, now, "round_start")
        if flags & COMPLETED:
            self.stats["completed_" + LAYER_NAMES[layer.kind]] += 1
            if layer.kind == CTRL and not layer.armed and self.cfg.failure_detection:
                # Every zone this node counts alive was heard from in the
                # round just completed here: their live counters can start.
                # (An adopted round would not do: it may have left out a
                # zone others declared failed, which zeros would revive.)
                for i in range(layer.n):
                    layer.arr.set_L(i, 0)
                layer.armed = True
                self.stats["fd_armed"] += 1
            if self.cfg.multicast and layer.kind != LOCAL and self.mcast is None:
                d = self.cfg.multicast_delay
                d = _ns(d) if d is not None else self._step_len(layer.kind) // 4
                self.mcast = (now + (self.rng.randrange(d) if d > 0 else 0), layer.kind, arr.round - 1)
        if layer.kind == LOCAL:
            ctrl = self.layers.get(CTRL)
            if ctrl is not None:
                self._refresh_R(ctrl)
        elif layer.kind == CTRL:
            self._merge_global_arr(arr.S, now)
            return
        self._release(now)

    def stable_array(self):
        """S this node applies, per stream (index = self.streams)."""
        if self.local:
            return self.gS.copy()
        lay = self.layers.get(FLAT)
        return lay.arr.S if lay is not None else np.zeros(len(self.streams), np.uint64)

    def _release(self, now):
        S = self.stable_array()
        node = self.ctx.node
        for j in range(len(S)):
            v = int(S[j])
            if v <= self.applied[j]:
                continue
            key = self.streams[j]
            slot = self._slot_of(key)
            if slot is None:
                continue
            self.stats["released"] += node.stable(slot, v)
            self.applied[j] = v
            self._tts(j, v, now)

    def _tts(self, j, v, now):
        dq = self.seen[j]
        t_seen = None
        while dq and dq[0][1] <= v:
            t, nx = dq.popleft()
            if nx >= v:
                t_seen = t
        if t_seen is None and dq:
            t_seen = dq[0][0]
        if t_seen is not None:
            x = (now - t_seen) / NS
            self.tts.append(x)
            self.tts_count += 1
            self.tts_max = max(self.tts_max, x)

    # ------------------------------------------------------------------ adaptive step
    def _is_leader(self, layer):
        alive = sorted(k[0] for k in layer.alive_keys())
        return bool(alive) and alive[0] == self.ctx.id

    def _set_step(self, x):
        self.step_ns = max(1, _ns(x))
        epoch, _ = self.step_us_epoch
        self.step_us_epoch = (epoch + 1, self.ctx.id & 0xFFFF)
        self.stats["step_changes"] += 1

    def _adopt_step(self, step_us, epoch, leader, now):
        if self.tuner is None or not step_us:
            return
        if (epoch, leader) > self.step_us_epoch:
            self.step_us_epoch = (epoch, leader)
            self.step_ns = step_us * 1000
            self.stats["step_adopted"] += 1

    def _adaptive_tick(self, now):
        if self.tuner is None:
            return
        layer = self.layers.get(FLAT)
        if layer is None or not self._is_leader(layer):
            return
        if not self.tuner.searching and self.tuner.next_run is None and not self.tuner.windows:
            self._set_step(self.tuner.start(now))
            return
        x = self.tuner.tick(now)
        if x is not None:
            self._set_step(x)

    # ------------------------------------------------------------------ observability
    def state(self) -> dict:
        """What an operator (or a test) wants to see."""
        layers = {}
        for kind, lay in self.layers.items():
            arr = lay.arr
            layers[LAYER_NAMES[kind]] = {
                "round": arr.round,
                "rounds_completed": lay.rounds_completed,
                "view": list(lay.keys),
                "view_hash": lay.hash,
                "n": lay.n,
                "heard": [k for i, k in enumerate(lay.keys) if arr.heard(i)],
                "alive": lay.alive_keys(),
                "failed": sorted(lay.failed, key=repr),
                "K": lay.K,
                "L": arr.L.tolist(),
                "S": {k: int(v) for k, v in zip(self.streams, arr.S)},
                "M": {k: int(v) for k, v in zip(self.streams, arr.M)},
                "pending": lay.pending,
                "admissions": list(lay.admissions),
                "tpr_mean": float(np.mean(lay.tpr)) if lay.tpr else None,
                "steps_per_round_mean": float(np.mean(lay.steps_per_round)) if lay.steps_per_round else None,
                "view_mismatch": lay.mismatch,
            }
        tts = np.asarray(self.tts) if self.tts else None
        main = self.layers.get(LOCAL if self.local else FLAT)
        return {
            "round": main.arr.round if main else None,
            "rounds_completed": main.rounds_completed if main else 0,
            "S": {k: int(v) for k, v in zip(self.streams, self.stable_array())},
            "failed": sorted({k[0] for k in main.failed}) if main else [],
            "K": main.K if main else None,
            "step": self._step_len() / NS if self.ctx is not None else None,
            "steps": self.step_no,
            "controller": CTRL in self.layers,
            "layers": layers,
            "tts": {
                "count": self.tts_count,
                "mean": float(tts.mean()) if tts is not None else None,
                "p50": float(np.percentile(tts, 50)) if tts is not None else None,
                "p99": float(np.percentile(tts, 99)) if tts is not None else None,
                "max": self.tts_max,
            },
            "events": list(self.failed_events),
            "windows": list(self.tuner.windows) if self.tuner else [],
            "stats": dict(self.stats),
        }
