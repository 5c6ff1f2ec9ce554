# cython: language_level=3
"""A logger's crash-safe log on disk (``csrc/logstore.h``).

Append-only segment files with a CRC32C per record.  Opening a directory
recovers it: a torn record at the end of the newest segment (an interrupted
write) is cut off, everything before it is indexed again.
"""
import os

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from rpbcast.core.csrc cimport *

NOLABEL = RP_SRB_NOLABEL


def crc32c(const uint8_t[::1] data not None, uint32_t crc=0):
    return rp_crc32c(crc, &data[0] if data.shape[0] else NULL, data.shape[0])


def crc32c_table(const uint8_t[::1] data not None, uint32_t crc=0):
    """The portable table-driven CRC32C (the reference for the hardware path)."""
    return rp_crc32c_sw(crc, &data[0] if data.shape[0] else NULL, data.shape[0])


class LogError(OSError):
    pass


cdef class LogStore:
    """Open or create the log in ``directory``.  ``segment_bytes`` is the
    size at which a new segment file starts."""

    def __cinit__(self, directory, uint64_t segment_bytes=64 << 20):
        self.opened = False
        path = os.fsencode(os.fspath(directory))
        self.path = os.fsdecode(path)
        cdef int rc = rp_log_open(&self.l, path, segment_bytes)
        if rc == RP_ENOMEM:
            raise MemoryError()
        if rc < 0:
            raise LogError(-rc, f"cannot open log directory {self.path!r}: {os.strerror(-rc)}")
        self.opened = True

    def __dealloc__(self):
        if self.opened:
            rp_log_close(&self.l)

    def close(self):
        if self.opened:
            rp_log_close(&self.l)
            self.opened = False

    def abandon(self):
        """Close as a process killed right now would: records appended but
        not yet flushed or synced are lost (tests crash loggers with it)."""
        if self.opened:
            rp_log_abandon(&self.l)
            self.opened = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self):
        if not self.opened:
            raise ValueError("log is closed")

    @property
    def directory(self):
        return self.path

    def append(self, uint32_t sender, uint32_t inc, uint64_t seq, const uint8_t[::1] payload not None,
               label=None, int64_t t=0):
        """Append a record; returns False if (sender, inc, seq) was already
        logged, or lies below the stream's GC frontier (collected as stable)."""
        self._check()
        cdef uint64_t lab = NOLABEL if label is None else <uint64_t>label
        cdef uint8_t z = 0
        cdef int rc = rp_log_append(&self.l, sender, inc, seq, lab, t,
                                    &payload[0] if payload.shape[0] else &z, payload.shape[0])
        if rc == 1:
            return False
        if rc == RP_EINVAL:
            raise ValueError("payload larger than 1 MiB")
        if rc < 0:
            raise LogError(-rc, os.strerror(-rc) if rc > -4096 else "log append failed")
        return True

    def flush(self):
        self._check()
        cdef int rc = rp_log_flush(&self.l)
        if rc < 0:
            raise LogError(-rc, os.strerror(-rc))

    def sync(self):
        """Flush and fdatasync: everything appended so far is durable."""
        self._check()
        cdef int rc = rp_log_sync(&self.l)
        if rc < 0:
            raise LogError(-rc, os.strerror(-rc))

    def has(self, uint32_t sender, uint32_t inc, uint64_t seq):
        self._check()
        return bool(rp_log_has(&self.l, sender, inc, seq))

    def read(self, uint32_t sender, uint32_t inc, uint64_t seq):
        """(payload bytes, label) or None if not logged.  Raises LogError on
        a CRC mismatch or I/O failure."""
        self._check()
        cdef const uint8_t *p
        cdef uint64_t label = 0
        cdef long n = rp_log_read(&self.l, sender, inc, seq, &p, &label)
        if n == -1:
            return None
        if n < 0:
            raise LogError(5, "corrupt record" if n == -3 else "log read failed")
        return (p[:n] if n else b""), (None if label == NOLABEL else label)

    def seqs(self, uint32_t sender, uint32_t inc):
        """Sorted NumPy array of the seqs logged for (sender, inc)."""
        self._check()
        import numpy as np
        cdef uint32_t i
        cdef uint64_t q, lo = 0, hi = 0
        cdef int found = 0
        for i in range(self.l.nstreams):
            if self.l.streams[i].sender == sender and self.l.streams[i].inc == inc and self.l.streams[i].count:
                lo = self.l.streams[i].min_seq
                hi = self.l.streams[i].max_seq
                found = 1
        if not found:
            return np.zeros(0, np.uint64)
        out = np.empty(hi - lo + 1, np.uint64)
        cdef uint64_t[::1] o = out
        cdef size_t k = 0
        for q in range(lo, hi + 1):
            if rp_log_has(&self.l, sender, inc, q):
                o[k] = q
                k += 1
        return out[:k]

    def gc(self, uint32_t sender, uint32_t inc, uint64_t below):
        """Everything of (sender, inc) below ``below`` may go; returns the
        number of records dropped from the index."""
        self._check()
        cdef int64_t r = rp_log_gc(&self.l, sender, inc, below)
        if r < 0:
            raise MemoryError("log stream table")
        return r

    def streams(self):
        """[(sender, inc, count, min_seq, max_seq)] of indexed records."""
        self._check()
        cdef uint32_t i
        out = []
        for i in range(self.l.nstreams):
            s = &self.l.streams[i]
            out.append((s.sender, s.inc, s.count, s.min_seq if s.count else None,
                        s.max_seq if s.count else None))
        return out

    def stats(self):
        self._check()
        return {"segments": self.l.nsegs, "appended": self.l.appended, "synced": self.l.synced,
                "bytes": self.l.bytes, "recovered_records": self.l.rec_records,
                "recovered_bad_segments": self.l.rec_bad,
                "recovered_truncated_bytes": self.l.rec_truncated_bytes}
