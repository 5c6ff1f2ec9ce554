"""Reference model of csrc/signature.h: a dict slot -> (key, a, b).

The value is recomputed from scratch with the ``xxhash`` package on every
query: sum of xxh64(pack('<IIQ', key, a, b), seed) mod 2**64 over the
present entries.  No incremental arithmetic.
"""
import struct

import xxhash


def entry_hash(key, a, b, seed):
    return xxhash.xxh64_intdigest(struct.pack("<IIQ", key, a, b), seed)


class SignatureModel:
    def __init__(self, seed):
        self.seed = seed
        self.entries = {}

    def set(self, slot, key, a, b):
        self.entries[slot] = (key, a, b)

    def delete(self, slot):
        self.entries.pop(slot, None)

    @property
    def value(self):
        return sum(entry_hash(k, a, b, self.seed) for k, a, b in self.entries.values()) % (1 << 64)

    def __len__(self):
        return len(self.entries)
