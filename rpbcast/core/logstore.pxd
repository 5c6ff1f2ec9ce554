from libc.stdint cimport uint32_t, int64_t

from rpbcast.core.csrc cimport rp_log_t

cdef class LogStore:
    cdef rp_log_t l
    cdef bint opened
    cdef object path
    cdef int64_t _sid(self, uint32_t sender, uint32_t inc)
