"""The virtual clock and the heap of pending events (events.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t

cdef enum:
    EV_ARRIVE = 0      # a packet reaches the far end of a link
    EV_FORWARD = 1     # router processing done: forward it
    EV_HOSTRX = 2      # host receive processing done: hand it to the engine
    EV_HOSTTX = 3      # host send processing done: it leaves on its first link(s)
    EV_TIMER = 4       # the engine's timer
    EV_CALL = 5        # a Python callable


ctypedef struct ev_t:
    int64_t t
    uint64_t seq
    int32_t kind
    int32_t node
    int32_t arg        # packet index, or call id
    int32_t link       # ARRIVE: the link it came over


@cython.final
cdef class EventQueue:
    cdef ev_t *heap
    cdef size_t n, cap
    cdef uint64_t seq                   # insertion number: orders events at the same time
    cdef readonly int64_t now           # virtual ns; the event loop moves it
    cdef readonly int64_t max_n         # most events pending at once

    cdef int push(self, int64_t t, int kind, int node, int arg, int link) except -1
    cdef void pop(self, ev_t *out) noexcept nogil
