"""Link directions: FIFO queues with serialisation, latency and loss (links.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t

from rpbcast.sim.channel cimport chan_t
from rpbcast.sim.packets cimport NCLS


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


@cython.final
cdef class Links:
    cdef readonly int n                 # link directions
    cdef int nodes
    cdef link_t *l
    cdef object rand                    # the network's uniform [0, 1) source, for loss

    cdef int64_t enter(self, int32_t L, int32_t wire, int cls, int64_t t) except -2
