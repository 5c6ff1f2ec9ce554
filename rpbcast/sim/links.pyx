# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Link directions.

Each direction of a link is a FIFO queue: a packet entering at t starts
transmitting when the packets ahead of it are done, takes wire bytes /
bandwidth to serialise, then the latency to propagate.  A queue limit
drops arrivals that find the buffer full (the packet on the wire not
counted, as ns-2's DropTail).  A loss channel per direction decides after
transmission (a lost packet still occupied the link).  The queue keeps the
finish times of its packets, for the time-averaged queue length.
"""
from libc.stdint cimport uint32_t
from libc.stdlib cimport malloc, calloc, free
from libc.math cimport llround

import numpy as np

from rpbcast.sim.channel cimport chan_init, chan_set, chan_lose, chan_state
from rpbcast.sim.nodes cimport check_node


cdef inline void settle(link_t *l, int64_t t) noexcept nogil:
    """The packets that finished by t leave the queue; integrate the waiting
    count (not the one on the wire) up to t."""
    cdef int64_t f
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


cdef class Links:
    def __cinit__(self, int n, int nodes):
        self.n = n
        self.nodes = nodes
        self.l = <link_t *>calloc(n if n else 1, sizeof(link_t))
        if not self.l:
            raise MemoryError()

    def __dealloc__(self):
        cdef int i
        if self.l == NULL:
            return
        for i in range(self.n):
            free(self.l[i].ring)
        free(self.l)

    def set(self, int i, int a, int b, int64_t lat_ns, double bandwidth_bps, int limit):
        """Link direction i from node a to node b."""
        if i < 0 or i >= self.n:
            raise IndexError("link out of range")
        check_node(a, self.nodes)
        check_node(b, self.nodes)
        cdef link_t *l = &self.l[i]
        l.a = a
        l.b = b
        l.lat = lat_ns
        l.ns_per_byte = 8e9 / bandwidth_bps if bandwidth_bps > 0 else 0.0
        l.limit = limit
        chan_init(&l.loss)
        cdef int32_t cap = limit + 1 if 0 <= limit < 4096 else 64
        free(l.ring)
        l.ring = <int64_t *>malloc(cap * sizeof(int64_t))
        if not l.ring:
            raise MemoryError()
        l.rcap = cap

    def set_rand(self, rand):
        self.rand = rand

    def set_loss(self, int i, int kind, double p, double r=0, double lg=0, double lb=1,
                 uint32_t classes=0xFFFFFFFF, int state=0):
        if i < 0 or i >= self.n:
            raise IndexError(i)
        chan_set(&self.l[i].loss, kind, p, r, lg, lb, classes, state)

    def loss_state(self, int i):
        """(seen, lost, packets seen in the bad state, state) of link i's loss channel."""
        if i < 0 or i >= self.n:
            raise IndexError(i)
        return chan_state(&self.l[i].loss)

    cdef int64_t enter(self, int32_t L, int32_t wire, int cls, int64_t t) except -2:
        """A packet of wire bytes and class cls enters link L at t: when it
        reaches the far end, or -1 if the queue dropped it or it was lost."""
        cdef link_t *l = &self.l[L]
        cdef int64_t start, ser, fin
        cdef int32_t w, j
        cdef int64_t *nr
        settle(l, t)
        w = l.rcount - 1 if l.rcount > 0 else 0      # waiting, not counting the one on the wire
        if l.rcount > 0 and l.limit >= 0 and w >= l.limit:
            l.drops += 1
            l.drop_bytes += wire
            l.drops_cls[cls] += 1
            return -1
        start = l.busy_until if l.busy_until > t else t
        ser = llround(wire * l.ns_per_byte) if l.ns_per_byte > 0 else 0
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
        l.pkts[cls] += 1
        l.bytes[cls] += wire
        if l.loss.kind and chan_lose(&l.loss, cls, self.rand):
            return -1
        return fin + l.lat

    def stats(self, int64_t now):
        """Per link direction at now, as a dict of NumPy arrays (index = link)."""
        cdef int i
        cdef int m = self.n
        out = {k: np.zeros(m, np.int64) for k in (
            "a", "b", "pkts", "bytes", "data_pkts", "data_bytes", "repair_pkts", "repair_bytes",
            "control_pkts", "control_bytes", "drops", "drop_bytes", "data_drops", "repair_drops",
            "control_drops", "lost", "loss_seen", "max_queue", "busy_ns", "backlog_ns")}
        qarea = np.zeros(m, np.float64)
        cdef link_t *l
        for i in range(m):
            l = &self.l[i]
            settle(l, now)
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
            out["busy_ns"][i] = l.busy_ns - (l.busy_until - now if l.busy_until > now else 0)
            out["backlog_ns"][i] = l.busy_until - now if l.busy_until > now else 0
            qarea[i] = l.qarea
        out["queue_area"] = qarea
        return out
