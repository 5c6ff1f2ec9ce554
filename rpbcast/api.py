"""The Python API on real sockets.

    from rpbcast import Node, Config
    with Node(Config(node_id=1, members=[...])) as node:
        node.publish(b"hello")
        msg = node.receive(timeout=1.0)     # Message(sender, inc, seq, label, payload, rx_time)

High rates: ``publish_batch`` and ``recv_batch`` move many messages per call
with NumPy arrays and one payload buffer, no Python object per message.
Asyncio: ``await node.areceive()`` and ``async for msg in node``.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import os
import threading
import time
from typing import Callable, NamedTuple, Optional

import numpy as np

from rpbcast import netaddr
from rpbcast.config import Config, ConfigError, MemberSpec
from rpbcast.core.node import NOLABEL
from rpbcast.protocol.engine import Engine
from rpbcast.drivers.udp import SocketError, Transport

EPOCH_2024 = 1704067200
# receive(): messages fetched per refill, into a buffer of this many bytes
# (a refill stops early when the buffer is full; the rest waits)
RECEIVE_BATCH = 1024
RECEIVE_BUF = 1 << 20


class Message(NamedTuple):
    sender: int
    inc: int
    seq: int
    label: Optional[int]
    payload: memoryview
    rx_time: int          # ns, CLOCK_MONOTONIC (kernel receive time with timestamps on)


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

    def payload(self, i) -> memoryview:
        o = int(self.offs[i])
        return memoryview(self.buf)[o:o + int(self.lens[i])]


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
    if stage == "bind" and err == errno.EADDRINUSE:
        return ConfigError(f"{where} is already in use (another rpbcast node?): choose another port, "
                           f"or port 0 to pick a free one")
    if stage == "bind" and err == errno.EADDRNOTAVAIL:
        return ConfigError(f"{where}: that IP address is not on this host; use one of its addresses "
                           f"(e.g. 127.0.0.1)")
    if stage in ("IP_ADD_MEMBERSHIP", "IP_MULTICAST_IF") and err in (errno.ENODEV, errno.EADDRNOTAVAIL, errno.EINVAL):
        return ConfigError(f"cannot use interface {cfg.interface!r} for multicast ({os.strerror(err)}); "
                           f"interfaces here: {', '.join(netaddr.interfaces())}")
    if err == errno.EACCES:
        return ConfigError(f"{where}: permission denied for {stage}")
    return ConfigError(f"{where}: {stage} failed: {os.strerror(err)}")


class Node:
    """A group member on real UDP sockets."""

    def __init__(self, config: Config, *, start: bool = True, log=None, resume=None,
                 trace: int = 0, stats_socket: Optional[str] = None, extensions=()):
        """resume: {(sender, inc): first seq wanted} for a restarted receiver;
        trace: capacity of the event trace buffer (0 = off);
        stats_socket: a UNIX socket path where `rpbcast stat` reads live
        counters; extensions: engine extensions to run (e.g.
        rpbcast.protocol.gsgc.GsgcExtension()), every member running the same."""
        cfg = config.validate()
        gip, gport = netaddr.parse_hostport(cfg.group_addr)
        bip, bport = netaddr.parse_hostport(cfg.bind)
        ifname, ifindex, if_ip = (None, 0, 0)
        if cfg.transport == "multicast":
            try:
                ifname, ifindex, if_ip = netaddr.resolve_interface(cfg.interface)
            except netaddr.AddressError as e:
                raise ConfigError(str(e)) from None
            if not netaddr.multicast_route(ifname, gip):
                raise ConfigError(f"no multicast route for {cfg.group_addr.split(':')[0]} on {ifname}: "
                                  f"run `ip route add 224.0.0.0/4 dev {ifname}` (or use transport = 'unicast')")
        members = [MemberSpec(m.node_id, netaddr.addr_of(m.addr), m.role, m.rank) for m in cfg.members]
        inc = cfg.incarnation if cfg.incarnation is not None else _incarnation(cfg)
        ecfg = cfg.replace(members=members, incarnation=inc, addr=0)
        self.config = cfg
        # time.time_ns(): the MAC nonce counter of a keyed group starts at the
        # wall clock, beyond every counter an earlier run used (csrc/auth.h)
        self.engine = Engine(ecfg, time.monotonic_ns(), log=log, mac_counter0=time.time_ns())
        if resume:
            self.engine.resume(resume)
        if trace:
            self.engine.node.enable_trace(trace)
        for x in extensions:
            self.engine.add_extension(x)
        if cfg.conflate:
            self.engine.node.set_conflate(cfg.conflate)
        try:
            self.transport = Transport(
                self.engine, group_ip=gip, group_port=gport, bind_ip=bip, bind_port=bport,
                if_ip=if_ip, ifindex=ifindex, ttl=cfg.ttl, mloop=cfg.multicast_loop, rcvbuf=cfg.rcvbuf,
                sndbuf=cfg.sndbuf, gro=cfg.gro, gso=cfg.gso, timestamps=cfg.timestamps,
                busy_poll=cfg.busy_poll, rx_batch=cfg.rx_batch, fanout=cfg.transport == "unicast",
                drop_rate=cfg.drop_rate)
        except SocketError as e:
            where = cfg.bind if "unicast" in str(e) else cfg.group_addr
            raise _socket_error_to_config(e, cfg, where) from None
        self.engine.set_addr(self.transport.addr)
        info = self.transport.sock_info()
        self.warnings = []
        if cfg.rcvbuf and info["rcvbuf"] < cfg.rcvbuf:
            self.warnings.append(f"receive buffer capped at {info['rcvbuf']} bytes (asked {cfg.rcvbuf}): "
                                 f"raise net.core.rmem_max, or run as root")
        if cfg.sndbuf and info["sndbuf"] < cfg.sndbuf:
            self.warnings.append(f"send buffer capped at {info['sndbuf']} bytes (asked {cfg.sndbuf}): "
                                 f"raise net.core.wmem_max, or run as root")
        for w in self.warnings:
            import logging
            logging.getLogger("rpbcast").warning(w)
        self._batch = None
        self._bi = 0
        self._buf = bytearray(max(4 << 20, cfg.mtu * 4096))
        self._callbacks = []
        self._dispatcher = None
        self._closed = False
        self._stats_sock = None
        if stats_socket:
            self._serve_stats(stats_socket)
        if start:
            self.transport.start()

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
    def publish(self, payload, label: Optional[int] = None) -> int:
        """Multicast one message; returns its sequence number.  Raises
        BlockingIOError when back-pressure applies."""
        return self.transport.publish(payload, label)

    def publish_batch(self, payloads, lens=None, labels=None) -> int:
        """Publish many messages: ``payloads`` is one buffer with the
        messages back to back and ``lens`` their sizes (uint32), or a list of
        bytes.  Returns how many went out."""
        if lens is None:
            items = list(payloads)
            lens = np.fromiter((len(p) for p in items), np.uint32, len(items))
            payloads = b"".join(items)
        lens = np.ascontiguousarray(lens, dtype=np.uint32)
        if labels is not None:
            labels = np.ascontiguousarray(labels, dtype=np.uint64)
        # An oversize message ends the batch with an error, not silently:
        # the messages before it go out, and the error says how many did.
        if self._closed:
            raise RuntimeError("this rpbcast Node is closed")
        room = self.engine.node.max_body
        need = lens.astype(np.int64) + (8 if labels is not None else 0)
        big = np.flatnonzero(need > room)
        if len(big):
            k = int(big[0])
            done = self.transport.publish_batch(memoryview(payloads).cast("B"), lens[:k],
                                                labels[:k] if labels is not None else None) if k else 0
            if done == k:
                raise ValueError(f"message {k} is {int(lens[k])} bytes, larger than a datagram can carry "
                                 f"({room - (8 if labels is not None else 0)} bytes); "
                                 f"{done} of {len(lens)} messages were published")
            return done
        return self.transport.publish_batch(memoryview(payloads).cast("B"), lens, labels)

    # ---- receiving ------------------------------------------------------
    def recv_batch(self, max_n: int = 4096, buf: Optional[bytearray] = None) -> Batch:
        buf = buf if buf is not None else bytearray(max(len(self._buf), self.config.mtu * max_n))
        k, s, i, q, lab, t, off, ln = self.transport.recv_batch(max_n, buf)
        return Batch(k, s, i, q, lab, t, off, ln, buf)

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
                               None if lab == NOLABEL else lab, b.payload(i), int(b.rx_times[i]))
            # A fresh buffer per batch: payloads handed out earlier are
            # memoryviews into the previous one and must stay valid.  A
            # batch that came back empty handed nothing out: reuse it.
            prev = self._batch
            buf = prev.buf if prev is not None and prev.count == 0 else bytearray(RECEIVE_BUF)
            self._batch = self.recv_batch(RECEIVE_BATCH, buf)
            self._bi = 0
            if self._batch.count:
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            self.transport.wait(-1 if left is None else min(left, 0.1) if self.transport else left)

    def __iter__(self):
        while not self._closed:
            m = self.receive(timeout=0.1)
            if m is not None:
                yield m

    async def areceive(self) -> Message:
        """Await the next message (asyncio)."""
        loop = asyncio.get_running_loop()
        while True:
            m = self.receive(timeout=0)
            if m is not None:
                return m
            fut = loop.create_future()
            fd = self.transport.fileno

            def ready():
                if not fut.done():
                    fut.set_result(None)

            loop.add_reader(fd, ready)
            try:
                await asyncio.wait_for(fut, 0.1)
            except asyncio.TimeoutError:
                pass
            finally:
                loop.remove_reader(fd)
            self.transport.clear_signal()

    def __aiter__(self):
        return self

    async def __anext__(self) -> Message:
        if self._closed:
            raise StopAsyncIteration
        return await self.areceive()

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

    # ---- membership -----------------------------------------------------
    def members(self):
        self.transport.lock()
        try:
            return [(m.node_id, netaddr.fmt_addr(m.addr) if m.addr else None, m.status, m.role)
                    for m in self.engine.members.entries()]
        finally:
            self.transport.unlock()

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
        return self.transport.stats()

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
                        c.sendall(json.dumps(st, default=str).encode())
                    except OSError:
                        pass

        threading.Thread(target=loop, name="rpbcast-stats", daemon=True).start()

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._stats_sock is not None:
            srv, path = self._stats_sock
            srv.close()
            try:
                os.unlink(path)
            except OSError:
                pass
        self.transport.close()
        if self._dispatcher is not None:
            self._dispatcher.join(timeout=1)
        # Drop the transport so its sockets close now (the port is free
        # again), and every later call says why it cannot work.
        self.transport = _ClosedTransport()
        if self.engine.logger is not None:
            self.engine.logger.log.sync()
            self.engine.logger.log.close()

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


class _ClosedTransport:
    """What a closed Node talks to: every use raises."""

    def __getattr__(self, name):
        raise RuntimeError("this rpbcast Node is closed")


class Logger(Node):
    """A logger service: keeps every message on disk in log_dir and serves
    repairs and late joiners from it."""

    def __init__(self, config: Config, *, start: bool = True):
        super().__init__(config.replace(role="logger"), start=start)
