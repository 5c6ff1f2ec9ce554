"""What the baseline engines share: an Engine subclass with the rpbcast
control plane switched off, interval arithmetic on (lo, hi) lists, and a
packer that turns per-stream interval sets into digest sections within the
MTU.

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
from rpbcast.protocol.membership import MEMBER
from rpbcast.protocol.selection import weights

Ivl = Tuple[int, int]
T = wire.MsgType

MAX_SEQ = (1 << 62) - 1
MISSING_CAP = 4096        # intervals fetched per node.missing call
SECTION_OVERHEAD = 12     # section header (4) + sender, inc (8)
BODY_SLACK = 16

# trace event codes (csrc/trace.h, docs/traces.md)
EV_GOSSIP_OUT, EV_GOSSIP_IN, EV_RTX_REQ, EV_HEARTBEAT, EV_LOST = 6, 7, 8, 11, 14


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
        head = struct.pack("<II", sender, inc)
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
        raise ConfigError(f"unknown {protocol} parameters: {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(names))})")
    return cls(**params)


# ---------------------------------------------------------------- engine

class BaselineEngine(Engine):
    """An rpbcast Engine with its control plane replaced.

    Kept from the Engine: construction of the C data plane, the static member
    table, publish / recv / counters / traffic, the control-message dispatch
    (``_control`` through the class's ``_handlers``), and the logger role
    where a baseline has loggers.  Everything timer-driven (gossip rounds,
    immediate NACKs, heartbeat signatures, pings, joins, reports) is
    replaced by the subclass's ``get_timer`` / ``handle_timer`` /
    ``_after_rx``."""

    protocol = "baseline"
    Params = None
    STATS = ()                # protocol counters, added to counters()
    # The driver contract (Engine.driver_needs): receive_datagram is node.rx
    # and then on_data_plane, as in the rpbcast engine, and _after_rx does
    # nothing for a datagram that neither queued control nor flagged a gap.
    # A subclass that looks into data datagrams says otherwise.
    DATA_PLANE_RX = True
    _handlers = {}

    def __init__(self, config: Config, now: int, rng=None, log=None, **params):
        if config.join:
            raise ConfigError(f"{self.protocol}: static membership only (join must be False)")
        super().__init__(config, now, rng, log)
        self.params = make_params(self.Params, self.protocol, params)
        self.status = MEMBER
        self.stats = {k: 0 for k in self.STATS}
        self._now = now

    @property
    def driver_needs(self) -> DriverNeeds:
        return DriverNeeds(data_plane_rx=self.DATA_PLANE_RX, every_rx=False)

    def _bump(self, name, k=1):
        self.stats[name] = self.stats.get(name, 0) + k

    # Nothing of the rpbcast control plane runs unless a subclass asks.
    def _after_rx(self, now):
        self._now = now
        self.node.clear_nack()

    def get_timer(self) -> int:
        return self._now + 3600 * NS

    def handle_timer(self, now: int):
        self._now = now

    def counters(self):
        c = super().counters()
        c.update(self.stats)
        return c

    # ------------------------------------------------------------------ helpers
    def _body_budget(self, fixed=0) -> int:
        return self.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - fixed - BODY_SLACK

    def _missing(self, slot, phase, frm=0, upto=MAX_SEQ) -> List[Ivl]:
        return [tuple(r) for r in self.node.missing(slot, phase, frm, upto, MISSING_CAP).tolist()]

    def _send_sections(self, dest, type_, kind, streams, fixed_head=b"", max_msgs=None, flags=0,
                       seq=0):
        """Emit ``type_`` messages whose bodies are fixed_head + sections.
        Returns (messages, bytes)."""
        budget = self._body_budget(len(fixed_head))
        msgs = pack_sections(kind, streams, budget)
        if max_msgs is not None:
            msgs = msgs[:max_msgs]
        nbytes = 0
        for secs in msgs:
            body = fixed_head + b"".join(secs)
            self._emit(dest, type_, body, flags=flags, seq=seq)
            nbytes += len(body)
        return len(msgs), nbytes

    def _candidates(self, now):
        """Gossip / ping candidates and their cumulative selection weights,
        recomputed when the member table changes and at most once per
        second otherwise (member_timeout filtering, new RTT estimates):
        Engine._pick_target costs O(members) per call."""
        key = (self.members.version, now // NS)
        if getattr(self, "_cand_key", None) != key:
            c = self._targets(now)
            rtts = [m.rtt for m in c]
            cum = None
            if c and self.cfg.selection != "uniform" and any(r is not None for r in rtts):
                cum = list(itertools.accumulate(weights(rtts, self.cfg.selection)))
            self._cand_key, self._cand, self._cand_cum = key, c, cum
        return self._cand, self._cand_cum

    def _pick_target(self, now):
        """One member drawn with the selection distribution (as
        rpbcast.protocol.selection.choose, from cached weights)."""
        c, cum = self._candidates(now)
        if not c:
            return None
        if cum is None:
            return c[self.rng.randrange(len(c))]
        x = self.rng.random() * cum[-1]
        return c[min(bisect.bisect_right(cum, x), len(c) - 1)]

    def _ping(self, now):
        """An RTT probe to a random member (feeds the selection weights)."""
        c, _ = self._candidates(now)
        if not c:
            return
        m = c[self.rng.randrange(len(c))]
        nonce = self.rng.getrandbits(48)
        self.pings[nonce] = (m.node_id, now)
        if len(self.pings) > 64:
            self.pings.pop(next(iter(self.pings)))
        self._emit(m.addr, T.PING, struct.pack("<q", now), seq=nonce)

    def _loggers(self):
        """members.loggers(), cached until the member table changes (it is
        O(members) and get_timer runs after every event)."""
        v = self.members.version
        if getattr(self, "_loggers_v", None) != v:
            self._loggers_v = v
            self._loggers_c = self.members.loggers()
        return self._loggers_c

    def _stream_addr(self, slot, pid) -> Optional[int]:
        a = self._addr_of(pid)
        if a:
            return a
        a = self.node.peer_info(slot)["addr"]
        return a or None
