# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Driving the engines, exactly as the UDP transport's I/O loop drives them
(csrc/loop.c, rpbcast/drivers/udp.pyx): the driver contract of
rpbcast/protocol/engine.py.

An engine whose ``driver_needs.data_plane_rx`` is set gets its datagrams
straight into the C data plane (``rp_node_rx``), and its control plane runs
(``on_data_plane``) only when the data plane queued control messages or
flagged a gap -- or after every datagram when ``driver_needs.every_rx``.
That is ``Engine.receive_datagram`` by construction.  Any other engine gets
``receive_datagram(data, addr, now)``.  Either way ``datagrams_to_send()``
(handed to forwarding) and ``get_timer()`` follow; a timer event calls
``handle_timer``.  A host whose delivery queue is full holds datagrams in
its input queue (inputq.pyx) until ``release``.
"""
from libc.stdint cimport INT64_MAX
from libc.stdlib cimport calloc, free
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

import numpy as np

from rpbcast.core.csrc cimport rp_node_rx, rp_out_pending
from rpbcast.core.node cimport Node
from rpbcast.sim.events cimport EV_TIMER
from rpbcast.sim.nodes cimport check_node
from rpbcast.sim.packets cimport pkt_t
from rpbcast.sim.wallclock cimport wall_ns

cdef int64_t NEVER = INT64_MAX


cdef class EngineDriver:
    def __cinit__(self, EventQueue ev not None, PacketPool pkts not None, Forwarder fwd not None,
                  Hosts hosts not None, InputQueues inq not None):
        cdef int k = hosts.n + 1
        cdef int v
        self.ev = ev
        self.pkts = pkts
        self.fwd = fwd
        self.hosts = hosts
        self.inq = inq
        self.n = hosts.n
        self.engs = <PyObject **>calloc(k, sizeof(PyObject *))
        self.nodes = <PyObject **>calloc(k, sizeof(PyObject *))
        self.mode = <uint8_t *>calloc(k, 1)
        self.timer_at = <int64_t *>calloc(k, sizeof(int64_t))
        self.calls = <uint64_t *>calloc(k, sizeof(uint64_t))
        if not self.engs or not self.nodes or not self.mode or not self.timer_at or not self.calls:
            raise MemoryError()
        for v in range(k):
            self.timer_at[v] = NEVER
        self.engines = [None] * k
        self._nodes = [None] * k

    def __dealloc__(self):
        free(self.engs); free(self.nodes); free(self.mode); free(self.timer_at); free(self.calls)

    # ---- set-up
    def attach(self, int v, engine, bint fast):
        """Drive engine at node v; fast: through the C data plane."""
        check_node(v, self.n)
        self.engines[v] = engine
        self._nodes[v] = None
        self.nodes[v] = <PyObject *>None
        self.engs[v] = <PyObject *>engine
        self.set_fast(v, fast)

    def set_fast(self, int v, bint fast):
        check_node(v, self.n)
        engine = self.engines[v]
        cdef uint8_t mode = 0
        if fast:
            needs = engine.driver_needs
            if not needs.data_plane_rx:
                raise ValueError(f"the engine at {v} must receive through receive_datagram "
                                 f"(driver_needs.data_plane_rx is False)")
            node = engine.node
            if not isinstance(node, Node):
                raise TypeError("the fast path needs engine.node to be an rpbcast.core.node.Node")
            self._nodes[v] = node
            self.nodes[v] = <PyObject *>node
            mode = MODE_DATA_PLANE | (MODE_EVERY_RX if needs.every_rx else 0)
        self.mode[v] = mode

    def is_fast(self, int v):
        check_node(v, self.n)
        return bool(self.mode[v])

    def node(self, int v):
        """The data plane of an engine driven through it."""
        check_node(v, self.n)
        if not self.mode[v]:
            raise ValueError(f"node {v} is not on the C path")
        return self._nodes[v]

    def stop_timer(self, int v):
        """The host at v went down: its timer does not run."""
        check_node(v, self.n)
        self.timer_at[v] = NEVER

    def call_counts(self):
        """Calls into each node's control plane (index = node)."""
        return np.array([self.calls[v] for v in range(self.n + 1)], np.int64)

    # ---- receiving
    cdef int host_rx(self, int v, int32_t i) except -1:
        """Hand packet i to the engine at v (now), unless v's delivery queue
        is full: then it waits in v's input queue."""
        cdef InputQueues inq = self.inq
        if inq.limit[v] >= 0 and self.hosts.up[v] and (inq.count[v] > 0 or inq.full(v)):
            self.pkts.p[i].refs += 1
            return inq.push(v, i)
        return self.host_rx_now(v, i)

    cdef int host_rx_now(self, int v, int32_t i) except -1:
        cdef pkt_t *p = &self.pkts.p[i]
        cdef bytes data = <bytes>p.data        # a new reference: survives the pool growing
        if not self.hosts.up[v]:
            return 0
        if self.mode[v]:
            return self.data_plane_rx(v, data, p.src)
        return self.engine_rx(v, data, p.src)

    cdef int data_plane_rx(self, int v, bytes data, int src) except -1:
        """The datagram goes to v's C data plane; the control plane runs
        only if the data plane asks (control messages, a gap) or the engine
        wants every datagram."""
        cdef Node node = <Node>self.nodes[v]
        cdef int64_t now = self.ev.now
        cdef int64_t w0
        rp_node_rx(&node.n, <const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), <uint64_t>src, now)
        self.n_fast_rx += 1
        if node.n.nctl or node.n.nack_pending or self.mode[v] & MODE_EVERY_RX:
            w0 = wall_ns()
            if node.n.nctl:
                self.n_ctl += 1
            self.calls[v] += 1
            (<object>self.engs[v]).on_data_plane(now, node.n.nctl > 0, node.n.nack_pending != 0, False, True)
            self.collect(v)
            self.arm(v)
            self.w_ctl += wall_ns() - w0
        elif rp_out_pending(&node.n.out):
            self.collect(v)
        return 0

    cdef int engine_rx(self, int v, bytes data, int src) except -1:
        """The engine's own receive_datagram."""
        cdef int64_t w0 = wall_ns()
        self.n_slow_rx += 1
        self.calls[v] += 1
        (<object>self.engs[v]).receive_datagram(data, src, self.ev.now)
        self.collect(v)
        self.arm(v)
        self.w_slow += wall_ns() - w0
        return 0

    def release(self, int v):
        """Hand v's held datagrams to its engine, in order, while its
        delivery queue is below the limit (call after the application read).
        Returns how many were handed over."""
        cdef int32_t i
        cdef int k = 0
        check_node(v, self.n)
        while self.inq.count[v] > 0:
            if self.hosts.up[v] and self.inq.full(v):
                break
            i = self.inq.pop(v)
            self.host_rx_now(v, i)
            self.pkts.unref(i)
            k += 1
        return k

    # ---- sending and timers
    cdef int collect(self, int v) except -1:
        """Send what the engine at v wants sent."""
        cdef object eng = <object>self.engs[v]
        cdef object out = eng.datagrams_to_send()
        cdef object item
        for item in out:
            dest, data = item
            self.fwd.send(v, <uint64_t>dest, data)
        return 0

    cdef int arm(self, int v) except -1:
        """Re-read the engine's timer."""
        cdef object eng = <object>self.engs[v]
        cdef int64_t t
        if not self.hosts.up[v]:
            return 0
        t = eng.get_timer()
        if t < self.ev.now:
            t = self.ev.now
        if t != self.timer_at[v]:
            self.timer_at[v] = t
            self.ev.push(t, EV_TIMER, v, 0, -1)
        return 0

    def flush(self, int v):
        """After touching engine v from Python: send its datagrams, re-read its timer."""
        check_node(v, self.n)
        if self.engs[v] == NULL:
            raise ValueError(f"no engine at node {v}")
        self.collect(v)
        self.arm(v)

    def start(self, int v):
        """Read engine v's first timer."""
        check_node(v, self.n)
        self.arm(v)

    cdef int fire_timer(self, int v, int64_t t) except -1:
        cdef object eng
        cdef int64_t nt
        cdef int64_t now = self.ev.now
        if not self.hosts.up[v] or self.timer_at[v] != t:
            self.n_stale_timer += 1
            return 0
        self.timer_at[v] = NEVER
        eng = <object>self.engs[v]
        self.n_timer += 1
        self.calls[v] += 1
        eng.handle_timer(now)
        self.collect(v)
        # a timer still due now would fire forever at the same instant: 1 ns later
        nt = eng.get_timer()
        if nt <= now:
            nt = now + 1
        if nt != self.timer_at[v] and self.hosts.up[v]:
            self.timer_at[v] = nt
            self.ev.push(nt, EV_TIMER, v, 0, -1)
        return 0
