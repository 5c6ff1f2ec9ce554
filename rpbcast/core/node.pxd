from rpbcast.core.csrc cimport rp_node_t

cdef class Node:
    cdef rp_node_t n
    cdef object log
