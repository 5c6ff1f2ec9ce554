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

from rpbcast import netaddr
from rpbcast.core import wire
from rpbcast.core.digest import DigestError, decode as digest_decode, encode as digest_encode
from rpbcast.core.node import SERVE_FROM_LOGGER, SERVE_GCNOTE, SERVE_GCNOTE_AT_ONCE

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
        self.malformed = 0          # requests whose MISSING sections did not parse
        self._bound_replies(engine)

    # ---------------------------------------------------- bounded replies
    def _bound_replies(self, engine):
        """Replies bounded (docs/security.md, Amplification): the outbox
        drops replies beyond cfg.reply_outbox_bytes, and replies to an
        address that has not proven it receives there are capped at
        cfg.amplify_factor x what it sent.  A configured member's address
        is trusted; in a keyed group so is every member table entry (only
        key holders can change it); anyone else proves its address by
        echoing a cookie (csrc/addrcheck.h).  Every requester's repairs
        are paced at cfg.requester_repair_rate."""
        cfg = engine.cfg
        self.node.reply_cap = cfg.reply_outbox_bytes
        # a validated requester, too, gets its own share and no more
        # (csrc/reqlimit.h); a logger's catch-up is paced by catchup_rate
        if cfg.requester_repair_rate:
            self.node.set_requester_limit(cfg.requester_repair_rate, cfg.requester_repair_burst,
                                          cfg.repair_requesters)
        self._members = engine.members
        self._members_version = None
        self._static = {netaddr.addr_of(m.addr) for m in cfg.members}
        if not cfg.amplify_factor:
            return
        self.node.enable_addrcheck(cfg.amplify_factor, cfg.unvalidated_rate)
        self.trust_members()

    def trust_members(self):
        """Tell the data plane which addresses are members' (after the
        member table changed, in a keyed group)."""
        table = self._members
        if table.version == self._members_version:
            return
        self._members_version = table.version
        trusted = set(self._static)
        if self.node.keyed:
            trusted.update(m.addr for m in table.entries() if isinstance(m.addr, int) and m.addr)
        self.node.set_trusted_addrs(trusted)

    def handlers(self):
        return {T.RTX: self.on_rtx, T.GAPNOTE: self.on_gapnote}

    def serve_missing(self, body, src, now, logger_phase):
        """Serve the MISSING sections of a request from address src, in one
        call into the data plane: ``body`` is a GOSSIP's sections (after its
        fixed part) or an RTX body.  Returns the ServedSections (sender, inc,
        intervals asked, ids GcNOTEd ...), [] if the sections' framing is
        malformed (nothing is served then, and nothing raises: a peer's
        message never aborts the control plane).

        Gossip phase (GOSSIP): every stream is served from what we hold; ids
        we collected get a GcNOTE (§4.3), queued after the REPAIRs.  Logger
        phase (RTX): own ids no longer held were acknowledged by a logger
        (the send buffer keeps them until then), which a GcNOTE says at once;
        other streams come from the log where we keep one.  A member with a
        log (hooks.serves_from_log) serves from it and never answers with a
        GcNOTE; the extensions' on_request then answer for what could not be
        served (a logger: GAPNOTE)."""
        self.trust_members()
        from_log = SERVE_FROM_LOGGER if self.hooks.serves_from_log else 0
        if logger_phase:
            how, own = from_log, SERVE_GCNOTE | SERVE_GCNOTE_AT_ONCE
        else:
            how = from_log or SERVE_GCNOTE
            own = how
        try:
            served = self.node.serve_missing(body, src, how, now, own)
        except wire.WireError:
            self.malformed += 1
            return []
        requests = self.hooks.on_request
        if requests:
            me = (self.id, self.inc)
            for sec in served:
                if logger_phase and (sec.sender, sec.inc) == me:
                    continue
                for answer in requests:
                    answer(sec.sender, sec.inc, sec.intervals, src, now)
        return served

    def on_rtx(self, msg, now):
        self.serve_missing(msg[6], msg[9], now, True)

    # ------------------------------------------------------------------ notes
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
