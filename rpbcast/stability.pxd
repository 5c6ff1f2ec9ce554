from rpbcast.includes.core cimport rp_stab_t

cdef class StabilityArrays:
    cdef rp_stab_t s
