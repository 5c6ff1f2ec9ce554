"""Extensions: protocol features that ride on the engine's gossip and timers
without living in the engine (the logger role, FIFO-SRB purge signalling,
GSGC stability, ...).

An extension overrides the hooks it needs; the engine calls them, always
from the control plane (under the node lock when on real sockets), in the
order the extensions were added (the logger role first).  An extension sees
the engine only through its ``Context`` (``self.ctx``, set by ``attach``):
identity, time, the data plane, the member table, the configuration, and
the few things it may do -- emit a message, publish into its stream, gossip,
send a GAPNOTE, post an application event, trace.
"""
from __future__ import annotations

from typing import List, Optional

NS = 1_000_000_000


class Extension:
    ctx: "Context" = None

    # Declarations the engine reads once, when the extension is added.
    # True when after_rx must run after every received batch, even one that
    # queued no control message and flagged no gap (Engine.driver_needs).
    needs_every_rx = False
    # True: every gossip this member sends carries its receive frontiers
    # (LASTSEEN), not only those to loggers.
    gossip_frontiers = False
    # True: repairs of other members' streams come from this member's log,
    # and ids it no longer holds are answered by on_request (never by a
    # GcNOTE): a logger (§3.2).
    serves_from_log = False
    # True: this member is where the logger phase ends (a logger): the
    # engine runs logger_phase() instead of asking a logger, and ids handed
    # to the logger phase wait for it (§4.3).
    ends_logger_phase = False

    def attach(self, ctx: "Context"):
        """Called once by Engine.add_extension."""
        self.ctx = ctx

    def get_timer(self) -> Optional[int]:
        """Next time (ns) on_timer must run, or None."""
        return None

    def on_timer(self, now: int):
        pass

    def on_round(self, now: int):
        """Once per gossip round, before the round's gossip is built."""

    def gossip_sections(self, target, budget: int, now: int) -> List[bytes]:
        """Extra sections for a gossip to `target` (a Member), within budget bytes."""
        return []

    def on_section(self, source: int, kind: int, data: bytes, now: int):
        """A gossip section of a kind the engine does not handle."""

    def on_message(self, msg, now: int) -> bool:
        """A control message of a type the engine does not handle (msg is the
        tuple from Node.take_control()).  Return True if handled."""
        return False

    def on_lastseen(self, source: int, source_inc: int, entries, now: int):
        """Receive frontiers a member (incarnation source_inc) reported:
        [(sender, inc, frontier)], frontier = every seq below it was
        received by `source`."""

    def on_request(self, sender: int, inc: int, intervals, src: int, now: int):
        """A member (address src) asked for these ids of stream (sender, inc);
        the data plane has served what it holds."""

    def frontier_caps(self) -> Optional[dict]:
        """Caps on the receive frontiers this member reports: {slot:
        frontier}, a slot not in it reporting 0; None for no cap."""
        return None

    def logger_phase(self, now: int):
        """This member's logger phase is due (only with ends_logger_phase)."""

    def after_rx(self, now: int):
        """After a batch of datagrams was processed."""

    def on_member(self, node_id: int, status: str, now: int):
        """A membership change ('joined', 'left', 'failed', ...)."""

    def on_slots_retired(self, slots, now: int):
        """The data plane retired the streams in these slots (a node id's
        quota, or max_streams, was full: csrc/node.h).  Forget whatever is
        kept by slot: from now on a slot may name another stream.  A stream
        that comes back gets a new slot (find it again by (id, inc))."""


# Hooks called for every extension that overrides them.
_LISTED = ("on_round", "gossip_sections", "on_section", "on_message", "on_lastseen", "on_request",
           "frontier_caps", "after_rx", "on_member", "on_slots_retired")


class Hooks:
    """An engine's extensions by hook: for each hook of _LISTED, the bound
    methods of the extensions that override it, in the order they were
    added.  The engine's parts call these lists, so a hook nobody uses
    costs nothing on the hot paths; the lists are updated in place, so a
    part may keep a reference to one."""

    def __init__(self):
        for name in _LISTED:
            setattr(self, name, [])
        self.timed: List[Extension] = []       # extensions with timers
        self.logger_phase = None               # the logger phase of the extension that ends it
        self.serves_from_log = False
        self.gossip_frontiers = False

    def add(self, ext: Extension):
        cls = type(ext)
        for name in _LISTED:
            if getattr(cls, name) is not getattr(Extension, name):
                getattr(self, name).append(getattr(ext, name))
        if cls.get_timer is not Extension.get_timer:
            self.timed.append(ext)
        if ext.ends_logger_phase:
            self.logger_phase = ext.logger_phase
        self.serves_from_log |= bool(ext.serves_from_log)
        self.gossip_frontiers |= bool(ext.gossip_frontiers)


class Context:
    """What an extension may use of its engine.

    Fixed for the engine's life: ``id``, ``inc``, ``node`` (the C data
    plane, rpbcast.core.node.Node), ``members`` (the MemberTable), ``rng``
    (the engine's random source), ``gossip_interval_ns``.  Current values:
    ``now`` (the time of the event being handled), ``cfg`` (the engine's
    Config), ``status`` (this member's membership status)."""

    def __init__(self, engine):
        self._engine = engine
        self.id = engine.id
        self.inc = engine.inc
        self.node = engine.node
        self.members = engine.members
        self.rng = engine.rng
        self.gossip_interval_ns = int(round(engine.cfg.gossip_interval * NS))

    @property
    def now(self) -> int:
        return self._engine._now

    @property
    def cfg(self):
        return self._engine.cfg

    @property
    def status(self) -> int:
        return self._engine.status

    # ------------------------------------------------------------------ acting
    def emit(self, dest, type_, body=b"", flags=0, sender=None, inc=None, aux=0, seq=0):
        """Queue one control message to dest (an address, or DEST_MCAST);
        sender and inc default to ours."""
        self._engine.emit(dest, type_, body, flags, sender, inc, aux, seq)

    def publish(self, payload, label: Optional[int] = None, now: Optional[int] = None) -> int:
        """Publish into this member's own reliable stream, as the application
        does (an extension's records travel, and are repaired, like data);
        returns the seq.  Raises BlockingIOError on back-pressure."""
        e = self._engine
        return e.publish(payload, label, e._now if now is None else now)

    def send_gossip(self, member, sections, now: int):
        """One GOSSIP message to member carrying our heartbeat and membership
        signatures and exactly these sections (traced as gossip out).
        Raises ValueError if it does not fit the MTU."""
        self._engine.repair.send_gossip(member, sections, now)

    def report_frontiers(self, member, now: int):
        """A gossip to member carrying our receive frontiers (LASTSEEN) and
        what the extensions add, asking for nothing."""
        self._engine.repair.report_frontiers(member, now)

    def send_gapnote(self, dest, sender: int, inc: int, intervals, lost: bool = True):
        """Tell dest that these ids of (sender, inc) will never be served:
        lost for good (lost) or collected after every member had them."""
        self._engine.serving.send_gapnote(dest, sender, inc, intervals, lost)

    def post_event(self, *event):
        """An application event (Engine.next_event); ("member", id, what)
        is also passed to every extension's on_member."""
        self._engine.post_event(*event)

    def trace(self, now, event, sender=0, inc=0, seq=0, size=0, peer=0, aux=0):
        """Record a trace event (rpbcast.protocol.trace_events)."""
        self.node.trace_event(now, event, sender, inc, seq, size, peer, aux)

    def set_gc_limit(self, rounds: int):
        """Keep messages in the gossip buffer for this many rounds (GSGC
        extends the age bound while it collects by stability)."""
        self._engine.cfg = self._engine.cfg.replace(gc_limit=int(rounds))
