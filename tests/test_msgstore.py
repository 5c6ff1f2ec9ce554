"""MessageStore (csrc/msgstore.h, csrc/hmap.h) against tests/models/msgstore_model.py."""
import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from models.msgstore_model import (APP, DELIVER, GOSSIP, LOG, QUEUE, SEND, SRB,
                                   MessageStoreModel)
from rpbcast.core import msgstore
from rpbcast.core.msgstore import MessageStore

HOLDS = st.sampled_from([DELIVER | GOSSIP, DELIVER | GOSSIP, GOSSIP, DELIVER, SEND | GOSSIP,
                         SRB | SEND, LOG, 0, QUEUE | GOSSIP, APP])
EVICTABLE = st.sampled_from([GOSSIP, GOSSIP, GOSSIP | DELIVER, 0, GOSSIP | LOG])


def test_hold_bits_match_model():
    assert (msgstore.DELIVER, msgstore.GOSSIP, msgstore.SEND, msgstore.SRB, msgstore.LOG,
            msgstore.APP, msgstore.QUEUE) == (DELIVER, GOSSIP, SEND, SRB, LOG, APP, QUEUE)


def assert_same(s, m, payloads):
    assert len(s) == len(m)
    assert (s.head, s.tail) == (m.head, m.tail)
    assert s.bytes_used == m.bytes_used
    assert s.gossip_bytes == m.gossip_bytes
    assert s.gossip_count == m.gossip_count
    assert s.counters() == m.counters
    assert s.arena_bytes == m.acap
    # never more bytes than the arena; never less than what is stored
    assert sum(e["len"] for e in m.entries.values()) <= s.bytes_used <= s.arena_bytes
    for tk in range(max(0, m.tail - 3), m.head + 3):
        assert s.valid(tk) == m.valid(tk)
        got = s.get(tk)
        assert got == m.get(tk)
        if got is not None:
            assert got[-1] == payloads[tk]      # payload bytes preserved exactly


class StoreMachine(RuleBasedStateMachine):
    # 1 MiB and more: a mapping of its own (csrc/bigmem.c), touched at once with prefault
    @initialize(arena=st.sampled_from([1024, 1500, 4096, (1 << 20) + 1500]), max_entries=st.sampled_from([16, 17, 32]),
                prefault=st.booleans())
    def init(self, arena, max_entries, prefault):
        self.s = MessageStore(arena, max_entries, prefault=prefault)
        self.m = MessageStoreModel(arena, max_entries)
        self.age = 0
        self.payloads = {}

    @rule(sender=st.integers(0, 2), seq=st.integers(0, 5),
          size=st.one_of(st.integers(0, 40), st.integers(100, 512)),
          fill=st.integers(0, 255), label=st.one_of(st.none(), st.integers(0, 2**64 - 2)),
          t=st.integers(-2**63, 2**63 - 1), holds=HOLDS, evictable=EVICTABLE)
    def put(self, sender, seq, size, fill, label, t, holds, evictable):
        payload = bytes((fill + i * 7) % 256 for i in range(size))
        head = self.m.head
        tk = self.m.put(sender, seq, payload, label, t, self.age, holds, evictable)
        got = self.s.put(sender, seq, payload, label=label, t=t, age=self.age, holds=holds,
                         evictable=evictable)
        assert got == tk
        if tk is None:
            # only a pinned oldest entry makes put fail
            first = self.m.entries[self.m.tail]
            assert first["holds"] & ~evictable
        else:
            assert tk == head                  # tickets are consecutive
            self.payloads[tk] = payload

    @rule(sizes=st.lists(st.integers(0, 400), min_size=1, max_size=8),
          holds=st.sampled_from([GOSSIP, GOSSIP, DELIVER | GOSSIP, SEND]),
          evictable=st.sampled_from([GOSSIP, GOSSIP | DELIVER]), sender=st.integers(0, 2))
    def put_burst(self, sizes, holds, evictable, sender):
        for i, size in enumerate(sizes):
            self.put(sender, i % 6, size, len(self.payloads) % 256, None, 0, holds, evictable)

    @rule(size=st.integers(513, 800))
    def put_too_big(self, size):
        with pytest.raises(ValueError):
            self.s.put(0, 0, bytes(size + self.m.acap // 2 - 512))

    @rule(data=st.data(), holds=st.sampled_from([DELIVER, GOSSIP, SEND | SRB, LOG, APP, QUEUE,
                                                 0xFFFFFFFF, DELIVER | GOSSIP]))
    def release(self, data, holds):
        tk = data.draw(st.integers(max(0, self.m.tail - 2), self.m.head + 1))
        self.s.release(tk, holds)
        self.m.release(tk, holds)

    @rule(d=st.integers(0, 2))
    def tick(self, d):
        self.age += d                          # rounds: ages are non-decreasing

    @rule(back=st.integers(-1, 4), max_bytes=st.sampled_from([0, 0, 1, 50, 300, 1000]))
    def gc(self, back, max_bytes):
        min_age = max(0, self.age - back)
        assert self.s.gc(min_age, max_bytes) == self.m.gc(min_age, max_bytes)

    @rule(max_n=st.integers(0, 6))
    def take_deliveries(self, max_n):
        assert self.s.take_deliveries(max_n).tolist() == self.m.take_deliveries(max_n)

    @rule(sender=st.integers(0, 3), seq=st.integers(0, 6))
    def find(self, sender, seq):
        assert self.s.find(sender, seq) == self.m.find(sender, seq)

    @invariant()
    def agree(self):
        if hasattr(self, "s"):
            assert_same(self.s, self.m, self.payloads)
            for sender in range(3):
                for seq in range(6):
                    assert self.s.find(sender, seq) == self.m.find(sender, seq)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=200, stateful_step_count=50)


# ---------------------------------------------------------------------------
# targeted examples

def test_put_get_release():
    s = MessageStore(1024, 16)
    t0 = s.put(1, 10, b"hello", label=7, t=123, age=4)
    assert t0 == 0
    assert s.get(t0) == (1, 10, 7, 123, 4, DELIVER | GOSSIP, b"hello")
    assert s.find(1, 10) == 0 and s.find(2, 10) is None and s.find(1, 11) is None
    t1 = s.put(1, 11, b"", holds=GOSSIP)
    assert s.get(t1)[-1] == b"" and s.gossip_bytes == 5 and s.gossip_count == 2
    s.release(t0, GOSSIP)
    assert s.valid(t0) and s.gossip_bytes == 0   # still held for delivery
    s.release(t0, DELIVER)
    assert not s.valid(t0) and s.get(t0) is None and s.find(1, 10) is None
    assert s.valid(t1) and s.tail == 1
    s.release(t1, GOSSIP)
    assert len(s) == 0 and s.bytes_used == 0


def test_tail_waits_for_oldest():
    s = MessageStore(1024, 16)
    a = s.put(0, 0, b"a" * 10, holds=SEND)
    b = s.put(0, 1, b"b" * 10, holds=GOSSIP)
    s.release(b, GOSSIP)
    assert s.valid(b) and len(s) == 2            # behind a pinned entry
    s.release(a, SEND)
    assert len(s) == 0 and s.counters()["freed"] == 2


def test_eviction_of_gossip_only_entries():
    s = MessageStore(1024, 16)
    tks = [s.put(0, i, bytes([i]) * 300, holds=GOSSIP) for i in range(3)]
    assert tks == [0, 1, 2] and s.bytes_used == 900
    t3 = s.put(0, 3, b"x" * 300, holds=GOSSIP)   # evicts the oldest
    assert t3 == 3 and not s.valid(0) and s.valid(1)
    assert s.counters()["evicted"] == 1
    assert s.get(1)[-1] == bytes([1]) * 300 and s.get(3)[-1] == b"x" * 300
    assert s.gossip_bytes == 900 and s.bytes_used <= 1024


def test_put_fails_when_oldest_is_pinned():
    s = MessageStore(1024, 16)
    s.put(0, 0, b"p" * 400, holds=DELIVER | GOSSIP)   # pinned: undelivered
    s.put(0, 1, b"q" * 400, holds=GOSSIP)
    assert s.put(0, 2, b"r" * 400) is None
    assert s.counters()["full"] == 1 and len(s) == 2
    assert s.take_deliveries().tolist() == [0]
    assert s.valid(0)                               # readable until the next put/release/gc
    assert s.put(0, 2, b"r" * 400) == 2             # now evictable: 0 goes
    assert not s.valid(0) and s.get(2)[-1] == b"r" * 400


def test_entry_ring_bound():
    s = MessageStore(1 << 16, 16)
    for i in range(16):
        assert s.put(0, i, b"z", holds=SEND) == i
    assert s.put(0, 16, b"z", holds=SEND) is None   # 16 entries: ring full
    s.release(0, SEND)
    assert s.put(0, 16, b"z", holds=SEND) == 16


def test_wraparound_preserves_payloads():
    s = MessageStore(1024, 64)
    rng = random.Random(5)
    live = {}
    for i in range(400):
        data = rng.randbytes(rng.randint(0, 300))
        tk = s.put(i % 3, i, data, holds=GOSSIP)
        assert tk is not None
        live[tk] = data
        for k in [k for k in live if not s.valid(k)]:
            del live[k]
        for k, v in live.items():
            assert s.get(k)[-1] == v
        assert s.bytes_used <= 1024


def test_find_returns_newest_duplicate():
    s = MessageStore(4096, 16)
    a = s.put(3, 9, b"old", holds=SEND)
    b = s.put(3, 9, b"new", holds=SEND)
    assert s.find(3, 9) == b
    s.release(a, SEND)
    assert s.find(3, 9) == b                          # freeing the old one keeps the index
    s.release(b, SEND)
    assert s.find(3, 9) is None


def test_gc_by_age_then_bytes():
    s = MessageStore(4096, 32)
    for age in (1, 1, 2, 3, 3):
        s.put(0, age * 10 + len(s), b"g" * 100, age=age, holds=GOSSIP)
    assert s.gc(2) == 2                               # ages < 2
    assert len(s) == 3 and s.gossip_bytes == 300
    assert s.gc(2, max_bytes=150) == 2                # oldest first until <= 150
    assert s.gossip_bytes == 100 and len(s) == 1
    assert s.gc(2, max_bytes=100) == 0


def test_gc_age_wraps():
    s = MessageStore(4096, 16)
    s.put(0, 0, b"a", age=2**32 - 2, holds=GOSSIP)
    s.put(0, 1, b"b", age=1, holds=GOSSIP)            # round counter wrapped
    assert s.gc(0) == 1                               # 2**32 - 2 is "before" 0
    assert not s.valid(0) and s.valid(1)


def test_take_deliveries_order_and_max():
    s = MessageStore(4096, 16)
    for i in range(5):
        s.put(0, i, b"d", holds=DELIVER if i != 2 else GOSSIP)
    assert s.take_deliveries(2).tolist() == [0, 1]
    assert s.take_deliveries(0).tolist() == []
    assert s.take_deliveries().tolist() == [3, 4]
    assert s.take_deliveries().tolist() == []
    assert len(s) == 5                                # no freeing here


def test_argument_checks():
    with pytest.raises(ValueError):
        MessageStore(1023, 16)
    with pytest.raises(ValueError):
        MessageStore(1024, 15)
    s = MessageStore(1024, 16)
    with pytest.raises(ValueError):
        s.put(0, 0, bytes(513))
    assert s.put(0, 0, bytes(512), holds=SEND) == 0


# ---------------------------------------------------------------------------
# hash-index stress: colliding seqs across senders, deletions in tail order
# (backward-shift deletion in csrc/hmap.c) and duplicates

def expected_index(m):
    out = {}
    for tk, e in m.entries.items():
        out[(e["sender"], e["seq"])] = tk       # ascending: the newest wins
    return out


@pytest.mark.parametrize("seed", range(3))
def test_index_stress(seed):
    rng = random.Random(seed)
    s = MessageStore(1 << 20, 1 << 12)
    m = MessageStoreModel(1 << 20, 1 << 12)
    # same seqs under many senders, and duplicates of the same (sender, seq)
    keys = [(sender, seq) for sender in range(16) for seq in range(300)]
    for step in range(30000):
        if rng.random() < 0.52:
            sender, seq = rng.choice(keys)
            holds = rng.choice([SEND, GOSSIP, SEND | GOSSIP])
            tk = s.put(sender, seq, b"", holds=holds, evictable=0)
            assert tk == m.put(sender, seq, b"", holds=holds, evictable=0)
        elif m.head > m.tail:
            # mostly old tickets, so the tail keeps moving and index entries
            # are deleted from the middle of probe runs
            tk = min(m.head - 1, m.tail + int(rng.expovariate(1 / 30)))
            h = rng.choice([SEND, GOSSIP, SEND | GOSSIP])
            s.release(tk, h)
            m.release(tk, h)
        if step % 1000 == 999:
            exp = expected_index(m)
            assert len(exp) > 100
            for k in keys:
                assert s.find(*k) == exp.get(k)
            assert len(s) == len(m) and s.tail == m.tail
    assert s.counters() == m.counters
    # drain everything: every index entry must go, none may be left dangling
    for tk in range(m.tail, m.head):
        s.release(tk, 0xFFFFFFFF)
    assert len(s) == 0
    assert all(s.find(*k) is None for k in keys)
    # and the index keeps working afterwards
    head = s.head
    for i, k in enumerate(keys[:3000]):
        assert s.put(*k, b"", holds=SEND) == head + i
    assert all(s.find(*k) == head + i for i, k in enumerate(keys[:3000]))
