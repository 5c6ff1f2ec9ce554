# cython: language_level=3
"""Hashed heartbeat / membership signatures (thesis §5.1, §5.3).

``Signature`` keeps a vector of 16-byte entries (u32 key, u32 a, u64 b) by
local slot and their signature: the sum mod 2**64 of XXH64 of each entry.
Changing one entry is O(1).  The value is byte-for-byte what Python's
``xxhash`` package gives for the same entries (see ``reference()``).
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t


from rpbcast.core.csrc cimport *

DEFAULT_SEED = RP_SIG_SEED  # "rpbcast1"


def xxh64(const uint8_t[::1] data not None, uint64_t seed=0):
    """XXH64 of ``data`` computed by the C core."""
    return rp_xxh64(&data[0] if data.shape[0] else NULL, data.shape[0], seed)


def entry_hash(uint32_t key, uint32_t a, uint64_t b, uint64_t seed=DEFAULT_SEED):
    return rp_sig_entry(key, a, b, seed)


def reference(entries, seed=DEFAULT_SEED):
    """The signature of ``entries`` [(key, a, b), ...] computed with the
    ``xxhash`` package only, for cross-checking the C core."""
    import struct
    import xxhash
    return sum(xxhash.xxh64_intdigest(struct.pack("<IIQ", k, a, b), seed)
               for k, a, b in entries) % (1 << 64)


cdef class Signature:
    """A vector of signature entries addressed by local slot."""

    def __cinit__(self, uint64_t seed=DEFAULT_SEED, uint32_t capacity=16):
        if rp_sigvec_init(&self.v, capacity, seed) != RP_OK:
            raise MemoryError()

    def __dealloc__(self):
        rp_sigvec_free(&self.v)

    def set(self, uint32_t slot, uint32_t key, uint32_t a, uint64_t b):
        if rp_sigvec_set(&self.v, slot, key, a, b) != RP_OK:
            raise MemoryError()

    def set_batch(self, const uint32_t[::1] slots not None, const uint32_t[::1] keys not None,
                  const uint32_t[::1] a not None, const uint64_t[::1] b not None):
        """set(slots[i], keys[i], a[i], b[i]) for every i, in order, in one
        C loop (the way the data plane updates heartbeat entries)."""
        cdef Py_ssize_t n = slots.shape[0], i
        cdef int rc = RP_OK
        if keys.shape[0] != n or a.shape[0] != n or b.shape[0] != n:
            raise ValueError("slots, keys, a and b must have the same length")
        with nogil:
            for i in range(n):
                rc = rp_sigvec_set(&self.v, slots[i], keys[i], a[i], b[i])
                if rc != RP_OK:
                    break
        if rc != RP_OK:
            raise MemoryError()

    def delete(self, uint32_t slot):
        rp_sigvec_del(&self.v, slot)

    @property
    def value(self):
        return self.v.sig

    @property
    def seed(self):
        return self.v.seed

    def __len__(self):
        return self.v.count
