"""Forwarding tables: multicast trees per source, next hops per destination (routes.pyx)."""
cimport cython
from libc.stdint cimport int32_t


@cython.final
cdef class Routes:
    cdef readonly int n                 # nodes
    cdef int nlinks
    cdef int32_t **mc_off               # per source: CSR of tree children links
    cdef int32_t **mc_links
    cdef int32_t **uc_next              # per destination: link from each node toward it
    cdef public object route_cb         # route_cb(kind, node): install a missing route

    cdef int ensure_tree(self, int src) except -1
    cdef int ensure_route(self, int dst) except -1
