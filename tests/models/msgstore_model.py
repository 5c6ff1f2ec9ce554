"""Reference model of csrc/msgstore.h: an ordered dict ticket -> entry.

Entries are appended in arrival order under consecutive tickets.  An entry
stays stored until it and every older entry have no holds left (the tail
only advances over idle entries), which happens on release(), gc() and
eviction -- not on take_deliveries(), so delivered payloads stay readable.

The arena is a ring of ``arena`` bytes holding each payload contiguously at
increasing byte positions; a payload that would straddle the end of the ring
starts at its beginning instead, and an empty store starts again at the
beginning.  Used bytes run from the oldest stored payload to the end of the
newest one.  A put that does not fit (bytes, or the entry ring of ``ecap``
entries) evicts the oldest entry if all its holds are evictable, and fails
(None) when that entry is pinned.
"""
from collections import OrderedDict

DELIVER, GOSSIP, SEND, SRB, LOG, APP, QUEUE = (1 << k for k in range(7))


def signed32(x):
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


class MessageStoreModel:
    def __init__(self, arena_bytes, max_entries):
        assert arena_bytes >= 1024 and max_entries >= 16
        self.acap = arena_bytes
        self.ecap = 16
        while self.ecap < max_entries:
            self.ecap *= 2
        self.entries = OrderedDict()   # ticket -> dict
        self.head = 0                  # next ticket
        self.bhead = 0                 # byte position after the newest payload
        self.counters = dict(put=0, full=0, evicted=0, freed=0)

    # -- derived state ---------------------------------------------------------
    @property
    def tail(self):
        return next(iter(self.entries)) if self.entries else self.head

    @property
    def bytes_used(self):
        if not self.entries:
            return 0
        return self.bhead - self.entries[self.tail]["mpos"]

    @property
    def gossip_bytes(self):
        return sum(e["len"] for e in self.entries.values() if e["holds"] & GOSSIP)

    @property
    def gossip_count(self):
        return sum(1 for e in self.entries.values() if e["holds"] & GOSSIP)

    def __len__(self):
        return len(self.entries)

    # -- internals --------------------------------------------------------------
    def _free_tail(self):
        while self.entries and self.entries[self.tail]["holds"] == 0:
            self.entries.popitem(last=False)
            self.counters["freed"] += 1

    # -- operations -------------------------------------------------------------
    def put(self, sender, seq, payload, label=None, t=0, age=0,
            holds=DELIVER | GOSSIP, evictable=GOSSIP):
        n = len(payload)
        if n > self.acap // 2:
            raise ValueError("payload exceeds half the arena")
        while True:
            if not self.entries:
                self.bhead = -(-self.bhead // self.acap) * self.acap   # restart at offset 0
            start = self.bhead
            if start % self.acap + n > self.acap:                     # would straddle the end
                start += self.acap - start % self.acap
            oldest = self.entries[self.tail]["mpos"] if self.entries else start
            if len(self.entries) < self.ecap and start + n - oldest <= self.acap:
                ticket = self.head
                self.entries[ticket] = dict(sender=sender, seq=seq, label=label, t=t, age=age,
                                            holds=holds, payload=bytes(payload), mpos=start,
                                            len=n)
                self.head += 1
                self.bhead = start + n
                self.counters["put"] += 1
                return ticket
            first = self.entries[self.tail]
            if first["holds"] & ~evictable:
                self.counters["full"] += 1
                return None
            first["holds"] = 0
            self.counters["evicted"] += 1
            self._free_tail()

    def valid(self, ticket):
        return ticket in self.entries

    def get(self, ticket):
        e = self.entries.get(ticket)
        if e is None:
            return None
        return (e["sender"], e["seq"], e["label"], e["t"], e["age"], e["holds"], e["payload"])

    def find(self, sender, seq):
        hits = [tk for tk, e in self.entries.items() if e["sender"] == sender and e["seq"] == seq]
        return max(hits) if hits else None

    def release(self, ticket, holds):
        e = self.entries.get(ticket)
        if e is not None:
            e["holds"] &= ~holds
        self._free_tail()

    def gc(self, min_age, max_bytes=0):
        """Drop the GOSSIP hold of entries older than min_age (round counters
        compared modulo 2**32), then of the oldest ones while the gossip
        buffer holds more than max_bytes.  Ages are non-decreasing."""
        n = 0
        for e in self.entries.values():
            if e["holds"] & GOSSIP and signed32(e["age"] - min_age) < 0:
                e["holds"] &= ~GOSSIP
                n += 1
        for e in self.entries.values():
            if not (max_bytes and self.gossip_bytes > max_bytes):
                break
            if e["holds"] & GOSSIP:
                e["holds"] &= ~GOSSIP
                n += 1
        self._free_tail()
        return n

    def take_deliveries(self, max_n=1024):
        out = []
        for tk, e in self.entries.items():
            if len(out) >= max_n:
                break
            if e["holds"] & DELIVER:
                e["holds"] &= ~DELIVER
                out.append(tk)
        return out
