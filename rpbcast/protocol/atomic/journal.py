"""The atomic layer's crash-safe log: what a member promised, what it was
told, what it handed over.

Two LogStores (rpbcast.core.logstore: append-only segments, a CRC32C per
record, torn-tail recovery) in one directory:

    log/        proposals this member holds (its YES: the record is here and
                synced before the vote goes out) and decisions (a sender's
                COMMIT is here and synced before it is announced)
    delivered/  proposals handed to the application (synced before the
                application sees them: exactly once across a crash)

A LogStore keys records by (sender, inc, seq); the log puts two kinds per
proposal (sender, inc, q) at seq = q * 4 + kind, and a large payload's PART
records at their own stream seqs (q' * 4 + PART: they precede their
PROPOSE in the stream, so the proposal's GC horizon must stay below them).  The log is written by the
control plane (the loop thread on real sockets) and ``delivered/`` by the
application's thread, so neither waits for the other's fsync.

``fsync=False`` flushes instead of syncing (simulations of a thousand
members); durability then holds against a process crash, not power loss.
"""
from __future__ import annotations

import collections
import os
from typing import Dict, Set, Tuple

from rpbcast.core.logstore import LogError, LogStore

PROPOSAL, DECISION, PART = 0, 1, 2
Key = Tuple[int, int, int]          # (sender, inc, seq) of a proposal


def _seq(q: int, kind: int) -> int:
    return (q << 2) | kind


class Recovered:
    """What a journal held when it was opened."""

    def __init__(self):
        self.proposals: Dict[Key, bytes] = {}           # key -> PROPOSE record
        self.parts: Dict[Key, bytes] = {}               # (sender, inc, seq) -> PART record
        self.decisions: Dict[Key, Tuple[int, int]] = {}  # key -> (outcome, reason)
        self.delivered: Set[Key] = set()
        self.existed = False                            # the directory held a journal already


class Journal:
    def __init__(self, directory: str, fsync: bool = True):
        self.directory = directory
        self.fsync = fsync
        self.existed = os.path.isdir(os.path.join(directory, "log"))
        os.makedirs(directory, exist_ok=True)
        self.log = LogStore(os.path.join(directory, "log"), segment_bytes=8 << 20)
        self.delivered_log = LogStore(os.path.join(directory, "delivered"), segment_bytes=8 << 20)
        self._delivered_gc = collections.deque()   # (sender, inc, below): delivered/ may drop, later
        self.errors = 0

    # ------------------------------------------------------------------ recovery
    def recover(self) -> Recovered:
        r = Recovered()
        r.existed = self.existed
        for sender, inc, count, lo, hi in self.log.streams():
            if not count:
                continue
            for s in self.log.seqs(sender, inc).tolist():
                got = self.log.read(sender, inc, s)
                if got is None:
                    continue
                key = (sender, inc, s >> 2)
                if s & 3 == PROPOSAL:
                    r.proposals[key] = got[0]
                elif s & 3 == DECISION and len(got[0]) >= 2:
                    r.decisions[key] = (got[0][0], got[0][1])
                elif s & 3 == PART:
                    r.parts[key] = got[0]
        for sender, inc, count, lo, hi in self.delivered_log.streams():
            if count:
                for q in self.delivered_log.seqs(sender, inc).tolist():
                    r.delivered.add((sender, inc, q))
        return r

    # ------------------------------------------------------------------ writing
    def add_proposal(self, key: Key, record: bytes, now: int) -> int:
        """Append a proposal (not yet durable: sync()).  Returns its ordinal
        (the log's count of appended records, which a sync must reach), or
        0 if it was there already.  Raises LogError."""
        s, i, q = key
        if not self.log.append(s, i, _seq(q, PROPOSAL), record, None, now):
            return 0
        return self.appended

    def add_part(self, key: Key, record: bytes, now: int) -> int:
        """Append a PART record found at key = (sender, inc, its seq): like
        add_proposal, durable only after sync()."""
        s, i, q = key
        if not self.log.append(s, i, _seq(q, PART), record, None, now):
            return 0
        return self.appended

    def add_decision(self, key: Key, outcome: int, reason: int, now: int) -> bool:
        s, i, q = key
        return self.log.append(s, i, _seq(q, DECISION), bytes((outcome, reason)), None, now)

    @property
    def appended(self) -> int:
        """Records appended to log/ (the C log's own counter)."""
        return self.log.stats()["appended"]

    @property
    def synced(self) -> int:
        """Records a completed fsync covers (the C log's counter: it moves
        only when fdatasync returned)."""
        return self.log.stats()["synced"]

    def sync(self):
        """Everything appended so far is durable (flushed only without
        fsync).  Raises LogError."""
        if self.fsync:
            self.log.sync()
        else:
            self.log.flush()

    def mark_delivered(self, keys):
        """Record that these proposals reached the application, durably,
        before it sees them.  (The application's thread: delivered/ is
        touched nowhere else once recovered.)"""
        while self._delivered_gc:
            self.delivered_log.gc(*self._delivered_gc.popleft())
        for s, i, q in keys:
            self.delivered_log.append(s, i, q, b"")
        if self.fsync:
            self.delivered_log.sync()
        else:
            self.delivered_log.flush()

    def gc(self, sender: int, inc: int, below_q: int):
        """Proposals of (sender, inc) below below_q are finished: their
        records may go (whole segments at a time)."""
        self.log.gc(sender, inc, _seq(below_q, 0))
        self._delivered_gc.append((sender, inc, below_q))

    # ------------------------------------------------------------------ closing
    def close(self):
        for lg in (self.log, self.delivered_log):
            try:
                lg.sync()
            except (LogError, ValueError):
                pass
            lg.close()

    def crash(self):
        """Close as a process killed now would (tests): unsynced records are lost."""
        self.log.abandon()
        self.delivered_log.abandon()
