# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Deliveries taken straight from the engines' C data planes into arrays
(the periodic drain of a run), with the payload check done on the way."""
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport rp_node_recv, rp_node_pending
from rpbcast.core.node cimport Node

cnp.import_array()


cdef uint64_t count_corrupt(size_t k, const uint8_t *buf, const uint32_t *offs, const uint32_t *lens, int size,
                            const uint32_t *snd, const uint32_t *inc, const uint64_t *seq) noexcept nogil:
    """Payloads among k in buf whose length is not size or whose first 16
    bytes are not their (sender, inc, seq) (workload.payload)."""
    cdef size_t j
    cdef uint64_t bad = 0
    cdef const uint8_t *h
    cdef uint32_t h0, h1
    cdef uint64_t h2
    for j in range(k):
        if lens[j] != <uint32_t>size or lens[j] < 16:
            bad += 1
            continue
        h = buf + offs[j]
        memcpy(&h0, h, 4)
        memcpy(&h1, h + 4, 4)
        memcpy(&h2, h + 8, 8)
        if h0 != snd[j] or h1 != inc[j] or h2 != seq[j]:
            bad += 1
    return bad


def drain(list nodes, int size, bint check, int64_t now):
    """Take every delivery waiting at the given data planes (rpbcast.core.node.Node).
    Returns (counts per node, senders, incs, seqs, rx_times, corrupt): the
    records node by node, in delivery order; corrupt counts payloads whose
    first 16 bytes are not (sender, inc, seq) or whose length is not size
    (when check)."""
    cdef Py_ssize_t i, nn = len(nodes)
    cdef uint64_t total = 0
    cdef Node node
    for i in range(nn):
        node = <Node?>nodes[i]
        total += rp_node_pending(&node.n)
    counts = np.zeros(nn, np.int64)
    snd_a = np.empty(total, np.uint32)
    inc_a = np.empty(total, np.uint32)
    seq_a = np.empty(total, np.uint64)
    rxt_a = np.empty(total, np.int64)
    cdef cnp.int64_t[::1] cnt = counts
    cdef cnp.uint32_t[::1] snd = snd_a
    cdef cnp.uint32_t[::1] inc = inc_a
    cdef cnp.uint64_t[::1] seq = seq_a
    cdef cnp.int64_t[::1] rxt = rxt_a
    cdef size_t chunk = 4096
    cdef size_t cap = 4 << 20
    cdef uint64_t *lab = <uint64_t *>malloc(chunk * sizeof(uint64_t))
    cdef uint32_t *offs = <uint32_t *>malloc(chunk * sizeof(uint32_t))
    cdef uint32_t *lens = <uint32_t *>malloc(chunk * sizeof(uint32_t))
    cdef uint8_t *buf = <uint8_t *>malloc(cap)
    cdef size_t pos = 0, k, room
    cdef uint64_t corrupt = 0
    if not lab or not offs or not lens or not buf:
        free(lab); free(offs); free(lens); free(buf)
        raise MemoryError()
    try:
        for i in range(nn):
            node = <Node>nodes[i]
            while pos < total:
                room = total - pos
                k = rp_node_recv(&node.n, chunk if room > chunk else room, &snd[pos], &inc[pos],
                                 &seq[pos], lab, &rxt[pos], offs, lens, buf, cap, now)
                if k == 0:
                    break
                if check:
                    corrupt += count_corrupt(k, buf, offs, lens, size, &snd[pos], &inc[pos], &seq[pos])
                cnt[i] += k
                pos += k
    finally:
        free(lab); free(offs); free(lens); free(buf)
    return counts, snd_a[:pos], inc_a[:pos], seq_a[:pos], rxt_a[:pos], corrupt
