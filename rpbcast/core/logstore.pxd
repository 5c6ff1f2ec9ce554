from rpbcast.core.csrc cimport rp_log_t

cdef class LogStore:
    cdef rp_log_t l
    cdef bint opened
    cdef object path
