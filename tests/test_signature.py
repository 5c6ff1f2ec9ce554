"""XXH64 and hashed signatures (csrc/signature.h) against the xxhash package
and tests/models/signature_model.py."""
import random
import struct

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from models.signature_model import SignatureModel, entry_hash
from rpbcast.core import signature
from rpbcast.core.signature import DEFAULT_SEED, Signature, xxh64

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
SEEDS = st.one_of(st.sampled_from([0, 1, DEFAULT_SEED, 2**64 - 1, 2**63]), U64)


# ---------------------------------------------------------------------------
# XXH64

def test_xxh64_every_length_0_to_100():
    rng = random.Random(1234)
    for n in range(101):
        data = bytes(rng.randrange(256) for _ in range(n))
        for seed in (0, 1, DEFAULT_SEED, 2**64 - 1, rng.randrange(2**64)):
            assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed), (n, seed)


def test_xxh64_known_vectors():
    # published XXH64 test values (independent of both implementations)
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc", 0) == 0x44BC2CF5AD770999


@given(st.binary(max_size=300), SEEDS)
def test_xxh64_random(data, seed):
    assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed)


@pytest.mark.parametrize("n", [1000, 4096, 65537, 1 << 20])
def test_xxh64_large(n):
    data = random.Random(n).randbytes(n)
    for seed in (0, DEFAULT_SEED):
        assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed)


def test_xxh64_memoryview_offsets():
    # unaligned starts: loads must be alignment-safe
    buf = bytes(range(256)) * 4
    for off in range(9):
        view = memoryview(buf)[off:off + 77]
        assert xxh64(view, 7) == xxhash.xxh64_intdigest(bytes(view), 7)


@given(U32, U32, U64, SEEDS)
def test_entry_hash(key, a, b, seed):
    assert signature.entry_hash(key, a, b, seed) == entry_hash(key, a, b, seed)
    assert signature.entry_hash(key, a, b, seed) == xxhash.xxh64_intdigest(
        struct.pack("<IIQ", key, a, b), seed)


# ---------------------------------------------------------------------------
# Signature vector

class SignatureMachine(RuleBasedStateMachine):
    @initialize(seed=SEEDS, capacity=st.sampled_from([1, 2, 16, 100]))
    def init(self, seed, capacity):
        self.sig = Signature(seed, capacity)
        self.m = SignatureModel(seed)

    # few distinct slots and values so replacements and equal entries happen
    @rule(slot=st.integers(0, 40), key=st.integers(0, 3), a=st.integers(0, 3),
          b=st.one_of(st.integers(0, 5), U64))
    def set(self, slot, key, a, b):
        self.sig.set(slot, key, a, b)
        self.m.set(slot, key, a, b)

    @rule(slot=st.integers(0, 45))
    def delete(self, slot):
        self.sig.delete(slot)
        self.m.delete(slot)

    @rule(slot=st.integers(0, 40), key=U32, a=U32, b=U64)
    def set_twice(self, slot, key, a, b):
        # O(1) update: setting the same slot again replaces, never adds
        self.sig.set(slot, key, a, b)
        self.sig.set(slot, key, a, b)
        self.m.set(slot, key, a, b)

    @rule(ops=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.integers(0, 3),
                                 st.one_of(st.integers(0, 5), U64)), max_size=12))
    def set_batch(self, ops):
        cols = list(zip(*ops)) or [(), (), (), ()]
        self.sig.set_batch(np.array(cols[0], np.uint32), np.array(cols[1], np.uint32),
                           np.array(cols[2], np.uint32), np.array(cols[3], np.uint64))
        for slot, key, a, b in ops:
            self.m.set(slot, key, a, b)

    @invariant()
    def agree(self):
        if hasattr(self, "sig"):
            assert self.sig.value == self.m.value
            assert self.sig.value == signature.reference(self.m.entries.values(), self.m.seed)
            assert len(self.sig) == len(self.m)
            assert self.sig.seed == self.m.seed


TestSignatureMachine = SignatureMachine.TestCase
TestSignatureMachine.settings = settings(stateful_step_count=30)


@given(st.lists(st.tuples(U32, U32, U64), max_size=20), st.randoms(), SEEDS)
def test_order_independent(entries, rnd, seed):
    a, b = Signature(seed), Signature(seed)
    for slot, e in enumerate(entries):
        a.set(slot, *e)
    order = list(enumerate(entries))
    rnd.shuffle(order)
    for slot, e in order:
        b.set(slot, *e)
    assert a.value == b.value == signature.reference(entries, seed)
    # also independent of which slot holds which entry
    c = Signature(seed)
    perm = list(range(len(entries)))
    rnd.shuffle(perm)
    for slot, e in zip(perm, entries):
        c.set(slot + 5, *e)
    assert c.value == a.value


def test_equal_entries_do_not_cancel():
    s = Signature(0)
    s.set(0, 1, 2, 3)
    s.set(1, 1, 2, 3)
    h = entry_hash(1, 2, 3, 0)
    assert s.value == (2 * h) % 2**64 != 0
    s.delete(0)
    assert s.value == h


def test_set_batch_rejects_ragged_columns():
    sig = Signature()
    with pytest.raises(ValueError, match="same length"):
        sig.set_batch(np.zeros(2, np.uint32), np.zeros(2, np.uint32), np.zeros(1, np.uint32),
                      np.zeros(2, np.uint64))
    assert len(sig) == 0


def test_replace_and_delete():
    s = Signature(9)
    assert s.value == 0 and len(s) == 0
    s.set(3, 1, 1, 1)
    s.set(3, 2, 2, 2)                 # replace, not add
    assert len(s) == 1 and s.value == entry_hash(2, 2, 2, 9)
    s.delete(3)
    assert len(s) == 0 and s.value == 0
    s.delete(3)                       # absent: no-op
    s.delete(10**6)                   # beyond capacity: no-op
    assert len(s) == 0 and s.value == 0


def test_grows_past_capacity():
    s = Signature(1, capacity=1)
    s.set(0, 1, 1, 1)
    s.set(1000, 2, 2, 2)
    assert len(s) == 2
    assert s.value == signature.reference([(1, 1, 1), (2, 2, 2)], 1)
    s.delete(0)
    assert s.value == entry_hash(2, 2, 2, 1)


def test_default_seed_matches_reference_default():
    s = Signature()
    s.set(0, 7, 8, 9)
    assert s.value == signature.reference([(7, 8, 9)])
    assert s.seed == DEFAULT_SEED
