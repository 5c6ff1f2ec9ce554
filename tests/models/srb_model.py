"""Reference models of csrc/srb.h: FIFO Semantically Reliable Broadcast
(Pereira et al.) receiver queue and sender window, with dicts.

Labels: None is "no label" (never obsolete); m is obsoleted by m' when both
carry the same label and m' has the higher seq (was sent later).
"""

QUEUED, OLD = 1, 3


def pow2_at_least(x):
    c = 16
    while c < x:
        c *= 2
    return c


class QueueFull(Exception):
    """The span [head, seq] does not fit under max_cap."""


class SRBQueueModel:
    """Receiver side: per-sender FIFO delivery queue.

    slots[seq] is ("Q", label, handle) for a queued message or "P" for a
    purged one (obsolete, inferred purged or marked purged); absent = not
    received.  [head, ready) is the deliverable prefix (every seq there is
    settled: the paper's Q_i); TP4 applies only inside it, so newest[label] is
    the newest queued, undelivered seq of the prefix with that label.
    """

    def __init__(self, base=0, w=0, max_cap=1 << 26):
        self.head = self.ready = self.tail = base
        self.w = w
        self.max_cap = max_cap
        self.slots = {}
        self.newest = {}
        self.purged = []            # (seq, handle) purged by TP4, not yet taken
        self.counters = dict(queued=0, delivered=0, purged_queue=0,
                             purged_inferred=0, purged_marked=0)

    def _advance(self):
        """Extend the prefix; a labelled message entering it purges the
        older queued one with its label (TP4)."""
        self.ready = max(self.ready, self.head)
        while self.ready < self.tail and self.ready in self.slots:
            sl = self.slots[self.ready]
            if sl != "P" and sl[1] is not None:
                old = self.newest.get(sl[1])
                if old is not None:
                    kind, _, h = self.slots[old]
                    assert kind == "Q"
                    self.slots[old] = "P"
                    self.counters["purged_queue"] += 1
                    self.purged.append((old, h))
                self.newest[sl[1]] = self.ready
            self.ready += 1

    def take_purged(self):
        out, self.purged = self.purged, []
        return out

    def _reach(self, seq):
        """Make [head, seq] addressable (the ring grows in powers of two up
        to max_cap)."""
        if seq >= self.tail:
            if pow2_at_least(seq - self.head + 1) > self.max_cap:
                raise QueueFull(seq)
            self.tail = seq + 1

    def insert(self, seq, label, handle):
        """Returns QUEUED or OLD; raises QueueFull."""
        if seq < self.head or seq in self.slots:
            return OLD
        self._reach(seq)
        self.slots[seq] = ("Q", label, handle)
        self.counters["queued"] += 1
        self._advance()
        return QUEUED

    def infer(self, t):
        """Seeing seq t: every seq <= t - w is stable or purged at the
        sender; those not received here are purged."""
        if self.w == 0 or t < self.w:
            return 0, None, None
        limit = t - self.w
        if limit < self.head:
            return 0, None, None
        self._reach(limit)
        newly = [s for s in range(self.head, limit + 1) if s not in self.slots]
        for s in newly:
            self.slots[s] = "P"
        self.counters["purged_inferred"] += len(newly)
        self._advance()
        if not newly:
            return 0, None, None
        return len(newly), newly[0], newly[-1]

    def mark_purged(self, seq):
        if seq < self.head:
            return False
        try:
            self._reach(seq)
        except QueueFull:
            return False
        if seq in self.slots:
            return False
        self.slots[seq] = "P"
        self.counters["purged_marked"] += 1
        self._advance()
        return True

    def pop(self, max_n=1 << 30):
        """[(handle, seq)] in FIFO order, up to the first seq not received."""
        out = []
        while len(out) < max_n and self.head < self.tail:
            sl = self.slots.get(self.head)
            if sl is None:
                break
            if sl != "P":
                _, label, handle = sl
                if label is not None and self.newest.get(label) == self.head:
                    del self.newest[label]
                out.append((handle, self.head))
                self.counters["delivered"] += 1
            del self.slots[self.head]
            self.head += 1
        return out

    @property
    def pending(self):
        return self.tail - self.head

    def queued(self):
        """{seq: handle} of messages waiting for delivery."""
        return {s: v[2] for s, v in self.slots.items() if v != "P"}


class SRBWindowModel:
    """Sender side: window of w outstanding messages, TP5 purging."""

    OUT, OBS, PURGED, STABLE = "out", "obsolete", "purged", "stable"

    def __init__(self, base=0, w=64):
        self.base = base
        self.w = w
        self.cap = pow2_at_least(w)
        self.next = self.low = self.safe = self.stable = base
        self.msgs = {}      # seq -> dict(label, handle, state, sup)
        self.newest = {}    # label -> newest seq sent with it

    @property
    def can_send(self):
        return self.next - self.low < self.w

    def _advance(self):
        while self.low < self.next and self.msgs[self.low]["state"] in (self.PURGED, self.STABLE):
            self.low += 1

    def sent(self, label, handle):
        """Returns the seq, or None when the window is closed."""
        if not self.can_send:
            return None
        seq = self.next
        if label is not None:
            p = self.newest.get(label)
            if p is not None and self.msgs[p]["state"] == self.OUT:
                self.msgs[p]["state"] = self.OBS
                self.msgs[p]["sup"] = seq
            self.newest[label] = seq
        self.msgs[seq] = dict(label=label, handle=handle, state=self.OUT, sup=None)
        self.next += 1
        return seq

    def set_safe(self, upto):
        """TP5: purge every obsolete message whose successor is now safe.
        Returns [(seq, superseded_by, handle)] in successor order."""
        upto = min(upto, self.next)
        out = []
        for s, m in self.msgs.items():
            if m["state"] == self.OBS and m["sup"] < upto:
                m["state"] = self.PURGED
                out.append((s, m["sup"], m["handle"]))
        out.sort(key=lambda x: x[1])
        self.safe = max(self.safe, upto)
        self._advance()
        return out

    def set_stable(self, upto):
        upto = min(upto, self.next)
        out = []
        for s in sorted(self.msgs):
            m = self.msgs[s]
            if s < upto and m["state"] in (self.OUT, self.OBS):
                m["state"] = self.STABLE
                out.append(m["handle"])
        self.stable = max(self.stable, upto)
        self.safe = max(self.safe, self.stable)
        self._advance()
        return out

    def purged_by(self, seq):
        m = self.msgs.get(seq)
        if m is None or m["state"] != self.PURGED:
            return None
        if seq + self.cap < self.next:      # its ring slot was reused
            return None
        return m["sup"]

    def outstanding(self):
        """Handles not yet handed back (OUT or OBSOLETE)."""
        return {m["handle"] for m in self.msgs.values() if m["state"] in (self.OUT, self.OBS)}
