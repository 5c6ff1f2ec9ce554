# cython: language_level=3, boundscheck=False, wraparound=False
"""The real-network driver: UDP sockets, the I/O loop thread, and the glue
to the engine's control plane.

The C loop (``csrc/loop.c``) receives datagram batches straight into the
node's data plane with the GIL released; it calls back into the engine (with
the GIL) only for control messages, due timers and immediate pulls, and it
sends the outbox with sendmmsg / UDP GSO.  The application publishes and
receives through this object from its own thread(s); a thread waiting for
deliveries (app_wait) reads the sockets itself while the loop thread leaves
them to it (docs/architecture.md, "Threads and locks").
"""
import logging
import os
import threading

import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.errno cimport errno
from posix.unistd cimport read, write, usleep

from rpbcast.core.csrc cimport *
from rpbcast.core.node cimport (Deliveries, Node, check_batch, labels_ptr, publish_label,
                                 published)

cnp.import_array()

log = logging.getLogger("rpbcast.drivers.udp")

# The raw-datagram path (engines whose driver_needs.data_plane_rx is False)
# receives into a batch of its own; csrc.pxd does not declare it.
cdef extern from "udpio.h" nogil:
    ctypedef struct rp_rxbatch_t:
        uint32_t cap
        uint32_t bufsize
        uint8_t *mem
        uint32_t n
        uint32_t *off
        uint32_t *len
        uint64_t *src
    int rp_rx_init(rp_rxbatch_t *b, uint32_t cap, int gro)
    void rp_rx_free(rp_rxbatch_t *b)
    int rp_sock_recv(rp_sock_t *s, rp_rxbatch_t *b)
    # IPv6 (the fields of rp_sockopt_t/rp_sock_t csrc.pxd does not declare)
    int rp_sock_open6(rp_sock_t *s, const rp_sockopt_t *o, const uint8_t *group6, const char **stage)
    void rp_sockopt_family(rp_sockopt_t *o, int family, const uint8_t *ip6, uint32_t scope)
    uint64_t rp_sock_addr(const rp_sock_t *s)
    int rp_sock_family(const rp_sock_t *s)
    uint64_t rp_sock_unresolved(const rp_sock_t *s)
    uint64_t rp_sock_unnamed(const rp_sock_t *s)
    int rp_sock_drop_own(rp_sock_t *s, uint32_t group, uint32_t id, uint32_t inc)
    int rp_sock_busy_poll(rp_sock_t *s, int usec)

cdef extern from "addr6.h" nogil:
    ctypedef struct rp_addr6_stats_t:
        uint64_t entries, pinned, cap, inserted, evicted, refused, stale
    uint64_t rp_addr6_intern(const uint8_t *ip, uint16_t port, uint32_t scope, int pin)
    int rp_addr6_lookup(uint64_t h, uint8_t *ip, uint16_t *port, uint32_t *scope)
    void rp_addr6_stats(rp_addr6_stats_t *st)
    int rp_addr6_reset(uint32_t cap)


# ---- IPv6 endpoint handles (csrc/addr6.h) --------------------------------
# The table lives in this extension (the C core is linked into each one), so
# rpbcast.netaddr reaches it through these.
def addr6_intern(bytes ip, uint16_t port, uint32_t scope=0, bint pin=False):
    """The 64-bit handle of [ip]:port%scope (0: the table refused it)."""
    if len(ip) != 16:
        raise ValueError("an IPv6 address is 16 bytes")
    return rp_addr6_intern(<const uint8_t *>ip, port, scope, pin)


def addr6_lookup(uint64_t h):
    """(ip bytes, port, scope) of a handle, or None if it is stale."""
    cdef uint8_t ip[16]
    cdef uint16_t port
    cdef uint32_t scope
    if rp_addr6_lookup(h, ip, &port, &scope) != 0:
        return None
    return bytes(ip[:16]), port, scope


def addr6_stats():
    cdef rp_addr6_stats_t st
    rp_addr6_stats(&st)
    return {"entries": st.entries, "pinned": st.pinned, "cap": st.cap, "inserted": st.inserted,
            "evicted": st.evicted, "refused": st.refused, "stale": st.stale}


def addr6_reset(uint32_t cap):
    """Empty the table and size it (tests); every old handle goes stale."""
    if rp_addr6_reset(cap) != 0:
        raise ValueError(f"addr6 table capacity must be 2..{1 << 20}, got {cap}")

RAW_MAX_WAIT_NS = 5_000_000     # the raw loop polls the sockets only: it looks at
                                # the timer a publish set at least this often
RAW_MAX_BATCHES = 16            # receive batches per socket per iteration
DEF RAW_YIELD_US = 50           # after an iteration with input: the application's turn
cdef extern from "sendwindow.h" nogil:
    enum:
        RP_EWINDOW
    ctypedef struct rp_sendwin_t:
        uint64_t limit
        int fd
        int waiting
        uint64_t n_closed, n_opened
    uint64_t rp_sendwin_in_flight(const rp_node_t *n)
    uint64_t rp_sendwin_room(const rp_sendwin_t *w, const rp_node_t *n)
    void rp_sendwin_closed(rp_sendwin_t *w)
    void rp_sendwin_signal(rp_sendwin_t *w)

cdef extern from "loop.h" nogil:
    rp_sendwin_t *rp_loop_window(rp_loop_t *l)
    void rp_loop_set_window(rp_loop_t *l, uint64_t limit)
    int rp_loop_window_poke(rp_loop_t *l)
    void rp_loop_control_time(const rp_loop_t *l, uint64_t *total_ns, uint64_t *max_ns)
    void rp_loop_after_take(rp_loop_t *l)
    uint64_t rp_loop_wait_room(rp_loop_t *l, int64_t timeout_ns, int own)
    void rp_loop_window_counts(const rp_loop_t *l, uint64_t *waits, uint64_t *rx)
    void rp_loop_set_publish_spin(rp_loop_t *l, int64_t spin_ns, int park)
    void rp_loop_window_spin_counts(const rp_loop_t *l, uint64_t *spun, uint64_t *sleeps)
    uint64_t rp_loop_take_count(const rp_loop_t *l)
    int rp_loop_app_poll(rp_loop_t *l)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum:
        POLLIN


class SocketError(OSError):
    """Opening a socket failed; ``stage`` names the step (bind, join...)."""

    def __init__(self, err, stage, what):
        import os
        self.stage = stage
        super().__init__(err, f"{what}: {stage} failed: {os.strerror(err)}")


def now_ns():
    return rp_now_ns()


cdef int64_t _control_cb(void *ctx, int64_t now, int why) noexcept with gil:
    cdef Transport t = <Transport>ctx
    try:
        r = t._on_control(now, why)
        rp_loop_window_poke(&t.loop)      # acknowledgments may have reopened the send window
        return r
    except BaseException:
        t.errors += 1
        log.exception("control plane error (node %s)", t.engine.id)
        return now + 10_000_000


cdef class Transport:
    cdef rp_sock_t mrx
    cdef rp_sock_t uc
    cdef bint have_mrx, have_uc, loop_ok
    cdef rp_loop_t loop
    cdef readonly object engine
    cdef Node node
    cdef object thread
    cdef public int errors
    cdef public bint fanout
    cdef readonly bint own_filter       # the kernel drops our own multicast copy
    cdef object _fan_version
    cdef uint64_t mcast_addr
    cdef bint raw, have_rawrx           # the engine takes raw datagrams (receive_datagrams)
    cdef rp_rxbatch_t rawrx
    cdef object _raw_rng
    cdef object _hb                     # the engine's heartbeats, when the loop sends the tail probe
    cdef readonly int busy_poll_us      # SO_BUSY_POLL as the kernel holds it (0: off)
    cdef readonly double publish_spin   # Config.publish_spin_us, in seconds

    def __cinit__(self):
        self.mrx.fd = -1
        self.uc.fd = -1
        self.have_mrx = self.have_uc = self.loop_ok = False
        self.raw = self.have_rawrx = False

    def __init__(self, engine, *, uint32_t group_ip, uint16_t group_port, uint32_t bind_ip,
                 uint16_t bind_port, uint32_t if_ip=0, int ifindex=0, int ttl=0, bint mloop=True,
                 int rcvbuf=8 << 20, int sndbuf=8 << 20, bint gro=True, bint gso=True,
                 bint timestamps=False, bint busy_poll=False, uint32_t rx_batch=64,
                 bint fanout=False, double drop_rate=0.0, uint64_t seed=0, bint app_receive=True,
                 int family=4, bytes group6=None, bytes bind6=None, uint32_t bind_scope=0,
                 bint drop_own=True, int busy_poll_us=0):
        """family 6: IPv6 -- bind6/bind_scope the unicast address, group6 the
        group (joined on ifindex, which IPv6 multicast needs); the *_ip
        arguments are then unused."""
        self.engine = None
        self.errors = 0
        self.fanout = fanout
        self._fan_version = None
        cdef rp_sockopt_t o
        cdef const char *stage = NULL
        cdef int rc
        o.ip = bind_ip
        o.port = bind_port
        o.if_ip = if_ip
        o.ifindex = ifindex
        o.rcvbuf = rcvbuf
        o.sndbuf = sndbuf
        o.ttl = ttl
        o.loop = mloop
        o.gro = gro
        o.timestamps = timestamps
        o.reuse = 0
        v6 = family == 6
        if v6 and (bind6 is None or len(bind6) != 16 or (not fanout and (group6 is None or len(group6) != 16))):
            raise ValueError("family 6 needs bind6 (and group6 unless fanout): 16-byte addresses")
        rp_sockopt_family(&o, family, <const uint8_t *>bind6 if v6 else NULL, bind_scope)
        rc = rp_sock_open(&self.uc, &o, 0, &stage)
        if rc < 0:
            raise SocketError(-rc, stage.decode(),
                              f"unicast socket {_fmt6(bind6, bind_port) if v6 else _fmt(bind_ip, bind_port)}")
        self.have_uc = True
        if not gso:
            self.uc.gso = 0
        if not fanout:
            o.ip = group_ip
            o.port = group_port
            o.reuse = 1
            if v6:
                # bound to the group itself (a link-local group needs the scope)
                rp_sockopt_family(&o, 6, <const uint8_t *>group6, ifindex)
                rc = rp_sock_open6(&self.mrx, &o, <const uint8_t *>group6, &stage)
            else:
                rc = rp_sock_open(&self.mrx, &o, group_ip, &stage)
            if rc < 0:
                raise SocketError(-rc, stage.decode(), f"multicast socket "
                                  f"{_fmt6(group6, group_port) if v6 else _fmt(group_ip, group_port)}")
            self.have_mrx = True
        if v6:
            self.mcast_addr = rp_addr6_intern(<const uint8_t *>group6, group_port, ifindex, 1) if group6 else 0
        else:
            self.mcast_addr = (<uint64_t>group_ip << 16) | group_port
        needs = engine.driver_needs
        # An engine that looks into the datagrams themselves (SRM hears
        # other members' repairs to suppress its own) gets them raw, through
        # receive_datagrams, from a loop of this driver's own (_raw_once);
        # the C loop's lock, app signal and publish path serve both.
        self.raw = not needs.data_plane_rx
        if self.raw:
            if rp_rx_init(&self.rawrx, rx_batch, gro):
                raise MemoryError()
            self.have_rawrx = True
            import random
            self._raw_rng = random.Random(seed or bind_port)
        self.node = engine.node
        # our own multicast, looped back for the other members on this host,
        # is dropped by a socket filter before it wakes anyone here (the node
        # would only count and discard it); a kernel that refuses the filter
        # leaves it to the node, as before
        self.own_filter = False
        if self.have_mrx and drop_own:
            self.own_filter = rp_sock_drop_own(&self.mrx, self.node.n.group, self.node.n.id,
                                               self.node.n.inc) == 0
        # SO_BUSY_POLL: receives poll the device queue (veth/NIC NAPI;
        # loopback has none) before they sleep
        self.busy_poll_us = 0
        if busy_poll_us:
            rc = rp_sock_busy_poll(&self.uc, busy_poll_us)
            if rc >= 0 and self.have_mrx:
                rc = rp_sock_busy_poll(&self.mrx, busy_poll_us)
            if rc < 0:
                raise SocketError(-rc, "SO_BUSY_POLL", "busy_poll_us")
            self.busy_poll_us = rc
        rc = rp_loop_init(&self.loop, &self.node.n, &self.mrx if self.have_mrx else NULL, &self.uc,
                          self.mcast_addr, rx_batch, busy_poll)
        if rc < 0:
            raise MemoryError() if rc == RP_ENOMEM else OSError(-rc, "loop init failed")
        self.loop_ok = True
        self.loop.every_rx = needs.every_rx
        # the application thread receives itself when it waits, unless the
        # loop spins anyway or the engine wants control after every batch
        self.loop.app_rx = app_receive and not busy_poll and not needs.every_rx
        self.loop.control = _control_cb
        self.loop.ctx = <void *>self
        self.loop.idle_after_ns = int(engine.cfg.idle_after * 1e9)
        # the tail probe is the loop's (C, either thread, no control call)
        hb = getattr(engine, "heartbeats", None)
        if hb is not None and hb.hand_probe_to_driver():
            self._hb = hb
            self.loop.probe_ns = hb.driver_probe_ns()
        # and the idle heartbeat's deadline (last publish + idle_after): a
        # control-plane timer on it, moved by every message, called the
        # control plane every idle_after for nothing while a stream lasted
        if hb is not None and not self.raw and hasattr(hb, "hand_idle_to_driver"):
            self.loop.idle_after_ns = hb.hand_idle_to_driver()
            self.loop.idle_driven = 1
        rp_loop_set_window(&self.loop, getattr(engine.cfg, "send_window", 0))
        self.loop.drop_rate = drop_rate
        self.loop.rng = seed or ((bind_port * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF)
        self.engine = engine
        self.loop.next_timer = engine.get_timer()
        if fanout:
            self._refresh_fanout()

    def __dealloc__(self):
        if self.loop_ok:
            self.loop.stop = 1
            rp_loop_free(&self.loop)
        if self.have_rawrx:
            rp_rx_free(&self.rawrx)
        if self.have_mrx:
            rp_sock_close(&self.mrx)
        if self.have_uc:
            rp_sock_close(&self.uc)

    # ---- addresses ------------------------------------------------------
    @property
    def addr(self):
        """This node's unicast address in the engine's 64-bit form (IPv6:
        a handle, rpbcast.netaddr)."""
        return rp_sock_addr(&self.uc)

    @property
    def port(self):
        return self.uc.port

    @property
    def fileno(self):
        """Readable when deliveries are waiting (for selectors/asyncio)."""
        return self.loop.app_fd

    # ---- the loop ---------------------------------------------------------
    def start(self, cpu=None):
        """Run the loop in a thread of its own (pinned to `cpu` when given)."""
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._run, args=(cpu,), name=f"rpbcast-{self.engine.id}",
                                       daemon=True)
        self.thread.start()
        self.set_publish_spin(self.publish_spin)    # (the loop thread may now park)

    def _run(self, cpu=None):
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})      # 0: this thread (Linux affinity is per thread)
        if self.raw:
            while not self.loop.stop:
                self._raw_once(-1)
            return
        with nogil:
            rp_loop_run(&self.loop)

    @property
    def threaded(self):
        """True once start() runs the loop in its own thread."""
        return self.thread is not None

    def run_once(self, double max_wait=0.0):
        """One loop iteration in the calling thread (no loop thread)."""
        cdef int64_t w = <int64_t>(max_wait * 1e9)
        cdef int k
        if self.raw:
            return self._raw_once(w)
        with nogil:
            k = rp_loop_once(&self.loop, w)
        return k

    def stop(self):
        if not self.loop_ok:
            return
        self.loop.stop = 1
        rp_loop_wake(&self.loop)
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        self.loop.stop = 0
        self.set_publish_spin(self.publish_spin)    # no loop thread: nobody parks

    def close(self):
        if self.loop_ok:
            rp_loop_close_waiters(&self.loop)   # a receiver waiting returns now
            rp_sendwin_signal(rp_loop_window(&self.loop))   # ... and a publisher waiting for room
        self.stop()
        if self.loop_ok:
            self.lock()
            try:
                rp_loop_flush(&self.loop)
            finally:
                self.unlock()

    def lock(self):
        with nogil:
            rp_loop_lock(&self.loop)

    def unlock(self):
        rp_loop_unlock(&self.loop)

    # ---- the raw-datagram loop ---------------------------------------------
    cdef int _raw_once(self, int64_t max_wait_ns) except -1:
        """One iteration for an engine fed raw datagrams: wait for input (at
        most until its timer, RAW_MAX_WAIT_NS, max_wait_ns), hand every batch
        to engine.receive_datagrams, run a due timer, send what it queued."""
        cdef pollfd p[2]
        cdef int nfd = 0, k, r, got = 0
        cdef uint32_t b
        cdef int64_t now = rp_now_ns()
        cdef int64_t wait = self.loop.next_timer - now
        cdef rp_sock_t *socks[2]
        cdef uint64_t one = 1
        if wait > RAW_MAX_WAIT_NS:
            wait = RAW_MAX_WAIT_NS
        if max_wait_ns >= 0 and wait > max_wait_ns:
            wait = max_wait_ns
        if wait < 0:
            wait = 0
        if self.have_mrx:
            socks[nfd] = &self.mrx
            p[nfd].fd = self.mrx.fd
            p[nfd].events = POLLIN
            p[nfd].revents = 0
            nfd += 1
        socks[nfd] = &self.uc
        p[nfd].fd = self.uc.fd
        p[nfd].events = POLLIN
        p[nfd].revents = 0
        nfd += 1
        with nogil:
            poll(p, nfd, <int>((wait + 999999) // 1000000))
            rp_loop_lock(&self.loop)
        self.loop.n_iter += 1
        self.loop.n_wakeups += 1
        e = self.engine
        try:
            for k in range(nfd):
                if not p[k].revents:
                    continue
                for b in range(RAW_MAX_BATCHES):
                    r = rp_sock_recv(socks[k], &self.rawrx)
                    if r <= 0:
                        break
                    got += r
                    self._raw_deliver(rp_now_ns())
                    if <uint32_t>r < self.rawrx.cap:
                        break
            now = rp_now_ns()
            if now >= self.loop.next_timer:
                e.handle_timer(now)
                self.loop.n_control += 1
            self.loop.next_timer = e.get_timer()
            self._raw_send()
            if got and rp_node_pending(&self.node.n):
                write(self.loop.app_fd, &one, 8)
        except BaseException:
            self.errors += 1
            log.exception("control plane error (node %s)", e.id)
            self.loop.next_timer = rp_now_ns() + 10_000_000
        finally:
            rp_loop_unlock(&self.loop)
        if got:
            # Mutex and GIL are not fair: a loop that finds input at once
            # again would take both back before the application's recv
            # (waiting for them) ever runs, and nothing is delivered.
            with nogil:
                usleep(RAW_YIELD_US)
        return got

    cdef _raw_deliver(self, int64_t now):
        """The batch in rawrx to the engine (less the in-process drops)."""
        cdef uint32_t n = self.rawrx.n
        if not n:
            return
        cdef size_t size = <size_t>self.rawrx.cap * self.rawrx.bufsize
        buf = np.asarray(<uint8_t[:size]>self.rawrx.mem)
        offs = np.asarray(<uint32_t[:n]>self.rawrx.off)
        lens = np.asarray(<uint32_t[:n]>self.rawrx.len)
        srcs = np.asarray(<uint64_t[:n]>self.rawrx.src)
        if self.loop.drop_rate > 0:
            keep = np.array([self._raw_rng.random() >= self.loop.drop_rate for _ in range(n)], dtype=bool)
            self.loop.n_dropped += int(n - keep.sum())
            offs, lens, srcs = offs[keep], lens[keep], srcs[keep]
            if not len(offs):
                return
        self.engine.receive_datagrams(buf, offs, lens, srcs, now)
        self.loop.n_control += 1
        self._raw_send()         # control bodies point into rawrx: answer before the next batch

    cdef _raw_send(self):
        """What the engine queued, in order: its own datagrams
        (datagrams_to_send: SRM's repairs start datagrams of their own),
        to the group (or the fan-out list) or one address."""
        cdef const uint8_t[::1] d
        cdef int r
        for dest, data in self.engine.datagrams_to_send():
            d = data
            if not d.shape[0]:
                continue
            if dest == RP_DEST_MCAST:
                if self.fanout:
                    for a in self._fan_addrs():
                        r = rp_sock_sendto(&self.uc, &d[0], d.shape[0], int(a))
                else:
                    r = rp_sock_sendto(&self.uc, &d[0], d.shape[0], self.mcast_addr)
            else:
                r = rp_sock_sendto(&self.uc, &d[0], d.shape[0], dest)
            if r < 0:
                self.uc.n_tx_errors += 1
        rp_loop_flush(&self.loop)

    def _on_control(self, int64_t now, int why):
        e = self.engine
        t = e.on_data_plane(now, control=bool(why & RP_WHY_CTL), gap=bool(why & RP_WHY_NACK),
                            timer=bool(why & RP_WHY_TIMER), rx=bool(why & RP_WHY_RX))
        if self.fanout and self._fan_version != e.members.version:
            self._refresh_fanout_locked()
        if self._hb is not None and why & RP_WHY_CTL:
            self.loop.probe_ns = self._hb.driver_probe_ns()     # >= 2 x RTT, as pongs come in
        return t

    def _fan_addrs(self):
        e = self.engine
        return np.array(sorted({m.addr for m in e.members.active() if m.addr}), dtype=np.uint64)

    def _refresh_fanout_locked(self):
        addrs = self._fan_addrs()
        cdef const uint64_t[::1] a = addrs
        if rp_loop_set_fanout_locked(&self.loop, &a[0] if len(addrs) else NULL, len(addrs)) != RP_OK:
            raise MemoryError()
        self._fan_version = self.engine.members.version

    def _refresh_fanout(self):
        addrs = self._fan_addrs()
        cdef const uint64_t[::1] a = addrs
        if rp_loop_set_fanout(&self.loop, &a[0] if len(addrs) else NULL, len(addrs)) != RP_OK:
            raise MemoryError()
        self._fan_version = self.engine.members.version

    # ---- application side -------------------------------------------------
    # The same checks and errors as the node face (rpbcast.core.node), here
    # under the loop lock and sent at once.
    def publish(self, const uint8_t[::1] payload not None, label=None, uint32_t stream=0):
        cdef uint64_t lab
        cdef uint8_t z = 0
        cdef const uint8_t *p = &payload[0] if payload.shape[0] else &z
        cdef uint64_t n = payload.shape[0]
        cdef int64_t seq
        publish_label(label, &lab)
        with nogil:
            seq = rp_loop_publish_ext(&self.loop, p, n, lab, stream)
        if seq == RP_EWINDOW:
            raise BlockingIOError(self._full_window())
        return published(seq, n, self.node.n.out.mtu)

    def _full_window(self):
        """Which window refused a publish, for its BlockingIOError."""
        self.lock()
        try:
            flow_full = self.node.n.flowack != NULL and rp_flowack_room(self.node.n.flowack, &self.node.n) == 0
        finally:
            self.unlock()
        if flow_full:
            cfg = self.engine.cfg
            also = f" or {cfg.flow_window_bytes:,} bytes" if cfg.flow_window_bytes else ""
            return (f"back-pressure: the flow window is full ({cfg.flow_window:,} messages{also} beyond "
                    f"what the slowest receiving application has taken; Config.flow_window"
                    f"{', flow_window_bytes' if also else ''})")
        return (f"back-pressure: the send window is full ({rp_loop_window(&self.loop).limit:,} "
                f"published messages not yet acknowledged; Config.send_window)")

    def publish_batch(self, const uint8_t[::1] payloads not None, const uint32_t[::1] lens not None,
                      const uint64_t[::1] labels=None, uint32_t stream=0):
        check_batch(payloads, lens, labels)
        cdef size_t k = lens.shape[0], done
        cdef const uint64_t *lp = labels_ptr(labels)
        cdef uint8_t z = 0
        with nogil:
            done = rp_loop_publish_batch_ext(&self.loop, &payloads[0] if payloads.shape[0] else &z,
                                             &lens[0] if k else NULL, lp, k, stream)
        return done

    # ---- the send window (back-pressure; csrc/sendwindow.h) ---------------
    @property
    def window_fd(self):
        """Readable once the send window reopened after a publish found it
        full (for selectors/asyncio); stays readable until a publish finds
        it full again."""
        return rp_loop_window(&self.loop).fd

    def set_window(self, uint64_t limit):
        """Change the send window's limit (0: none); waiters wake if that
        opened it."""
        with nogil:
            rp_loop_set_window(&self.loop, limit)

    def window_room(self, bint arm=False):
        """How many messages may be published now (None: no window).  With
        arm, a full window also arms the signal, as a refused publish does:
        window_fd turns readable once it reopens."""
        cdef uint64_t r
        with nogil:
            rp_loop_lock(&self.loop)
            r = rp_sendwin_room(rp_loop_window(&self.loop), &self.node.n)
            if r == 0 and arm:
                rp_sendwin_closed(rp_loop_window(&self.loop))
            rp_loop_unlock(&self.loop)
        return None if r == <uint64_t>-1 else r

    def window_state(self):
        """{limit, in_flight, closed, opened}: the window now and its counters."""
        cdef rp_sendwin_t *w = rp_loop_window(&self.loop)
        self.lock()
        try:
            return {"limit": w.limit, "in_flight": rp_sendwin_in_flight(&self.node.n),
                    "closed": w.n_closed, "opened": w.n_opened}
        finally:
            self.unlock()

    def wait_writable(self, double timeout):
        """Wait up to timeout seconds (< 0: forever) until a quarter of the
        windows is free again; True if there is room.  A threaded node with
        app_receive reads its sockets itself meanwhile (rp_loop_wait_room):
        the acknowledgment that reopens the window wakes this thread, not
        the loop thread and then this one through the window's eventfd."""
        cdef int64_t t = -1 if timeout < 0 else <int64_t>(timeout * 1e9)
        cdef int own = self.app_receive
        cdef uint64_t room
        with nogil:
            room = rp_loop_wait_room(&self.loop, t, own)
        return room > 0

    def set_publish_spin(self, double seconds):
        """Config.publish_spin_us: wait_writable polls the sockets and the
        window's eventfd this long (without the GIL or the node lock) before
        it sleeps; 0: it sleeps at once.  With a loop thread, that thread
        leaves the sockets to the publisher between its waits (loop.h)."""
        self.publish_spin = seconds if seconds > 0 else 0.0
        if self.loop_ok:
            rp_loop_set_publish_spin(&self.loop, <int64_t>(self.publish_spin * 1e9), self.thread is not None)
            rp_loop_wake(&self.loop)        # re-enter its wait with the new rule

    def recv_batch(self, size_t max_n, uint8_t[::1] buf not None, uint32_t[::1] streams=None):
        """Take up to max_n deliveries: (count, senders, incs, seqs, labels,
        rx_times, offs, lens); payloads land back to back in buf, stream ids
        in ``streams`` when given."""
        cdef Deliveries d = Deliveries(max_n)
        cdef size_t k
        with nogil:
            rp_loop_lock_app(&self.loop)
            k = d.take(&self.node.n, buf, rp_now_ns())
            if k:
                rp_loop_after_take(&self.loop)     # the flow window acknowledges what was taken
            rp_loop_unlock(&self.loop)
        d.copy_streams(streams, k)
        return d.result(k)

    cdef size_t _take_into(self, Deliveries d, size_t max_n, uint8_t[::1] buf):
        """Up to max_n deliveries into d's columns, under the node lock; the
        take acknowledges what it took to the flow window at once (every
        application take goes through here, so none is left out)."""
        cdef size_t k
        # receive_mode "spin": the sockets are this thread's between its waits,
        # so a take that finds nothing reads them (once) and takes again -- an
        # application that only takes, never waiting, is not left with what
        # arrived unread (the loop does not look while they are its own)
        cdef int tries = 2 if self.loop.app_owns_rx else 1
        with nogil:
            rp_loop_lock_app(&self.loop)    # a waiting take is let in within a few loop batches
            while True:
                k = rp_node_recv_ex(&self.node.n, max_n, &d.s_[0], &d.i_[0], &d.q_[0], &d.b_[0], &d.t_[0],
                                    &d.o_[0], &d.l_[0], &d.st_[0], &buf[0] if buf.shape[0] else NULL,
                                    buf.shape[0], rp_now_ns())
                tries -= 1
                if k or not tries or rp_loop_app_poll(&self.loop) <= 0:
                    break
            if k:
                rp_loop_after_take(&self.loop)
            if self.loop.app_owns_rx:
                # the sockets stay this thread's; a take of a few is lone
                # messages again (a stream's handover ends: this thread takes
                # without waiting while the loop reads, so no wait would end it)
                self.loop.app_seen_ns = rp_now_ns()
                if k < RP_APP_BUSY_BATCH:
                    self.loop.app_busy = 0
            rp_loop_unlock(&self.loop)
        return k

    def take(self, size_t max_n, uint8_t[::1] buf not None):
        """recv_batch for the application's calls: (count, senders, incs,
        seqs, labels, rx_times, offs, lens, streams), arrays of count
        entries.  The node fills columns kept per thread (_scratch) and only
        the count taken is copied out: a call that takes one message, or
        none, does not allocate eight arrays of max_n entries
        (bench/receive_cost.py: recv_batch(65536) of one message 7.6 -> 3.0
        us, of none 5.5 -> 1.1 us)."""
        if not max_n:
            return _NO_DELIVERIES
        cdef Deliveries d = _scratch(max_n)
        cdef size_t k = self._take_into(d, max_n, buf)
        if not k:
            return _NO_DELIVERIES
        return _copied(d, k)

    def take_receive(self, size_t max_n, uint8_t[::1] buf not None):
        """take for Node.receive: the same, but one message comes back as
        plain ints (count, sender, inc, seq, label, rx_time, off, len,
        stream), not nine arrays of one entry -- the common case of a
        receiver that waits for each message (~2 us of copies less)."""
        if not max_n:
            return _NO_DELIVERIES
        cdef Deliveries d = _scratch(max_n)
        cdef size_t k = self._take_into(d, max_n, buf)
        if not k:
            return _NO_DELIVERIES
        if k == 1:
            return (1, d.s_[0], d.i_[0], d.q_[0], d.b_[0], d.t_[0], d.o_[0], d.l_[0], d.st_[0])
        return _copied(d, k)

    def pending(self):
        cdef uint64_t k
        with nogil:
            rp_loop_lock(&self.loop)
            k = rp_node_pending(&self.node.n)
            rp_loop_unlock(&self.loop)
        return k

    def wait(self, double timeout):
        """Wait until deliveries may be waiting (or timeout); True if
        signalled."""
        cdef pollfd p
        cdef int r
        cdef uint64_t v
        p.fd = self.loop.app_fd
        p.events = POLLIN
        cdef int ms = -1 if timeout < 0 else <int>(timeout * 1000)
        with nogil:
            r = poll(&p, 1, ms)
            if r > 0:
                read(self.loop.app_fd, &v, 8)
        return r > 0

    @property
    def yield_batches(self):
        """Receive batches the loop thread does while an application take
        waits for the node lock before it hands the lock over (0: never;
        csrc/loop.c rp_loop_lock_app)."""
        return self.loop.yield_batches

    @yield_batches.setter
    def yield_batches(self, uint32_t n):
        self.loop.yield_batches = n

    @property
    def app_receive(self):
        """True when a waiting application thread receives from the
        sockets itself (rp_loop_app_wait); needs the loop thread."""
        return bool(self.loop.app_rx) and self.thread is not None

    def own_receive(self, bint on):
        """receive_mode "spin": the application thread is the receiver, also
        between its waits: for 10 ms after it last received (a wait or a
        take) the loop thread leaves the sockets to it (it still runs timers and control;
        an application away longer has them read by the loop again)."""
        # only with a loop thread: a node driven by run_once (Node.poll) is
        # its own loop, and must watch its sockets when it waits
        self.loop.app_owns_rx = 1 if on and self.loop.app_rx and self.thread is not None else 0
        if self.loop_ok:
            rp_loop_wake(&self.loop)        # re-enter its wait with the new rule

    @property
    def owns_receive(self):
        return bool(self.loop.app_owns_rx)

    def app_wait(self, double timeout, double spin=0.0):
        """Wait for deliveries, receiving from the sockets in this thread
        (spinning up to `spin` seconds first); timeout < 0: forever.
        Returns how many are pending (0: timed out or closing)."""
        cdef int64_t t = -1 if timeout < 0 else <int64_t>(timeout * 1e9)
        cdef int64_t s = <int64_t>(spin * 1e9)
        cdef uint64_t k
        with nogil:
            k = rp_loop_app_wait(&self.loop, t, s)
        return k

    def clear_signal(self):
        cdef uint64_t v
        with nogil:
            read(self.loop.app_fd, &v, 8)

    def stats(self):
        """Counters of the node, the sockets and the loop (a consistent
        snapshot, taken under the node lock)."""
        self.lock()
        try:
            d = self.engine.counters()
            d["traffic"] = self.engine.traffic()
            d["rx_reasons"] = self.node.rx_reasons()
        finally:
            self.unlock()
        d["sock"] = {
            "rx_dgrams": self.uc.n_rx_dgrams + (self.mrx.n_rx_dgrams if self.have_mrx else 0),
            "rx_calls": self.uc.n_rx_calls + (self.mrx.n_rx_calls if self.have_mrx else 0),
            "tx_dgrams": self.uc.n_tx_dgrams, "tx_calls": self.uc.n_tx_calls,
            "tx_gso_sends": self.uc.n_tx_gso, "tx_errors": self.uc.n_tx_errors,
            "family": rp_sock_family(&self.uc), "tx_unresolved": rp_sock_unresolved(&self.uc),
            "rx_unnamed": rp_sock_unnamed(&self.uc) + (rp_sock_unnamed(&self.mrx) if self.have_mrx else 0),
            "gso": self.uc.gso, "gro": bool(self.uc.gro or (self.have_mrx and self.mrx.gro)),
            "rcvbuf": self.mrx.rcvbuf if self.have_mrx else self.uc.rcvbuf, "sndbuf": self.uc.sndbuf,
            "timestamps": bool(self.uc.timestamps or (self.have_mrx and self.mrx.timestamps)),
        }
        cdef uint64_t ctl_ns, ctl_max, win_waits, win_rx, win_spun, win_sleeps
        rp_loop_control_time(&self.loop, &ctl_ns, &ctl_max)
        rp_loop_window_counts(&self.loop, &win_waits, &win_rx)
        rp_loop_window_spin_counts(&self.loop, &win_spun, &win_sleeps)
        d["loop"] = {"iterations": self.loop.n_iter, "wakeups": self.loop.n_wakeups,
                     "control_calls": self.loop.n_control, "tx_blocked": self.loop.n_tx_blocked,
                     "dropped_in_process": self.loop.n_dropped, "errors": self.errors,
                     "window_closed": rp_loop_window(&self.loop).n_closed,
                     "window_opened": rp_loop_window(&self.loop).n_opened,
                     # waits for room that found the windows closed, and socket reads
                     # by the publisher itself that found acknowledgments
                     "window_waits": win_waits, "window_rx": win_rx,
                     # of those waits, the ones that found room while spinning
                     # (Config.publish_spin_us), and the sleeps of all of them
                     "window_spun": win_spun, "window_sleeps": win_sleeps,
                     # application takes that took something (delivered / takes:
                     # the receiver's messages per take)
                     "takes": rp_loop_take_count(&self.loop),
                     # the receive path: app_signals counts loop -> application
                     # hops (eventfd writes); app_rx_* what the application
                     # thread received itself; handoffs, batches it passed to
                     # the loop for the control plane
                     "app_signals": self.loop.n_app_signals, "app_rx_dgrams": self.loop.n_app_rx_dgrams,
                     "app_rx_calls": self.loop.n_app_rx_calls, "app_handoffs": self.loop.n_app_handoffs,
                     "app_spins": self.loop.n_app_spins, "app_rx_empty": self.loop.n_app_rx_empty,
                     # control-plane calls a spinning wait ran itself (receive_mode
                     # "spin": its timers, control messages and gaps, no loop wake-up)
                     "app_control": self.loop.n_app_control,
                     "tail_probes": self.loop.n_probes,
                     # takes against the loop's receive batches (rp_loop_lock_app):
                     # turns the loop cut short for a waiting take, the most
                     # batches one take waited through, its longest wait
                     "app_yields": self.loop.n_app_yields, "app_lock_waits": self.loop.n_app_lock_waits,
                     "app_handover_timeouts": self.loop.n_handover_timeouts,
                     "app_wait_batches_max": self.loop.max_app_wait_batches,
                     "app_lock_wait_max_us": self.loop.max_app_lock_wait_ns / 1e3,
                     # time the control plane held the node lock (a receive waits that long)
                     "control_us": ctl_ns / 1e3, "control_max_us": ctl_max / 1e3}
        return d

    def sock_info(self):
        return {"rcvbuf": self.mrx.rcvbuf if self.have_mrx else self.uc.rcvbuf, "sndbuf": self.uc.sndbuf,
                "gro": bool(self.uc.gro or (self.have_mrx and self.mrx.gro)),
                "timestamps": bool(self.uc.timestamps or (self.have_mrx and self.mrx.timestamps))}

    def sendto(self, const uint8_t[::1] data not None, uint64_t addr):
        """Send one raw datagram from this node's socket (tests, tools)."""
        cdef int r = rp_sock_sendto(&self.uc, &data[0], data.shape[0], addr)
        if r < 0:
            raise OSError(-r, "sendto failed")


# Transport.take's columns: one Deliveries per thread, grown to the largest
# max_n asked up to SCRATCH_MAX_N (threads may take concurrently; each copies
# out what it took).
_tls = threading.local()
_NO_DELIVERIES = (0,) + tuple(np.empty(0, t) for t in (np.uint32, np.uint32, np.uint64, np.uint64, np.int64,
                                                         np.uint32, np.uint32, np.uint32))
for _a in _NO_DELIVERIES[1:]:
    _a.flags.writeable = False


DEF SCRATCH_MAX_N = 65536      # larger asks get columns of their own (not kept)


cdef Deliveries _scratch(size_t max_n):
    if max_n > SCRATCH_MAX_N:
        return Deliveries(max_n)
    cdef Deliveries d = getattr(_tls, "d", None)
    if d is None or d.max_n < max_n:
        d = Deliveries(max_n)
        _tls.d = d
    return d


def _fmt(uint32_t ip, uint16_t port):
    return f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}:{port}"


def _fmt6(bytes ip, uint16_t port):
    import ipaddress
    return f"[{ipaddress.IPv6Address(ip)}]:{port}"


cdef tuple _copied(Deliveries d, size_t k):
    """The first k entries of d's columns, copied out (d is per-thread
    scratch, reused by the next take)."""
    r = d.result(k)
    return (k, r[1].copy(), r[2].copy(), r[3].copy(), r[4].copy(), r[5].copy(), r[6].copy(),
            r[7].copy(), d.streams[:k].copy())
