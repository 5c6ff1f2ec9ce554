# cython: language_level=3
"""A logger's crash-safe log on disk (``csrc/logstore.h``).

Append-only segment files of records, each a run of consecutive messages of
one stream with one CRC32C for the run, self-delimiting (a sync word, a
header CRC, and the header repeated as a trailer).  Opening a directory
recovers it: an incomplete last record of the newest segment (an
interrupted write) is cut off; a record that fails its check anywhere else
is damage -- its ids are reported (``damaged``), every record after it is
kept -- and the report goes to the log ``rpbcast.log`` (so to stderr when
nothing else is configured) and to ``stats()``.  Logs of the old format
(a record per message) are converted when opened.
"""
import logging
import os

import numpy as np

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from rpbcast.core.csrc cimport *

NOLABEL = RP_SRB_NOLABEL
VERSION = RP_LOG_VERSION

_log = logging.getLogger("rpbcast.log")


def crc32c(const uint8_t[::1] data not None, uint32_t crc=0):
    return rp_crc32c(crc, &data[0] if data.shape[0] else NULL, data.shape[0])


def crc32c_table(const uint8_t[::1] data not None, uint32_t crc=0):
    """The portable table-driven CRC32C (the reference for the hardware path)."""
    return rp_crc32c_sw(crc, &data[0] if data.shape[0] else NULL, data.shape[0])


class LogError(OSError):
    pass


cdef class _Intervals:
    """Collects rp_log_intervals' callbacks."""
    cdef list out


cdef void _collect(void *arg, uint64_t lo, uint64_t hi) noexcept nogil:
    with gil:
        (<_Intervals>arg).out.append((lo, hi))


cdef object _iset_array(const rp_iset_t *s):
    out = np.empty((s.n, 2), np.uint64)
    cdef uint32_t i
    for i in range(s.n):
        out[i, 0] = s.v[i].lo
        out[i, 1] = s.v[i].hi
    return out


cdef class LogStore:
    """Open or create the log in ``directory``.  ``segment_bytes`` is the
    size at which a new segment file starts.  ``direct``: write the
    segments with O_DIRECT from the log's own thread where the file system
    takes it (False: through the page cache, a flush only a copy)."""

    def __cinit__(self, directory, uint64_t segment_bytes=64 << 20, bint direct=True):
        self.opened = False
        path = os.fsencode(os.fspath(directory))
        self.path = os.fsdecode(path)
        cdef int rc = rp_log_open_mode(&self.l, path, segment_bytes, direct)
        if rc == RP_ENOMEM:
            raise MemoryError()
        if rc < 0:
            raise LogError(-rc, f"cannot open log directory {self.path!r}: {os.strerror(-rc)}")
        self.opened = True
        self._report_recovery()

    def _report_recovery(self):
        """Say what recovery found, loudly when anything acknowledged may be
        gone (damage); a cut torn tail is what a crash leaves."""
        r = self.recovery()
        if r["damaged_records"] or r["damaged_bytes"] or r["bad_segments"]:
            _log.error("log %s: DAMAGED: %d record(s) failed their check (%d ids, answered as lost), "
                       "%d byte(s) named no record; %d record(s) kept after the damage. %s",
                       self.path, r["damaged_records"], r["damaged_ids"], r["damaged_bytes"],
                       r["records"], "Ids: " + "; ".join(
                           f"{s}/{i}: {self._fmt_ivals(self.damaged(s, i))}"
                           for s, i, *_ in self.streams() if len(self.damaged(s, i))))
        if r["repaired_records"]:
            _log.warning("log %s: %d record(s) had a damaged header or trailer; checked by the other copy, kept",
                         self.path, r["repaired_records"])
        if r["truncated_bytes"]:
            _log.warning("log %s: cut a torn tail of %d byte(s) (an interrupted write)", self.path,
                         r["truncated_bytes"])
        if r["converted_records"]:
            _log.warning("log %s: converted %d record(s) of the old format", self.path, r["converted_records"])

    @staticmethod
    def _fmt_ivals(iv, limit=8):
        parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in iv[:limit].tolist()]
        return ",".join(parts) + (f",... ({len(iv)} intervals)" if len(iv) > limit else "")

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
        cdef int rc
        with nogil:
            rc = rp_log_sync(&self.l)
        if rc < 0:
            raise LogError(-rc, os.strerror(-rc))

    def sync_start(self):
        """Group commit: flush, and have the log's syncer thread fdatasync
        it.  Returns the epoch: once synced_epoch() reaches it, everything
        appended before this call is durable.  The caller never waits."""
        self._check()
        cdef uint64_t e = 0
        cdef int rc = rp_log_sync_start(&self.l, &e)
        if rc == RP_ENOMEM:
            raise MemoryError("log syncer thread")
        if rc < 0:
            raise LogError(-rc, os.strerror(-rc))
        return e

    def synced_epoch(self):
        """The latest sync_start epoch whose fdatasync completed.  Raises
        LogError once a sync failed (nothing after it may be acknowledged)."""
        self._check()
        cdef int err = 0
        cdef uint64_t e = rp_log_synced_epoch(&self.l, &err)
        if err:
            raise LogError(-err, f"fdatasync of the log failed: {os.strerror(-err)}")
        return e

    def wait_synced(self, uint64_t epoch):
        """Wait (without the GIL) until sync_start's epoch is durable."""
        self._check()
        cdef int err
        with nogil:
            err = rp_log_wait_synced(&self.l, epoch)
        if err:
            raise LogError(-err, f"fdatasync of the log failed: {os.strerror(-err)}")

    def has(self, uint32_t sender, uint32_t inc, uint64_t seq):
        self._check()
        return bool(rp_log_has(&self.l, sender, inc, seq))

    def durable(self, uint32_t sender, uint32_t inc, uint64_t seq):
        """True if (sender, inc, seq) is logged and a completed sync covers it."""
        self._check()
        return bool(rp_log_durable(&self.l, sender, inc, seq))

    def read(self, uint32_t sender, uint32_t inc, uint64_t seq):
        """(payload bytes, label) or None if not logged.  Raises LogError on
        a record that fails its check (its ids are damaged from then on) or
        an I/O failure."""
        self._check()
        cdef const uint8_t *p
        cdef uint64_t label = 0
        cdef long n = rp_log_read(&self.l, sender, inc, seq, &p, &label)
        if n == RP_LOG_ABSENT:
            return None
        if n < 0:
            raise LogError(5, "damaged record" if n == RP_LOG_DAMAGED else "log read failed")
        return (p[:n] if n else b""), (None if label == NOLABEL else label)

    def read_range(self, uint32_t sender, uint32_t inc, uint64_t lo, uint64_t hi):
        """[(seq, payload, label)] of the logged messages in [lo, hi], in
        seq order, read the way a logger streams them (a cursor); damaged
        records are skipped (their ids are in damaged())."""
        self._check()
        cdef rp_log_cursor_t c
        cdef const uint8_t *p
        cdef uint64_t seq = 0, label = 0
        cdef long n
        out = []
        if rp_log_seek(&self.l, &c, sender, inc, lo) < 0:
            return out
        while True:
            n = rp_log_next(&self.l, &c, hi, &seq, &p, &label)
            if n == RP_LOG_DAMAGED:
                continue
            if n < 0:
                break
            out.append((seq, p[:n] if n else b"", None if label == NOLABEL else label))
        return out

    cdef int64_t _sid(self, uint32_t sender, uint32_t inc):
        return rp_log_find_stream(&self.l, sender, inc)

    def intervals(self, uint32_t sender, uint32_t inc):
        """The logged ids of (sender, inc) as an (n, 2) uint64 array of
        merged intervals (memory by records, not by seq span)."""
        self._check()
        cdef int64_t sid = self._sid(sender, inc)
        cdef _Intervals acc = _Intervals()
        acc.out = []
        if sid >= 0:
            rp_log_intervals(&self.l, <uint32_t>sid, _collect, <void *>acc)
        return np.array(acc.out, dtype=np.uint64).reshape(-1, 2)

    def seqs(self, uint32_t sender, uint32_t inc):
        """Sorted NumPy array of the seqs logged for (sender, inc) (one
        entry per logged id: use intervals() for big logs)."""
        iv = self.intervals(sender, inc)
        if not len(iv):
            return np.zeros(0, np.uint64)
        return np.concatenate([np.arange(a, b + 1, dtype=np.uint64) for a, b in iv.tolist()])

    def damaged(self, uint32_t sender, uint32_t inc):
        """Ids of (sender, inc) whose record failed its check (on recovery
        or when read), as an (n, 2) uint64 array: lost for good here."""
        self._check()
        cdef int64_t sid = self._sid(sender, inc)
        if sid < 0:
            return np.zeros((0, 2), np.uint64)
        return _iset_array(&self.l.streams[sid].damaged)

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

    def recovery(self):
        """What opening the log found (counts since open)."""
        self._check()
        return {"records": self.l.rec_records, "runs": self.l.rec_runs,
                "damaged_records": self.l.rec_damaged_records, "damaged_ids": self.l.rec_damaged_ids,
                "damaged_bytes": self.l.rec_damaged_bytes, "repaired_records": self.l.rec_repaired,
                "truncated_bytes": self.l.rec_truncated_bytes, "bad_segments": self.l.rec_bad,
                "converted_records": self.l.rec_converted}

    def stats(self):
        self._check()
        return {"segments": self.l.nsegs, "appended": self.l.appended, "synced": self.l.synced,
                "bytes": self.l.bytes, "runs": self.l.runs, "syncs": self.l.n_syncs, "direct": bool(self.l.direct),
                "preads": self.l.n_preads, "recovered_records": self.l.rec_records,
                "recovered_bad_segments": self.l.rec_bad,
                "recovered_truncated_bytes": self.l.rec_truncated_bytes,
                "damaged_records": self.l.rec_damaged_records, "damaged_ids": self.l.rec_damaged_ids,
                "damaged_bytes": self.l.rec_damaged_bytes, "repaired_records": self.l.rec_repaired,
                "damaged_on_read": self.l.rd_damaged, "converted_records": self.l.rec_converted}
