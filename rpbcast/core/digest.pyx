# cython: language_level=3, boundscheck=False, wraparound=False
"""Interval digests: a set of sequence numbers, as intervals, in few bytes.

See ``csrc/digest.h`` for the encoding.  A digest says "inside the window
[from, upto] the set is exactly these intervals"; a digest cut short by its
byte budget narrows the window instead of dropping intervals, so it never
claims what it does not know.
"""
from libc.stdint cimport uint8_t, uint64_t
from libc.stdlib cimport malloc, free
import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport *

cnp.import_array()


class DigestError(ValueError):
    """A digest that does not decode: the reason is in the message."""


cdef str _reason(long code):
    cdef const char *name = rp_digest_error_name(code)
    return name.decode() if name != NULL else str(code)


def _as_intervals(intervals):
    a = np.ascontiguousarray(np.asarray(intervals, dtype=np.uint64).reshape(-1, 2))
    if a.shape[0] > 1:
        # lo - prev_hi >= 2, written without prev_hi + 1 (wraps at 2**64 - 1)
        if (np.any(a[:, 0] > a[:, 1]) or np.any(a[1:, 0] <= a[:-1, 1])
                or np.any(a[1:, 0] - a[:-1, 1] < 2)):
            raise ValueError("intervals must be sorted, disjoint and non-adjacent with lo <= hi")
    elif a.shape[0] == 1 and a[0, 0] > a[0, 1]:
        raise ValueError("interval with lo > hi")
    return a


def encode(intervals, uint64_t from_, uint64_t upto, size_t budget=1400):
    """Encode the part of ``intervals`` inside [from_, upto] in at most
    ``budget`` bytes.  Returns (bytes, covered_upto, n_intervals); the bytes
    are empty when not even a truthful header fits."""
    if upto < from_:
        raise ValueError("upto < from_")
    a = _as_intervals(intervals)
    cdef const uint64_t[:, ::1] v = a
    cdef size_t n = a.shape[0]
    cdef uint8_t *buf = <uint8_t *>malloc(budget if budget else 1)
    if buf == NULL:
        raise MemoryError()
    cdef uint64_t cov = 0
    cdef size_t nout = 0
    cdef size_t w
    try:
        w = rp_digest_encode(<const rp_ival_t *>&v[0, 0] if n else NULL, n, from_, upto,
                             buf, budget, &cov, &nout)
        if w == 0:
            return b"", None, 0
        return buf[:w], cov, nout
    finally:
        free(buf)


def decode(const uint8_t[::1] data not None, size_t max_intervals=1 << 20):
    """Decode a digest.  Returns (intervals as an (n, 2) uint64 array, from,
    upto, bytes consumed); raises DigestError on malformed input."""
    cdef size_t length = data.shape[0]
    cdef size_t n = 0
    cdef long r
    if length == 0:
        raise DigestError("truncated")
    r = rp_digest_check(&data[0], length, &n)
    if r < 0:
        raise DigestError(_reason(r))
    if n > max_intervals:
        raise DigestError(_reason(RP_DIG_TOO_MANY))
    out = np.empty((n, 2), dtype=np.uint64)
    cdef uint64_t[:, ::1] o = out
    cdef uint64_t frm = 0, upto = 0
    r = rp_digest_decode(&data[0], length, <rp_ival_t *>&o[0, 0] if n else NULL, n, &n,
                         &frm, &upto)
    if r < 0:
        raise DigestError(_reason(r))
    return out, frm, upto, r
