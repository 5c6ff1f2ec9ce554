# cython: language_level=3, boundscheck=False, wraparound=False
"""Message store: payloads in a preallocated arena, addressed by tickets.

See ``csrc/msgstore.h``.  This class is for tests, tools and the Python
layers; the engine uses the C structure directly.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy
import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport *

cnp.import_array()

DELIVER = RP_MS_DELIVER
GOSSIP = RP_MS_GOSSIP
SEND = RP_MS_SEND
SRB = RP_MS_SRB
LOG = RP_MS_LOG
APP = RP_MS_APP
QUEUE = RP_MS_QUEUE
NOLABEL = RP_SRB_NOLABEL


cdef class MessageStore:
    def __cinit__(self, uint64_t arena_bytes=1 << 20, uint64_t max_entries=1 << 14, bint prefault=False):
        cdef int rc = rp_mstore_init(&self.s, arena_bytes, max_entries, prefault)
        if rc == RP_EINVAL:
            raise ValueError("arena_bytes must be >= 1024 and max_entries >= 16")
        if rc != RP_OK:
            raise MemoryError()

    def __dealloc__(self):
        rp_mstore_free(&self.s)

    def put(self, uint32_t sender, uint64_t seq, const uint8_t[::1] payload not None,
            label=None, int64_t t=0, uint32_t age=0, uint32_t holds=RP_MS_DELIVER | RP_MS_GOSSIP,
            uint32_t evictable=RP_MS_GOSSIP):
        """Store a copy; returns the ticket, or None when the arena is full of
        pinned entries."""
        cdef uint64_t lab = NOLABEL if label is None else <uint64_t>label
        cdef uint32_t n = payload.shape[0]
        cdef uint8_t dummy = 0
        cdef int64_t r = rp_mstore_put(&self.s, sender, seq, lab, t, age, holds, evictable,
                                       &payload[0] if n else &dummy, n)
        if r == RP_EFULL:
            return None
        if r == RP_EINVAL:
            raise ValueError(f"payload of {n} bytes exceeds half the arena")
        if r < 0:
            raise MemoryError()
        return r

    def find(self, uint32_t sender, uint64_t seq):
        cdef int64_t t = rp_mstore_find(&self.s, sender, seq)
        return None if t < 0 else t

    def valid(self, uint64_t ticket):
        return bool(rp_mstore_valid(&self.s, ticket))

    def get(self, uint64_t ticket):
        """(sender, seq, label, t, age, holds, payload bytes) or None."""
        if not rp_mstore_valid(&self.s, ticket):
            return None
        cdef rp_msent_t *e = rp_mstore_entry(&self.s, ticket)
        cdef uint8_t *d = rp_mstore_data(&self.s, e)
        label = None if e.label == NOLABEL else e.label
        return (e.sender, e.seq, label, e.t, e.age, e.holds, d[:e.len] if e.len else b"")

    def release(self, uint64_t ticket, uint32_t holds):
        rp_mstore_release(&self.s, ticket, holds)

    def gc(self, uint32_t min_age, uint64_t max_bytes=0):
        return rp_mstore_gc(&self.s, min_age, max_bytes)

    def take_deliveries(self, size_t max_n=1024):
        out = np.empty(max_n, dtype=np.uint64)
        cdef uint64_t[::1] o = out
        cdef size_t k = rp_mstore_take_deliveries(&self.s, &o[0], max_n) if max_n else 0
        return out[:k]

    @property
    def bytes_used(self):
        return rp_mstore_bytes_used(&self.s)

    @property
    def arena_bytes(self):
        return self.s.acap

    def __len__(self):
        return rp_mstore_count(&self.s)

    @property
    def gossip_bytes(self):
        return self.s.gossip_bytes

    @property
    def gossip_count(self):
        return self.s.gossip_count

    @property
    def tail(self):
        return self.s.tail

    @property
    def head(self):
        return self.s.head

    def counters(self):
        return {"put": self.s.n_put, "full": self.s.n_full, "evicted": self.s.n_evicted,
                "freed": self.s.n_freed}
