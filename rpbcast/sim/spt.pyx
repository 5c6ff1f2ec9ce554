# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Shortest-path trees in C (Dijkstra): the routes of topology.py."""
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport malloc, calloc, free

import numpy as np
cimport numpy as cnp

cnp.import_array()


ctypedef struct key_t:     # a tentative cost: (latency, hops) to node v
    int64_t d
    int32_t h
    int32_t v


cdef inline bint key_less(key_t *a, key_t *b) noexcept nogil:
    """(latency, hops, node) lexicographically: the tie-breaks of the routes."""
    return a.d < b.d or (a.d == b.d and (a.h < b.h or (a.h == b.h and a.v < b.v)))


cdef inline void kheap_push(key_t *heap, size_t *n, key_t k) noexcept nogil:
    cdef size_t i = n[0], p
    n[0] += 1
    while i > 0:
        p = (i - 1) >> 1
        if not key_less(&k, &heap[p]):
            break
        heap[i] = heap[p]
        i = p
    heap[i] = k


cdef inline key_t kheap_pop(key_t *heap, size_t *n) noexcept nogil:
    cdef key_t top = heap[0], last
    cdef size_t i = 0, c
    n[0] -= 1
    if n[0]:
        last = heap[n[0]]
        while True:
            c = 2 * i + 1
            if c >= n[0]:
                break
            if c + 1 < n[0] and key_less(&heap[c + 1], &heap[c]):
                c += 1
            if not key_less(&heap[c], &last):
                break
            heap[i] = heap[c]
            i = c
        heap[i] = last
    return top


def spt(int n, cnp.int32_t[::1] off not None, cnp.int32_t[::1] nbr not None,
        cnp.int64_t[::1] lat not None, int root):
    """Shortest-path tree from root over nodes 1..n (CSR adjacency: node v's
    neighbours are nbr[off[v]:off[v+1]] at latencies lat[...]).

    Cost is (latency, hops) compared lexicographically; among equal-cost
    predecessors the lowest node id wins.  Returns (parent, dist, hops, via)
    as NumPy arrays of n + 1 entries; parent[root] = 0, unreachable = -1;
    via[v] is the CSR position (index into nbr) of the edge parent -> v."""
    if off.shape[0] != n + 2:
        raise ValueError("off needs n + 2 entries")
    if root < 1 or root > n:
        raise IndexError(root)
    parent = np.full(n + 1, -1, np.int32)
    dist = np.full(n + 1, -1, np.int64)
    hops = np.full(n + 1, -1, np.int32)
    via_a = np.full(n + 1, -1, np.int32)
    cdef cnp.int32_t[::1] via = via_a
    cdef cnp.int32_t[::1] par = parent
    cdef cnp.int64_t[::1] d = dist
    cdef cnp.int32_t[::1] h = hops
    cdef uint8_t *done = <uint8_t *>calloc(n + 1, 1)
    cdef key_t *heap = <key_t *>malloc((2 * (n + 1) + nbr.shape[0] + 4) * sizeof(key_t))
    cdef size_t hn = 0
    cdef key_t top, k
    cdef int32_t u, w, j
    cdef bint improved
    if not done or not heap:
        free(done); free(heap)
        raise MemoryError()
    d[root] = 0
    h[root] = 0
    par[root] = 0
    kheap_push(heap, &hn, key_t(0, 0, root))
    while hn:
        top = kheap_pop(heap, &hn)
        u = top.v
        if done[u] or top.d != d[u] or top.h != h[u]:
            continue                      # a stale entry: u was improved after it was pushed
        done[u] = 1
        for j in range(off[u], off[u + 1]):
            w = nbr[j]
            if done[w]:
                continue
            k = key_t(d[u] + lat[j], h[u] + 1, w)
            if d[w] < 0 or k.d < d[w] or (k.d == d[w] and (k.h < h[w] or (k.h == h[w] and u < par[w]))):
                improved = d[w] < 0 or k.d < d[w] or k.h < h[w]
                d[w] = k.d
                h[w] = k.h
                par[w] = u
                via[w] = j
                if improved:              # a new parent at the same cost keeps w's heap entry
                    kheap_push(heap, &hn, k)
    free(done)
    free(heap)
    return parent, dist, hops, via_a
