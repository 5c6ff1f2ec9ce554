# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Forwarding tables.

A multicast from source s follows s's tree: node v forwards a copy on each
of its children links, mc_links[s][mc_off[s][v]:mc_off[s][v + 1]].  A
unicast toward d leaves node v on uc_next[d][v] (-1: no route).  Tables
are computed in Python (topology.py) when first needed: a missing one is
asked of route_cb, so a run pays only for the sources and destinations it
uses.
"""
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy

cimport numpy as cnp

from rpbcast.sim.nodes cimport check_node

cnp.import_array()


cdef class Routes:
    def __cinit__(self, int n, int nlinks):
        self.n = n
        self.nlinks = nlinks
        self.mc_off = <int32_t **>calloc(n + 1, sizeof(int32_t *))
        self.mc_links = <int32_t **>calloc(n + 1, sizeof(int32_t *))
        self.uc_next = <int32_t **>calloc(n + 1, sizeof(int32_t *))
        if not self.mc_off or not self.mc_links or not self.uc_next:
            raise MemoryError()
        self.route_cb = None

    def __dealloc__(self):
        cdef int i
        if self.mc_off != NULL and self.mc_links != NULL and self.uc_next != NULL:
            for i in range(self.n + 1):
                free(self.mc_off[i])
                free(self.mc_links[i])
                free(self.uc_next[i])
        free(self.mc_off)
        free(self.mc_links)
        free(self.uc_next)

    def set_mcast_tree(self, int src, cnp.int32_t[::1] off not None, cnp.int32_t[::1] links not None):
        """Children links of each node in src's multicast tree (CSR: node v's
        are links[off[v]:off[v+1]], off has n + 2 entries)."""
        check_node(src, self.n)
        if off.shape[0] != self.n + 2:
            raise ValueError("off needs n + 2 entries")
        cdef int i
        for i in range(links.shape[0]):
            if links[i] < 0 or links[i] >= self.nlinks:
                raise IndexError("tree link out of range")
        free(self.mc_off[src])
        free(self.mc_links[src])
        self.mc_off[src] = <int32_t *>malloc((self.n + 2) * sizeof(int32_t))
        self.mc_links[src] = <int32_t *>malloc((links.shape[0] + 1) * sizeof(int32_t))
        if not self.mc_off[src] or not self.mc_links[src]:
            raise MemoryError()
        memcpy(self.mc_off[src], &off[0], (self.n + 2) * sizeof(int32_t))
        if links.shape[0]:
            memcpy(self.mc_links[src], &links[0], links.shape[0] * sizeof(int32_t))

    def set_route(self, int dst, cnp.int32_t[::1] next_link not None):
        """next_link[v]: the link node v sends on toward dst (-1: none)."""
        check_node(dst, self.n)
        if next_link.shape[0] != self.n + 1:
            raise ValueError("next_link needs n + 1 entries")
        free(self.uc_next[dst])
        self.uc_next[dst] = <int32_t *>malloc((self.n + 1) * sizeof(int32_t))
        if not self.uc_next[dst]:
            raise MemoryError()
        memcpy(self.uc_next[dst], &next_link[0], (self.n + 1) * sizeof(int32_t))

    def clear(self):
        """Forget every table (they are asked of route_cb again)."""
        cdef int i
        for i in range(self.n + 1):
            free(self.mc_off[i]); self.mc_off[i] = NULL
            free(self.mc_links[i]); self.mc_links[i] = NULL
            free(self.uc_next[i]); self.uc_next[i] = NULL

    cdef int ensure_tree(self, int src) except -1:
        if self.mc_off[src] == NULL:
            if self.route_cb is None:
                raise RuntimeError(f"no multicast tree for source {src}")
            self.route_cb("mcast", src)
            if self.mc_off[src] == NULL:
                raise RuntimeError(f"route_cb did not install the multicast tree of {src}")
        return 0

    cdef int ensure_route(self, int dst) except -1:
        if self.uc_next[dst] == NULL:
            if self.route_cb is None:
                raise RuntimeError(f"no unicast routes toward {dst}")
            self.route_cb("unicast", dst)
            if self.uc_next[dst] == NULL:
                raise RuntimeError(f"route_cb did not install the routes toward {dst}")
        return 0
