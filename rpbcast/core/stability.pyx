# cython: language_level=3, boundscheck=False, wraparound=False
"""GSGC stability arrays (R, M, W, S, r) and gossip failure detection (L).

Thin face of ``csrc/stability.h``; the merge rules, and the two corrections
to the paper's Fig. 2, are documented there.
"""
from libc.stdint cimport uint32_t, uint64_t
import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport *

cnp.import_array()

REDUNDANT = RP_STAB_REDUNDANT
ADOPTED = RP_STAB_ADOPTED
MERGED = RP_STAB_MERGED
NEXT = RP_STAB_NEXT
FUTURE = RP_STAB_FUTURE
OLD = RP_STAB_OLD
COMPLETED = RP_STAB_COMPLETED


def words(n):
    """Number of 64-bit words in a bitmap of n members."""
    return (n + 63) // 64


cdef class StabilityArrays:
    """Stability detection state of one member.

    ``m`` senders and ``n`` members are indexed locally (0..m-1, 0..n-1); the
    caller maps ids to indices.  ``W`` is a bitmap of uint64 words.
    """

    def __cinit__(self, uint32_t m, uint32_t n, uint32_t self_index):
        if self_index >= n:
            raise ValueError(f"self_index {self_index} must be < n ({n})")
        if rp_stab_init(&self.s, m, n, self_index) != RP_OK:
            raise MemoryError()

    def __dealloc__(self):
        rp_stab_free(&self.s)

    def resize(self, uint32_t m, uint32_t n):
        if rp_stab_resize(&self.s, m, n) != RP_OK:
            raise MemoryError()

    def set_R(self, uint32_t j, uint64_t v):
        if j >= self.s.m:
            raise IndexError(f"sender index {j} >= m ({self.s.m})")
        rp_stab_set_R(&self.s, j, v)

    def start_round(self):
        rp_stab_start_round(&self.s)

    def merge(self, M, W, S, uint64_t r):
        """Merge a gossip (M, W, S, r); returns the RP_STAB_* flags."""
        cdef const uint64_t[::1] m_ = np.ascontiguousarray(M, dtype=np.uint64)
        cdef const uint64_t[::1] w_ = np.ascontiguousarray(W, dtype=np.uint64)
        cdef const uint64_t[::1] s_ = np.ascontiguousarray(S, dtype=np.uint64)
        cdef uint32_t mi = m_.shape[0]
        if s_.shape[0] != mi:
            raise ValueError("M and S must have the same length")
        if mi > self.s.m:
            raise ValueError(f"message has {mi} senders, resize() to at least that first")
        cdef uint32_t ni = w_.shape[0] * 64
        if ni > self.s.n:
            ni = self.s.n
        if w_.shape[0] > words(self.s.n):
            raise ValueError("W has more words than members; resize() first")
        cdef uint64_t zero = 0
        cdef int f = rp_stab_merge(&self.s, &m_[0] if mi else &zero, &w_[0] if w_.shape[0] else &zero,
                                   &s_[0] if mi else &zero, r, mi, ni)
        if f < 0:
            raise ValueError("dimensions do not match")
        return f

    def merge_S(self, S, uint64_t r):
        cdef const uint64_t[::1] s_ = np.ascontiguousarray(S, dtype=np.uint64)
        cdef uint64_t zero = 0
        if s_.shape[0] > self.s.m:
            raise ValueError("S longer than m; resize() first")
        return rp_stab_merge_S(&self.s, &s_[0] if s_.shape[0] else &zero, s_.shape[0], r)

    def check(self):
        return rp_stab_check(&self.s)

    @property
    def complete(self):
        return bool(rp_stab_complete(&self.s))

    def fd_step(self):
        rp_stab_fd_step(&self.s)

    def fd_heard(self, uint32_t i):
        rp_stab_fd_heard(&self.s, i)

    def fd_merge(self, L):
        cdef const uint32_t[::1] l_ = np.ascontiguousarray(L, dtype=np.uint32)
        if l_.shape[0]:
            rp_stab_fd_merge(&self.s, &l_[0], l_.shape[0])

    def fd_failed(self, uint32_t K):
        return rp_stab_fd_failed(&self.s, K)

    def set_L(self, uint32_t i, uint32_t v):
        """Set one live counter (own entry stays 0).  For carrying L over
        when a caller re-indexes members, and for a newcomer that starts
        with "not heard of yet" rather than "just heard"."""
        if i >= self.s.n:
            raise IndexError(f"member index {i} >= n ({self.s.n})")
        if i != self.s.self:
            self.s.L[i] = v

    def set_alive(self, uint32_t i, bint alive):
        rp_stab_set_alive(&self.s, i, alive)

    def is_alive(self, uint32_t i):
        return bool(rp_stab_is_alive(&self.s, i))

    def heard(self, uint32_t i):
        return bool(rp_stab_heard(&self.s, i))

    @property
    def m(self):
        return self.s.m

    @property
    def n(self):
        return self.s.n

    @property
    def self_index(self):
        return self.s.self

    @property
    def round(self):
        return self.s.round

    @property
    def rounds_completed(self):
        return self.s.n_rounds

    @property
    def R(self):
        return np.array(<uint64_t[:self.s.m]>self.s.R, copy=True) if self.s.m else np.zeros(0, np.uint64)

    @property
    def M(self):
        return np.array(<uint64_t[:self.s.m]>self.s.M, copy=True) if self.s.m else np.zeros(0, np.uint64)

    @property
    def S(self):
        return np.array(<uint64_t[:self.s.m]>self.s.S, copy=True) if self.s.m else np.zeros(0, np.uint64)

    @property
    def W(self):
        return np.array(<uint64_t[:words(self.s.n)]>self.s.W, copy=True)

    @property
    def alive(self):
        return np.array(<uint64_t[:words(self.s.n)]>self.s.alive, copy=True)

    @property
    def L(self):
        return np.array(<uint32_t[:self.s.n]>self.s.L, copy=True)
