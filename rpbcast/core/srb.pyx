# cython: language_level=3, boundscheck=False, wraparound=False
"""FIFO Semantically Reliable Broadcast windows (see ``csrc/srb.h``).

``SRBQueue`` is a receiver's per-sender FIFO delivery queue with label
purging (TP4) and purge inference from the sender window (§2.5);
``SRBWindow`` is a sender's window with purging of obsolete messages once
their successor is safe (TP5).  Both hold opaque integer handles.
"""
from libc.stdint cimport uint64_t, int64_t
import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport *

cnp.import_array()

NOLABEL = RP_SRB_NOLABEL
QUEUED = RP_SQ_R_QUEUED
OLD = RP_SQ_R_OLD


cdef inline uint64_t _label(object label) except? 0:
    if label is None:
        return RP_SRB_NOLABEL
    cdef uint64_t l = label
    if l == RP_SRB_NOLABEL:
        raise ValueError("label 2**64-1 is reserved for 'no label'")
    return l


cdef class SRBQueue:
    def __cinit__(self, uint64_t base=0, uint64_t w=0, uint64_t cap=64, uint64_t max_cap=0):
        cdef int rc = rp_srbq_init(&self.q, base, w, cap, max_cap)
        if rc == RP_EINVAL:
            raise ValueError("cap larger than max_cap (or max_cap above 2**32-1)")
        if rc != RP_OK:
            raise MemoryError()

    def __dealloc__(self):
        rp_srbq_free(&self.q)

    def insert(self, uint64_t seq, label, uint64_t handle):
        """Returns QUEUED or OLD.  Queued messages this one made obsolete (it
        entered the deliverable prefix, or let later ones in): take_purged()."""
        cdef int r = rp_srbq_insert(&self.q, seq, _label(label), handle)
        if r == RP_EFULL:
            raise OverflowError("queue holds max_cap messages (or intervals)")
        if r < 0:
            raise MemoryError()
        return r

    def take_purged(self):
        """[(seq, handle)] of queued messages purged by TP4 since the last call."""
        out = []
        cdef uint64_t h[256]
        cdef uint64_t s[256]
        cdef size_t k, i
        while True:
            k = rp_srbq_take_purged(&self.q, h, s, 256)
            for i in range(k):
                out.append((s[i], h[i]))
            if k < 256:
                return out

    def infer(self, uint64_t t):
        """The sender sent seq t; returns (count, lo, hi) of seqs inferred
        purged (count 0: lo/hi None)."""
        cdef uint64_t lo = 0, hi = 0
        cdef int64_t k = rp_srbq_infer(&self.q, t, &lo, &hi)
        if k < 0:
            raise OverflowError("queue holds max_cap intervals")
        return (k, lo, hi) if k else (0, None, None)

    def mark_purged(self, uint64_t seq):
        return bool(rp_srbq_mark_purged(&self.q, seq))

    def mark_purged_range(self, uint64_t lo, uint64_t hi):
        """Every empty seq in [lo, hi] will never come; returns how many
        became purged (one interval whatever the length)."""
        return rp_srbq_mark_purged_range(&self.q, lo, hi)

    def peek(self):
        """The handle pop() would deliver next, or None."""
        cdef uint64_t h = 0
        return h if rp_srbq_peek(&self.q, &h) else None

    def pop(self, size_t max_n=1 << 30):
        """Deliverable (handle, seq) pairs in FIFO order."""
        out = []
        cdef uint64_t h[256]
        cdef uint64_t s[256]
        cdef size_t k, i
        while max_n:
            k = rp_srbq_pop(&self.q, h, s, max_n if max_n < 256 else 256)
            for i in range(k):
                out.append((h[i], s[i]))
            max_n -= k
            if k < 256:
                break
        return out

    @property
    def head(self):
        return self.q.head

    @property
    def ready(self):
        """Every seq in [head, ready) is queued or purged."""
        return self.q.ready

    @property
    def tail(self):
        return self.q.tail

    @property
    def pending(self):
        return rp_srbq_pending(&self.q)

    def counters(self):
        return {"queued": self.q.n_queued, "delivered": self.q.n_delivered,
                "purged_queue": self.q.n_purged_queue,
                "purged_inferred": self.q.n_purged_inferred,
                "purged_marked": self.q.n_purged_marked}


cdef class SRBWindow:
    def __cinit__(self, uint64_t base=0, uint64_t w=64):
        if w == 0 or w > (1 << 24):
            raise ValueError(f"window must be in 1..2**24, got {w}")
        if rp_srbw_init(&self.s, base, w) != RP_OK:
            raise MemoryError()

    def __dealloc__(self):
        rp_srbw_free(&self.s)

    @property
    def can_send(self):
        return bool(rp_srbw_can_send(&self.s))

    def sent(self, label, uint64_t handle):
        """Record the next message; returns its seq.  Raises BlockingIOError
        when the window is closed."""
        cdef uint64_t seq = self.s.next
        cdef int r = rp_srbw_sent(&self.s, _label(label), handle)
        if r == RP_EFULL:
            raise BlockingIOError("window closed: wait for stability or purges")
        if r < 0:
            raise MemoryError()
        return seq

    def set_safe(self, uint64_t upto):
        """Returns [(purged seq, superseded by, handle), ...]."""
        out = []
        cdef uint64_t a[256]
        cdef uint64_t b[256]
        cdef uint64_t c[256]
        cdef size_t k, i
        while True:
            k = rp_srbw_set_safe(&self.s, upto, a, b, c, 256)
            for i in range(k):
                out.append((a[i], b[i], c[i]))
            if k < 256:
                break
        return out

    def set_stable(self, uint64_t upto):
        """Returns the handles of messages that left the window as stable."""
        out = []
        cdef uint64_t a[256]
        cdef size_t k, i
        while True:
            k = rp_srbw_set_stable(&self.s, upto, a, 256)
            for i in range(k):
                out.append(a[i])
            if k < 256:
                break
        return out

    def purged_by(self, uint64_t seq):
        cdef uint64_t sup = 0
        return sup if rp_srbw_purged_by(&self.s, seq, &sup) else None

    @property
    def low(self):
        return self.s.low

    @property
    def next(self):
        return self.s.next

    @property
    def w(self):
        return self.s.w

    @property
    def safe(self):
        return self.s.safe

    @property
    def stable(self):
        return self.s.stable
