from rpbcast.core.csrc cimport rp_seqtrack_t

cdef class SeqTracker:
    cdef rp_seqtrack_t st
