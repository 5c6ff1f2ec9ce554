"""Packets in flight: a pool of structs sharing the datagram's bytes (packets.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t
from cpython.ref cimport PyObject

# packet classes (the datagram's first message type)
cdef enum:
    CLS_DATA = 0
    CLS_REPAIR = 1
    CLS_CONTROL = 2
    NCLS = 3


ctypedef struct pkt_t:
    PyObject *data     # the datagram (bytes), one reference per packet
    int64_t t0
    int32_t src
    int32_t dst        # 0: multicast
    int32_t len        # datagram bytes
    int32_t wire       # bytes on a link (datagram + header_bytes)
    int32_t refs       # events and queues that still refer to it
    int32_t cls
    int32_t next_free


@cython.final
cdef class PacketPool:
    # Growing the pool moves it: a pkt_t * is good only until the next new().
    cdef pkt_t *p
    cdef int32_t n, cap, free_head
    cdef readonly uint64_t freed

    cdef int32_t new(self, bytes data, int src, int dst, int64_t t0, int32_t header_bytes) except -1
    cdef void recycle(self, int32_t i) noexcept

    cdef inline void unref(self, int32_t i) noexcept:
        """An event or queue is done with packet i.  (Inline: every event
        passes here.)"""
        self.p[i].refs -= 1
        if self.p[i].refs <= 0:
            self.recycle(i)
