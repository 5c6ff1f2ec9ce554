"""GSGC layers: one stability computation each, over its own participants
and arrays.

The arrays (R, M, W, S, r, L, alive) and the merge rules of Fig. 2 live in
the C core (``rpbcast.core.stability.StabilityArrays``); a Layer maps its
participants (member keys, or zones) to array indices, keeps the view hash
members compare before merging, and follows its participants across view
changes (``remap``).  The flat (global) scheme of §3 has one layer over
every member; local gossip (§5) has a local layer over the members of a
zone (phase 1) and, on stability controllers, a controller layer over the
zones (phase 2) whose R is the local layer's S.
"""
from __future__ import annotations

import collections
import hashlib
import math

import numpy as np

from rpbcast.core.stability import StabilityArrays

FLAT, LOCAL, CTRL = 0, 1, 2
LAYER_NAMES = {FLAT: "flat", LOCAL: "local", CTRL: "controllers"}

L_UNKNOWN = 255                         # live counter of a member not heard of yet (newcomer)
L_MAX = 250                             # K cap: LIVE counters are u8 on the wire


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



class Layer:
    def __init__(self, kind, keys, self_key, m, now, unknown_L=False):
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
        self.steps = 0                  # steps this layer has taken (its own step interval)
        self.round_step = 0             # self.steps when the current round started
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
