"""GSGC: gossip-style stability detection and failure detection (Guo et al.,
CS-TR-97-1656), as an engine extension that decides when messages are stable
and may leave the gossip and send buffers.

    from rpbcast.protocol.gsgc import GsgcExtension
    ext = engine.add_extension(GsgcExtension(b=1))
    ...
    ext.state()        # round, S per stream, failed members, time-to-stable

The arrays (R, M, W, S, r, L, alive) and the merge rules of Fig. 2 live in
the C core (``rpbcast.core.stability.StabilityArrays``); this module maps member
ids and streams to array indices, runs the steps, puts the state on the wire
and applies S to the buffers.  The design (ranks, views, wire, joins,
failure threshold, local gossip, adaptive step) is in ``docs/gsgc.md``.

Layers.  A *layer* is one stability computation over a set of participants
with its own arrays: the flat (global) scheme of §3 has one layer over every
member; local gossip (§5) has a local layer over the members of this node's
zone (phase 1) and, on stability controllers, a controller layer over the
zones (phase 2) whose R is the local layer's S.
"""
from __future__ import annotations

import collections
import hashlib
import math
import random
import struct
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np

from rpbcast.core import wire
from rpbcast.protocol.extension import Extension
from rpbcast.protocol.membership import MEMBER, PENDING_LEAVE, addr_to_wire
from rpbcast.core.node import DEST_MCAST, SELF_SLOT
from rpbcast.core.stability import COMPLETED, StabilityArrays

NS = 1_000_000_000
T = wire.MsgType

# Our own gossip section kind (an unknown kind to v1 nodes, so safe to
# ignore: wire-format.md §8).  It precedes the STABILITY and LIVE sections
# of a layer and says which layer and which view they belong to.
SEC_GSGC = 0x47
_CTL = struct.Struct("<QBBHII")         # view hash, layer, flags, 0, step_us, step epoch
CTL_GLOBAL_S = 0x01                     # flag: a STABILITY message body (global S) follows

FLAT, LOCAL, CTRL = 0, 1, 2
LAYER_NAMES = {FLAT: "flat", LOCAL: "local", CTRL: "controllers"}

L_UNKNOWN = 255                         # live counter of a member not heard of yet (newcomer)
L_MAX = 250                             # K cap: LIVE counters are u8 on the wire


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


# --------------------------------------------------------------------------
# pure helpers

def view_hash(layer: int, keys) -> int:
    """64-bit digest of a layer's participant list (the ranks are positions
    in it).  Members whose views hash differently do not merge M/W/L."""
    h = hashlib.blake2b(repr((layer, tuple(keys))).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def diffusion_steps(n: int, b: int) -> float:
    """Expected steps for a push gossip with fan-out b to reach all of n
    members: log_{1+b}(n) + ln(n)/b (Pittel's log2 n + ln n for b = 1)."""
    if n <= 1:
        return 0.0
    return math.log(n) / math.log(1 + b) + math.log(n) / b


def k_threshold(n: int, b: int, c: float = 2.0, k_min: int = 6) -> int:
    """Failure threshold K (steps): c times the diffusion time D of the live
    arrays, plus 2 steps for scattered send times, at least k_min."""
    k = math.ceil(c * diffusion_steps(n, b)) + 2
    return int(min(L_MAX, max(k_min, k)))


class Window(NamedTuple):
    s: float            # step interval with a near-minimum TPR (Fig. 10)
    f_s: float          # its TPR
    s1: float           # window of good step intervals (Fig. 11)
    s2: float
    evaluations: dict   # step -> TPR measured/evaluated
    iterations1: int    # Part I loop iterations
    iterations2: int    # Part II loop iterations (bodies executed)


def window_search(a0: float, b0: float, g: float, e: float, p: float, grid: Optional[float] = None):
    """The two-part adaptive algorithm of §4.3 (Figs. 10 and 11) as a
    generator: it yields a step interval x, is sent back f(x) (the average
    TPR measured with that step), and returns a Window.

    Faithful to the figures, with three things the figures leave open:
    e is relative (|f(x) - f(s)| < e * f(s), as the text defines it); the
    Part II loops also stop at a0 and b0 (the figure's upper loop has no
    bound); ``grid`` rounds every evaluated point to a multiple of grid
    (the paper's curves were measured at 1-s steps)."""
    q = (lambda x: x) if not grid else (lambda x: max(grid, round(x / grid) * grid))
    evals = {}

    def f(x):
        x = q(x)
        if x not in evals:
            evals[x] = yield x
        return evals[x]

    a, b = float(a0), float(b0)
    it1 = 0
    while b - a > g:                            # Part I: golden-ratio search
        d = b - a
        m1, m2 = a + 0.382 * d, a + 0.618 * d
        f1 = yield from f(m1)
        f2 = yield from f(m2)
        if f1 >= f2:
            a = m1
        else:
            b = m2
        it1 += 1
    s = q((a + b) / 2)
    fs = yield from f(s)
    tol = e * fs

    def near(v):
        return abs(v - fs) < tol

    it2 = 0
    s1, k = s, 1                                # Part II: lower bound
    while s1 - k * p > a0 and near((yield from f(s1 - k * p))):
        s1 -= k * p
        k *= 2
        it2 += 1
    k //= 2
    while k >= 1 and s1 - k * p > a0 and near((yield from f(s1 - k * p))):
        s1 -= k * p
        k //= 2
        it2 += 1
    s2, k = s, 1                                # upper bound
    while s2 + k * p <= b0 and near((yield from f(s2 + k * p))):
        s2 += k * p
        k *= 2
        it2 += 1
    k //= 2
    while k >= 1 and s2 + k * p <= b0 and near((yield from f(s2 + k * p))):
        s2 += k * p
        k //= 2
        it2 += 1
    return Window(s, fs, q(s1), q(s2), dict(evals), it1, it2)


def find_window(f: Callable[[float], float], a0: float, b0: float, g: float, e: float, p: float,
                grid: Optional[float] = None) -> Window:
    """Run the §4.3 search on a TPR function f(step) (Figs. 10-11)."""
    gen = window_search(a0, b0, g, e, p, grid)
    try:
        x = next(gen)
        while True:
            x = gen.send(float(f(x)))
    except StopIteration as stop:
        return stop.value


class OnlineSearch:
    """The §4.3 search driven by measured rounds (sans-IO).

    ``start(now)`` returns the first step interval to use.  Feed every
    measured time-per-round with ``observe(tpr, now)`` and call
    ``tick(now)`` once per step; both return a new step interval when the
    search moves on (else None).  A probe is the mean of
    ``rounds_per_probe`` rounds after ``warmup`` discarded ones; a probe
    that sees no round within ``probe_timeout(x)`` counts as that long.
    When a search ends the step is set to s and the search runs again
    ``period`` seconds later."""

    def __init__(self, a0, b0, g, e, p, grid=None, rounds_per_probe=4, warmup=1, period=60.0,
                 timeout_steps=60):
        self.args = (a0, b0, g, e, p, grid)
        self.rounds_per_probe = rounds_per_probe
        self.warmup = warmup
        self.period_ns = _ns(period)
        self.timeout_steps = timeout_steps
        self.gen = None
        self.x = None
        self.samples = []
        self.skip = 0
        self.probe_t = 0
        self.next_run = None
        self.windows: List[Window] = []
        self.probes = 0

    @property
    def searching(self):
        return self.gen is not None

    def start(self, now):
        self.gen = window_search(*self.args)
        return self._probe(next(self.gen), now)

    def _probe(self, x, now):
        self.x = x
        self.samples = []
        self.skip = self.warmup
        self.probe_t = now
        self.probes += 1
        return x

    def _feed(self, v, now):
        try:
            return self._probe(self.gen.send(v), now)
        except StopIteration as stop:
            w = stop.value
            self.windows.append(w)
            self.gen = None
            self.x = w.s
            self.next_run = now + self.period_ns
            return w.s

    def observe(self, tpr: float, now: int):
        if self.gen is None:
            return None
        if self.skip > 0:
            self.skip -= 1
            return None
        self.samples.append(tpr)
        if len(self.samples) >= self.rounds_per_probe:
            return self._feed(sum(self.samples) / len(self.samples), now)
        return None

    def tick(self, now: int):
        if self.gen is None:
            if self.next_run is not None and now >= self.next_run:
                self.next_run = None
                return self.start(now)
            return None
        waited = (now - self.probe_t) / NS
        if waited > self.timeout_steps * self.x:
            return self._feed(max(waited, *self.samples) if self.samples else waited, now)
        return None


def zones_by_rtt(ids, rtt: Callable[[int, int], float], threshold: float) -> Dict[int, int]:
    """A zone map from RTTs (seconds): in id order, each member not yet
    placed opens a zone (named by its id) holding every unplaced member
    within ``threshold`` of it.  Deterministic for a given RTT matrix, so
    it can be computed once (or by a coordinator) and configured on every
    member as ``zones=``."""
    ids = sorted(ids)
    zone = {}
    for a in ids:
        if a in zone:
            continue
        zone[a] = a
        for b in ids:
            if b not in zone and rtt(a, b) <= threshold:
                zone[b] = a
    return zone


# --------------------------------------------------------------------------
# configuration

ADMISSIONS = ("window", "execution", "immediate")


@dataclass
class GsgcConfig:
    b: int = 1                      # gossip sub-group size per step (paper's b)
    step: Optional[float] = None    # seconds; None: one step per engine gossip round
    K: Optional[int] = None         # failure threshold (steps); None: k_threshold(n, b)
    k_factor: float = 2.0           # c in K = c * D + 2
    k_min: int = 6
    k_measured: bool = True         # K >= 1.5 x p99 of observed staleness of live members
    fail_after: float = 1.0         # and K >= this many seconds of steps: a member silent for
                                    # less is never declared failed (an overloaded logger's
                                    # timers ran 0.5 s late; K = 9 steps of 20 ms called it
                                    # failed and recovered a dozen times a second)
    quorum: float = 0.5             # failures are declared only while > quorum * n stay alive
    admission: str = "window"       # joins (§3.3): window | execution | immediate
    admission_window: Optional[float] = None   # seconds after a round start; None: 2 steps
    execution_quiet: Optional[float] = None    # execution control: quiet time; None: 4 steps
    multicast: bool = True          # multicast S when a round completes here (§3.1 optimisation)
    multicast_delay: Optional[float] = None    # suppression delay bound; None: step / 4
    age_limit: Optional[int] = None  # engine gc_limit while GSGC runs; None: auto; 0: leave it
    newcomer: Optional[bool] = None  # start with L "unknown" (joining / restarted); None: engine cfg.join
    # local gossip (§5)
    zones: object = None            # None (flat) | "subnet" | {node_id: zone} | callable(Member)
    subnet_prefix: int = 24
    controllers: int = 2            # G stability controllers per local group
    b2: Optional[int] = None        # sub-group size among controllers; None: b
    # adaptive step (§4.3); needs step set (own timer), flat layer only
    adaptive: Optional[dict] = None  # OnlineSearch kwargs (a0, b0, g, e, p, ...)

    def validate(self):
        if self.b < 1:
            raise ValueError("b (gossip sub-group size) must be at least 1")
        if self.step is not None and self.step <= 0:
            raise ValueError("step must be a positive number of seconds, or None")
        if self.admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, got {self.admission!r}")
        if not 0 <= self.quorum < 1:
            raise ValueError("quorum must be in [0, 1)")
        if self.fail_after < 0:
            raise ValueError("fail_after must be >= 0 seconds")
        if self.K is not None and not 1 <= self.K <= L_MAX:
            raise ValueError(f"K must be in 1..{L_MAX} (LIVE counters are one byte)")
        if self.controllers < 1:
            raise ValueError("controllers (G) must be at least 1")
        if self.adaptive is not None and self.step is None:
            raise ValueError("adaptive needs step= (the extension's own step timer)")
        if self.adaptive is not None and self.zones is not None:
            raise ValueError("the adaptive step runs on the flat scheme only")
        if not (self.zones is None or self.zones == "subnet" or isinstance(self.zones, dict)
                or callable(self.zones)):
            raise ValueError("zones must be None, 'subnet', a {node_id: zone} dict or a callable(Member)")
        if not 0 < self.subnet_prefix <= 32:
            raise ValueError("subnet_prefix must be 1..32")
        return self


# --------------------------------------------------------------------------
# one stability computation

class _Layer:
    def __init__(self, kind, keys, self_key, m, now, step_no, unknown_L=False):
        self.kind = kind
        self.keys = list(keys)
        self.pos = {k: i for i, k in enumerate(self.keys)}
        self.ids = {self._id(k): i for i, k in enumerate(self.keys)}
        self.self_key = self_key
        self.me = self.pos[self_key]
        self.hash = view_hash(kind, self.keys)
        self.arr = StabilityArrays(m, len(self.keys), self.me)
        self.armed = not unknown_L
        if unknown_L:
            for i in range(len(self.keys)):
                self.arr.set_L(i, L_UNKNOWN)
        self.completed_before = 0       # rounds completed by earlier arrays (view changes)
        self.round_t = now
        self.round_step = step_no
        self.last_round = self.arr.round
        self.failed = set()
        self.pending = None             # candidate keys waiting for admission
        self.pending_hash = None
        self.quiet_until = 0
        self.used = set()               # targets of this step
        self.K = 6
        self.tpr = collections.deque(maxlen=256)
        self.steps_per_round = collections.deque(maxlen=256)
        self.stale = collections.deque(maxlen=256)
        self.admissions = []            # (time, round, how, ids)
        self.mismatch = 0

    def _id(self, k):
        """Member id of a (id, inc) key; a zone key is its own id."""
        return k if self.kind == CTRL else k[0]

    @property
    def n(self):
        return len(self.keys)

    @property
    def rounds_completed(self):
        return self.completed_before + self.arr.rounds_completed

    def alive_keys(self):
        return [k for i, k in enumerate(self.keys) if self.arr.is_alive(i)]

    def remap(self, keys, now):
        """Re-index to a new participant list.  Everything keyed by member
        (W bit, L, alive) follows its key; keys new to the view start alive,
        unheard in this round, with L = 0.  Returns the merge flags."""
        old = self.arr
        m = old.m
        keys = list(keys)
        pos = {k: i for i, k in enumerate(keys)}
        arr = StabilityArrays(m, len(keys), pos[self.self_key])
        R = old.R
        for j in range(m):
            arr.set_R(j, int(R[j]))
        r = old.round
        arr.merge_S(old.S, r)           # round := r, S carried over
        arr.start_round()               # M := R (the R set above), W := {self}
        L = old.L
        bits = []
        for k, i in pos.items():
            oi = self.pos.get(k)
            if oi is None:
                continue
            arr.set_L(i, int(L[oi]))
            if not old.is_alive(oi):
                arr.set_alive(i, False)
            if old.heard(oi):
                bits.append(i)
        W = np.zeros((len(keys) + 63) // 64, np.uint64)
        for i in bits:
            W[i // 64] |= np.uint64(1 << (i % 64))
        flags = arr.merge(old.M, W, np.zeros(m, np.uint64), r)
        self.completed_before += old.rounds_completed
        self.arr = arr
        self.keys = keys
        self.pos = pos
        self.ids = {self._id(k): i for i, k in enumerate(keys)}
        self.me = pos[self.self_key]
        self.hash = view_hash(self.kind, keys)
        self.failed &= set(keys)
        self.used = set()
        return flags


# --------------------------------------------------------------------------
# the extension

class GsgcExtension(Extension):
    """GSGC on one engine.  Every member of the group must run it with the
    same layer configuration (flat, or the same zones)."""

    def __init__(self, config: Optional[GsgcConfig] = None, rng: Optional[random.Random] = None, **kw):
        self.cfg = (config or GsgcConfig(**kw)).validate()
        self.rng = rng
        self.layers: Dict[int, _Layer] = {}
        self.streams: List[tuple] = []          # (sender, inc) in local order
        self.sidx: Dict[tuple, int] = {}
        self.slot: Dict[tuple, int] = {}
        self.applied: List[int] = []            # S already applied to the buffers
        self.gS = np.zeros(0, np.uint64)        # global S (local-gossip mode)
        self.seen: List[collections.deque] = []
        self.pending_sends = []                 # [time, layer kind, done]
        self.mcast = None                       # (time, layer kind, round)
        self.next_step = None
        self.step_no = 0
        self.last_step_t = 0
        self.members_version = -1
        self.ctx = None
        self.step_us_epoch = (0, 0)             # adaptive: (epoch, leader id) of the step in use
        self.tuner = None
        self.zone_seen = collections.defaultdict(dict)   # zone -> {controller id: time}
        self.tts = collections.deque(maxlen=4096)
        self.tts_count = 0
        self.tts_max = 0.0
        self.stats = collections.Counter()
        self.failed_events = []                 # (time, layer, key, "failed" | "recovered")

    # ------------------------------------------------------------------ setup
    def attach(self, engine):
        super().attach(engine)
        if self.rng is None:
            self.rng = random.Random(engine.rng.getrandbits(64))
        cfg = self.cfg
        self.step_ns = _ns(cfg.step) if cfg.step is not None else None
        if cfg.adaptive is not None:
            a = dict(cfg.adaptive)
            self.tuner = OnlineSearch(**a)
        if cfg.age_limit != 0:
            ecfg = engine.cfg
            if cfg.age_limit is None:
                n = max(len(ecfg.members), 2)
                k = cfg.K or min(L_MAX, max(k_threshold(n, cfg.b, cfg.k_factor, cfg.k_min), self._k_floor()))
                ratio = (cfg.step / ecfg.gossip_interval) if cfg.step is not None else 1.0
                limit = max(ecfg.gc_limit, math.ceil((2 * k + 16) * ratio))
            else:
                limit = cfg.age_limit
            engine.cfg = ecfg.replace(gc_limit=int(limit))
        if self.step_ns is not None:
            self.next_step = engine._now + self.rng.randrange(max(self.step_ns, 1))

    @property
    def local(self):
        return self.cfg.zones is not None

    def _step_len(self):
        return self.step_ns if self.step_ns is not None else self.engine._gossip_ns

    def _zone_of(self, m):
        z = self.cfg.zones
        if z == "subnet":
            ip, _ = addr_to_wire(m.addr)
            return ip >> (32 - self.cfg.subnet_prefix)
        if callable(z):
            return z(m)
        return z.get(m.node_id)

    def _active(self):
        return self.engine.status in (MEMBER, PENDING_LEAVE)

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

    def _slot_of(self, key):
        e = self.engine
        if key == (e.id, e.inc):
            return SELF_SLOT
        s = self.slot.get(key)
        if s is None:
            s = e.node.find_peer(*key)
            if s is not None:
                self.slot[key] = s
        return s

    def _discover_streams(self, now):
        e = self.engine
        node = e.node
        if node.next_seq:
            self._stream((e.id, e.inc))
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
        node = self.engine.node
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

    # ------------------------------------------------------------------ views
    def _eligible(self):
        # Our own entry by the engine's status: the table's self entry can
        # lag it (a joiner's entry keeps PENDING_JOIN after _become).
        e = self.engine
        return [m for m in e.members.entries()
                if (m.status in (MEMBER, PENDING_LEAVE) if m.node_id != e.id else self._active())]

    def _candidates(self):
        """{layer kind: (keys, self key)} this node's member table implies."""
        e = self.engine
        el = self._eligible()
        if not self.local:
            return {FLAT: (sorted((m.node_id, m.inc) for m in el), (e.id, e.inc))}
        me = e.members.get(e.id)
        myzone = self._zone_of(me)
        local = sorted((m.node_id, m.inc) for m in el if self._zone_of(m) == myzone)
        zones = sorted({self._zone_of(m) for m in el}, key=repr)
        out = {LOCAL: (local, (e.id, e.inc))}
        if self._is_controller():
            out[CTRL] = (zones, myzone)
        return out

    def _zone_members(self):
        z = collections.defaultdict(list)
        for m in self._eligible():
            z[self._zone_of(m)].append(m.node_id)
        return z

    def _is_controller(self):
        lay = self.layers.get(LOCAL)
        if lay is None:
            return False
        alive = sorted(self_id for self_id, _ in lay.alive_keys())
        return self.engine.id in alive[:self.cfg.controllers]

    def _sync_views(self, now):
        """Bring the layers in line with the member table (§3.3 joins under
        the configured admission policy; removals and new incarnations at
        once)."""
        e = self.engine
        if not self._active():
            return
        if e.members.version == self.members_version and (not self.local or self._ctrl_ok()):
            return
        self.members_version = e.members.version
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
                newcomer = self.cfg.newcomer if self.cfg.newcomer is not None else bool(e.cfg.join)
                late = newcomer if kind != CTRL else self.step_no > 2
                layer = _Layer(kind, keys, me, len(self.streams), now, self.step_no, unknown_L=late)
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
                layer.quiet_until = now + self._quiet_ns()
                continue
            # admission window
            if now - layer.round_t <= self._window_ns():
                self._switch(layer, keys, now, "window")
            else:
                if base != layer.keys:
                    self._switch(layer, base, now, "update")
                layer.pending = keys
                layer.pending_hash = view_hash(kind, keys)

    def _ctrl_ok(self):
        return (CTRL in self.layers) == self._is_controller()

    def _window_ns(self):
        w = self.cfg.admission_window
        return _ns(w) if w is not None else 2 * self._step_len()

    def _quiet_ns(self):
        q = self.cfg.execution_quiet
        return _ns(q) if q is not None else 4 * self._step_len()

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
        k = max(k, self._k_floor())
        return int(min(L_MAX, k))

    def _k_floor(self):
        """Steps in fail_after seconds."""
        return math.ceil(self.cfg.fail_after * NS / max(self._step_len(), 1)) if self.cfg.fail_after else 0

    # ------------------------------------------------------------------ steps
    def get_timer(self):
        t = []
        if self.next_step is not None:
            t.append(self.next_step)
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
            self._step(now, piggyback=False)
            self.next_step = max(self.next_step + self.step_ns, now + 1)
        self._send_due(now)
        if self.mcast is not None and now >= self.mcast[0]:
            self._multicast(now)

    def _step(self, now, piggyback):
        self.step_no += 1
        e = self.engine
        self._discover_streams(now)
        self._sync_views(now)
        if not self.layers:
            self.last_step_t = now
            return
        for kind in sorted(self.layers):
            layer = self.layers.get(kind)
            if layer is None:
                continue
            self._refresh_R(layer)
            layer.arr.fd_step()
            if kind != CTRL:
                self._heard_by_traffic(layer)
            layer.K = self._K(layer)
            self._fd_eval(layer, now)
            self._after_merge(layer, layer.arr.check(), now)
            layer.used = set()
        self.last_step_t = now
        if self.local:
            self._sync_views(now)               # controller role may have moved
        self._adaptive_tick(now)
        # schedule this step's sends (b per layer, scattered inside the step)
        step = self._step_len()
        self.pending_sends = [s for s in self.pending_sends if not s[2] and s[0] >= now - step]
        if self._active():
            for kind, layer in self.layers.items():
                if now < layer.quiet_until:
                    continue
                b = self.cfg.b if kind != CTRL else (self.cfg.b2 or self.cfg.b)
                for k in range(b):
                    t = now if (piggyback and k == 0 and kind != CTRL) else now + self.rng.randrange(max(step, 1))
                    self.pending_sends.append([t, kind, False])
        self._release(now)

    def _heard_by_traffic(self, layer):
        """L[i] := 0 for members heard from since the last step (Fig. 3:
        any message from them, data included)."""
        e = self.engine
        since = self.last_step_t
        for i, key in enumerate(layer.keys):
            if i == layer.me:
                continue
            m = e.members.get(key[0])
            heard = m is not None and m.last_heard > since
            if not heard:
                slot = self._slot_of(key)
                if slot is not None and slot != SELF_SLOT:
                    heard = e.node.peer_info(slot)["last_heard"] > since
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
            self.engine.events.append(("gsgc_zone", key, what))
        else:
            self.engine._event("member", key[0], what)

    # ------------------------------------------------------------------ sending
    def _targets(self, layer):
        """Node ids this layer gossips to."""
        e = self.engine
        if layer.kind != CTRL:
            return [k[0] for i, k in enumerate(layer.keys) if i != layer.me and layer.arr.is_alive(i)]
        zm = self._zone_members()
        out = []
        now = e._now
        horizon = 4 * layer.K * self._step_len()
        for i, z in enumerate(layer.keys):
            if i == layer.me or not layer.arr.is_alive(i):
                continue
            seen = [c for c, t in self.zone_seen.get(z, {}).items() if now - t <= horizon]
            out += seen or sorted(zm.get(z, []))[:self.cfg.controllers]
        return out

    def _sections(self, layer, now):
        e = self.engine
        arr = layer.arr
        flags = 0
        extra = b""
        if self.local and layer.kind == LOCAL and len(self.streams):
            flags |= CTL_GLOBAL_S
            extra = wire.stability_body(0, [(s, i, int(v)) for (s, i), v in zip(self.streams, self.gS)])
        epoch, leader = self.step_us_epoch
        step_us = (self.step_ns // 1000) if self.step_ns is not None else 0
        ctl = wire.section(SEC_GSGC, _CTL.pack(layer.hash, layer.kind, flags, 0, step_us & 0xFFFFFFFF,
                                               ((epoch & 0xFFFF) << 16) | (leader & 0xFFFF)) + extra)
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
            m = self.engine.members.get(target_id)
            me = self.engine.members.get(self.engine.id)
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
        e = self.engine
        for s in self.pending_sends:
            if s[2] or s[0] > now:
                continue
            s[2] = True
            layer = self.layers.get(s[1])
            if layer is None or now < layer.quiet_until:
                continue
            cands = [t for t in self._targets(layer) if t not in layer.used and t != e.id]
            if not cands:
                continue
            tid = cands[self.rng.randrange(len(cands))]
            m = e.members.get(tid)
            if m is None or not m.addr:
                continue
            body = wire.gossip_body(e.node.hb_signature, e.members.signature, now & (2**64 - 1),
                                    self._sections(layer, now))
            e.gossip_seq += 1
            try:
                e._emit(m.addr, T.GOSSIP, body, seq=e.gossip_seq)
            except ValueError:
                self.stats["too_big"] += 1      # m * 24 + n / 8 beyond the MTU: see docs/gsgc.md
                continue
            e.node.trace_event(now, 6, 0, 0, e.gossip_seq, len(body), tid, 0)
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
        self.engine._emit(DEST_MCAST, T.STABILITY, body)
        self.stats["multicast_sent"] += 1

    # ------------------------------------------------------------------ receiving
    def after_rx(self, now):
        self.ctx = None

    def on_section(self, source, kind, data, now):
        if kind == SEC_GSGC:
            if len(data) < _CTL.size:
                return
            h, layer, flags, _, step_us, ep = _CTL.unpack_from(data, 0)
            self.ctx = [source, h, layer, None]
            if flags & CTL_GLOBAL_S and len(data) > _CTL.size:
                try:
                    r, entries = wire.read_stability_body(bytes(data[_CTL.size:]))
                except struct.error:
                    entries = []
                if self._active() and self.local:
                    self._merge_global(entries, now)
            self._adopt_step(step_us, ep >> 16, ep & 0xFFFF, now)
            return
        if kind == wire.Section.STABILITY:
            if not self._active():
                return
            ctx = self.ctx if self.ctx is not None and self.ctx[0] == source else None
            r, senders, M, S, W, n = wire.read_stability(bytes(data))
            self.stats["sections_rx"] += 1
            matched = self._on_stability(ctx, source, r, senders, M, S, W, n, now)
            if ctx is not None:
                ctx[3] = matched
            return
        if kind == wire.Section.LIVE:
            ctx = self.ctx if self.ctx is not None and self.ctx[0] == source else None
            if ctx is None or not ctx[3]:
                return
            layer = self.layers.get(ctx[2])
            if layer is None or layer.hash != ctx[1]:
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
        m = self.engine.members.get(source)
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

    def _on_stability(self, ctx, source, r, senders, M, S, W, n, now):
        self._sync_views(now)
        kind = ctx[2] if ctx is not None else FLAT
        if self.local and kind == FLAT:
            kind = LOCAL
        if kind == CTRL and self.local:
            m = self.engine.members.get(source)
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
        h = ctx[1] if ctx is not None else None
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
                layer.steps_per_round.append(self.step_no - layer.round_step)
                if layer.kind == FLAT and self.tuner is not None and self._is_leader(layer):
                    x = self.tuner.observe((now - layer.round_t) / NS, now)
                    if x is not None:
                        self._set_step(x)
            layer.round_t = now
            layer.round_step = self.step_no
            if layer.pending is not None:
                pending = layer.pending
                layer.pending = layer.pending_hash = None
                self._switch(layer, pending, now, "round_start")
        if flags & COMPLETED:
            self.stats["completed_" + LAYER_NAMES[layer.kind]] += 1
            if self.cfg.multicast and layer.kind != LOCAL and self.mcast is None:
                d = self.cfg.multicast_delay
                d = _ns(d) if d is not None else self._step_len() // 4
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
        node = self.engine.node
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
        return bool(alive) and alive[0] == self.engine.id

    def _set_step(self, x):
        self.step_ns = max(1, _ns(x))
        epoch, _ = self.step_us_epoch
        self.step_us_epoch = (epoch + 1, self.engine.id & 0xFFFF)
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
            "step": self._step_len() / NS if self.engine is not None else None,
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

