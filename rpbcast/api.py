"""The Python API on real sockets.

    from rpbcast import Node, Config
    with Node(Config(node_id=1, members=[...])) as node:
        node.publish(b"hello")
        msg = node.receive(timeout=1.0)     # Message(sender, inc, seq, label, payload, rx_time)

High rates: ``publish_batch`` and ``recv_batch`` move many messages per call
with NumPy arrays and one payload buffer, no Python object per message.
Asyncio: ``await node.areceive()`` and ``async for msg in node``;
``await node.apublish(payload)`` and ``await node.writable()``.

Back-pressure: a sender has at most ``Config.send_window`` messages in
flight beyond what flow control waits for; beyond it ``publish`` raises
BlockingIOError (or, with ``timeout=``, waits and raises TimeoutError),
``publish_batch`` takes fewer, ``apublish``/``writable`` await room.

All or none (``Config(atomic=True, state_dir=...)``, docs/atomic.md):
``node.publish_atomic(payload, timeout=2.0)`` (or ``await
node.apublish_atomic(...)``) returns an AtomicOutcome once every member has
the message on disk (committed) or it is aborted; members take committed
messages with ``receive_atomic`` / ``areceive_atomic``.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import errno
import logging
import os
import sys
import threading
import time
import weakref
from typing import Callable, List, NamedTuple, Optional

import numpy as np

from rpbcast import netaddr
from rpbcast.config import Config, ConfigError, MemberSpec
from rpbcast.core.node import NOLABEL
from rpbcast.protocol.atomic import ATOMIC_LABEL, AtomicDelivery, AtomicMessage, AtomicOutcome
from rpbcast.baselines import engine_for
from rpbcast.protocol.engine import Engine
from rpbcast.drivers.udp import SocketError, Transport

_log = logging.getLogger("rpbcast")

EPOCH_2024 = 1704067200
# the send-buffer watch: how often it looks, and how long without any
# acknowledgment before it says what the publisher waits for
WATCH_INTERVAL = 0.25
STALL_REPORT_AFTER = 1.0
STALL_REPORT_EVERY = 10.0
# receive(): messages fetched per refill, into a buffer of this many bytes
# (a refill stops early when the buffer is full; the rest waits)
RECEIVE_BATCH = 1024
EXT_LABEL = 2**64 - 3     # reserved: marks the extension header (stream, fragment) on the wire


def _stream_id(s) -> int:
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= int(s) < 2**32:
        raise ValueError(f"a stream id is an integer in 0..2**32-1, got {s!r}")
    return int(s)
RECEIVE_BUF = 1 << 20
SPIN_SLICE = 0.01       # a spinning wait returns to Python this often (signal handlers)


def _buf_refs(batch) -> int:
    return sys.getrefcount(batch.buf)


def _buf_held(batch) -> bool:
    """Whether anything but the batch itself refers to its buffer: a
    payload memoryview handed out by receive() (or a copy of batch.buf)."""
    return _buf_refs(batch) > _BUF_ALONE


_scratch = threading.local()
SCRATCH_MAX = 64 << 20


def _scratch_buf(size: int) -> bytearray:
    """This thread's buffer for recv_batch without one: at least 4 MiB, grown
    to `size` (at most SCRATCH_MAX; a batch stops early when it is full)."""
    size = min(max(size, 4 << 20), SCRATCH_MAX)
    b = getattr(_scratch, "buf", None)
    if b is None or len(b) < size:
        b = _scratch.buf = bytearray(size)
    return b


class Message(NamedTuple):
    sender: int
    inc: int
    seq: int
    label: Optional[int]
    payload: memoryview
    rx_time: int          # ns, CLOCK_MONOTONIC (kernel receive time with timestamps on)
    stream: int = 0       # the stream it was published on (publish(stream=))


class Batch(NamedTuple):
    """recv_batch result: arrays of length count; payload i is
    buf[offs[i]:offs[i] + lens[i]]."""
    count: int
    senders: np.ndarray
    incs: np.ndarray
    seqs: np.ndarray
    labels: np.ndarray
    rx_times: np.ndarray
    offs: np.ndarray
    lens: np.ndarray
    buf: bytearray
    streams: Optional[np.ndarray] = None    # stream id of each message

    def payload(self, i) -> memoryview:
        o = int(self.offs[i])
        return memoryview(self.buf)[o:o + int(self.lens[i])]


# a batch's buffer referred to by nothing else: the count _buf_refs sees
_BUF_ALONE = _buf_refs(Batch(0, *([None] * 7), bytearray(0)))


@dataclasses.dataclass(frozen=True)
class Drain:
    """What flush() or close() left: whether every published message was
    acknowledged by what flow control waits for (loggers, and with
    flow_control = "receivers" every live receiver), and if not, which
    messages and what they wait for.  True when drained."""
    drained: bool
    unacked: int                     # published messages not acknowledged
    first: Optional[int]             # their seqs: first .. last
    last: Optional[int]
    waiting_for: tuple               # in words, one entry per logger / receiver behind
    waited: float                    # seconds waited
    confirmed: bool = True           # False: nothing acknowledges (no logger): nothing to wait for

    def __bool__(self):
        return self.drained

    def __str__(self):
        if not self.confirmed:
            return "nothing acknowledges published messages (no logger): delivery is not confirmed"
        if self.drained:
            return "every published message is acknowledged"
        return (f"{self.unacked:,} published message(s) not acknowledged after {self.waited:.1f} s "
                f"(seqs {self.first}..{self.last}): waiting for {'; '.join(self.waiting_for) or '?'}")


def _ago(now_ns: int, t_ns: int) -> str:
    return f"{(now_ns - t_ns) / 1e9:.1f} s ago"


def _incarnation(cfg: Config) -> int:
    """A number this node id has never used: a persisted counter when
    state_dir is set (written and fsynced before use), else the clock in
    tenths of a second since 2024."""
    clock = int((time.time() - EPOCH_2024) * 10) & 0xFFFFFFFF
    if cfg.state_dir is None:
        return clock
    os.makedirs(cfg.state_dir, exist_ok=True)
    path = os.path.join(cfg.state_dir, f"incarnation.{cfg.node_id}")
    last = -1
    try:
        with open(path) as f:
            last = int(f.read().strip() or -1)
    except (OSError, ValueError):
        pass
    inc = max(last + 1, clock if last < 0 else last + 1) & 0xFFFFFFFF
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(inc))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(cfg.state_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return inc


def _socket_error_to_config(e: SocketError, cfg: Config, where: str):
    stage, err = e.stage, e.errno
    if stage == "SO_BUSY_POLL":
        return ConfigError(f"busy_poll_us = {cfg.busy_poll_us}: SO_BUSY_POLL refused ({os.strerror(err)}; "
                           f"above net.core.busy_read it needs CAP_NET_ADMIN)")
    if stage == "bind" and err == errno.EADDRINUSE:
        return ConfigError(f"{where} is already in use (another rpbcast node?): choose another port, "
                           f"or port 0 to pick a free one")
    if stage == "bind" and err == errno.EADDRNOTAVAIL:
        return ConfigError(f"{where}: that IP address is not on this host; use one of its addresses "
                           f"(e.g. 127.0.0.1)")
    if stage in ("IP_ADD_MEMBERSHIP", "IP_MULTICAST_IF", "IPV6_JOIN_GROUP", "IPV6_MULTICAST_IF") and \
            err in (errno.ENODEV, errno.EADDRNOTAVAIL, errno.EINVAL):
        return ConfigError(f"cannot use interface {cfg.interface!r} for multicast ({os.strerror(err)}); "
                           f"interfaces here: {', '.join(netaddr.interfaces())}")
    if err == errno.EACCES:
        return ConfigError(f"{where}: permission denied for {stage}")
    return ConfigError(f"{where}: {stage} failed: {os.strerror(err)}")


class Node:
    """A group member on real UDP sockets."""

    def __init__(self, config: Config, *, start: bool = True, log=None, resume=None,
                 trace: int = 0, stats_socket: Optional[str] = None, extensions=(),
                 streams=None):
        """resume: what a restarted receiver already delivered, per stream
        {(sender, inc): frontier int | delivered seqs | [(lo, hi)] ranges}
        (Engine.resume): those ids are never delivered again, the others
        are recovered; streams it does not name follow Config.catch_up;
        trace: capacity of the event trace buffer (0 = off);
        stats_socket: a UNIX socket path where `rpbcast stat` reads live
        counters; extensions: engine extensions to run (e.g.
        rpbcast.protocol.gsgc.GsgcExtension()), every member running the same;
        streams: the stream ids to deliver (None: every stream; see
        subscribe) -- the others are filtered out in the data plane."""
        cfg = config.validate()
        try:
            # the sockets' addresses, either family (netaddr.transport_endpoints)
            eps = netaddr.transport_endpoints(cfg)
        except netaddr.AddressError as e:
            raise ConfigError(str(e)) from None
        eps.pop("ifname")
        members = [MemberSpec(m.node_id, netaddr.addr_of(m.addr), m.role, m.rank) for m in cfg.members]
        inc = cfg.incarnation if cfg.incarnation is not None else _incarnation(cfg)
        ecfg = cfg.replace(members=members, incarnation=inc, addr=0, mtu=netaddr.datagram_mtu(cfg))
        self.config = cfg
        # mac_counter0, the wall clock: a keyed group's MAC nonce counter starts
        # beyond every counter an earlier run used (csrc/auth.h)
        self._t_start = time.monotonic_ns()
        # the engine Config.protocol names: rpbcast, or a baseline on the
        # same data plane (rpbcast.baselines; docs/protocols.md)
        self.engine = engine_for(ecfg, self._t_start, log=log, mac_counter0=time.time_ns())
        if resume:
            self.engine.resume(resume)
        if trace:
            self.engine.node.enable_trace(trace)
        self._atomic = None
        if cfg.atomic and cfg.role != "logger":
            self._atomic = self.engine.add_extension(AtomicDelivery())
        self._atomic_mark = threading.Lock()
        for x in extensions:
            self.engine.add_extension(x)
        if cfg.conflate:
            self.engine.node.set_conflate(cfg.conflate)
        try:
            self.transport = Transport(
                self.engine, **eps, ttl=cfg.ttl, mloop=cfg.multicast_loop, rcvbuf=cfg.rcvbuf,
                sndbuf=cfg.sndbuf, gro=cfg.gro, gso=cfg.gso, timestamps=cfg.timestamps,
                busy_poll=cfg.busy_poll, rx_batch=cfg.rx_batch, fanout=cfg.transport == "unicast",
                drop_rate=cfg.drop_rate, app_receive=cfg.app_receive, drop_own=cfg.drop_own_copy,
                busy_poll_us=cfg.busy_poll_us)
        except SocketError as e:
            where = cfg.bind if "unicast" in str(e) else cfg.group_addr
            raise _socket_error_to_config(e, cfg, where) from None
        self.engine.set_addr(self.transport.addr)
        self.transport.set_publish_spin(cfg.publish_spin_us * 1e-6)   # waits for room spin first
        # a static member started while streams may be running answers for
        # what follows its start, unless catch_up (docs/api.md, "Restarts")
        self.engine.started_late(time.monotonic_ns())
        self.transport.run_once(0.0)        # send what that queued (its JOIN) now
        info = self.transport.sock_info()
        self.warnings = _reach_warnings(cfg)
        if cfg.rcvbuf and info["rcvbuf"] < cfg.rcvbuf:
            self.warnings.append(f"receive buffer capped at {info['rcvbuf']} bytes (asked {cfg.rcvbuf}): "
                                 f"raise net.core.rmem_max, or run as root")
        if cfg.sndbuf and info["sndbuf"] < cfg.sndbuf:
            self.warnings.append(f"send buffer capped at {info['sndbuf']} bytes (asked {cfg.sndbuf}): "
                                 f"raise net.core.wmem_max, or run as root")
        for w in self.warnings:
            logging.getLogger("rpbcast").warning(w)
        self._batch = None
        self._bi = 0
        # < 0: spin for the whole wait (receive_mode "spin")
        self._spin = -1.0 if cfg.receive_mode == "spin" else cfg.receive_spin_us * 1e-6
        self._streams_chosen = streams is not None
        if streams is not None:
            self.engine.node.only_streams(True)
            for s in streams:
                self.engine.node.subscribe(_stream_id(s))
        self._callbacks = []
        self._dispatcher = None
        self._closed = False
        self._async_fds = set()         # (event loop, fd) with asyncio readers (_fd_ready)
        self._close_drain = None
        self._stats_sock = None
        self.stalled = None          # what the send buffer waits for, while nothing is acknowledged
        self._stop = threading.Event()
        if stats_socket:
            self._serve_stats(stats_socket)
        if start:
            self.transport.start(cfg.loop_cpu)
            if cfg.receive_mode == "spin":
                self.transport.own_receive(True)    # (a node without a loop thread has nobody to park)
        if cfg.role != "logger":
            # (a weak reference: a node nobody closes is still collected, and its __del__ stops it)
            threading.Thread(target=_watch, args=(weakref.ref(self), self._stop), name=f"rpbcast-watch-{cfg.node_id}",
                             daemon=True).start()

    # ---- identity -------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self.engine.id

    @property
    def incarnation(self) -> int:
        return self.engine.inc

    @property
    def addr(self) -> str:
        return netaddr.fmt_addr(self.transport.addr)

    # ---- sending --------------------------------------------------------
    def publish(self, payload, label: Optional[int] = None, timeout: Optional[float] = 0, stream: int = 0) -> int:
        """Multicast one message on ``stream``; returns its sequence number
        (of its first fragment when it is larger than a datagram: it is
        delivered whole, docs/api.md "Large messages"; ValueError when it is
        larger than Config.max_message_size).

        Back-pressure (the send window of Config.send_window or the flow
        window of Config.flow_window is full, or the store, or a FIFO-SRB
        window; the error names which window): with timeout=0 (the default)
        raises BlockingIOError at once; with a number of seconds waits up
        to that long for room and then raises TimeoutError; None waits as
        long as it takes."""
        if label == ATOMIC_LABEL and self._atomic is not None:
            raise ValueError("label 2**64-2 is reserved for atomic delivery's records")
        stream = _stream_id(stream)
        if timeout == 0:
            return self._send1(payload, label, stream)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self._send1(payload, label, stream)
            except BlockingIOError as e:
                err = e
            if self._closed:
                raise RuntimeError("this rpbcast Node is closed")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"publish: no room after {timeout} s ({err})") from err
            self._wait_for_room(1.0 if left is None else min(left, 1.0))

    def wait_writable(self, timeout: Optional[float] = None) -> bool:
        """Block until the send window has room (at most timeout seconds,
        None: as long as it takes); True if it has.  Woken by the
        acknowledgment that reopens it, read by this thread itself (or the
        window's eventfd, when the control plane reopens it); False once
        the node is closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                return False
            room = self.transport.window_room(arm=True)
            if room is None or room > 0:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._wait_for_room(1.0 if left is None else min(left, 1.0))

    def _wait_for_room(self, most: float):
        """Sleep until the send window may have room again (at most `most`
        seconds), after a publish was refused (or window_room armed it)."""
        t = self.transport
        if not t.threaded:
            t.run_once(min(most, 0.002))        # nobody else drives this node
        elif t.window_room() == 0:
            t.wait_writable(most)               # the refused publish armed the signal
        else:
            # refused by the store or a FIFO-SRB window, which have no signal
            time.sleep(min(most, 0.0005))

    async def writable(self) -> None:
        """Resolve once the send window has room (asyncio): at once if it
        has, else when acknowledgments reopen it -- woken by the window's
        eventfd, no polling."""
        while self.transport.window_room(arm=True) == 0:
            await self._fd_ready(self.transport.window_fd)

    async def apublish(self, payload, label: Optional[int] = None, stream: int = 0) -> int:
        """publish, awaitable: waits (the event loop running) for room in
        the send window instead of raising BlockingIOError."""
        if label == ATOMIC_LABEL and self._atomic is not None:
            raise ValueError("label 2**64-2 is reserved for atomic delivery's records")
        stream = _stream_id(stream)
        while True:
            try:
                return self._send1(payload, label, stream)
            except BlockingIOError:
                pass
            if self._closed:
                raise RuntimeError("this rpbcast Node is closed")
            if self.transport.window_room() == 0:
                await self._fd_ready(self.transport.window_fd)
            else:
                await asyncio.sleep(0.0005)     # the store or a FIFO-SRB window: no signal

    async def _fd_ready(self, fd: int) -> None:
        """Until fd is readable (or the node closes): one reader per (event
        loop, fd) wakes every task waiting on it -- asyncio keeps a single
        reader per fd, and a second add_reader would silently replace the
        first task's."""
        loop = asyncio.get_running_loop()
        waiters = _fd_waiters.setdefault(loop, {})
        futs = waiters.get(fd)
        if futs is None:
            futs = waiters[fd] = []
            loop.add_reader(fd, _fd_wake, loop, fd)
            self._async_fds.add((loop, fd))
        fut = loop.create_future()
        futs.append(fut)
        try:
            await fut
        finally:
            if fut in futs:                     # cancelled: the last one out removes the reader
                futs.remove(fut)
                if not futs and waiters.get(fd) is futs:
                    del waiters[fd]
                    loop.remove_reader(fd)

    def _send1(self, payload, label, stream):
        """One message through the C publish path, which checks its size
        and label itself; only when it refuses one is the rule it broke
        spelt out (here, off the path every message takes)."""
        try:
            return self.transport.publish(payload, label, stream)
        except ValueError:
            self._check_message(len(memoryview(payload).cast("B")), label)
            raise

    def _check_message(self, nbytes: int, label) -> None:
        cap = self.config.message_cap
        if nbytes > cap:
            raise ValueError(f"a {nbytes}-byte message is larger than max_message_size ({cap} bytes)")
        if label == EXT_LABEL:
            raise ValueError("label 2**64-3 is reserved (it marks a message's extension header on the wire)")
        if self.config.srb_window and nbytes + (8 if label is not None else 0) > self.engine.node.max_body:
            raise ValueError(f"a {nbytes}-byte message is larger than a datagram; FIFO-SRB (srb_window) "
                             f"counts messages in its window, so it does not fragment: at most "
                             f"{self.engine.node.max_body - (8 if label is not None else 0)} bytes")

    # ---- streams ----------------------------------------------------------
    def subscribe(self, stream: int) -> None:
        """Deliver ``stream`` from now on.  A node built without ``streams=``
        delivers every stream; the first subscribe switches it to only the
        streams subscribed.  Messages of other streams are still received,
        repaired, served and logged (reliability does not depend on who
        reads what), only not delivered: no Python object is made for them."""
        self.transport.lock()
        try:
            node = self.engine.node
            if not self._streams_chosen:
                node.only_streams(True)
                self._streams_chosen = True
            node.subscribe(_stream_id(stream))
        finally:
            self.transport.unlock()

    def unsubscribe(self, stream: int) -> None:
        """Stop delivering ``stream`` (messages already queued are delivered)."""
        self.transport.lock()
        try:
            node = self.engine.node
            if not self._streams_chosen:
                node.only_streams(True)
                for s in node.stream_stats():
                    if s != "other":
                        node.subscribe(s)
                node.subscribe(0)
                self._streams_chosen = True
            node.unsubscribe(_stream_id(stream))
        finally:
            self.transport.unlock()

    def publish_batch(self, payloads, lens=None, labels=None, stream: int = 0) -> int:
        """Publish many messages on ``stream``: ``payloads`` is one buffer
        with the messages back to back and ``lens`` their sizes (uint32), or
        a list of bytes; each may be large (up to max_message_size).
        Returns how many went out."""
        if lens is None:
            items = list(payloads)
            lens = np.fromiter((len(p) for p in items), np.uint32, len(items))
            payloads = b"".join(items)
        lens = np.ascontiguousarray(lens, dtype=np.uint32)
        if labels is not None:
            labels = np.ascontiguousarray(labels, dtype=np.uint64)
            if self._atomic is not None and (labels == np.uint64(ATOMIC_LABEL)).any():
                raise ValueError("label 2**64-2 is reserved for atomic delivery's records")
            if (labels == np.uint64(EXT_LABEL)).any():
                raise ValueError("label 2**64-3 is reserved (it marks a message's extension header on the wire)")
        stream = _stream_id(stream)
        # An oversize message ends the batch with an error, not silently:
        # the messages before it go out, and the error says how many did.
        if self._closed:
            raise RuntimeError("this rpbcast Node is closed")
        if self.config.srb_window:      # no fragments under FIFO-SRB (_check_message)
            room = self.engine.node.max_body - (8 if labels is not None else 0)
            what = f"larger than a datagram can carry under FIFO-SRB ({room} bytes)"
        else:
            room = self.config.message_cap
            what = f"larger than max_message_size ({room} bytes)"
        big = np.flatnonzero(lens.astype(np.int64) > room)
        if len(big):
            k = int(big[0])
            done = self.transport.publish_batch(memoryview(payloads).cast("B"), lens[:k],
                                                labels[:k] if labels is not None else None,
                                                stream) if k else 0
            if done == k:
                raise ValueError(f"message {k} is {int(lens[k])} bytes, {what}; "
                                 f"{done} of {len(lens)} messages were published")
            return done
        return self.transport.publish_batch(memoryview(payloads).cast("B"), lens, labels, stream)

    # ---- draining: what flow control still waits for --------------------
    def _send_state(self, t0_ns: int) -> Drain:
        """The send buffer now (node lock held by the caller)."""
        e = self.engine
        node = e.node
        nxt, acked = node.next_seq, node.acked
        if not node.hold_send:
            return Drain(True, 0, None, None, (), (time.monotonic_ns() - t0_ns) / 1e9,
                         confirmed=bool(e.members.loggers()) or not nxt)
        unacked = max(nxt - acked, 0)
        if not unacked:
            return Drain(True, 0, None, None, (), (time.monotonic_ns() - t0_ns) / 1e9)
        return Drain(False, unacked, acked, nxt - 1, tuple(self._waiting_for(nxt)),
                     (time.monotonic_ns() - t0_ns) / 1e9)

    def _waiting_for(self, nxt: int) -> List[str]:
        """Who has not acknowledged seqs below nxt, and when we last heard of
        them (node lock held)."""
        e = self.engine
        now = time.monotonic_ns()
        out = []
        acks = getattr(getattr(e, "logger_acks", None), "acks", {})
        for m in e.members.loggers():
            held = acks.get(m.node_id, 0)
            if held >= nxt:
                continue
            where = netaddr.fmt_addr(m.addr) if m.addr else "?"
            if not m.last_heard:
                heard = f"never heard from (this node started {_ago(now, self._t_start)})"
            else:
                heard = f"last heard {_ago(now, m.last_heard)}"
            out.append(f"logger {m.node_id} at {where}: {heard}, "
                       f"{'holds seqs below ' + str(held) if held else 'has acknowledged nothing'}")
        reports = getattr(e.send_buffer, "reports", None)
        if reports is not None and self.config.flow_control == "receivers":
            timeout = int(self.config.flow_timeout * 1e9)
            for m in e.members.active(now, timeout):
                if m.is_logger or not m.last_heard:
                    continue
                got = reports.get(m.node_id, (0, 0))[1]
                if got < nxt:
                    out.append(f"receiver {m.node_id}: reported seqs below {got}, last heard {_ago(now, m.last_heard)}")
        return out

    def send_buffer(self) -> Drain:
        """The send buffer now: what is published but not acknowledged yet,
        and what it waits for."""
        self.transport.lock()
        try:
            return self._send_state(time.monotonic_ns())
        finally:
            self.transport.unlock()

    def flush(self, timeout: Optional[float] = None) -> Drain:
        """Wait until every message published so far is acknowledged by what
        flow control waits for (a logger, ``ack_loggers`` of them; with
        flow_control = "receivers" also every live receiver), at most
        ``timeout`` seconds (None: as long as it takes).  Returns a Drain:
        true when drained, else what was left and what it waits for."""
        t0 = time.monotonic_ns()
        deadline = None if timeout is None else t0 + int(timeout * 1e9)
        while True:
            self.transport.lock()
            try:
                d = self._send_state(t0)
            finally:
                self.transport.unlock()
            if d.drained:
                return d
            now = time.monotonic_ns()
            if deadline is not None and now >= deadline:
                return d
            step = 0.002 if deadline is None else max(0.0, min(0.002, (deadline - now) / 1e9))
            if self.transport.threaded:
                time.sleep(step)
            else:
                self.transport.run_once(step)      # nobody else drives this node

    def _watch_once(self, w):
        """One look at the send buffer (the watch thread, _watch)."""
        self.transport.lock()
        try:
            node = self.engine.node
            acked, unacked = node.acked, (node.next_seq - node.acked if node.hold_send else 0)
            d = self._send_state(self._t_start) if unacked > 0 else None
        finally:
            self.transport.unlock()
        now = time.monotonic()
        if unacked <= 0 or acked != w["acked"]:
            w["acked"], w["since"] = acked, (now if unacked > 0 else None)
            if self.stalled is not None and unacked <= 0:
                _log.warning(f"node {self.node_id}: every published message is acknowledged again")
            self.stalled = None
            return
        if now - w["since"] >= STALL_REPORT_AFTER:
            stalled = (f"{unacked:,} published message(s) (seqs {d.first}..{d.last}) without an "
                       f"acknowledgment for {now - w['since']:.1f} s: waiting for "
                       f"{'; '.join(d.waiting_for) or '?'}")
            if now >= w["next_report"]:
                _log.warning(f"node {self.node_id}: {stalled}")
                w["next_report"] = now + STALL_REPORT_EVERY
            # set after the warning: whoever sees Node.stalled can find it logged
            self.stalled = stalled

    # ---- receiving ------------------------------------------------------
    def recv_batch(self, max_n: int = 4096, buf: Optional[bytearray] = None) -> Batch:
        """Take up to max_n deliveries (payloads back to back into buf; without
        one, into a buffer of the batch's own, of the size they take)."""
        scratch = buf is None
        if scratch:
            buf = _scratch_buf(self.config.mtu * max_n)
        k, s, i, q, lab, t, off, ln, st = self.transport.take(max_n, buf)
        need = self.engine.node.recv_need if not k else 0
        if need > len(buf):
            # The next message is a large one, whole: a buffer that holds it.
            buf, scratch = bytearray(need), False
            k, s, i, q, lab, t, off, ln, st = self.transport.take(max_n, buf)
        if scratch:
            # what the batch took, copied out of this thread's scratch buffer
            # (not a zeroed buffer of mtu * max_n bytes per call)
            buf = buf[:int(off[k - 1]) + int(ln[k - 1])] if k else bytearray()
        return Batch(k, s, i, q, lab, t, off, ln, buf, st)

    def poll(self, timeout: float = 0.0, max_n: int = 4096, buf: Optional[bytearray] = None) -> Batch:
        """Drive the node from the calling thread and take what it delivers:
        one loop iteration (receive, timers, send), waiting up to `timeout`
        seconds for traffic unless deliveries are already waiting, then
        recv_batch.  For a node built with ``start=False`` (no loop thread):
        a message then reaches the application with one thread wake-up
        instead of two, which is most of the one-way latency on a busy
        machine (docs/performance.md)."""
        if self.transport.threaded:
            raise RuntimeError("poll() drives the node itself: build it with Node(config, start=False)")
        self.transport.run_once(0.0 if self.transport.pending() else timeout)
        return self.recv_batch(max_n, buf)

    def receive(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message, waiting up to timeout seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._batch is not None and self._bi < self._batch.count:
                b, i = self._batch, self._bi
                self._bi += 1
                lab = int(b.labels[i])
                return Message(int(b.senders[i]), int(b.incs[i]), int(b.seqs[i]),
                               None if lab == NOLABEL else lab, b.payload(i), int(b.rx_times[i]),
                               int(b.streams[i]) if b.streams is not None else 0)
            # Payloads handed out earlier are memoryviews into the previous
            # batch's buffer and must stay valid: it is reused only when none
            # of them is still alive (a fresh, zeroed 1 MiB buffer per
            # message was most of receive()'s 30 us; bench/receive_cost.py).
            # An empty batch handed nothing out: its buffer is free whoever
            # refers to it.
            prev = self._batch
            free = prev is not None and (prev.count == 0 or not _buf_held(prev))
            buf = prev.buf if free else bytearray(RECEIVE_BUF)
            r = self.transport.take_receive(RECEIVE_BATCH, buf)
            k = r[0]
            if k == 1:
                # one message (a receiver waiting for each): plain ints, no arrays
                _, s, i, q, lab, t, off, ln, st = r
                self._batch, self._bi = Batch(1, None, None, None, None, None, None, None, buf), 1
                return Message(s, i, q, None if lab == NOLABEL else lab, memoryview(buf)[off:off + ln], t, st)
            if k or self.engine.node.recv_need <= len(buf):
                self._batch = Batch(*r[:8], buf, r[8])
            else:
                self._batch = self.recv_batch(RECEIVE_BATCH, buf)     # a large message: a buffer for it
            del buf         # (held here, it would look like a payload held on the next turn)
            self._bi = 0
            if self._batch.count:
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            self.wait(left)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to timeout seconds (None: until close()) until deliveries
        are pending, for recv_batch; True if they may be.  With
        Config.app_receive (the default) the calling thread reads the
        sockets and runs the data plane itself while it waits, after
        spinning up to Config.receive_spin_us: a message reaches it with one
        thread wake-up, not two (the loop thread's, then this one's); control
        messages in what it reads go to the loop thread."""
        if self._closed:
            # (a wait that close() ended already took its wake-up: another
            # would sleep on the eventfd forever)
            return False
        t = self.transport
        if t.app_receive:
            if self._spin >= 0:
                return t.app_wait(-1 if timeout is None else max(timeout, 0.0), self._spin) > 0
            # receive_mode "spin": in slices, so that signal handlers run
            # between them (a spinning wait makes no system call a signal ends)
            deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
            while True:
                left = SPIN_SLICE if deadline is None else min(SPIN_SLICE, deadline - time.monotonic())
                if t.app_wait(max(left, 0.0), -1.0):
                    return True
                if self._closed or (deadline is not None and time.monotonic() >= deadline):
                    return False
        return t.wait(-1 if timeout is None else min(max(timeout, 0.0), 0.1))

    def __iter__(self):
        while not self._closed:
            m = self.receive(timeout=0.1)
            if m is not None:
                yield m

    async def areceive(self) -> Message:
        """Await the next message (asyncio).  Woken by the node's delivery
        eventfd through the event loop's reader: no polling."""
        while True:
            m = self.receive(timeout=0)
            if m is not None:
                return m
            if self._closed:
                raise RuntimeError("this rpbcast Node is closed")
            # Nothing is pending now, so anything delivered from here on
            # moves the store and the loop thread signals the eventfd.
            await self._fd_ready(self.transport.fileno)
            self.transport.clear_signal()

    def __aiter__(self):
        return self

    async def __anext__(self) -> Message:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self.areceive()
        except RuntimeError:
            if self._closed:                    # closed while waiting: the iteration ends
                raise StopAsyncIteration from None
            raise

    def on_message(self, callback: Callable[[Message], None]):
        """Call callback(msg) for every delivery, from a dispatcher thread."""
        self._callbacks.append(callback)
        if self._dispatcher is None:
            self._dispatcher = threading.Thread(target=self._dispatch, name="rpbcast-dispatch", daemon=True)
            self._dispatcher.start()

    def _dispatch(self):
        while not self._closed:
            try:
                m = self.receive(timeout=0.1)
            except RuntimeError:
                if self._closed:
                    return          # closed while we waited
                raise
            if m is None:
                continue
            for cb in list(self._callbacks):
                cb(m)

    # ---- atomic delivery (docs/atomic.md) --------------------------------
    def _need_atomic(self) -> AtomicDelivery:
        if self._atomic is None:
            raise RuntimeError("atomic delivery is off: build the node with Config(atomic=True, state_dir=...)")
        return self._atomic

    def _propose(self, payload, timeout: Optional[float]):
        """Publish an atomic message's records (its PROPOSE, after the PART
        records of a payload larger than a datagram): (seq of the PROPOSE,
        timeout), seq None if back-pressure kept one out until the timeout
        passed."""
        ext = self._need_atomic()
        t = self.config.atomic_timeout if timeout is None else float(timeout)
        self.transport.lock()
        try:
            recs = ext.records(payload, t)
        finally:
            self.transport.unlock()
        give_up = time.monotonic() + t
        seq = None
        for record in recs:
            while True:
                try:
                    seq = self.transport.publish(record, ATOMIC_LABEL)
                    break
                except BlockingIOError:
                    if time.monotonic() >= give_up:
                        return None, t
                    time.sleep(0.001)
        return seq, t

    def _watch(self, seq, fn):
        self.transport.lock()
        try:
            if not self._atomic.watch(seq, fn, time.monotonic_ns()):
                raise RuntimeError(f"atomic proposal {seq} was published but not found")
        finally:
            self.transport.unlock()

    def publish_atomic(self, payload, timeout: Optional[float] = None) -> AtomicOutcome:
        """Multicast payload to every member or to none, and wait for the
        outcome: committed once every member of the group (as this node saw
        it now: the snapshot) has it on disk -- each then delivers it
        through receive_atomic, also after a crash -- or aborted (a NO, a
        member booted or gone, or no decision within timeout seconds,
        default Config.atomic_timeout), and then nobody delivers it."""
        seq, t = self._propose(payload, timeout)
        if seq is None:
            return AtomicOutcome(False, -1, "back-pressure: not published", 0, t)
        done = threading.Event()
        box = []

        def decided(outcome):
            box.append(outcome)
            done.set()

        self._watch(seq, decided)
        # the sender's own deadline decides at the latest; the slack covers a stalled loop
        if not done.wait(t + 30.0):
            raise TimeoutError(f"no decision on atomic proposal {seq}: is the node's loop running?")
        return box[0]

    async def apublish_atomic(self, payload, timeout: Optional[float] = None) -> AtomicOutcome:
        """publish_atomic, awaitable: the event loop runs while the group votes."""
        loop = asyncio.get_running_loop()
        seq, t = await loop.run_in_executor(None, self._propose, payload, timeout)
        if seq is None:
            return AtomicOutcome(False, -1, "back-pressure: not published", 0, t)
        fut = loop.create_future()

        def decided(outcome):
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(outcome))

        self._watch(seq, decided)
        return await asyncio.wait_for(fut, t + 30.0)

    def _take_atomic(self, max_n: int):
        ext = self._need_atomic()
        with self._atomic_mark:
            self.transport.lock()
            try:
                msgs = ext.take(max_n)
            finally:
                self.transport.unlock()
            try:
                ext.mark_delivered(msgs)    # durable before the application sees them
            except OSError:
                self.transport.lock()       # not handed over after all: they wait for the next call
                try:
                    ext.untake(msgs)
                finally:
                    self.transport.unlock()
                raise
        return msgs

    def receive_atomic(self, timeout: Optional[float] = None) -> Optional[AtomicMessage]:
        """The next committed atomic message (from any sender), waiting up
        to timeout seconds (None: forever).  Each is handed over once, also
        across a crash of this node."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msgs = self._take_atomic(1)
            if msgs:
                return msgs[0]
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            self.transport.wait(0.05 if left is None else min(left, 0.05))

    async def areceive_atomic(self) -> AtomicMessage:
        """Await the next committed atomic message."""
        loop = asyncio.get_running_loop()
        while True:
            msgs = self._take_atomic(1)
            if msgs:
                return msgs[0]
            fut = loop.create_future()
            fd = self.transport.fileno

            def ready():
                if not fut.done():
                    fut.set_result(None)

            loop.add_reader(fd, ready)
            try:
                await asyncio.wait_for(fut, 0.05)
            except asyncio.TimeoutError:
                pass
            finally:
                loop.remove_reader(fd)

    def atomic_snapshot(self, seq: int):
        """The member ids our proposal seq waited for (its snapshot), or None
        if this node no longer remembers it."""
        ext = self._need_atomic()
        self.transport.lock()
        try:
            p = ext.coordinator.get(seq)
            return None if p is None else sorted(p.snapshot)
        finally:
            self.transport.unlock()

    def atomic_delivered(self):
        """{(sender, inc, seq)} of the atomic messages handed to this node's
        application (its journal's record, across restarts, within the
        retention)."""
        ext = self._need_atomic()
        self.transport.lock()
        try:
            return set(ext.participant.delivered)
        finally:
            self.transport.unlock()

    def atomic_state(self) -> dict:
        """The atomic layer's counters and state (pending, in doubt, booted, latency)."""
        ext = self._need_atomic()
        self.transport.lock()
        try:
            return ext.state()
        finally:
            self.transport.unlock()

    # ---- membership -----------------------------------------------------
    def members(self):
        self.transport.lock()
        try:
            return [(m.node_id, netaddr.fmt_addr(m.addr) if m.addr else None, m.status, m.role)
                    for m in self.engine.members.entries()]
        finally:
            self.transport.unlock()

    def member_info(self) -> List[dict]:
        """Every member this node knows: id, addr, status, role, and how
        long ago it was last heard from (None: never -- a configured member
        that has not said a word is not known to be alive)."""
        from rpbcast.protocol.membership import STATUS_NAMES
        now = time.monotonic_ns()
        self.transport.lock()
        try:
            out = []
            for m in self.engine.members.entries():
                me = m.node_id == self.engine.id
                out.append({"id": m.node_id, "addr": netaddr.fmt_addr(m.addr) if m.addr else None,
                            "status": STATUS_NAMES.get(m.status, str(m.status)),
                            "role": "logger" if m.is_logger else "member", "self": me,
                            "last_heard_s": None if me or not m.last_heard else round((now - m.last_heard) / 1e9, 3)})
            return out
        finally:
            self.transport.unlock()

    def streams(self, limit: int = 256) -> List[dict]:
        """Per sender incarnation this node receives: how far it got, what it
        misses, duplicates, when it last heard from it (the most recently
        heard ``limit``)."""
        now = time.monotonic_ns()
        self.transport.lock()
        try:
            node = self.engine.node
            rows = [node.peer_info(slot) for slot, _, _ in node.peer_ids()]
        finally:
            self.transport.unlock()
        rows.sort(key=lambda r: r["last_heard"], reverse=True)
        out = []
        for r in rows[:limit]:
            heard = r["last_heard"]
            out.append({"sender": r["id"], "inc": r["inc"], "next": r["next"], "contiguous": r["contiguous"],
                        "missing": r["missing"], "received": r["rx_new"] + r["rx_fill"], "duplicates": r["rx_dup"],
                        "dead": r["dead"],
                        "last_heard_s": None if heard < 0 else round((now - heard) / 1e9, 3)})
        return out

    # ---- state ----------------------------------------------------------
    # ---- conflation (latest value per label) ----------------------------
    def latest(self, label: int, sender: Optional[int] = None):
        """The newest value of ``label`` -- from ``sender``, or the newest over
        all senders -- as (sender, inc, seq, payload bytes, rx time), or None.
        Needs ``Config.conflate``; obsolete values are never walked."""
        if not self.config.conflate:
            raise ValueError("conflation is off: set Config.conflate = 1 (or 2)")
        self.transport.lock()
        try:
            return self.engine.node.latest(label, sender)
        finally:
            self.transport.unlock()

    def snapshot(self) -> dict:
        """{(sender, label): (inc, seq, payload bytes)}: the latest value of
        every label seen (Config.conflate)."""
        if not self.config.conflate:
            raise ValueError("conflation is off: set Config.conflate = 1 (or 2)")
        self.transport.lock()
        try:
            return self.engine.node.snapshot()
        finally:
            self.transport.unlock()

    def extension_state(self, cls):
        """state() of the first extension of this class (under the node lock)."""
        self.transport.lock()
        try:
            for x in self.engine.extensions:
                if isinstance(x, cls):
                    return x.state()
            return None
        finally:
            self.transport.unlock()

    def take_trace(self):
        """Recorded trace events (a dict of NumPy columns) or None."""
        self.transport.lock()
        try:
            return self.engine.node.take_trace()
        finally:
            self.transport.unlock()

    def stats(self) -> dict:
        d = self.transport.stats()
        self.transport.lock()
        try:
            # per stream: {id: {subscribed, received, filtered, delivered, bytes}}
            d["by_stream"] = self.engine.node.stream_stats()
            d["reassembly"] = self.engine.node.frag_stats()
        finally:
            self.transport.unlock()
        # ids given up for good (lost, purged, unwanted), not counting those a
        # late starter skipped before its t_join (never its to deliver)
        d["lost"] = max(0, d.get("forgotten", 0) - d.get("t_join_skipped", 0))
        return d

    def commit(self, frontiers: dict) -> None:
        """Config.flow_commit: this application has made durable every
        message below ``frontier`` of each stream, ``{(sender, inc):
        frontier}``; its node's flow reports never go further, so a
        loggerless sender keeps what a crash could still cost this receiver
        (docs/api.md, "The loggerless guarantee")."""
        self.transport.lock()
        try:
            self.engine.commit(frontiers)
        finally:
            self.transport.unlock()

    def events(self) -> list:
        """The protocol's events for the application since the last call,
        oldest first (docs/api.md, "Events"): ("released", receiver, reason),
        ("restored", receiver, reason), ("lost", sender, inc, lo, hi),
        ("member", id, what[, reason]), ..."""
        self.transport.lock()
        try:
            evs = self.engine.events
            out = list(evs)
            evs.clear()
            return out
        finally:
            self.transport.unlock()

    def _serve_stats(self, path):
        import json
        import socket as _socket
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        srv = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(4)
        srv.settimeout(0.2)
        self._stats_sock = (srv, path)

        def loop():
            while not self._closed:
                try:
                    c, _ = srv.accept()
                except (TimeoutError, OSError):
                    continue
                with c:
                    try:
                        st = self.stats()
                        st["node_id"] = self.node_id
                        st["incarnation"] = self.incarnation
                        st["addr"] = self.addr
                        st["role"] = self.config.role
                        st["time"] = time.time()
                        st["members"] = self.members()
                        st["member_info"] = self.member_info()
                        st["streams"] = self.streams(64)
                        sb = self.send_buffer()
                        st["send_buffer"] = {"unacked": sb.unacked, "first": sb.first, "last": sb.last,
                                             "waiting_for": list(sb.waiting_for), "confirmed": sb.confirmed,
                                             "stalled": self.stalled}
                        c.sendall(json.dumps(st, default=str).encode())
                    except OSError:
                        pass

        threading.Thread(target=loop, name="rpbcast-stats", daemon=True).start()

    def close(self, linger: Optional[float] = None, *, report: bool = True) -> Optional[Drain]:
        """Drain, then stop the loop, flush the sockets and close them (a
        logger also syncs its log).  Draining: wait up to ``linger`` seconds
        (default Config.linger) until every published message is
        acknowledged (flush); what could not be drained is returned (a
        false Drain) and, unless ``report`` is false, logged as a warning.  Returns None for a node that
        publishes nothing it could wait for (a logger)."""
        if self._closed:
            return self._close_drain
        drain = None
        if self.config.role != "logger":
            drain = self.flush(self.config.linger if linger is None else linger)
            if not drain.drained and report:
                _log.warning(f"node {self.node_id} closing: {drain}")
        self._close_drain = drain
        self._report_final()
        self._closed = True
        self._stop.set()
        if self._stats_sock is not None:
            srv, path = self._stats_sock
            srv.close()
            try:
                os.unlink(path)
            except OSError:
                pass
        if self._atomic is not None:
            # pending proposals abort, announced: nobody stays in doubt
            self.transport.stop()
            self._atomic.close(time.monotonic_ns())
        # Tasks awaiting this node's eventfds wake (and then find it closed)
        # before the fds go away with the transport.
        for loop, fd in self._async_fds:
            try:
                loop.call_soon_threadsafe(_fd_wake, loop, fd)
            except RuntimeError:
                pass                    # that event loop is closed
        self._async_fds.clear()
        self.transport.close()
        if self._dispatcher is not None:
            self._dispatcher.join(timeout=1)
        # Drop the transport so its sockets close now (the port is free
        # again), and every later call says why it cannot work.
        self.transport = _ClosedTransport()
        if self.engine.logger is not None:
            self.engine.logger.log.sync()
            self.engine.logger.log.close()
        return drain

    def _report_final(self):
        """flow_control = "receivers": this node's frontier of every stream
        that moved since it last reported, sent before it closes (the last
        messages of a flowing stream are otherwise reported at its pause,
        which a closing node does not wait for)."""
        final = getattr(self.engine.send_buffer, "report_final", None)
        if final is None:
            return
        self.transport.lock()
        try:
            final(time.monotonic_ns())
        finally:
            self.transport.unlock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if not self._closed:
                self.transport.stop()
        except Exception:
            pass


# event loop -> {fd: futures waiting for it to turn readable} (Node._fd_ready)
_fd_waiters: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fd_wake(loop, fd):
    """fd turned readable (or its node closes): wake every task waiting on it."""
    waiters = _fd_waiters.get(loop, {})
    if fd in waiters:
        loop.remove_reader(fd)
        for f in waiters.pop(fd):
            if not f.done():
                f.set_result(None)


def _watch(ref, stop: threading.Event):
    """Say what a publisher waits for when nothing has been acknowledged
    for STALL_REPORT_AFTER seconds (a logger that is not there, or died):
    once, then every STALL_REPORT_EVERY seconds (Node.stalled meanwhile)."""
    w = {"acked": None, "since": None, "next_report": 0.0}
    while not stop.wait(WATCH_INTERVAL):
        node = ref()
        if node is None:
            return
        try:
            node._watch_once(w)
        except Exception:        # noqa: BLE001 -- closing under us
            return
        del node


def _reach_warnings(cfg: Config) -> List[str]:
    """Start-up warnings: members this configuration's multicast will not
    reach (rpbcast.tools.doctor has the whole diagnosis)."""
    try:
        from rpbcast.tools.doctor import reach_warnings
        return reach_warnings(cfg)
    except (OSError, ValueError):       # a host we cannot inspect: no warning rather than no node
        return []


class _ClosedTransport:
    """What a closed Node talks to: every use raises."""

    def __getattr__(self, name):
        raise RuntimeError("this rpbcast Node is closed")


class Logger(Node):
    """A logger service: keeps every message on disk in log_dir and serves
    repairs and late joiners from it."""

    def __init__(self, config: Config, *, start: bool = True):
        super().__init__(config.replace(role="logger"), start=start)
