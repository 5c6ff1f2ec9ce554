"""LBRM (Log-Based Receiver-reliable Multicast, Holbrook, Singhal and
Cheriton 1995, thesis ref. [18]; thesis §1.3 and Table 7.1) on the rpbcast
data plane.

* Senders multicast DATA (the shared data plane) and keep each message until
  the logger acknowledges it (LOGACK, the rpbcast logger role); what is not
  acknowledged within ``Config.logger_retx_timeout`` is re-sent to the
  logger (as the Engine does).
* *Variable heartbeat*: ``hb_min`` (0.25 s) after the last DATA a sender
  multicasts a HEARTBEAT with its last seq; while it stays idle the interval
  doubles (``hb_backoff`` = 2) up to ``hb_max`` (32 s); new data resets it.
* One logger (``Config.role = "logger"``) logs everything on stable storage
  (``rpbcast.protocol.logger.LoggerRole`` + ``LogStore``), acknowledges senders, and
  serves every repair (REPAIR with FROM_LOGGER, unicast).  The logger fills
  its own gaps from the original sender.
* Receivers detect gaps from DATA and HEARTBEAT sequence numbers and ask the
  logger (RTX, unicast) at once, then every ``rtx_interval`` (0.25 s,
  Table 7.1) for everything still missing, until repaired.  No gossip, no
  peer repairs.

Wire: DATA, HEARTBEAT (without IDLE), RTX (MISSING sections), REPAIR,
LOGACK, GAPNOTE (the logger's answer for ids it can never supply).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rpbcast.core import wire
from rpbcast.config import ConfigError
from rpbcast.core.node import PHASE_ALL, PHASE_NEW
from rpbcast.protocol.pings import PingReplies
from rpbcast.protocol.send_buffer import HoldForLoggers, LoggerAcks
from rpbcast.protocol.serving import Serving
from rpbcast.protocol.trace_events import EV_HEARTBEAT, EV_RTX_REQ

from rpbcast.baselines.common import T, BaselineEngine, ProtocolPart, iv_count, ns

NEVER = 1 << 62


@dataclass
class LbrmParams:
    hb_min: float = 0.25              # first heartbeat this long after the last data (s)
    hb_max: float = 32.0              # heartbeat interval cap (s)
    hb_backoff: float = 2.0           # interval factor per idle heartbeat
    rtx_interval: Optional[float] = None   # re-request period (s); None: Config.logger_rtx_interval
    immediate_request: Optional[bool] = None   # ask as soon as a gap shows; None: Config.immediate_nack
    cache_interval: float = 0.25      # age unit of the receive cache (it holds ~2 units)


class LbrmEngine(BaselineEngine):
    """LBRM: senders hold until the logger acknowledges (and resend to it),
    variable heartbeats and requests to the logger, a small receive cache;
    the logger (role "logger") is the rpbcast logger role."""

    protocol = "lbrm"
    Params = LbrmParams
    STATS = ("heartbeats_sent", "rtx_sent", "rtx_ids")

    def _protocol_parts(self, now):
        p = self.params
        if p.hb_min <= 0 or p.hb_max < p.hb_min or p.hb_backoff < 1:
            raise ConfigError("lbrm needs 0 < hb_min <= hb_max and hb_backoff >= 1")
        self.logger_acks = LoggerAcks(self, now)
        self.send_buffer = HoldForLoggers(self, self.logger_acks)
        self.send_buffer.update_hold()
        self._before_publish = self.logger_acks.on_publish
        self.serving = Serving(self)                 # logger: serve from the log; sender: serve own
        self.pings = PingReplies(self)
        self.lbrm = Lbrm(self, now)
        self.cache = ReceiveCache(self, now)
        return [self.lbrm, self.logger_acks, self.cache, self.serving, self.pings]


class Lbrm(ProtocolPart):
    """Variable heartbeats, and requests to the logger (the logger: to the source)."""

    def __init__(self, engine, now):
        super().__init__(engine)
        p = self.params
        loggers = self.loggers()
        if not self.is_logger and len(loggers) != 1:
            raise ConfigError(f"lbrm needs exactly one logger in the member list, found {len(loggers)}")
        self._hb_min, self._hb_max = ns(p.hb_min), ns(p.hb_max)
        self._rtx_ns = ns(p.rtx_interval if p.rtx_interval is not None else self.cfg.logger_rtx_interval)
        self._immediate = self.cfg.immediate_nack if p.immediate_request is None else p.immediate_request
        self._min_gap_ns = ns(self.cfg.nack_min_interval)
        self._hb_seq = 0                 # next_seq the heartbeat schedule was set for
        self._hb_next: Optional[int] = None
        self._hb_ival = self._hb_min
        self.next_rtx: Optional[int] = None      # periodic re-request, while anything is missing
        self.next_nack: Optional[int] = None     # deferred immediate request
        self.last_nack = -(1 << 62)
        self.heartbeat_log = []          # (time, seq) of heartbeats sent, for inspection

    def handlers(self):
        return {T.GCNOTE: self.on_gcnote}

    def on_gcnote(self, msg, now):
        # A sender no longer holds ids the logger asked for: it only lets go
        # of acknowledged ones, so this is a stale answer.  Nothing to do.
        pass

    # ------------------------------------------------------------------ timers
    def _hb_sync(self):
        """New data since the schedule was set: the next heartbeat is hb_min
        after the last DATA, and the back-off starts over."""
        node = self.node
        if node.next_seq != self._hb_seq:
            self._hb_seq = node.next_seq
            self._hb_ival = self._hb_min
            self._hb_next = node.last_publish + self._hb_min

    def get_timer(self):
        self._hb_sync()
        t = [x for x in (self._hb_next, self.next_rtx, self.next_nack) if x is not None]
        return min(t) if t else NEVER

    def on_timer(self, now):
        node = self.node
        self._hb_sync()
        if self._hb_next is not None and now >= self._hb_next:
            node.send_heartbeat(False)
            self.bump("heartbeats_sent")
            self.heartbeat_log.append((now, node.next_seq - 1))
            node.trace_event(now, EV_HEARTBEAT, self.id, self.inc, node.next_seq - 1, 0, 0, 0)
            self._hb_ival = min(int(self._hb_ival * self.params.hb_backoff), self._hb_max)
            self._hb_next = now + self._hb_ival
        if self.next_nack is not None and now >= self.next_nack:
            self.next_nack = None
            self._request(now, PHASE_NEW)
        if self.next_rtx is not None and now >= self.next_rtx:
            self._rerequest(now)

    # ------------------------------------------------------------------ requests
    def after_rx(self, now):
        node = self.node
        if node.nack_pending:
            node.clear_nack()
            if self._immediate:
                due = self.last_nack + self._min_gap_ns
                if now >= due:
                    self._request(now, PHASE_NEW)
                elif self.next_nack is None:
                    self.next_nack = due
            if self.next_rtx is None:
                self.next_rtx = now + self._rtx_ns

    def _rerequest(self, now):
        node = self.node
        if not node.total_missing():
            self.next_rtx = None
            return
        node.clear_inflight()
        self._request(now, PHASE_ALL)
        self.next_rtx = now + self._rtx_ns

    def _request(self, now, phase):
        """Ask for missing ids (phase PHASE_NEW: not asked yet), marking them
        asked.  Receivers ask the logger; the logger asks the original
        sender."""
        node = self.node
        self.last_nack = now
        by_dest = {}
        for slot, pid, pinc in node.peer_ids():
            if not node.peer_missing_count(slot, PHASE_ALL):
                continue
            miss = self.missing(slot, phase)
            if not miss:
                continue
            if self.is_logger:
                dest = self.stream_addr(slot, pid)
                if dest is None:
                    continue
            else:
                dest = self.loggers()[0].addr
            by_dest.setdefault(dest, []).append((pid, pinc, miss, miss[0][0], miss[-1][1]))
            for lo, hi in miss:
                node.mark_inflight(slot, lo, hi)
        for dest, streams in by_dest.items():
            nmsg, nbytes = self.send_sections(dest, T.RTX, wire.Section.MISSING, streams)
            k = sum(iv_count(s[2]) for s in streams)
            self.bump("rtx_sent", nmsg)
            self.bump("rtx_ids", k)
            node.trace_event(now, EV_RTX_REQ, 0, 0, 0, k, dest, len(streams))


class ReceiveCache(ProtocolPart):
    """Receivers repair from the logger only: the store needs to hold a
    message only until it is delivered (and, at a sender, acknowledged).
    Its round is a timer of its own: running it only when some other timer
    fired made the store's contents depend on when the driver called in."""

    def __init__(self, engine, now):
        super().__init__(engine)
        self._cache_ns = ns(self.params.cache_interval)
        self.next_round = now + self._cache_ns

    def get_timer(self):
        return self.next_round

    def on_timer(self, now):
        if now >= self.next_round:
            self.node.round(1, 0)
            self.next_round = now + self._cache_ns

    after_rx = on_timer


# For rpbcast.sim (rpbcast/sim/protocols.py): engine factory and whether the
# protocol has a logger.  Bind parameters with rpbcast.baselines.factory.
SIM_PROTOCOL = {"factory": lambda config, now, rng, log=None: LbrmEngine(config, now, rng, log),
                "uses_logger": True}
