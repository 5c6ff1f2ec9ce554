"""The rpbcast protocol engine: sans-IO, driven by events.

    engine = Engine(config, now)
    engine.receive_datagram(data, addr, now)     # a datagram arrived
    engine.handle_timer(now)                     # engine.get_timer() is due
    engine.publish(payload, label=None, now=now) # the application sends
    for dest, data in engine.datagrams_to_send(): ...   # DEST_MCAST or a unicast address
    engine.recv() / engine.recv_batch(...)       # deliveries

No sockets, clocks or threads.  Times are integer nanoseconds; addresses are
opaque integers chosen by the driver.  The per-message work (gap detection,
storing, serving repairs) runs in the C data plane (``rpbcast.core.node.Node``);
the control plane is a composition of parts, each one concept:

    group        the member table and the membership protocol (§5.3)
    repair       gossip rounds, pulls and their retries, the logger phase,
                 GcNOTE hand-off (§4, §4.3)
    pings        RTT probes for the biased selection (§4.2)
    serving      answering requests, GcNOTE / GAPNOTE (§3.3, §6.2)
    heartbeats   the idle heartbeat and heartbeat lists (§5.1)
    send buffer  logger ACKs and the release strategy (§3.1, §5.2)
    extensions   the logger role (§3.2, §5.2), FIFO-SRB, GSGC, ... through
                 a public context (rpbcast.protocol.extension)

The Engine implements the driver contract, dispatches control messages to
its parts and aggregates their timers.  ``_compose`` chooses the parts:
rpbcast's here; each baseline (rpbcast.baselines) composes its own.
A part may have ``handlers()`` ({message type: handler(msg, now)}),
``get_timer()`` (an int, NEVER when idle) with ``on_timer(now)``, and
``after_rx(now)``; timers and after_rx run in the order of the parts.  A
composition may also state its parts' earliest deadline as one function
(``_parts_timer``): get_timer runs after every event.
"""
from __future__ import annotations

import collections
import copy
import random

import numpy as np
from typing import List, NamedTuple, Optional, Tuple

from rpbcast.config import Config, ConfigError, read_key_file, read_signing_keys
from rpbcast.core import wire
from rpbcast.core.node import NOLABEL, Node
from rpbcast.protocol import send_buffer
from rpbcast.protocol.authority import HANDLER_ERROR, Authority
from rpbcast.protocol.extension import Context, Hooks
from rpbcast.protocol.fifo_srb import FifoSrb
from rpbcast.protocol.group import Group
from rpbcast.protocol.heartbeats import Heartbeats
from rpbcast.protocol.logger import LoggerRole
from rpbcast.protocol.membership import MemberTable
from rpbcast.protocol.pings import Pings
from rpbcast.protocol.repair import Repair
from rpbcast.protocol.serving import Serving

NS = 1_000_000_000
NEVER = 1 << 62       # a part with nothing scheduled


class DriverNeeds(NamedTuple):
    """The driver contract's declared capabilities.

    data_plane_rx: a driver may receive straight into the C data plane
        (engine.node) and call engine.on_data_plane when it reports work --
        exactly equivalent to receive_datagram.  False: every datagram must
        go through receive_datagram(s).
    every_rx: on_data_plane must also run after every received batch (some
        part acts on data alone, e.g. a logger that syncs before it
        acknowledges), not only on control messages, gaps and timers."""
    data_plane_rx: bool
    every_rx: bool


class Delivery(NamedTuple):
    sender: int
    inc: int
    seq: int
    label: Optional[int]
    payload: bytes


class Engine:
    """One member's protocol state machine: rpbcast's parts, or (in a
    subclass) a baseline's."""

    protocol = "rpbcast"

    def __init__(self, config: Config, now: int, rng: Optional[random.Random] = None, log=None,
                 mac_counter0: Optional[int] = None):
        cfg = config.validate()
        self._check_config(cfg)
        self.cfg = cfg
        self.rng = rng or random.Random()
        self.id = cfg.node_id
        self.inc = cfg.incarnation if cfg.incarnation is not None else (now // 1_000_000) & 0xFFFFFFFF
        self.is_logger = cfg.role == "logger"
        self.node = Node(cfg.group, self.id, self.inc, mtu=cfg.mtu, store_bytes=cfg.store_bytes,
                         store_entries=cfg.store_entries, max_gap=cfg.max_gap,
                         srb_w=cfg.srb_window, max_scan=cfg.max_scan, max_streams=cfg.max_streams,
                         max_per_node=min(cfg.max_streams_per_node, cfg.max_streams),
                         max_strangers=cfg.max_stranger_streams,
                         deliver_own=cfg.deliver_own, fifo=cfg.delivery == "fifo",
                         is_logger=self.is_logger, no_deliver=self.is_logger,
                         max_message=cfg.message_cap, reassembly_bytes=cfg.reassembly_bound,
                         prefault=cfg.prefault)
        if cfg.key_file is not None:
            cfg = self._key(cfg, now if mac_counter0 is None else mac_counter0)
        if cfg.repair_rate:
            self.node.set_rate_limit(cfg.repair_rate, cfg.repair_burst)
        self.events = collections.deque()
        self.members = MemberTable(self.id)
        self.stats = {}                  # a protocol's own counters, added to counters()
        self.resumed = set()             # streams a restarted receiver resumed (resume())
        # Config.flow_commit: (sender, inc) -> the frontier the application
        # committed (every seq below it is durable on its side); flow
        # reports never go beyond it.  None: reports follow what the node has.
        self.committed = {} if cfg.flow_commit else None
        self._now = now
        self.extensions = []
        self.hooks = Hooks()
        self.context = Context(self)
        self._logger = None
        self._before_publish = _nothing
        self._parts_timer = None
        self.authority = None            # rpbcast.protocol.authority (set by a composition)
        self.last_handler_error = None   # the last exception a peer's message raised (for diagnosis)
        parts, extensions = self._compose(now, log)
        self._handlers = {}
        for p in parts:
            if hasattr(p, "handlers"):
                self._handlers.update(p.handlers())
        self._timed_parts = [p for p in parts if hasattr(p, "on_timer")]
        if self._parts_timer is None:
            self._parts_timer = _earliest([p.get_timer for p in self._timed_parts])
        self._parts_rx = [p.after_rx for p in parts if hasattr(p, "after_rx")]
        # parts that key state by stream slot forget a retired one (csrc/node.h)
        self._parts_forget = [p.forget_slots for p in parts if hasattr(p, "forget_slots")]
        self._rewire()
        for x in extensions:
            self.add_extension(x)
        # The data plane learns the member table: streams of other node ids
        # compete in a small pool and never displace a member's (issue 14).
        # A group with no member list that does not join knows no members:
        # every node id stays a member there (the behaviour before).
        if cfg.members or cfg.join:
            self.members.changed_ids = set(self.members.members)
            self._sync_members(now)

    def _key(self, cfg: Config, counter0: int) -> Config:
        """A keyed group (docs/security.md): every datagram this node sends
        carries a MAC, every one it receives must.  counter0 starts the MAC's
        nonce counter; a driver on a real network passes the wall clock in
        ns (csrc/auth.h says why).  The parts size their messages by
        cfg.mtu, so they see the MTU less the trailer."""
        self.node.set_auth(read_key_file(cfg.key_file), counter0)
        self.node.set_replay_clock_skew(int((cfg.replay_clock_skew or 0) * 1e9))
        if cfg.mac_impl != "auto":
            try:
                self.node.set_auth_impl(cfg.mac_impl)
            except ValueError as e:
                raise ConfigError(f"mac_impl: {e}") from None
        if cfg.encrypt:
            self.node.set_encrypt(True)
        if cfg.signed:
            self.node.set_signing(*read_signing_keys(cfg.key_file))
        parts_cfg = copy.copy(cfg)
        parts_cfg.mtu = self.node.max_body + wire.DG_HDR + wire.MSG_HDR
        self.cfg = parts_cfg
        return parts_cfg

    def _check_config(self, cfg: Config):
        """Refuse a configuration this protocol cannot run, before anything is built."""

    def _compose(self, now, log):
        """rpbcast's parts, in the order their timers run; and the built-in
        extensions (the logger role, FIFO-SRB)."""
        cfg = self.cfg
        self.group = Group(self, now)
        self.authority = Authority(self)
        self.logger_acks = send_buffer.LoggerAcks(self, now)
        self.send_buffer = send_buffer.for_config(self, self.logger_acks, now)
        self.send_buffer.update_hold()
        self._before_publish = self.logger_acks.on_publish
        self.serving = Serving(self)
        self.heartbeats = Heartbeats(self)
        self.repair = Repair(self, now)                        # draws its first round's offset
        self.pings = Pings(self, now, self.group.targets)      # and then the first ping's
        parts = [self.repair, self.pings, self.group, self.send_buffer, self.heartbeats,
                 self.logger_acks, self.serving]
        repair, pulls, pings, group = self.repair, self.repair.pulls, self.pings, self.group
        buffer, heartbeats, acks = self.send_buffer, self.heartbeats, self.logger_acks

        def parts_timer():
            # the parts' get_timer, inlined where it is an attribute
            return min(repair.next_gossip, repair.next_logger_rtx, pulls.next_nack, pulls.next_retry,
                       pings.next_ping, group.next_report, group.next_join, group.next_sample, buffer.next_report,
                       heartbeats.get_timer(), acks.get_timer())

        self._parts_timer = parts_timer
        extensions = []
        if self.is_logger:
            self._logger = LoggerRole(log)
            extensions.append(self._logger)
        if cfg.srb_window:
            extensions.append(FifoSrb())
        return parts, extensions

    def _rewire(self):
        # the after-rx calls of the parts, then of the extensions
        self._after_rx_calls = self._parts_rx + self.hooks.after_rx
        self._ext_timers = [x.get_timer for x in self.hooks.timed]

    # ------------------------------------------------------------------ parts' services
    def emit(self, dest, type_, body=b"", flags=0, sender=None, inc=None, aux=0, seq=0):
        """Queue one control message (sender and inc default to ours)."""
        self.node.emit(dest, type_, flags, self.id if sender is None else sender,
                       self.inc if inc is None else inc, aux, seq, body)

    def post_event(self, *ev):
        """An event for the application (next_event); a membership change
        also goes to the send buffer (a receiver declared failed stops
        holding senders back) and to the extensions."""
        self.events.append(ev)
        if ev[0] == "member":
            self.send_buffer.on_member_event(ev, self._now)
            for on_member in self.hooks.on_member:
                on_member(ev[1], ev[2], self._now)

    @property
    def logger(self):
        """The logger role (rpbcast.protocol.logger.LoggerRole), or None."""
        return self._logger

    @property
    def status(self) -> int:
        """This member's membership status (rpbcast.protocol.membership)."""
        return self.group.status

    def self_entry(self):
        """This member's own member-table entry, as it announces it."""
        return self.group.self_entry()

    # ------------------------------------------------------------------ API
    def resume(self, delivered):
        """A restarted receiver says what it already has, per stream:
        ``{(sender, inc): what}`` where ``what`` is

        * an int n: every seq below n was delivered, none above (a frontier);
        * the delivered seqs (an array or any iterable of ints), or
        * the delivered ranges, a sequence of inclusive ``(lo, hi)`` pairs.

        Ids it names are never asked for nor delivered again; every other id
        of those streams is recovered from peers and loggers like any gap, so
        a receiver that checkpoints what it delivered gets each message
        exactly once across restarts (also above a hole: unordered delivery
        hands out ids past a gap).  Streams it does not name follow
        ``catch_up``."""
        for (s, i), what in delivered.items():
            if (s, i) == (self.id, self.inc):
                continue
            self.resumed.add((s, i))
            ranges = delivered_ranges(what)
            base = 0
            if ranges and ranges[0][0] == 0:
                base = ranges.pop(0)[1] + 1
            slot = self.node.peer(s, i, base)
            if self.committed is not None:
                # what it resumes from it had made durable before the crash
                self.committed[(s, i)] = max(self.committed.get((s, i), 0), base)
            for lo, hi in ranges:
                for a in range(lo, hi + 1, RESUME_CHUNK):
                    self.node.mark_received(slot, np.arange(a, min(hi + 1, a + RESUME_CHUNK), dtype=np.uint64))

    def commit(self, frontiers):
        """The application made durable every message below ``frontier`` of
        each stream: ``{(sender, inc): frontier}`` (Config.flow_commit).
        Frontiers only move forward; a stream it never names holds its
        sender at 0."""
        if self.committed is None:
            raise ValueError("commit() needs Config.flow_commit = True")
        c = self.committed
        for (s, i), f in frontiers.items():
            f = int(f)
            if f < 0:
                raise ValueError(f"commit: frontier of {s}/{i} must be >= 0, got {f}")
            if f > c.get((s, i), 0):
                c[(s, i)] = f

    def started_late(self, now: int):
        """This member starts while the group may already be running (a
        process start or restart, not a simulation's time 0): unless
        ``catch_up`` it answers only for what follows its start, the t_join
        of the first member that answers (rpbcast.protocol.group)."""
        if hasattr(self.group, "ask_t_join"):
            self.group.ask_t_join(now)

    def add_extension(self, ext):
        self.extensions.append(ext)
        ext.attach(self.context)
        self.hooks.add(ext)
        self._rewire()
        return ext

    def set_addr(self, addr: int):
        """The transport bound our unicast socket: this is where peers reach us."""
        self.cfg = self.cfg.replace(addr=addr)
        self.group.set_addr(addr)

    def publish(self, payload, label: Optional[int] = None, now: int = 0) -> int:
        self._before_publish(now)
        return self.node.publish(payload, label, now)

    def publish_batch(self, payloads, lens, labels=None, now: int = 0) -> int:
        self._before_publish(now)
        return self.node.publish_batch(payloads, lens, labels, now)

    def join(self, now: int):
        """Start (or restart) the join protocol."""
        self.group.join(now)

    def leave(self, now: int):
        self.group.leave(now)

    def disconnect(self, now: int):
        """An intermittently connected subscriber goes away for a while: the
        group marks it DISCONNECTED (not failed, not gone), loggers keep what
        it has not acknowledged (within their retention), and on
        reconnect() it catches up from peers and loggers (thesis §1.1, §5.3)."""
        self.group.disconnect(now)

    def reconnect(self, now: int):
        self.group.reconnect(now)
        self.repair.next_gossip = now           # catch up at once

    # ------------------------------------------------------------ driver contract
    # A driver either hands datagrams to receive_datagram(s), or -- when
    # driver_needs.data_plane_rx -- runs them through the C data plane
    # (self.node) itself and then calls on_data_plane.  Both routes run the
    # same code: receive_datagram is node.rx followed by on_data_plane.

    @property
    def driver_needs(self) -> DriverNeeds:
        """What a driver that receives through the C data plane must do for
        this engine (docs/architecture.md, "The driver contract")."""
        every = any(x.needs_every_rx for x in self.extensions)
        return DriverNeeds(data_plane_rx=True, every_rx=every)

    def on_data_plane(self, now: int, control: bool = False, gap: bool = False, timer: bool = False,
                      rx: bool = False) -> int:
        """The data plane has work for the control plane: control messages
        queued (control), a gap flagged for an immediate pull (gap), a timer
        due (timer), or simply a batch received (rx; only needed when
        driver_needs.every_rx).  Returns the next timer (ns)."""
        if self.node.nretired:
            self._forget_retired(now)
        if control:
            self._control(now)
            if self.members.changed_ids:
                self._sync_members(now)
        if control or gap or rx:
            self._after_rx(now)
            if self.node.nretired:
                self._forget_retired(now)
        if timer:
            self.handle_timer(now)
        return self.get_timer()

    def receive_datagram(self, data, addr: int, now: int) -> int:
        r = self.node.rx(data, addr, now)
        self.on_data_plane(now, control=self.node.nctl > 0, rx=True)
        return r

    def receive_datagrams(self, buf, offs, lens, addrs, now: int) -> int:
        bad = self.node.rx_batch(buf, offs, lens, addrs, now)
        self.on_data_plane(now, control=self.node.nctl > 0, rx=True)
        return bad

    def datagrams_to_send(self) -> List[Tuple[int, bytes]]:
        return self.node.datagrams()

    def recv(self, max_n: int = 1 << 16, now: int = 0) -> List[Delivery]:
        """Deliveries as objects (convenient, not for high rates: use
        recv_batch)."""
        buf = bytearray(max(self.cfg.mtu, 1 << 16) * 4)
        out = []
        while len(out) < max_n:
            k, snd, inc, seq, lab, _, off, ln = self.node.recv_batch(min(max_n - len(out), 4096), buf, now)
            if not k and self.node.recv_need > len(buf):
                buf = bytearray(self.node.recv_need)      # a large message: room for it whole
                continue
            if not k:
                break
            mv = memoryview(buf)
            for i in range(k):
                o = int(off[i])
                out.append(Delivery(int(snd[i]), int(inc[i]), int(seq[i]),
                                    None if lab[i] == NOLABEL else int(lab[i]), bytes(mv[o:o + int(ln[i])])))
        return out

    def recv_batch(self, max_n: int, buf, now: int = 0):
        return self.node.recv_batch(max_n, buf, now)

    def next_event(self):
        return self.events.popleft() if self.events else None

    def get_timer(self) -> int:
        t = self._parts_timer()
        if self._ext_timers:
            for timer in self._ext_timers:
                x = timer()
                if x is not None and x < t:
                    t = x
        return t

    def handle_timer(self, now: int):
        self._now = now
        if self.node.nretired:
            self._forget_retired(now)
        for p in self._timed_parts:
            p.on_timer(now)
        for x in self.hooks.timed:
            xt = x.get_timer()
            if xt is not None and now >= xt:
                x.on_timer(now)
        if self.members.changed_ids:
            self._sync_members(now)

    def _after_rx(self, now):
        for after_rx in self._after_rx_calls:
            after_rx(now)

    def _forget_retired(self, now):
        """The data plane retired streams to make room for new ones
        (csrc/node.h, rp_node_peer): every part and extension forgets what
        it keys by their slots, now -- the slots are reused from here on, and
        nothing of an old stream may apply to the new one in its slot."""
        slots = self.node.take_retired()
        if not slots:
            return
        for forget in self._parts_forget:
            forget(slots)
        for on_retired in self.hooks.on_slots_retired:
            on_retired(slots, now)

    def _sync_members(self, now):
        """Tell the data plane which node ids changed membership since the
        last time, in one call (csrc/node.h, rp_node_set_members): promoted
        streams leave the strangers' pool, demoted ones enter it; streams it
        retired to restore the bounds are forgotten at once."""
        changed = self.members.changed_ids
        ids = [i for i in changed if i != self.id]
        changed.clear()
        member = self.members.is_data_plane_member
        self.node.set_members(ids, [member(i) for i in ids])
        if self.node.nretired:
            self._forget_retired(now)

    def _control(self, now):
        self._now = now
        heard = self.members.heard
        handlers = self._handlers
        authority = self.authority
        for msg in self.node.take_control(now):
            heard(msg[7], now)
            if authority is not None:
                why = authority.check(msg)
                if why is not None:
                    self.reject(why)
                    continue
            # A peer's message never raises into the driver: one that makes a
            # handler raise is dropped and counted (issue 14).  (Exception,
            # not BaseException: KeyboardInterrupt and exits still stop us.)
            try:
                h = handlers.get(msg[0])
                if h is not None:
                    h(msg, now)
                else:
                    for on_message in self.hooks.on_message:
                        if on_message(msg, now):
                            break
            except Exception as exc:
                self.reject(HANDLER_ERROR)
                self.last_handler_error = f"{type(exc).__name__}: {exc} (message type {msg[0]} from {msg[7]})"
            if self.node.nretired:              # a handler named new streams
                self._forget_retired(now)

    def reject(self, reason: str):
        """Count a control message dropped for `reason` (rpbcast.protocol.authority)."""
        stats = self.stats
        key = "ctl_rejected_" + reason
        stats[key] = stats.get(key, 0) + 1
        stats["ctl_rejected"] = stats.get("ctl_rejected", 0) + 1

    # ------------------------------------------------------------------ stats
    def counters(self):
        c = self.node.counters()
        c["members"] = len(self.members.active())
        # own messages not yet released by loggers / receivers (the window in use)
        c["unacked"] = max(self.node.next_seq - self.node.acked, 0) if self.node.hold_send else 0
        c.update(self.stats)
        # a keyed node's MAC, replay and decryption counters (docs/security.md)
        c.update({k: v for k, v in self.node.auth_stats().items() if k != "sealed"})
        if self.cfg.signed:
            c["signatures"] = self.node.signatures      # datagrams this node signed
        return c

    def traffic(self):
        return self.node.traffic()


def _nothing(now):
    pass


RESUME_CHUNK = 1 << 20     # ids marked received per call when resuming


def delivered_ranges(what) -> List[Tuple[int, int]]:
    """What a receiver delivered of one stream (Engine.resume's forms) as
    sorted, merged, inclusive (lo, hi) ranges."""
    if isinstance(what, (int, np.integer)):
        n = int(what)
        if n < 0:
            raise ValueError(f"resume: a frontier must be >= 0, got {n}")
        return [(0, n - 1)] if n else []
    if isinstance(what, np.ndarray) and what.ndim == 1:
        seqs = np.unique(what.astype(np.int64, copy=False))
    else:
        items = list(what)
        if items and all(isinstance(x, (tuple, list)) and len(x) == 2 for x in items):
            out = []
            for lo, hi in sorted((int(a), int(b)) for a, b in items):
                if lo < 0 or hi < lo:
                    raise ValueError(f"resume: bad range ({lo}, {hi})")
                if out and lo <= out[-1][1] + 1:
                    out[-1] = (out[-1][0], max(out[-1][1], hi))
                else:
                    out.append((lo, hi))
            return out
        seqs = np.unique(np.asarray(items, dtype=np.int64))
    if len(seqs) and seqs[0] < 0:
        raise ValueError("resume: seqs must be >= 0")
    if not len(seqs):
        return []
    cut = np.flatnonzero(np.diff(seqs) != 1)
    starts = np.concatenate(([seqs[0]], seqs[cut + 1]))
    ends = np.concatenate((seqs[cut], [seqs[-1]]))
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def _earliest(timers):
    """The earliest of these parts' timers."""
    def earliest():
        t = NEVER
        for timer in timers:
            x = timer()
            if x < t:
                t = x
        return t
    return earliest
