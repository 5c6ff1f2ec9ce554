# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Packets in flight.

A packet is a struct holding a reference to the datagram's bytes object;
a multicast datagram is one object shared by every copy, and a packet is
one struct however many links it crosses: events and queues count their
references to it.  Freed structs go on a free list.
"""
from libc.stdint cimport uint8_t
from libc.stdlib cimport malloc, realloc, free
from cpython.ref cimport Py_INCREF, Py_DECREF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

CLASSES = ("data", "repair", "control")         # by class number (CLS_*)


cdef inline int classify(const uint8_t *b, Py_ssize_t n) noexcept nogil:
    """The class of an rpbcast datagram by its first message's type (its
    header is 24 bytes after the 0x52 0x50 magic); anything else is control."""
    cdef uint8_t t
    if n < 48 or b[0] != 0x52 or b[1] != 0x50:
        return CLS_CONTROL
    t = b[24]
    if t == 1:
        return CLS_DATA
    if t == 2:
        return CLS_REPAIR
    return CLS_CONTROL


cdef class PacketPool:
    def __cinit__(self):
        self.cap = 1024
        self.p = <pkt_t *>malloc(self.cap * sizeof(pkt_t))
        if not self.p:
            raise MemoryError()
        self.n = 0
        self.free_head = -1

    def __dealloc__(self):
        cdef int32_t i
        if self.p == NULL:
            return
        for i in range(self.n):
            if self.p[i].data != NULL:
                Py_DECREF(<object>self.p[i].data)
                self.p[i].data = NULL
        free(self.p)

    cdef int32_t new(self, bytes data, int src, int dst, int64_t t0, int32_t header_bytes) except -1:
        """A packet of datagram data, held once by the caller."""
        cdef int32_t i
        cdef pkt_t *q
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        if self.free_head >= 0:
            i = self.free_head
            self.free_head = self.p[i].next_free
        else:
            if self.n == self.cap:
                q = <pkt_t *>realloc(self.p, 2 * self.cap * sizeof(pkt_t))
                if not q:
                    raise MemoryError()
                self.p = q
                self.cap *= 2
            i = self.n
            self.n += 1
        q = &self.p[i]
        Py_INCREF(data)
        q.data = <PyObject *>data
        q.t0 = t0
        q.src = src
        q.dst = dst
        q.len = <int32_t>n
        q.wire = <int32_t>n + header_bytes
        q.refs = 1
        q.cls = classify(<const uint8_t *>PyBytes_AS_STRING(data), n)
        return i

    cdef void recycle(self, int32_t i) noexcept:
        """Back to the free list, with the reference to its datagram."""
        cdef pkt_t *q = &self.p[i]
        cdef PyObject *d
        d = q.data
        q.data = NULL
        q.next_free = self.free_head
        self.free_head = i
        self.freed += 1
        if d != NULL:
            Py_DECREF(<object>d)

    @property
    def in_flight(self):
        """Packets some event or queue still refers to."""
        cdef int k = 0
        cdef int32_t i = self.free_head
        while i >= 0:
            k += 1
            i = self.p[i].next_free
        return self.n - k
