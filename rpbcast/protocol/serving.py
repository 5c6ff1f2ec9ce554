"""Serving requests for ids (thesis §3.3, §4.3, §6.2).

A member asks for missing ids with MISSING sections: in a GOSSIP (a pull
in the gossip phase, from a peer) or in an RTX (the logger phase: to a
logger, or to the original sender).  The data plane serves what it holds
(REPAIR); for the rest the answer is a note:

* GcNOTE: "I collected these": a peer that no longer holds ids in the
  gossip phase, or a sender asked for own ids it let go, which a logger
  acknowledged (§4.3);
* GAPNOTE: from a logger, ids it can never supply: collected once every
  member had them, or lost for good (a dead incarnation, §6.2).

The requester's side of a GcNOTE is the repair protocol's (it moves ids to
the logger phase, rpbcast.protocol.repair); a GAPNOTE's is here.  Shared by
rpbcast and the LBRM baseline.
"""
from __future__ import annotations

import numpy as np

from rpbcast.core import wire
from rpbcast.core.digest import DigestError, decode as digest_decode, encode as digest_encode

T = wire.MsgType
MISSING = wire.Section.MISSING


def missing_intervals(body):
    """[(sender, inc, intervals)] of a MISSING-sections body (sections whose
    digest does not decode are skipped)."""
    out = []
    for kind, _, data in wire.sections(body):
        if kind != MISSING:
            continue
        s, i, d = wire.read_missing(data)
        try:
            iv, _, _, _ = digest_decode(d)
        except DigestError:
            continue
        out.append((s, i, iv))
    return out


class Serving:
    """Answers to requests: serve_missing, the notes, and GAPNOTEs received."""

    def __init__(self, engine):
        self.node = engine.node
        self.id = engine.id
        self.inc = engine.inc
        self.events = engine.events
        self.hooks = engine.hooks
        self.emit = engine.emit
        self._note_budget = engine.cfg.mtu - wire.DG_HDR - wire.MSG_HDR - 12

    def handlers(self):
        return {T.RTX: self.on_rtx, T.GAPNOTE: self.on_gapnote}

    def serve_missing(self, sections, src, now, logger_phase):
        """Serve the MISSING sections of a request from address src:
        ``sections`` are a GOSSIP's or RTX's [(kind, flags, data)] (other
        kinds are skipped).

        Gossip phase (GOSSIP): every stream is served from what we hold; ids
        we collected are returned as [(sender, inc, intervals)] for GcNOTEs
        the caller sends once it has handled the rest of the message.
        Logger phase (RTX): own ids no longer held were acknowledged by a
        logger (the send buffer keeps them until then), which a GcNOTE says
        at once; other streams come from the log where we keep one.

        A member with a log (hooks.serves_from_log) serves from it and never
        answers with GcNOTE; the extensions' on_request then answer for what
        could not be served."""
        node = self.node
        from_log = self.hooks.serves_from_log
        requests = self.hooks.on_request
        gc_secs = []
        for kind, _, data in sections:
            if kind != MISSING:
                continue
            s, i, d = wire.read_missing(data)
            try:
                iv, _, _, _ = digest_decode(d)
            except DigestError:
                continue
            if not logger_phase:
                served, gc = node.serve(s, i, iv, src, from_log, now, not from_log)
                if gc:
                    gc_secs.append((s, i, gc))
            elif s == self.id and i == self.inc:
                served, gc = node.serve(s, i, iv, src, False, now, True)
                if gc:
                    self.send_gcnote(src, s, i, gc)
                continue
            else:
                node.serve(s, i, iv, src, from_log, now, False)
            for answer in requests:
                answer(s, i, iv, src, now)
        return gc_secs

    def on_rtx(self, msg, now):
        self.serve_missing(wire.sections(msg[6]), msg[9], now, True)

    # ------------------------------------------------------------------ notes
    def send_gcnote(self, dest, sender, inc, intervals):
        self._send_note(dest, T.GCNOTE, sender, inc, intervals, 0)

    def send_gapnote(self, dest, sender, inc, intervals, lost=True):
        self._send_note(dest, T.GAPNOTE, sender, inc, intervals, wire.F_LOST if lost else 0)

    def _send_note(self, dest, type_, sender, inc, intervals, flags):
        """Intervals of (sender, inc) as digest sections, as many messages as
        they take."""
        iv = np.asarray(intervals, dtype=np.uint64).reshape(-1, 2)
        if not len(iv):
            return
        budget = self._note_budget
        frm = int(iv[0, 0])
        while frm <= int(iv[-1, 1]):
            d, cov, k = digest_encode(iv, frm, int(iv[-1, 1]), budget)
            if not d:
                break
            self.emit(dest, type_, wire.missing_section(sender, inc, d), flags)
            if cov >= int(iv[-1, 1]):
                break
            frm = cov + 1

    def on_gapnote(self, msg, now):
        """A logger says ids will never come: stop waiting for them."""
        node = self.node
        for s, i, iv in missing_intervals(msg[6]):
            slot = node.find_peer(s, i)
            if slot is None:
                continue
            for lo, hi in iv:
                k = node.forget(slot, int(lo), int(hi))
                if k:
                    self.events.append(("lost", s, i, int(lo), int(hi)))
