from rpbcast.core.csrc cimport rp_srbq_t, rp_srbw_t

cdef class SRBQueue:
    cdef rp_srbq_t q

cdef class SRBWindow:
    cdef rp_srbw_t s
