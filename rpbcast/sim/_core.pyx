# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The simulator's event loop, in C (docs/simulator.md).

One binary heap of plain structs ordered by (virtual time, insertion
number), so events at the same time run in the order they were scheduled
and a run is a pure function of its inputs.  Packets are structs holding a
reference to the datagram's bytes object; a multicast datagram is one object
shared by every copy.  Links are FIFO queues per direction: serialisation
size/bandwidth after the packets ahead, then propagation latency; a queue
limit drops arrivals that find the buffer full.  Per-hop router processing,
per-host send/receive CPU costs, and uniform / Gilbert-Elliott loss per link
direction or per receiving host are optional.

Engines are driven through the driver contract, exactly as the UDP
transport's I/O loop drives them (csrc/loop.c, rpbcast/drivers/udp.pyx): an
engine whose ``driver_needs.data_plane_rx`` is set gets its datagrams
straight into the C data plane (``rp_node_rx``), and its control plane runs
(``on_data_plane``) only when the data plane queued control messages or
flagged a gap -- or after every datagram when ``driver_needs.every_rx``.
That is ``Engine.receive_datagram`` by construction.  Any other engine gets
``receive_datagram(data, addr, now)``.  Either way ``datagrams_to_send()``
and ``get_timer()`` follow.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT64_MAX
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memset, memcpy
from libc.math cimport llround
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_Check
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

import numpy as np
cimport numpy as cnp

from rpbcast.core.node cimport Node
from rpbcast.core.csrc cimport rp_node_rx, rp_out_pending, rp_node_recv, rp_node_pending, rp_srbq_t

cnp.import_array()


# event kinds
cdef enum:
    EV_ARRIVE = 0      # a packet reaches the far end of a link
    EV_FORWARD = 1     # router processing done: forward it
    EV_HOSTRX = 2      # host receive processing done: hand it to the engine
    EV_HOSTTX = 3      # host send processing done: it leaves on its first link(s)
    EV_TIMER = 4       # the engine's timer
    EV_CALL = 5        # a Python callable

# packet classes (first message type of the datagram)
cdef enum:
    CLS_DATA = 0
    CLS_REPAIR = 1
    CLS_CONTROL = 2
    NCLS = 3

# loss model kinds
cdef enum:
    LOSS_NONE = 0
    LOSS_UNIFORM = 1
    LOSS_GE = 2

CLASSES = ("data", "repair", "control")
KIND_NONE, KIND_UNIFORM, KIND_GE = LOSS_NONE, LOSS_UNIFORM, LOSS_GE

cdef uint64_t DEST_MCAST = 0xFFFFFFFFFFFFFFFF
# fast[v]: 0 = receive_datagram; FAST_RX = the C data plane, then
# on_data_plane on control or gap; FAST_EVERY = ... and after every datagram
cdef enum:
    FAST_RX = 1
    FAST_EVERY = 2
cdef int64_t NEVER = INT64_MAX


ctypedef struct ev_t:
    int64_t t
    uint64_t seq
    int32_t kind
    int32_t node
    int32_t arg        # packet index, or call id
    int32_t link       # ARRIVE: the link it came over


ctypedef struct pkt_t:
    PyObject *data
    int64_t t0
    int32_t src
    int32_t dst        # 0: multicast
    int32_t len        # datagram bytes
    int32_t wire       # bytes on a link (datagram + header_bytes)
    int32_t refs       # events that still refer to it
    int32_t cls
    int32_t next_free


ctypedef struct chan_t:   # one loss channel: a link direction or a receiving host
    int32_t kind
    int32_t state        # Gilbert-Elliott: 0 good, 1 bad
    uint32_t classes     # bit mask of packet classes the model applies to
    double p             # uniform: loss probability; GE: P(good -> bad)
    double r             # GE: P(bad -> good)
    double loss_good
    double loss_bad
    uint64_t seen
    uint64_t lost
    uint64_t bad_pkts


ctypedef struct link_t:
    int32_t a, b
    int64_t lat
    double ns_per_byte   # 8e9 / bandwidth; 0 = no serialisation
    int32_t limit        # packets that may wait (not counting the one on the wire); -1 = no limit
    int64_t busy_until
    int64_t *ring        # finish times of the packets in the queue, FIFO
    int32_t rcap, rhead, rcount
    int64_t last_t
    double qarea         # integral of waiting packets over time (packet * ns)
    int64_t busy_ns
    uint64_t pkts[NCLS]
    uint64_t bytes[NCLS]
    uint64_t drops
    uint64_t drop_bytes
    uint64_t drops_cls[NCLS]
    int32_t max_wait
    chan_t loss


cdef inline int64_t wall_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline bint ev_less(ev_t *a, ev_t *b) noexcept nogil:
    return a.t < b.t or (a.t == b.t and a.seq < b.seq)


cdef class Core:
    # ---- nodes ------------------------------------------------------------
    cdef readonly int n                    # nodes are 1..n
    cdef int64_t *proc_ns                  # router processing per node
    cdef int64_t *cpu_free                 # host CPU busy until
    cdef double *send_a                    # host send cost ns = send_a + send_b * bytes
    cdef double *send_b
    cdef double *recv_f                    # receive cost = recv_f * send cost
    cdef uint8_t *member                   # receives multicast
    cdef uint8_t *up                       # host running
    cdef uint8_t *fast                     # engine driven through the C data plane: FAST_RX (| FAST_EVERY)
    cdef int64_t *timer_at
    cdef chan_t *rxloss                    # per receiving host
    cdef uint64_t *h_rx_pkts
    cdef uint64_t *h_rx_bytes
    cdef uint64_t *h_tx_pkts
    cdef uint64_t *h_tx_bytes
    cdef uint64_t *h_rx_cls
    cdef uint64_t *h_tx_cls
    cdef uint64_t *h_calls                 # Python control-plane calls per node
    cdef int64_t *h_busy_ns
    cdef PyObject **engs                   # borrowed from self.engines
    cdef PyObject **nodes                  # borrowed from self._nodes (rpbcast.core.node.Node or None)
    cdef readonly list engines
    cdef list _nodes

    # ---- links and routes -------------------------------------------------
    cdef readonly int nlinks
    cdef link_t *links
    cdef int32_t **mc_off                  # per source: CSR of tree children links
    cdef int32_t **mc_links
    cdef int32_t **uc_next                 # per destination: link from each node toward it
    cdef public object route_cb            # route_cb(kind, node): install a missing route

    # ---- events and packets -----------------------------------------------
    cdef ev_t *heap
    cdef size_t nheap, hcap
    cdef uint64_t evseq
    cdef pkt_t *pkts
    cdef int32_t npkts, pcap, free_head
    cdef readonly int64_t now
    cdef bint stopped
    cdef dict calls
    cdef int32_t next_call
    cdef int32_t header_bytes
    cdef object rand                       # random.Random().random of the network
    cdef public object send_filter         # (src, dest, data) -> True to drop at the sender

    # ---- counters ---------------------------------------------------------
    cdef readonly uint64_t n_events, n_arrive, n_timer, n_call, n_fast_rx, n_slow_rx, n_ctl
    cdef readonly uint64_t n_unroutable, n_filtered, n_sent, n_freed, n_stale_timer
    cdef readonly int64_t max_heap
    # wall-clock ns spent in Python engine calls (and everything they cause)
    cdef readonly int64_t w_timer, w_ctl, w_slow, w_call, w_run
    # ---- bounded delivery queues (slow consumers; off unless set_rx_limit) ---
    cdef int64_t *rx_limit                 # per node: -1 = none, else queued messages that stop receiving
    cdef int32_t **hq                      # per node: FIFO ring of held packets (indices into pkts)
    cdef int32_t *hq_cap
    cdef int32_t *hq_head
    cdef int32_t *hq_cnt
    cdef uint64_t *h_held                  # packets that had to wait
    cdef int32_t *h_held_max               # most packets waiting at once
    cdef PyObject **lnodes                 # borrowed from self._lnodes (Node of limited hosts)
    cdef list _lnodes

    def __cinit__(self, int n, int nlinks):
        cdef int k = n + 1
        self.n = n
        self.nlinks = nlinks
        self.proc_ns = <int64_t *>calloc(k, sizeof(int64_t))
        self.cpu_free = <int64_t *>calloc(k, sizeof(int64_t))
        self.send_a = <double *>calloc(k, sizeof(double))
        self.send_b = <double *>calloc(k, sizeof(double))
        self.recv_f = <double *>calloc(k, sizeof(double))
        self.member = <uint8_t *>calloc(k, 1)
        self.up = <uint8_t *>calloc(k, 1)
        self.fast = <uint8_t *>calloc(k, 1)
        self.timer_at = <int64_t *>calloc(k, sizeof(int64_t))
        self.rxloss = <chan_t *>calloc(k, sizeof(chan_t))
        self.h_rx_pkts = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.h_rx_bytes = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.h_tx_pkts = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.h_tx_bytes = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.h_rx_cls = <uint64_t *>calloc(k * NCLS, sizeof(uint64_t))
        self.h_tx_cls = <uint64_t *>calloc(k * NCLS, sizeof(uint64_t))
        self.h_calls = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.h_busy_ns = <int64_t *>calloc(k, sizeof(int64_t))
        self.engs = <PyObject **>calloc(k, sizeof(PyObject *))
        self.nodes = <PyObject **>calloc(k, sizeof(PyObject *))
        self.links = <link_t *>calloc(nlinks if nlinks else 1, sizeof(link_t))
        self.mc_off = <int32_t **>calloc(k, sizeof(int32_t *))
        self.mc_links = <int32_t **>calloc(k, sizeof(int32_t *))
        self.uc_next = <int32_t **>calloc(k, sizeof(int32_t *))
        self.rx_limit = <int64_t *>malloc(k * sizeof(int64_t))
        self.hq = <int32_t **>calloc(k, sizeof(int32_t *))
        self.hq_cap = <int32_t *>calloc(k, sizeof(int32_t))
        self.hq_head = <int32_t *>calloc(k, sizeof(int32_t))
        self.hq_cnt = <int32_t *>calloc(k, sizeof(int32_t))
        self.h_held = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.h_held_max = <int32_t *>calloc(k, sizeof(int32_t))
        self.lnodes = <PyObject **>calloc(k, sizeof(PyObject *))
        if (not self.rx_limit or not self.hq or not self.hq_cap or not self.hq_head or not self.hq_cnt
                or not self.h_held or not self.h_held_max or not self.lnodes):
            raise MemoryError()
        self.hcap = 1024
        self.heap = <ev_t *>malloc(self.hcap * sizeof(ev_t))
        self.pcap = 1024
        self.pkts = <pkt_t *>malloc(self.pcap * sizeof(pkt_t))
        if (not self.proc_ns or not self.cpu_free or not self.send_a or not self.send_b or not self.recv_f
                or not self.member or not self.up or not self.fast or not self.timer_at or not self.rxloss
                or not self.h_rx_pkts or not self.h_rx_bytes or not self.h_tx_pkts or not self.h_tx_bytes
                or not self.h_rx_cls or not self.h_tx_cls or not self.h_calls or not self.h_busy_ns
                or not self.engs or not self.nodes or not self.links or not self.mc_off
                or not self.mc_links or not self.uc_next or not self.heap or not self.pkts):
            raise MemoryError()
        cdef int i
        for i in range(k):
            self.timer_at[i] = NEVER
            self.rxloss[i].classes = 0xFFFFFFFF
            self.rx_limit[i] = -1
        self.npkts = 0
        self.free_head = -1
        self.nheap = 0
        self.evseq = 0

    def __init__(self, int n, int nlinks):
        self.engines = [None] * (n + 1)
        self._nodes = [None] * (n + 1)
        self._lnodes = [None] * (n + 1)
        self.calls = {}
        self.next_call = 0
        self.route_cb = None
        self.send_filter = None
        self.rand = None
        self.header_bytes = 0
        self.now = 0
        self.stopped = False

    def __dealloc__(self):
        cdef int i
        if self.pkts != NULL:
            for i in range(self.npkts):
                if self.pkts[i].data != NULL:
                    Py_DECREF(<object>self.pkts[i].data)
                    self.pkts[i].data = NULL
        for i in range(self.nlinks):
            free(self.links[i].ring)
        for i in range(self.n + 1):
            if self.mc_off != NULL:
                free(self.mc_off[i])
                free(self.mc_links[i])
            if self.uc_next != NULL:
                free(self.uc_next[i])
            if self.hq != NULL:
                free(self.hq[i])
        free(self.proc_ns); free(self.cpu_free); free(self.send_a); free(self.send_b); free(self.recv_f)
        free(self.member); free(self.up); free(self.fast); free(self.timer_at); free(self.rxloss)
        free(self.h_rx_pkts); free(self.h_rx_bytes); free(self.h_tx_pkts); free(self.h_tx_bytes)
        free(self.h_rx_cls); free(self.h_tx_cls); free(self.h_calls); free(self.h_busy_ns)
        free(self.engs); free(self.nodes); free(self.links); free(self.mc_off); free(self.mc_links)
        free(self.uc_next); free(self.heap); free(self.pkts)
        free(self.rx_limit); free(self.hq); free(self.hq_cap); free(self.hq_head); free(self.hq_cnt)
        free(self.h_held); free(self.h_held_max); free(self.lnodes)

    # ================================================================ set-up
    def set_link(self, int i, int a, int b, int64_t lat_ns, double bandwidth_bps, int limit):
        if i < 0 or i >= self.nlinks or a < 1 or a > self.n or b < 1 or b > self.n:
            raise IndexError("link or node out of range")
        cdef link_t *l = &self.links[i]
        l.a = a
        l.b = b
        l.lat = lat_ns
        l.ns_per_byte = 8e9 / bandwidth_bps if bandwidth_bps > 0 else 0.0
        l.limit = limit
        l.loss.classes = 0xFFFFFFFF
        cdef int32_t cap = limit + 1 if 0 <= limit < 4096 else 64
        free(l.ring)
        l.ring = <int64_t *>malloc(cap * sizeof(int64_t))
        if not l.ring:
            raise MemoryError()
        l.rcap = cap

    def set_header_bytes(self, int h):
        self.header_bytes = h

    def set_rand(self, rand):
        """The network's uniform [0, 1) source (random.Random(seed).random)."""
        self.rand = rand

    def set_proc(self, int v, int64_t ns):
        self._check(v)
        self.proc_ns[v] = ns

    def set_host_cost(self, int v, double send_a_ns, double send_b_ns_per_byte, double recv_factor):
        self._check(v)
        self.send_a[v] = send_a_ns
        self.send_b[v] = send_b_ns_per_byte
        self.recv_f[v] = recv_factor

    cdef int _check(self, int v) except -1:
        if v < 1 or v > self.n:
            raise IndexError(f"node {v} out of range 1..{self.n}")
        return 0

    cdef int _set_chan(self, chan_t *c, int kind, double p, double r, double lg, double lb,
                       uint32_t classes, int state) except -1:
        c.kind = kind
        c.p = p
        c.r = r
        c.loss_good = lg
        c.loss_bad = lb
        c.classes = classes
        c.state = state
        return 0

    def set_link_loss(self, int i, int kind, double p, double r=0, double lg=0, double lb=1,
                      uint32_t classes=0xFFFFFFFF, int state=0):
        if i < 0 or i >= self.nlinks:
            raise IndexError(i)
        self._set_chan(&self.links[i].loss, kind, p, r, lg, lb, classes, state)

    def set_rx_loss(self, int v, int kind, double p, double r=0, double lg=0, double lb=1,
                    uint32_t classes=0xFFFFFFFF, int state=0):
        self._check(v)
        self._set_chan(&self.rxloss[v], kind, p, r, lg, lb, classes, state)

    def set_host(self, int v, engine, bint member=True, bint fast=False):
        """Attach an engine at node v (an address equal to v).  fast: drive
        it through the C data plane (its driver_needs must allow it)."""
        self._check(v)
        self.engines[v] = engine
        self._nodes[v] = None
        self.nodes[v] = <PyObject *>None
        self.engs[v] = <PyObject *>engine
        self.member[v] = member
        self.set_fast(v, fast)
        self.up[v] = 1

    def set_fast(self, int v, bint fast):
        self._check(v)
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
            mode = FAST_RX | (FAST_EVERY if needs.every_rx else 0)
        self.fast[v] = mode

    def is_fast(self, int v):
        self._check(v)
        return bool(self.fast[v])

    def set_up(self, int v, bint up):
        """Crash (False) or restart (True) the host at v; the router keeps forwarding."""
        self._check(v)
        self.up[v] = up
        if not up:
            self.timer_at[v] = NEVER

    def set_member(self, int v, bint member):
        self._check(v)
        self.member[v] = member

    def set_mcast_tree(self, int src, cnp.int32_t[::1] off not None, cnp.int32_t[::1] links not None):
        """Children links of each node in src's multicast tree (CSR: node v's
        are links[off[v]:off[v+1]], off has n + 2 entries)."""
        self._check(src)
        if off.shape[0] != self.n + 2:
            raise ValueError("off needs n + 2 entries")
        cdef int i
        for i in range(links.shape[0]):
            if links[i] < 0 or links[i] >= self.nlinks:
                raise IndexError("tree link out of range")
        free(self.mc_off[src])
        free(self.mc_links[src])
        self.mc_off[src] = <int32_t *>malloc((self.n + 2) * sizeof(int32_t))
        self.mc_links[src] = <int32_t *>malloc((links.shape[0] + 1) * sizeof(int32_t))
        if not self.mc_off[src] or not self.mc_links[src]:
            raise MemoryError()
        memcpy(self.mc_off[src], &off[0], (self.n + 2) * sizeof(int32_t))
        if links.shape[0]:
            memcpy(self.mc_links[src], &links[0], links.shape[0] * sizeof(int32_t))

    def clear_routes(self):
        cdef int i
        for i in range(self.n + 1):
            free(self.mc_off[i]); self.mc_off[i] = NULL
            free(self.mc_links[i]); self.mc_links[i] = NULL
            free(self.uc_next[i]); self.uc_next[i] = NULL

    def set_route(self, int dst, cnp.int32_t[::1] next_link not None):
        """next_link[v]: the link node v sends on toward dst (-1: none)."""
        self._check(dst)
        if next_link.shape[0] != self.n + 1:
            raise ValueError("next_link needs n + 1 entries")
        free(self.uc_next[dst])
        self.uc_next[dst] = <int32_t *>malloc((self.n + 1) * sizeof(int32_t))
        if not self.uc_next[dst]:
            raise MemoryError()
        memcpy(self.uc_next[dst], &next_link[0], (self.n + 1) * sizeof(int32_t))

    # ================================================================ heap
    cdef int push(self, int64_t t, int kind, int node, int arg, int link) except -1:
        cdef size_t i, p
        cdef ev_t e
        cdef ev_t *nh
        if self.nheap == self.hcap:
            nh = <ev_t *>realloc(self.heap, 2 * self.hcap * sizeof(ev_t))
            if not nh:
                raise MemoryError()
            self.heap = nh
            self.hcap *= 2
        e.t = t
        e.seq = self.evseq
        self.evseq += 1
        e.kind = kind
        e.node = node
        e.arg = arg
        e.link = link
        i = self.nheap
        self.nheap += 1
        while i > 0:
            p = (i - 1) >> 1
            if not ev_less(&e, &self.heap[p]):
                break
            self.heap[i] = self.heap[p]
            i = p
        self.heap[i] = e
        if <int64_t>self.nheap > self.max_heap:
            self.max_heap = self.nheap
        return 0

    cdef void pop(self, ev_t *out) noexcept nogil:
        cdef size_t i = 0, c, n
        cdef ev_t last
        out[0] = self.heap[0]
        self.nheap -= 1
        n = self.nheap
        if n == 0:
            return
        last = self.heap[n]
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and ev_less(&self.heap[c + 1], &self.heap[c]):
                c += 1
            if not ev_less(&self.heap[c], &last):
                break
            self.heap[i] = self.heap[c]
            i = c
        self.heap[i] = last

    @property
    def pending_events(self):
        return self.nheap

    def next_time(self):
        return self.heap[0].t if self.nheap else None

    # ================================================================ packets
    cdef int32_t alloc_pkt(self) except -1:
        cdef int32_t i
        cdef pkt_t *np_
        if self.free_head >= 0:
            i = self.free_head
            self.free_head = self.pkts[i].next_free
            return i
        if self.npkts == self.pcap:
            np_ = <pkt_t *>realloc(self.pkts, 2 * self.pcap * sizeof(pkt_t))
            if not np_:
                raise MemoryError()
            self.pkts = np_
            self.pcap *= 2
        i = self.npkts
        self.npkts += 1
        return i

    cdef inline void unref(self, int32_t i):
        cdef pkt_t *p = &self.pkts[i]
        p.refs -= 1
        if p.refs <= 0:
            self.free_pkt(i)

    cdef void free_pkt(self, int32_t i):
        cdef pkt_t *p = &self.pkts[i]
        cdef PyObject *d = p.data
        p.data = NULL
        p.next_free = self.free_head
        self.free_head = i
        self.n_freed += 1
        if d != NULL:
            Py_DECREF(<object>d)

    @property
    def packets_in_flight(self):
        return self.npkts - self._nfree()

    cdef int _nfree(self):
        cdef int k = 0
        cdef int32_t i = self.free_head
        while i >= 0:
            k += 1
            i = self.pkts[i].next_free
        return k

    # ================================================================ loss
    cdef int lose(self, chan_t *c, int cls) except -1:
        """Decide the fate of one packet on a loss channel."""
        cdef double u, q
        cdef int lost
        if c.kind == LOSS_NONE or not (c.classes >> cls) & 1:
            return False
        c.seen += 1
        if c.kind == LOSS_UNIFORM:
            if c.p <= 0:
                return False
            if c.p >= 1:
                lost = 1
            else:
                u = self.rand()
                lost = u < c.p
        else:
            # Gilbert-Elliott: loss decided in the current state, then one transition.
            q = c.loss_bad if c.state else c.loss_good
            if c.state:
                c.bad_pkts += 1
            if q >= 1:
                lost = 1
            elif q > 0:
                u = self.rand()
                lost = u < q
            else:
                lost = 0
            u = self.rand()
            if c.state:
                if u < c.r:
                    c.state = 0
            elif u < c.p:
                c.state = 1
        if lost:
            c.lost += 1
        return lost

    # ================================================================ sending
    cdef inline int classify(self, const uint8_t *b, Py_ssize_t n) noexcept nogil:
        cdef uint8_t t
        if n < 48 or b[0] != 0x52 or b[1] != 0x50:
            return CLS_CONTROL
        t = b[24]
        if t == 1:
            return CLS_DATA
        if t == 2:
            return CLS_REPAIR
        return CLS_CONTROL

    cdef int ensure_tree(self, int src) except -1:
        if self.mc_off[src] == NULL:
            if self.route_cb is None:
                raise RuntimeError(f"no multicast tree for source {src}")
            self.route_cb("mcast", src)
            if self.mc_off[src] == NULL:
                raise RuntimeError(f"route_cb did not install the multicast tree of {src}")
        return 0

    cdef int ensure_route(self, int dst) except -1:
        if self.uc_next[dst] == NULL:
            if self.route_cb is None:
                raise RuntimeError(f"no unicast routes toward {dst}")
            self.route_cb("unicast", dst)
            if self.uc_next[dst] == NULL:
                raise RuntimeError(f"route_cb did not install the routes toward {dst}")
        return 0

    cdef int send(self, int v, uint64_t dest, object data) except -1:
        """A datagram leaves host v's engine at self.now."""
        cdef int32_t i
        cdef pkt_t *p
        cdef Py_ssize_t n
        cdef int dst, cls
        cdef int64_t t
        if not PyBytes_Check(data):
            data = bytes(data)
        n = PyBytes_GET_SIZE(data)
        if dest == DEST_MCAST:
            dst = 0
            self.ensure_tree(v)
        else:
            if dest < 1 or dest > <uint64_t>self.n or dest == <uint64_t>v:
                self.n_unroutable += 1
                return 0
            dst = <int>dest
            self.ensure_route(dst)
            if self.uc_next[dst][v] < 0:
                self.n_unroutable += 1
                return 0
        if self.send_filter is not None and self.send_filter(v, dest, data):
            self.n_filtered += 1
            return 0
        cls = self.classify(<const uint8_t *>PyBytes_AS_STRING(data), n)
        i = self.alloc_pkt()
        p = &self.pkts[i]
        Py_INCREF(data)
        p.data = <PyObject *>data
        p.t0 = self.now
        p.src = v
        p.dst = dst
        p.len = <int32_t>n
        p.wire = <int32_t>n + self.header_bytes
        p.refs = 1                        # held while we work on it
        p.cls = cls
        self.n_sent += 1
        self.h_tx_pkts[v] += 1
        self.h_tx_bytes[v] += p.wire
        self.h_tx_cls[v * NCLS + cls] += 1
        if self.send_a[v] > 0 or self.send_b[v] > 0:
            t = self.send_cost(v, p.len)
            t = (self.cpu_free[v] if self.cpu_free[v] > self.now else self.now) + t
            self.h_busy_ns[v] += t - (self.cpu_free[v] if self.cpu_free[v] > self.now else self.now)
            self.cpu_free[v] = t
            self.pkts[i].refs += 1
            self.push(t, EV_HOSTTX, v, i, -1)
        else:
            self.originate(v, i, self.now)
        self.unref(i)
        return 0

    cdef inline int64_t send_cost(self, int v, int32_t nbytes) noexcept:
        return llround(self.send_a[v] + self.send_b[v] * nbytes)

    cdef int originate(self, int v, int32_t i, int64_t t) except -1:
        cdef pkt_t *p = &self.pkts[i]
        cdef int32_t k, a, b
        cdef int32_t *ls
        if p.dst == 0:
            a = self.mc_off[v][v]
            b = self.mc_off[v][v + 1]
            ls = self.mc_links[v]
            for k in range(a, b):
                self.link_send(ls[k], i, t)
        else:
            self.link_send(self.uc_next[p.dst][v], i, t)
        return 0

    cdef int forward(self, int v, int32_t i, int64_t t) except -1:
        """Packet i is at router v at time t (processing done): pass it on."""
        cdef pkt_t *p = &self.pkts[i]
        cdef int32_t k, a, b, src, L
        cdef int32_t *off
        cdef int32_t *ls
        if p.dst == 0:
            src = p.src
            off = self.mc_off[src]
            a = off[v]
            b = off[v + 1]
            ls = self.mc_links[src]
            for k in range(a, b):
                self.link_send(ls[k], i, t)
        elif p.dst != v:
            L = self.uc_next[p.dst][v]
            if L < 0:
                self.n_unroutable += 1
            else:
                self.link_send(L, i, t)
        return 0

    cdef int link_send(self, int32_t L, int32_t i, int64_t t) except -1:
        """Packet i enters the queue of link L at time t."""
        cdef link_t *l = &self.links[L]
        cdef pkt_t *p = &self.pkts[i]
        cdef int64_t f, start, ser, fin
        cdef int32_t w, j
        cdef int64_t *nr
        # packets that finished by t leave the queue (integrate the waiting count)
        while l.rcount > 0:
            f = l.ring[l.rhead]
            if f > t:
                break
            if l.rcount > 1:
                l.qarea += <double>(l.rcount - 1) * <double>(f - l.last_t)
            l.last_t = f
            l.rhead += 1
            if l.rhead == l.rcap:
                l.rhead = 0
            l.rcount -= 1
        if l.rcount > 1:
            l.qarea += <double>(l.rcount - 1) * <double>(t - l.last_t)
        if t > l.last_t:
            l.last_t = t
        w = l.rcount - 1 if l.rcount > 0 else 0      # waiting, not counting the one on the wire
        if l.rcount > 0 and l.limit >= 0 and w >= l.limit:
            l.drops += 1
            l.drop_bytes += p.wire
            l.drops_cls[p.cls] += 1
            return 0
        start = l.busy_until if l.busy_until > t else t
        ser = llround(p.wire * l.ns_per_byte) if l.ns_per_byte > 0 else 0
        fin = start + ser
        l.busy_until = fin
        l.busy_ns += ser
        if l.rcount == l.rcap:
            nr = <int64_t *>malloc(2 * l.rcap * sizeof(int64_t))
            if not nr:
                raise MemoryError()
            for j in range(l.rcount):
                nr[j] = l.ring[(l.rhead + j) % l.rcap]
            free(l.ring)
            l.ring = nr
            l.rhead = 0
            l.rcap *= 2
        l.ring[(l.rhead + l.rcount) % l.rcap] = fin
        l.rcount += 1
        if l.rcount - 1 > l.max_wait:
            l.max_wait = l.rcount - 1
        l.pkts[p.cls] += 1
        l.bytes[p.cls] += p.wire
        if l.loss.kind and self.lose(&l.loss, p.cls):
            return 0
        self.pkts[i].refs += 1
        self.push(fin + l.lat, EV_ARRIVE, l.b, i, L)
        return 0

    # ================================================================ receiving
    cdef int arrive(self, int v, int32_t i) except -1:
        cdef pkt_t *p = &self.pkts[i]
        cdef bint here
        if p.dst == 0:
            here = self.member[v] and v != p.src
        else:
            here = p.dst == v
        # forward first (routers work in parallel with the host behind them)
        if p.dst == 0 or not here:
            if self.proc_ns[v] > 0:
                p.refs += 1
                self.push(self.now + self.proc_ns[v], EV_FORWARD, v, i, -1)
            else:
                self.forward(v, i, self.now)
        if here:
            self.deliver(v, i)
        return 0

    cdef int deliver(self, int v, int32_t i) except -1:
        cdef pkt_t *p = &self.pkts[i]
        cdef int64_t t, c
        if not self.up[v]:
            return 0
        if self.rxloss[v].kind and self.lose(&self.rxloss[v], p.cls):
            return 0
        self.h_rx_pkts[v] += 1
        self.h_rx_bytes[v] += p.wire
        self.h_rx_cls[v * NCLS + p.cls] += 1
        if self.send_a[v] > 0 or self.send_b[v] > 0:
            c = llround(self.recv_f[v] * (self.send_a[v] + self.send_b[v] * p.len))
            t = (self.cpu_free[v] if self.cpu_free[v] > self.now else self.now)
            self.h_busy_ns[v] += c
            self.cpu_free[v] = t + c
            p.refs += 1
            self.push(t + c, EV_HOSTRX, v, i, -1)
            return 0
        return self.host_rx(v, i)

    cdef int host_rx(self, int v, int32_t i) except -1:
        """Hand packet i to the engine at v (now), unless v's delivery queue
        is full (set_rx_limit): then it waits in v's input queue."""
        if self.rx_limit[v] >= 0 and self.up[v]:
            if self.hq_cnt[v] > 0 or <int64_t>self.queued(v) >= self.rx_limit[v]:
                return self.hold(v, i)
        return self.host_rx_now(v, i)

    cdef int host_rx_now(self, int v, int32_t i) except -1:
        cdef pkt_t *p = &self.pkts[i]
        cdef object data = <object>p.data      # a new reference: survives pkts reallocs
        cdef int64_t now = self.now
        cdef int64_t w0
        cdef Node node
        cdef object eng
        if not self.up[v]:
            return 0
        if self.fast[v]:
            node = <Node>self.nodes[v]
            rp_node_rx(&node.n, <const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data),
                       <uint64_t>p.src, now)
            self.n_fast_rx += 1
            if node.n.nctl or node.n.nack_pending or self.fast[v] & FAST_EVERY:
                w0 = wall_ns()
                eng = <object>self.engs[v]
                if node.n.nctl:
                    self.n_ctl += 1
                self.h_calls[v] += 1
                eng.on_data_plane(now, node.n.nctl > 0, node.n.nack_pending != 0, False, True)
                self.collect(v)
                self.arm(v)
                self.w_ctl += wall_ns() - w0
            elif rp_out_pending(&node.n.out):
                self.collect(v)
        else:
            w0 = wall_ns()
            eng = <object>self.engs[v]
            self.n_slow_rx += 1
            self.h_calls[v] += 1
            eng.receive_datagram(data, p.src, now)
            self.collect(v)
            self.arm(v)
            self.w_slow += wall_ns() - w0
        return 0

    # ================================================================ bounded delivery queues
    cdef uint64_t queued(self, int v) noexcept:
        """Messages waiting for the application at v: queued in the FIFO
        delivery queues and not purged (or, without FIFO delivery, the data
        plane's pending count)."""
        cdef Node node = <Node>self.lnodes[v]
        cdef rp_srbq_t *q
        cdef uint64_t k = 0
        cdef uint32_t j
        if not node.n.fifo:
            return rp_node_pending(&node.n)
        for j in range(node.n.npeers):
            q = node.n.peers[j].q
            if q != NULL:
                k += q.n_queued - q.n_delivered - q.n_purged_queue
        return k

    cdef int hold(self, int v, int32_t i) except -1:
        cdef int32_t cap = self.hq_cap[v]
        cdef int32_t *r
        cdef int32_t j
        if self.hq_cnt[v] == cap:
            cap = 2 * cap if cap else 256
            r = <int32_t *>malloc(cap * sizeof(int32_t))
            if not r:
                raise MemoryError()
            for j in range(self.hq_cnt[v]):
                r[j] = self.hq[v][(self.hq_head[v] + j) % self.hq_cap[v]]
            free(self.hq[v])
            self.hq[v] = r
            self.hq_cap[v] = cap
            self.hq_head[v] = 0
        self.hq[v][(self.hq_head[v] + self.hq_cnt[v]) % cap] = i
        self.hq_cnt[v] += 1
        self.pkts[i].refs += 1
        self.h_held[v] += 1
        if self.hq_cnt[v] > self.h_held_max[v]:
            self.h_held_max[v] = self.hq_cnt[v]
        return 0

    def set_rx_limit(self, int v, int64_t limit):
        """Bound the delivery queue at v (the paper's bounded receiver
        buffers, FIFO-SRB §3.2): while `limit` or more messages wait for v's
        application, datagrams reaching v's host wait unprocessed in an
        unbounded input queue, in order, until release(v) finds room.
        limit < 0 removes the bound (held datagrams stay until release)."""
        self._check(v)
        if limit >= 0:
            node = getattr(self.engines[v], "node", None)
            if not isinstance(node, Node):
                raise TypeError("a bounded delivery queue needs engine.node to be an rpbcast.core.node.Node")
            self._lnodes[v] = node
            self.lnodes[v] = <PyObject *>node
        self.rx_limit[v] = limit

    def release(self, int v):
        """Hand v's held datagrams to its engine, in order, while its
        delivery queue is below the limit (call after the application read).
        Returns how many were handed over."""
        cdef int32_t i
        cdef int k = 0
        self._check(v)
        while self.hq_cnt[v] > 0:
            if self.up[v] and self.rx_limit[v] >= 0 and <int64_t>self.queued(v) >= self.rx_limit[v]:
                break
            i = self.hq[v][self.hq_head[v]]
            self.hq_head[v] = (self.hq_head[v] + 1) % self.hq_cap[v]
            self.hq_cnt[v] -= 1
            self.host_rx_now(v, i)
            self.unref(i)
            k += 1
        return k

    def rx_queue(self, int v):
        """(messages waiting for the application, datagrams held, datagrams
        ever held, most held at once) at a host with a bounded queue."""
        self._check(v)
        if self.lnodes[v] == NULL:
            return (0, self.hq_cnt[v], self.h_held[v], self.h_held_max[v])
        return (self.queued(v), self.hq_cnt[v], self.h_held[v], self.h_held_max[v])

    # ================================================================ engines
    cdef int collect(self, int v) except -1:
        """Send what the engine at v wants sent."""
        cdef object eng = <object>self.engs[v]
        cdef object out = eng.datagrams_to_send()
        cdef object item
        for item in out:
            dest, data = item
            self.send(v, <uint64_t>dest, data)
        return 0

    cdef int arm(self, int v) except -1:
        cdef object eng = <object>self.engs[v]
        cdef int64_t t
        if not self.up[v]:
            return 0
        t = eng.get_timer()
        if t < self.now:
            t = self.now
        if t != self.timer_at[v]:
            self.timer_at[v] = t
            self.push(t, EV_TIMER, v, 0, -1)
        return 0

    def flush(self, int v):
        """After touching engine v from Python: send its datagrams, re-read its timer."""
        self._check(v)
        if self.engs[v] == NULL:
            raise ValueError(f"no engine at node {v}")
        self.collect(v)
        self.arm(v)

    cdef int fire_timer(self, int v, int64_t t) except -1:
        cdef object eng
        cdef int64_t nt
        if not self.up[v] or self.timer_at[v] != t:
            self.n_stale_timer += 1
            return 0
        self.timer_at[v] = NEVER
        eng = <object>self.engs[v]
        self.n_timer += 1
        self.h_calls[v] += 1
        eng.handle_timer(self.now)
        self.collect(v)
        # a timer still due now would fire forever at the same instant: 1 ns later
        nt = eng.get_timer()
        if nt <= self.now:
            nt = self.now + 1
        if nt != self.timer_at[v] and self.up[v]:
            self.timer_at[v] = nt
            self.push(nt, EV_TIMER, v, 0, -1)
        return 0

    # ================================================================ calls
    def at(self, int64_t t, fn, int node=0):
        """Call fn() at virtual time t (not before now).  With node, the
        engine there is flushed afterwards (datagrams sent, timer re-read)."""
        if node:
            self._check(node)
        if t < self.now:
            t = self.now
        cid = self.next_call
        self.next_call += 1
        self.calls[cid] = fn
        self.push(t, EV_CALL, node, cid, -1)
        return cid

    def cancel(self, int cid):
        self.calls.pop(cid, None)

    def stop(self):
        """End run() after the current event."""
        self.stopped = True

    # ================================================================ the loop
    def run(self, int64_t until):
        """Process events up to and including virtual time until (or until
        stop()); returns the number processed."""
        cdef ev_t e
        cdef uint64_t k = 0
        cdef int32_t i
        cdef int64_t w0, wstart = wall_ns()
        self.stopped = False
        while self.nheap and not self.stopped:
            if self.heap[0].t > until:
                break
            self.pop(&e)
            if e.t > self.now:
                self.now = e.t
            k += 1
            if e.kind == EV_ARRIVE:
                self.n_arrive += 1
                self.arrive(e.node, e.arg)
                self.unref(e.arg)
            elif e.kind == EV_FORWARD:
                self.forward(e.node, e.arg, self.now)
                self.unref(e.arg)
            elif e.kind == EV_HOSTRX:
                self.host_rx(e.node, e.arg)
                self.unref(e.arg)
            elif e.kind == EV_HOSTTX:
                self.originate(e.node, e.arg, self.now)
                self.unref(e.arg)
            elif e.kind == EV_TIMER:
                w0 = wall_ns()
                self.fire_timer(e.node, e.t)
                self.w_timer += wall_ns() - w0
            else:
                w0 = wall_ns()
                fn = self.calls.pop(e.arg, None)
                if fn is not None:
                    self.n_call += 1
                    fn()
                    if e.node and self.engs[e.node] != NULL and self.up[e.node]:
                        self.collect(e.node)
                        self.arm(e.node)
                self.w_call += wall_ns() - w0
        self.n_events += k
        self.w_run += wall_ns() - wstart
        if not self.stopped and until > self.now and (not self.nheap or self.heap[0].t > until):
            self.now = until
        return k

    def start(self, int v):
        """Read engine v's first timer."""
        self._check(v)
        self.arm(v)

    def advance(self, int64_t t):
        if t > self.now:
            self.now = t

    # ================================================================ deliveries
    def drain(self, cnp.int32_t[::1] nodes not None, int size, bint check):
        """Take every delivery waiting at the given nodes (engines on the C
        path) straight from their data planes.  Returns (counts per node,
        senders, incs, seqs, rx_times, corrupt): the records node by node, in
        delivery order; corrupt counts payloads whose first 16 bytes are not
        (sender, inc, seq) or whose length is not size (when check)."""
        cdef Py_ssize_t i, nn = nodes.shape[0]
        cdef uint64_t total = 0
        cdef int v
        cdef Node node
        for i in range(nn):
            v = nodes[i]
            self._check(v)
            if not self.fast[v]:
                raise ValueError(f"node {v} is not on the C path")
            node = <Node>self.nodes[v]
            total += rp_node_pending(&node.n)
        counts = np.zeros(nn, np.int64)
        snd_a = np.empty(total, np.uint32)
        inc_a = np.empty(total, np.uint32)
        seq_a = np.empty(total, np.uint64)
        rxt_a = np.empty(total, np.int64)
        cdef cnp.int64_t[::1] cnt = counts
        cdef cnp.uint32_t[::1] snd = snd_a
        cdef cnp.uint32_t[::1] inc = inc_a
        cdef cnp.uint64_t[::1] seq = seq_a
        cdef cnp.int64_t[::1] rxt = rxt_a
        cdef size_t chunk = 4096
        cdef size_t cap = 4 << 20
        cdef uint64_t *lab = <uint64_t *>malloc(chunk * sizeof(uint64_t))
        cdef uint32_t *offs = <uint32_t *>malloc(chunk * sizeof(uint32_t))
        cdef uint32_t *lens = <uint32_t *>malloc(chunk * sizeof(uint32_t))
        cdef uint8_t *buf = <uint8_t *>malloc(cap)
        cdef size_t pos = 0, k, j, room
        cdef uint64_t corrupt = 0
        cdef const uint8_t *h
        cdef uint32_t h0, h1
        cdef uint64_t h2
        if not lab or not offs or not lens or not buf:
            free(lab); free(offs); free(lens); free(buf)
            raise MemoryError()
        try:
            for i in range(nn):
                node = <Node>self.nodes[nodes[i]]
                while pos < total:
                    room = total - pos
                    k = rp_node_recv(&node.n, chunk if room > chunk else room, &snd[pos], &inc[pos],
                                     &seq[pos], lab, &rxt[pos], offs, lens, buf, cap, self.now)
                    if k == 0:
                        break
                    if check:
                        for j in range(k):
                            if lens[j] != <uint32_t>size or lens[j] < 16:
                                corrupt += 1
                                continue
                            h = buf + offs[j]
                            memcpy(&h0, h, 4)
                            memcpy(&h1, h + 4, 4)
                            memcpy(&h2, h + 8, 8)
                            if h0 != snd[pos + j] or h1 != inc[pos + j] or h2 != seq[pos + j]:
                                corrupt += 1
                    cnt[i] += k
                    pos += k
        finally:
            free(lab); free(offs); free(lens); free(buf)
        return counts, snd_a[:pos], inc_a[:pos], seq_a[:pos], rxt_a[:pos], corrupt

    # ================================================================ statistics
    def link_stats(self):
        """Per link direction, as a dict of NumPy arrays (index = link)."""
        cdef int i, c
        cdef int m = self.nlinks
        out = {k: np.zeros(m, np.int64) for k in (
            "a", "b", "pkts", "bytes", "data_pkts", "data_bytes", "repair_pkts", "repair_bytes",
            "control_pkts", "control_bytes", "drops", "drop_bytes", "data_drops", "repair_drops",
            "control_drops", "lost", "loss_seen", "max_queue", "busy_ns", "backlog_ns")}
        qarea = np.zeros(m, np.float64)
        cdef link_t *l
        for i in range(m):
            l = &self.links[i]
            self._settle(l)
            out["a"][i] = l.a
            out["b"][i] = l.b
            out["data_pkts"][i] = l.pkts[0]
            out["data_bytes"][i] = l.bytes[0]
            out["repair_pkts"][i] = l.pkts[1]
            out["repair_bytes"][i] = l.bytes[1]
            out["control_pkts"][i] = l.pkts[2]
            out["control_bytes"][i] = l.bytes[2]
            out["pkts"][i] = l.pkts[0] + l.pkts[1] + l.pkts[2]
            out["bytes"][i] = l.bytes[0] + l.bytes[1] + l.bytes[2]
            out["drops"][i] = l.drops
            out["drop_bytes"][i] = l.drop_bytes
            out["data_drops"][i] = l.drops_cls[0]
            out["repair_drops"][i] = l.drops_cls[1]
            out["control_drops"][i] = l.drops_cls[2]
            out["lost"][i] = l.loss.lost
            out["loss_seen"][i] = l.loss.seen
            out["max_queue"][i] = l.max_wait
            # transmission time up to now (a backlog may extend past it)
            out["busy_ns"][i] = l.busy_ns - (l.busy_until - self.now if l.busy_until > self.now else 0)
            out["backlog_ns"][i] = l.busy_until - self.now if l.busy_until > self.now else 0
            qarea[i] = l.qarea
        out["queue_area"] = qarea
        return out

    cdef void _settle(self, link_t *l):
        """Account for packets finished by now (for the queue integral)."""
        cdef int64_t f
        while l.rcount > 0:
            f = l.ring[l.rhead]
            if f > self.now:
                break
            if l.rcount > 1:
                l.qarea += <double>(l.rcount - 1) * <double>(f - l.last_t)
            l.last_t = f
            l.rhead = (l.rhead + 1) % l.rcap
            l.rcount -= 1
        if l.rcount > 1:
            l.qarea += <double>(l.rcount - 1) * <double>(self.now - l.last_t)
        if self.now > l.last_t:
            l.last_t = self.now

    def node_stats(self):
        """Per node (index = node id; 0 unused), as a dict of NumPy arrays."""
        cdef int v, k = self.n + 1
        out = {key: np.zeros(k, np.int64) for key in (
            "rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes", "rx_data", "rx_repair", "rx_control",
            "tx_data", "tx_repair", "tx_control", "rx_lost", "rx_loss_seen", "calls", "cpu_busy_ns")}
        for v in range(k):
            out["rx_pkts"][v] = self.h_rx_pkts[v]
            out["rx_bytes"][v] = self.h_rx_bytes[v]
            out["tx_pkts"][v] = self.h_tx_pkts[v]
            out["tx_bytes"][v] = self.h_tx_bytes[v]
            out["rx_data"][v] = self.h_rx_cls[v * NCLS]
            out["rx_repair"][v] = self.h_rx_cls[v * NCLS + 1]
            out["rx_control"][v] = self.h_rx_cls[v * NCLS + 2]
            out["tx_data"][v] = self.h_tx_cls[v * NCLS]
            out["tx_repair"][v] = self.h_tx_cls[v * NCLS + 1]
            out["tx_control"][v] = self.h_tx_cls[v * NCLS + 2]
            out["rx_lost"][v] = self.rxloss[v].lost
            out["rx_loss_seen"][v] = self.rxloss[v].seen
            out["calls"][v] = self.h_calls[v]
            out["cpu_busy_ns"][v] = self.h_busy_ns[v]
        return out

    def loss_state(self, kind, int i):
        """(seen, lost, packets seen in the bad state, state) of a loss channel."""
        cdef chan_t *c
        if kind == "link":
            if i < 0 or i >= self.nlinks:
                raise IndexError(i)
            c = &self.links[i].loss
        else:
            self._check(i)
            c = &self.rxloss[i]
        return c.seen, c.lost, c.bad_pkts, c.state

    def counters(self):
        return {"events": self.n_events, "arrivals": self.n_arrive, "timers": self.n_timer,
                "calls": self.n_call, "fast_rx": self.n_fast_rx, "slow_rx": self.n_slow_rx,
                "control_rx": self.n_ctl, "unroutable": self.n_unroutable, "filtered": self.n_filtered,
                "sent": self.n_sent, "stale_timers": self.n_stale_timer, "max_heap": self.max_heap}

    def wall(self):
        """Seconds of wall time: in run(), and within it in Python engine
        calls: timers (handle_timer, datagrams_to_send, get_timer), control
        (the control plane after a datagram), slow (receive_datagram for
        engines not on the C path), calls (scheduled Python callables:
        publishing).  loop = the rest: event loop, network model, C data plane."""
        r = {"run": self.w_run / 1e9, "engine_timers": self.w_timer / 1e9, "engine_control": self.w_ctl / 1e9,
             "engine_slow_rx": self.w_slow / 1e9, "calls": self.w_call / 1e9}
        r["loop"] = r["run"] - r["engine_timers"] - r["engine_control"] - r["engine_slow_rx"] - r["calls"]
        return r


def spt(int n, cnp.int32_t[::1] off not None, cnp.int32_t[::1] nbr not None,
        cnp.int64_t[::1] lat not None, int root):
    """Shortest-path tree from root over nodes 1..n (CSR adjacency: node v's
    neighbours are nbr[off[v]:off[v+1]] at latencies lat[...]).

    Cost is (latency, hops) compared lexicographically; among equal-cost
    predecessors the lowest node id wins.  Returns (parent, dist, hops, via)
    as NumPy arrays of n + 1 entries; parent[root] = 0, unreachable = -1;
    via[v] is the CSR position (index into nbr) of the edge parent -> v."""
    if off.shape[0] != n + 2:
        raise ValueError("off needs n + 2 entries")
    parent = np.full(n + 1, -1, np.int32)
    dist = np.full(n + 1, -1, np.int64)
    hops = np.full(n + 1, -1, np.int32)
    via_a = np.full(n + 1, -1, np.int32)
    cdef cnp.int32_t[::1] via = via_a
    cdef cnp.int32_t[::1] par = parent
    cdef cnp.int64_t[::1] d = dist
    cdef cnp.int32_t[::1] h = hops
    cdef uint8_t *done = <uint8_t *>calloc(n + 1, 1)
    cdef size_t cap = 2 * (n + 1) + nbr.shape[0] + 4
    # heap of (dist, hops, node) by value
    cdef int64_t *hd = <int64_t *>malloc(cap * sizeof(int64_t))
    cdef int32_t *hh = <int32_t *>malloc(cap * sizeof(int32_t))
    cdef int32_t *hv = <int32_t *>malloc(cap * sizeof(int32_t))
    cdef size_t hn = 0, i, c, p
    cdef int64_t kd, nd
    cdef int32_t kh, kv, u, w, k, nh
    cdef bint improved
    if not done or not hd or not hh or not hv:
        free(done); free(hd); free(hh); free(hv)
        raise MemoryError()
    try:
        if root < 1 or root > n:
            raise IndexError(root)
        d[root] = 0
        h[root] = 0
        par[root] = 0
        hd[0] = 0; hh[0] = 0; hv[0] = root
        hn = 1
        while hn:
            # pop the minimum
            kd = hd[0]; kh = hh[0]; kv = hv[0]
            hn -= 1
            if hn:
                i = 0
                nd = hd[hn]; nh = hh[hn]; w = hv[hn]
                while True:
                    c = 2 * i + 1
                    if c >= hn:
                        break
                    if c + 1 < hn and (hd[c + 1] < hd[c] or (hd[c + 1] == hd[c] and (
                            hh[c + 1] < hh[c] or (hh[c + 1] == hh[c] and hv[c + 1] < hv[c])))):
                        c += 1
                    if not (hd[c] < nd or (hd[c] == nd and (hh[c] < nh or (hh[c] == nh and hv[c] < w)))):
                        break
                    hd[i] = hd[c]; hh[i] = hh[c]; hv[i] = hv[c]
                    i = c
                hd[i] = nd; hh[i] = nh; hv[i] = w
            u = kv
            if done[u] or kd != d[u] or kh != h[u]:
                continue
            done[u] = 1
            for k in range(off[u], off[u + 1]):
                w = nbr[k]
                if done[w]:
                    continue
                nd = d[u] + lat[k]
                nh = h[u] + 1
                if d[w] < 0 or nd < d[w] or (nd == d[w] and (nh < h[w] or (nh == h[w] and u < par[w]))):
                    improved = d[w] < 0 or nd < d[w] or nh < h[w]
                    d[w] = nd
                    h[w] = nh
                    par[w] = u
                    via[w] = k
                    if improved:
                        # push (nd, nh, w)
                        i = hn
                        hn += 1
                        while i > 0:
                            p = (i - 1) >> 1
                            if not (nd < hd[p] or (nd == hd[p] and (nh < hh[p] or (nh == hh[p] and w < hv[p])))):
                                break
                            hd[i] = hd[p]; hh[i] = hh[p]; hv[i] = hv[p]
                            i = p
                        hd[i] = nd; hh[i] = nh; hv[i] = w
    finally:
        free(done); free(hd); free(hh); free(hv)
    return parent, dist, hops, via_a
