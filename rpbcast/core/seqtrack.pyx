# cython: language_level=3, boundscheck=False, wraparound=False
"""Per-sender sequence tracker: gap detection with the missing set as intervals.

The C structure is ``csrc/seqtrack.h``; this class is its Python face.  The
batch form takes a NumPy ``uint64`` array and fills a ``uint8`` array of
result codes without creating a Python object per sequence number.
"""
from libc.stdint cimport uint8_t, uint64_t, int64_t, uint32_t
import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport *

cnp.import_array()

DUP = RP_ACC_DUP
NEW = RP_ACC_NEW
FILL = RP_ACC_FILL
FAR = RP_ACC_FAR
NOMEM = RP_ACC_NOMEM
SEQ_LIMIT = RP_SEQ_LIMIT

RESULT_NAMES = {DUP: "dup", NEW: "new", FILL: "fill", FAR: "far", NOMEM: "nomem"}


cdef class SeqTracker:
    """Tracks one sender's sequence numbers as seen by one receiver.

    ``base`` is the first sequence number this receiver is responsible for
    (later ones joining a running stream start above 0).  A jump of more
    than ``max_gap`` past the highest seen is rejected as ``FAR`` (a
    corrupt or hostile sequence number must not create a gap of 2**62).
    ``max_intervals`` bounds the gap list (0 = unbounded).
    """

    def __cinit__(self, uint64_t base=0, uint64_t max_gap=1 << 32, uint32_t max_intervals=0):
        if base >= RP_SEQ_LIMIT:
            raise ValueError(f"base must be < 2**62, got {base}")
        if max_gap == 0:
            raise ValueError("max_gap must be at least 1")
        if rp_seqtrack_init(&self.st, base, max_gap, max_intervals) != RP_OK:
            raise MemoryError()

    def __dealloc__(self):
        rp_seqtrack_free(&self.st)

    def accept(self, uint64_t seq):
        """Accept one sequence number; returns NEW, FILL, DUP, FAR or NOMEM."""
        return rp_seqtrack_accept(&self.st, seq, NULL, NULL)

    def accept_gap(self, uint64_t seq):
        """Like accept, also returning the newly missing range or None."""
        cdef uint64_t lo, hi
        cdef int r = rp_seqtrack_accept(&self.st, seq, &lo, &hi)
        return r, ((lo, hi) if lo <= hi else None)

    def heartbeat(self, uint64_t seq):
        """The sender's latest seq is ``seq``: returns the newly missing
        (lo, hi) range, or None.  Raises ValueError for a jump past max_gap."""
        cdef uint64_t lo, hi
        cdef int64_t r = rp_seqtrack_heartbeat(&self.st, seq, &lo, &hi)
        if r == -RP_ACC_FAR:
            raise ValueError(f"heartbeat {seq} is more than max_gap ahead of {self.st.next}")
        if r < 0:
            raise MemoryError("gap list bound reached")
        return (lo, hi) if r > 0 else None

    def accept_batch(self, const uint64_t[::1] seqs not None, uint8_t[::1] out=None):
        """Accept many sequence numbers; returns (codes, n_accepted)."""
        cdef size_t n = seqs.shape[0]
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        elif <size_t>out.shape[0] < n:
            raise ValueError("out is shorter than seqs")
        cdef size_t good = 0
        if n:
            with nogil:
                good = rp_seqtrack_accept_batch(&self.st, &seqs[0], n, &out[0])
        return np.asarray(out[:n]), good

    def forget(self, uint64_t lo, uint64_t hi):
        """Stop waiting for [lo, hi] (announced lost, or inferred purged)."""
        if lo > hi:
            raise ValueError("lo > hi")
        cdef int64_t r = rp_seqtrack_forget(&self.st, lo, hi)
        if r < 0:
            raise MemoryError()
        return r

    def received(self, uint64_t seq):
        return bool(rp_seqtrack_received(&self.st, seq))

    def is_missing(self, uint64_t seq):
        return bool(rp_iset_contains(&self.st.missing, seq))

    @property
    def next(self):
        return self.st.next

    @property
    def lastseen(self):
        """Highest sequence number seen, or base - 1 when nothing yet."""
        return <int64_t>self.st.next - 1

    @property
    def base(self):
        return self.st.base

    @property
    def contiguous(self):
        """Smallest seq not yet received (GSGC's R entry for this sender)."""
        return rp_seqtrack_contiguous(&self.st)

    @property
    def missing_count(self):
        return self.st.missing.count

    @property
    def missing(self):
        """The missing set as a list of (lo, hi) closed intervals."""
        cdef uint32_t i
        return [(self.st.missing.v[i].lo, self.st.missing.v[i].hi)
                for i in range(self.st.missing.n)]

    def missing_array(self):
        """The missing set as an (n, 2) uint64 array."""
        cdef uint32_t n = self.st.missing.n
        a = np.empty((n, 2), dtype=np.uint64)
        cdef uint64_t[:, ::1] v = a
        cdef uint32_t i
        for i in range(n):
            v[i, 0] = self.st.missing.v[i].lo
            v[i, 1] = self.st.missing.v[i].hi
        return a

    def counters(self):
        return {"new": self.st.n_new, "fill": self.st.n_fill, "dup": self.st.n_dup,
                "far": self.st.n_far, "nomem": self.st.n_nomem, "gaps": self.st.n_gaps}
