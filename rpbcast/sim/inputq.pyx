# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Bounded delivery queues (slow consumers; off unless set_limit).

The paper's bounded receiver buffers (FIFO-SRB §3.2): while `limit` or
more messages wait for a host's application, datagrams reaching the host
wait unprocessed in an unbounded input queue, in order, until the
application has read enough.  Waiting messages are those queued in the
engine's FIFO delivery queues and not purged (or, without FIFO delivery,
the data plane's pending count).  A queue holds packet indices; whoever
pushes one holds a reference to the packet.
"""
from libc.stdint cimport uint32_t
from libc.stdlib cimport malloc, calloc, free

from rpbcast.core.csrc cimport rp_node_pending, rp_srbq_t
from rpbcast.core.node cimport Node
from rpbcast.sim.nodes cimport check_node


cdef class InputQueues:
    def __cinit__(self, int n):
        cdef int k = n + 1
        cdef int v
        self.n = n
        self.limit = <int64_t *>malloc(k * sizeof(int64_t))
        self.ring = <int32_t **>calloc(k, sizeof(int32_t *))
        self.cap = <int32_t *>calloc(k, sizeof(int32_t))
        self.head = <int32_t *>calloc(k, sizeof(int32_t))
        self.count = <int32_t *>calloc(k, sizeof(int32_t))
        self.held = <uint64_t *>calloc(k, sizeof(uint64_t))
        self.held_max = <int32_t *>calloc(k, sizeof(int32_t))
        self.nodes = <PyObject **>calloc(k, sizeof(PyObject *))
        if (not self.limit or not self.ring or not self.cap or not self.head or not self.count
                or not self.held or not self.held_max or not self.nodes):
            raise MemoryError()
        for v in range(k):
            self.limit[v] = -1
        self._nodes = [None] * k

    def __dealloc__(self):
        cdef int v
        if self.ring != NULL:
            for v in range(self.n + 1):
                free(self.ring[v])
        free(self.limit); free(self.ring); free(self.cap); free(self.head); free(self.count)
        free(self.held); free(self.held_max); free(self.nodes)

    def set_limit(self, int v, int64_t limit, node):
        """Bound v's delivery queue at limit waiting messages (< 0: no
        bound; held datagrams stay until released); node: v's data plane."""
        check_node(v, self.n)
        if limit >= 0:
            if not isinstance(node, Node):
                raise TypeError("a bounded delivery queue needs engine.node to be an rpbcast.core.node.Node")
            self._nodes[v] = node
            self.nodes[v] = <PyObject *>node
        self.limit[v] = limit

    def state(self, int v):
        """(messages waiting for the application, datagrams held, datagrams
        ever held, most held at once)."""
        check_node(v, self.n)
        if self.nodes[v] == NULL:
            return (0, self.count[v], self.held[v], self.held_max[v])
        return (self.waiting(v), self.count[v], self.held[v], self.held_max[v])

    cdef uint64_t waiting(self, int v) noexcept:
        """Messages waiting for the application at v."""
        cdef Node node = <Node>self.nodes[v]
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

    cdef bint full(self, int v) noexcept:
        """v is bounded and its delivery queue is full."""
        return self.limit[v] >= 0 and <int64_t>self.waiting(v) >= self.limit[v]

    cdef int push(self, int v, int32_t i) except -1:
        cdef int32_t cap = self.cap[v]
        cdef int32_t *r
        cdef int32_t j
        if self.count[v] == cap:
            cap = 2 * cap if cap else 256
            r = <int32_t *>malloc(cap * sizeof(int32_t))
            if not r:
                raise MemoryError()
            for j in range(self.count[v]):
                r[j] = self.ring[v][(self.head[v] + j) % self.cap[v]]
            free(self.ring[v])
            self.ring[v] = r
            self.cap[v] = cap
            self.head[v] = 0
        self.ring[v][(self.head[v] + self.count[v]) % cap] = i
        self.count[v] += 1
        self.held[v] += 1
        if self.count[v] > self.held_max[v]:
            self.held_max[v] = self.count[v]
        return 0

    cdef int32_t pop(self, int v) noexcept:
        """The oldest held packet (count[v] > 0)."""
        cdef int32_t i = self.ring[v][self.head[v]]
        self.head[v] = (self.head[v] + 1) % self.cap[v]
        self.count[v] -= 1
        return i
