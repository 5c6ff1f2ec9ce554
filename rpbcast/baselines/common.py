"""What the baseline engines share: the baseline engine (static membership,
the protocol's own parameters and counters, on the shared control-plane
parts of rpbcast.protocol), a helper base for a baseline's own part,
interval arithmetic on (lo, hi) lists, and a packer that turns per-stream
interval sets into digest sections within the MTU.

The data plane (``rpbcast.core.node.Node``) is the rpbcast one, untouched: DATA,
REPAIR and HEARTBEAT are handled per message in C (gap detection, the
message store, delivery); the baselines differ only in what the control
plane does with gaps, timers and control messages.
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools
import struct
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from rpbcast.core import wire
from rpbcast.config import Config, ConfigError
from rpbcast.core.digest import encode as digest_encode
from rpbcast.protocol.engine import NS, DriverNeeds, Engine
from rpbcast.protocol.group import StaticGroup
from rpbcast.protocol.logger import LoggerRole
from rpbcast.protocol.selection import weights

Ivl = Tuple[int, int]
T = wire.MsgType

MAX_SEQ = (1 << 62) - 1
MISSING_CAP = 4096        # intervals fetched per node.missing call
SECTION_OVERHEAD = 12     # section header (4) + sender, inc (8)
BODY_SLACK = 16
_STREAM_HEAD = struct.Struct("<II")


def ns(seconds: float) -> int:
    return int(round(seconds * NS))


# ---------------------------------------------------------------- intervals
# Sorted, disjoint lists of inclusive (lo, hi) pairs.

def iv_norm(a: Iterable[Ivl]) -> List[Ivl]:
    """Sort and merge overlapping or adjacent intervals."""
    out: List[List[int]] = []
    for lo, hi in sorted((int(x), int(y)) for x, y in a):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def iv_union(a: Sequence[Ivl], b: Sequence[Ivl]) -> List[Ivl]:
    return iv_norm(list(a) + list(b))


def iv_intersect(a: Sequence[Ivl], b: Sequence[Ivl]) -> List[Ivl]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def iv_subtract(a: Sequence[Ivl], b: Sequence[Ivl]) -> List[Ivl]:
    out, j = [], 0
    for lo, hi in a:
        cur = lo
        while j < len(b) and b[j][1] < cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] <= hi:
            if b[k][0] > cur:
                out.append((cur, b[k][0] - 1))
            cur = max(cur, b[k][1] + 1)
            if cur > hi:
                break
            k += 1
        if cur <= hi:
            out.append((cur, hi))
    return out


def iv_count(a: Sequence[Ivl]) -> int:
    return sum(hi - lo + 1 for lo, hi in a)


def runs(values: Iterable[int]) -> List[Ivl]:
    """Ints -> sorted runs."""
    out: List[List[int]] = []
    for v in sorted(set(values)):
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return [(lo, hi) for lo, hi in out]


# ---------------------------------------------------------------- packing

def _stream_head(sender: int, inc: int) -> bytes:
    # wire: a digest section's data starts with u32 sender, u32 inc (the
    # MISSING layout, wire-format.md), whatever the section's kind
    return _STREAM_HEAD.pack(sender, inc)


def pack_sections(kind: int, streams, budget: int) -> List[List[bytes]]:
    """Per-stream interval sets as digest sections of ``kind``, grouped into
    message bodies of at most ``budget`` bytes of sections.

    streams: iterable of (sender, inc, intervals, frm, upto); a section's
    digest says "inside [frm', upto'] the set is exactly these" (a stream too
    fragmented for one section is split over several windows, each truthful).
    Returns a list of section lists, one per message."""
    msgs: List[List[bytes]] = []
    cur: List[bytes] = []
    used = 0
    for sender, inc, ivs, frm, upto in streams:
        if frm > upto:
            continue
        arr = np.asarray(ivs, dtype=np.uint64).reshape(-1, 2)
        head = _stream_head(sender, inc)
        while frm <= upto:
            room = budget - used - SECTION_OVERHEAD
            d = b""
            if room >= 16:
                d, cov, _ = digest_encode(arr, frm, upto, room)
            if not d:
                if not cur:
                    break           # cannot fit even alone: give up on this stream
                msgs.append(cur)
                cur, used = [], 0
                continue
            cur.append(wire.section(kind, head + d))
            used += SECTION_OVERHEAD + len(d)
            if cov >= upto:
                break
            frm = cov + 1
    if cur:
        msgs.append(cur)
    return msgs


# ---------------------------------------------------------------- params

def make_params(cls, protocol: str, params: dict):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(f"protocol_params: unknown {protocol} parameters: {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(names))})")
    return cls(**params)


# ---------------------------------------------------------------- engine

class BaselineEngine(Engine):
    """A baseline protocol on the shared parts.

    Membership is static (``Config.members``: a StaticGroup); ``Params`` are
    the protocol's own parameters, ``STATS`` its counters (added to
    counters()).  A subclass states its control plane in
    ``_protocol_parts``; a logger (LBRM) gets the rpbcast logger role."""

    protocol = "baseline"
    Params = None
    STATS = ()
    # The driver contract: receive_datagram is node.rx and then
    # on_data_plane, as in the rpbcast engine, and nothing acts on a datagram
    # that neither queued control nor flagged a gap.  A subclass that looks
    # into data datagrams says otherwise.
    driver_needs = DriverNeeds(data_plane_rx=True, every_rx=False)

    def __init__(self, config: Config, now: int, rng=None, log=None, mac_counter0=None, **params):
        self.params = make_params(self.Params, self.protocol, params)
        super().__init__(config, now, rng, log, mac_counter0=mac_counter0)

    def _check_config(self, cfg):
        if cfg.join:
            raise ConfigError(f"{self.protocol}: static membership only (join must be False)")

    def _compose(self, now, log):
        self.stats.update((k, 0) for k in self.STATS)
        self.group = StaticGroup(self)
        # The baselines were first built on the rpbcast engine, whose first
        # gossip round and first ping took the engine's first two random
        # draws; they still take them, so a seeded run reproduces its
        # earlier results.
        self.rng.randrange(max(ns(self.cfg.gossip_interval), 1))
        self.rng.randrange(max(ns(self.cfg.ping_interval), 1))
        parts = self._protocol_parts(now)
        extensions = []
        if self.is_logger:
            self._logger = LoggerRole(log)
            extensions.append(self._logger)
        return parts, extensions

    def _protocol_parts(self, now):
        """This protocol's control plane: its parts, in the order their
        timers run."""
        raise NotImplementedError


class ProtocolPart:
    """Helpers for a baseline's own part: the engine's data plane, member
    table and counters, interval queries and section packing."""

    def __init__(self, engine):
        self.node = engine.node
        self.members = engine.members
        self.rng = engine.rng
        self.cfg = engine.cfg
        self.params = engine.params
        self.stats = engine.stats
        self.events = engine.events
        self.emit = engine.emit
        self.id = engine.id
        self.inc = engine.inc
        self.is_logger = engine.is_logger
        self._loggers_v = None
        self._loggers_c = []

    def bump(self, name, k=1):
        self.stats[name] = self.stats.get(name, 0) + k

    def body_budget(self, fixed=0) -> int:
        return self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - fixed - BODY_SLACK

    def missing(self, slot, phase, frm=0, upto=MAX_SEQ) -> List[Ivl]:
        return [tuple(r) for r in self.node.missing(slot, phase, frm, upto, MISSING_CAP).tolist()]

    def send_sections(self, dest, type_, kind, streams, fixed_head=b"", max_msgs=None, flags=0, seq=0):
        """Emit ``type_`` messages whose bodies are fixed_head + sections.
        Returns (messages, bytes)."""
        budget = self.body_budget(len(fixed_head))
        msgs = pack_sections(kind, streams, budget)
        if max_msgs is not None:
            msgs = msgs[:max_msgs]
        nbytes = 0
        for secs in msgs:
            body = fixed_head + b"".join(secs)
            self.emit(dest, type_, body, flags, seq=seq)
            nbytes += len(body)
        return len(msgs), nbytes

    def loggers(self):
        """members.loggers(), cached until the member table changes (it is
        O(members) and get_timer runs after every event)."""
        v = self.members.version
        if self._loggers_v != v:
            self._loggers_v = v
            self._loggers_c = self.members.loggers()
        return self._loggers_c

    def stream_addr(self, slot, pid) -> Optional[int]:
        m = self.members.get(pid)
        a = m.addr if m is not None else None
        if a:
            return a
        a = self.node.peer_info(slot)["addr"]
        return a or None


class Candidates:
    """Gossip / ping candidates and their cumulative selection weights,
    recomputed when the member table changes and at most once per second
    otherwise (member_timeout filtering, new RTT estimates):
    rpbcast.protocol.selection.choose costs O(members) per call."""

    def __init__(self, group, selection, rng):
        self.group = group
        self.members = group.members
        self.selection = selection
        self.rng = rng
        self._key = None
        self._cand = []
        self._cum = None

    def get(self, now):
        key = (self.members.version, now // NS)
        if self._key != key:
            c = self.group.targets(now)
            rtts = [m.rtt for m in c]
            cum = None
            if c and self.selection != "uniform" and any(r is not None for r in rtts):
                cum = list(itertools.accumulate(weights(rtts, self.selection)))
            self._key, self._cand, self._cum = key, c, cum
        return self._cand, self._cum

    def members_at(self, now):
        return self.get(now)[0]

    def pick(self, now):
        """One member drawn with the selection distribution (as
        rpbcast.protocol.selection.choose, from cached weights)."""
        c, cum = self.get(now)
        if not c:
            return None
        if cum is None:
            return c[self.rng.randrange(len(c))]
        x = self.rng.random() * cum[-1]
        return c[min(bisect.bisect_right(cum, x), len(c) - 1)]
