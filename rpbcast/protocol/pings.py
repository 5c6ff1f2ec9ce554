"""RTT probes (thesis §4.2, §7.5): the biased gossip-target selection weighs
members by round-trip time, measured here.

``Pings``: one PING per ping_interval to a random candidate; the PONG
echoes its nonce (seq) and the RTT goes into the member's EWMA
(Member.rtt).  ``PingReplies`` only answers PINGs (and takes PONGs).
Shared by rpbcast and the baselines (pbcast probes as rpbcast does; LBRM
and SRM only answer).
"""
from __future__ import annotations

import struct

from rpbcast.core import wire

T = wire.MsgType
NS = 1_000_000_000
_PING_BODY = struct.Struct("<q")


def _ping_body(now: int) -> bytes:
    # wire: a PING's body is its send time (i64 ns); the PONG echoes it
    return _PING_BODY.pack(now)


class PingReplies:
    """Answers PINGs; PONGs to our own PINGs update the member's RTT."""

    def __init__(self, engine):
        self.members = engine.members
        self.emit = engine.emit
        self.sent = {}              # nonce -> (member id, time sent)
        self.rtt_hint = None        # the latest RTT estimate to anyone (s)

    def handlers(self):
        return {T.PING: self.on_ping, T.PONG: self.on_pong}

    def on_ping(self, msg, now):
        self.emit(msg[9], T.PONG, msg[6], seq=msg[5])

    def on_pong(self, msg, now):
        p = self.sent.pop(msg[5], None)
        if p is None:
            return
        node_id, sent = p
        m = self.members.get(node_id)
        if m is not None:
            rtt = (now - sent) / NS
            m.rtt = rtt if m.rtt is None else 0.8 * m.rtt + 0.2 * rtt
            self.rtt_hint = m.rtt


class Pings(PingReplies):
    """RTT probes, and the answers."""

    def __init__(self, engine, now, candidates):
        """candidates(now) -> the members to probe."""
        super().__init__(engine)
        self.rng = engine.rng
        self.candidates = candidates
        self._ping_ns = int(round(engine.cfg.ping_interval * NS))
        self.next_ping = now + self.rng.randrange(max(self._ping_ns, 1))

    def get_timer(self):
        return self.next_ping

    def on_timer(self, now):
        if now >= self.next_ping:
            self.ping(now)
            self.next_ping = now + self._ping_ns

    def ping(self, now):
        c = self.candidates(now)
        if not c:
            return
        m = c[self.rng.randrange(len(c))]
        nonce = self.rng.getrandbits(48)
        self.sent[nonce] = (m.node_id, now)
        if len(self.sent) > 64:
            self.sent.pop(next(iter(self.sent)))
        self.emit(m.addr, T.PING, _ping_body(now), seq=nonce)
