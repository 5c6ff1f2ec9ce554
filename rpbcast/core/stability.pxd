from rpbcast.core.csrc cimport rp_stab_t

cdef class StabilityArrays:
    cdef rp_stab_t s
