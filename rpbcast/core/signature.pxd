from rpbcast.core.csrc cimport rp_sigvec_t

cdef class Signature:
    cdef rp_sigvec_t v
