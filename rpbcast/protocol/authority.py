"""Who may say what: a control message is believed only from the node whose
business it is, and only within plausible bounds (issue 14, defence in depth
among key holders; docs/security.md, "Authority").

The engine asks ``Authority.check(msg)`` before it hands a control message to
its part; a message that fails is dropped whole and counted by reason
(``engine.stats["ctl_rejected_<reason>"]``).  A genuine node never sends a
message with a part it has no authority over, so there is nothing to salvage.

What is checked is the datagram's *source* node id (and incarnation).  With a
group key it is bound by the MAC (the IV holds it, csrc/auth.c): a key holder
cannot speak in another's name.  Without a key it is not bound, and these
rules only stop a peer that does not lie about who it is.

The rules (the data plane's own are in csrc/node.c: DATA and HEARTBEAT only
from the stream's own node, reason ``not_own``):

* GAPNOTE (ids lost for good) about stream S: from S's sender or a logger,
  and for ids below what we know of S plus max_gap;
* GCNOTE about S: from anyone (a peer that collected ids answers GcNOTE: ask
  a logger), since from a third party it only changes whom we ask; its
  destructive readings (loss, "all below is with the loggers") are taken only
  from S's sender (rpbcast.protocol.repair).  Bounded like a GAPNOTE;
* LOGACK: from a logger in the member table, for our own stream, and for no
  more than we sent;
* JOIN and LEAVE: in the sender's own name (the entry, the header and the
  datagram's source agree), from the address the member entry names;
* MEMBERS: per entry, in rpbcast.protocol.group (a known member's address or
  incarnation is changed only by the member itself or a logger).
"""
from __future__ import annotations

from typing import Optional

from rpbcast.core import wire
from rpbcast.protocol.membership import addr_port, addr_scope, addr_to_wire, entry_addr
from rpbcast.protocol.serving import missing_intervals

T = wire.MsgType
SEQ_LIMIT = 1 << 62

# reasons (engine.stats["ctl_rejected_" + reason])
NOT_AUTHORITY = "not_authority"   # not the node whose business it is
OUT_OF_BOUNDS = "out_of_bounds"   # ids beyond what the sender could know
NOT_OWN_NAME = "not_own_name"     # JOIN/LEAVE in another node's name or from another address
HANDLER_ERROR = "handler_error"   # a handler raised on it (the engine's dispatch guard)


def addr_matches(entry_addr: int, src: int) -> bool:
    """Does a datagram from src come from the address a member entry names?
    (0: the entry names none; an unspecified IP: any, on the entry's port.)"""
    if not entry_addr or entry_addr == src:
        return True
    ip, port = addr_to_wire(entry_addr)
    return ip == 0 and port == addr_port(src)


class Authority:
    def __init__(self, engine):
        self.e = engine
        self.node = engine.node
        self.members = engine.members
        self.max_gap = engine.cfg.max_gap
        self._checks = {T.GAPNOTE: self._gapnote, T.GCNOTE: self._gcnote, T.LOGACK: self._logack,
                        T.JOIN: self._join, T.LEAVE: self._leave}

    def check(self, msg) -> Optional[str]:
        """None if msg may be acted on, else the reason it may not."""
        c = self._checks.get(msg[0])
        return c(msg) if c is not None else None

    def is_logger(self, node_id) -> bool:
        m = self.members.get(node_id)
        return m is not None and m.is_logger

    # ------------------------------------------------------------------ notes
    def _beyond(self, s, i, iv) -> bool:
        """Are ids in iv beyond what anyone could know of (s, i) by now: at or
        above what we know plus max_gap (a sender's next message can be at
        most max_gap ahead of what we hold)?"""
        if not len(iv):
            return False
        hi = int(iv[-1][1])
        if hi >= SEQ_LIMIT:
            return True
        slot = self.node.find_peer(s, i)
        known = self.node.peer_next(slot) if slot is not None else 0
        return hi >= known + self.max_gap

    def _gapnote(self, msg):
        source = msg[7]
        logger = self.is_logger(source)
        for s, i, iv in missing_intervals(msg[6]):
            if self._beyond(s, i, iv):
                return OUT_OF_BOUNDS
            if not logger and s != source:
                return NOT_AUTHORITY
        return None

    def _gcnote(self, msg):
        for s, i, iv in missing_intervals(msg[6]):
            if self._beyond(s, i, iv):
                return OUT_OF_BOUNDS
        return None

    # ------------------------------------------------------------------ ACKs
    def _logack(self, msg):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if not self.is_logger(source):
            return NOT_AUTHORITY
        if sender == self.e.id and inc == self.e.inc and seq > self.node.next_seq:
            return OUT_OF_BOUNDS          # acknowledges what we never sent
        return None

    # ------------------------------------------------------------------ membership
    def _join(self, msg):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if sender != source or inc != source_inc:
            return NOT_OWN_NAME
        for e in wire.read_members(body):
            if e.id != sender or not addr_matches(entry_addr(e, addr_scope(src)), src):
                return NOT_OWN_NAME
        return None

    def _leave(self, msg):
        type_, flags, sender, inc, aux, seq, body, source, source_inc, src = msg
        if sender != source or inc != source_inc:
            return NOT_OWN_NAME
        m = self.members.get(sender)
        if m is not None and not addr_matches(m.addr, src):
            return NOT_OWN_NAME
        return None
