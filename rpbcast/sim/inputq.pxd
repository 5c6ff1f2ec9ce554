"""Hosts' input queues under a bounded delivery queue (inputq.pyx)."""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t
from cpython.ref cimport PyObject


@cython.final
cdef class InputQueues:
    cdef readonly int n
    cdef int64_t *limit                 # per node: -1 = none, else waiting messages that stop receiving
    cdef int32_t **ring                 # per node: FIFO ring of held packets (indices into the pool)
    cdef int32_t *cap
    cdef int32_t *head
    cdef int32_t *count
    cdef uint64_t *held                 # packets that had to wait
    cdef int32_t *held_max              # most packets waiting at once
    cdef PyObject **nodes               # borrowed from _nodes (the data plane of limited hosts)
    cdef list _nodes

    cdef uint64_t waiting(self, int v) noexcept
    cdef bint full(self, int v) noexcept
    cdef int push(self, int v, int32_t i) except -1
    cdef int32_t pop(self, int v) noexcept
