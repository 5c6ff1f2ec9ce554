# cython: language_level=3, boundscheck=False, wraparound=False
"""The real-network driver: UDP sockets, the I/O loop thread, and the glue
to the engine's control plane.

The C loop (``csrc/loop.c``) receives datagram batches straight into the
node's data plane with the GIL released; it calls back into the engine (with
the GIL) only for control messages, due timers and immediate pulls, and it
sends the outbox with sendmmsg / UDP GSO.  The application publishes and
receives through this object from its own thread(s).
"""
import logging
import threading

import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.errno cimport errno
from posix.unistd cimport read

from rpbcast.core.csrc cimport *
from rpbcast.core.node cimport (Deliveries, Node, check_batch, labels_ptr, publish_label,
                                 published)

cnp.import_array()

log = logging.getLogger("rpbcast.drivers.udp")

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
        return t._on_control(now, why)
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
    cdef object _fan_version
    cdef uint64_t mcast_addr

    def __cinit__(self):
        self.mrx.fd = -1
        self.uc.fd = -1
        self.have_mrx = self.have_uc = self.loop_ok = False

    def __init__(self, engine, *, uint32_t group_ip, uint16_t group_port, uint32_t bind_ip,
                 uint16_t bind_port, uint32_t if_ip=0, int ifindex=0, int ttl=0, bint mloop=True,
                 int rcvbuf=8 << 20, int sndbuf=8 << 20, bint gro=True, bint gso=True,
                 bint timestamps=False, bint busy_poll=False, uint32_t rx_batch=64,
                 bint fanout=False, double drop_rate=0.0, uint64_t seed=0):
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
        rc = rp_sock_open(&self.uc, &o, 0, &stage)
        if rc < 0:
            raise SocketError(-rc, stage.decode(), f"unicast socket {_fmt(bind_ip, bind_port)}")
        self.have_uc = True
        if not gso:
            self.uc.gso = 0
        if not fanout:
            o.ip = group_ip
            o.port = group_port
            o.reuse = 1
            rc = rp_sock_open(&self.mrx, &o, group_ip, &stage)
            if rc < 0:
                raise SocketError(-rc, stage.decode(), f"multicast socket {_fmt(group_ip, group_port)}")
            self.have_mrx = True
        self.mcast_addr = (<uint64_t>group_ip << 16) | group_port
        needs = engine.driver_needs
        if not needs.data_plane_rx:
            raise ValueError(f"{type(engine).__name__} must receive through receive_datagram "
                             f"(driver_needs.data_plane_rx is False): the C loop cannot drive it")
        self.node = engine.node
        rc = rp_loop_init(&self.loop, &self.node.n, &self.mrx if self.have_mrx else NULL, &self.uc,
                          self.mcast_addr, rx_batch, busy_poll)
        if rc < 0:
            raise MemoryError() if rc == RP_ENOMEM else OSError(-rc, "loop init failed")
        self.loop_ok = True
        self.loop.every_rx = needs.every_rx
        self.loop.control = _control_cb
        self.loop.ctx = <void *>self
        self.loop.idle_after_ns = int(engine.cfg.idle_after * 1e9)
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
        if self.have_mrx:
            rp_sock_close(&self.mrx)
        if self.have_uc:
            rp_sock_close(&self.uc)

    # ---- addresses ------------------------------------------------------
    @property
    def addr(self):
        """This node's unicast address in the engine's 64-bit form."""
        return (<uint64_t>self.uc.ip << 16) | self.uc.port

    @property
    def port(self):
        return self.uc.port

    @property
    def fileno(self):
        """Readable when deliveries are waiting (for selectors/asyncio)."""
        return self.loop.app_fd

    # ---- the loop ---------------------------------------------------------
    def start(self):
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._run, name=f"rpbcast-{self.engine.id}", daemon=True)
        self.thread.start()

    def _run(self):
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

    def close(self):
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

    def _on_control(self, int64_t now, int why):
        e = self.engine
        t = e.on_data_plane(now, control=bool(why & RP_WHY_CTL), gap=bool(why & RP_WHY_NACK),
                            timer=bool(why & RP_WHY_TIMER), rx=bool(why & RP_WHY_RX))
        if self.fanout and self._fan_version != e.members.version:
            self._refresh_fanout_locked()
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
        return published(seq, n, self.node.n.out.mtu)

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

    def recv_batch(self, size_t max_n, uint8_t[::1] buf not None, uint32_t[::1] streams=None):
        """Take up to max_n deliveries: (count, senders, incs, seqs, labels,
        rx_times, offs, lens); payloads land back to back in buf, stream ids
        in ``streams`` when given."""
        cdef Deliveries d = Deliveries(max_n)
        cdef size_t k
        with nogil:
            rp_loop_lock(&self.loop)
            k = d.take(&self.node.n, buf, rp_now_ns())
            rp_loop_unlock(&self.loop)
        d.copy_streams(streams, k)
        return d.result(k)

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
            "gso": self.uc.gso, "gro": bool(self.uc.gro or (self.have_mrx and self.mrx.gro)),
            "rcvbuf": self.mrx.rcvbuf if self.have_mrx else self.uc.rcvbuf, "sndbuf": self.uc.sndbuf,
            "timestamps": bool(self.uc.timestamps or (self.have_mrx and self.mrx.timestamps)),
        }
        d["loop"] = {"iterations": self.loop.n_iter, "wakeups": self.loop.n_wakeups,
                     "control_calls": self.loop.n_control, "tx_blocked": self.loop.n_tx_blocked,
                     "dropped_in_process": self.loop.n_dropped, "errors": self.errors}
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


def _fmt(uint32_t ip, uint16_t port):
    return f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}:{port}"
