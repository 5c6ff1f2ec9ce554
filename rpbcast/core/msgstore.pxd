from rpbcast.core.csrc cimport rp_mstore_t

cdef class MessageStore:
    cdef rp_mstore_t s
