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
    """The queue holds max_cap messages, or the settled seqs would need more
    than max_cap intervals."""


def _runs(points, ivals):
    """Number of maximal runs of consecutive integers in the union of the
    single points and closed intervals."""
    spans = sorted([(p, p) for p in points] + list(ivals))
    n, end = 0, None
    for lo, hi in spans:
        if end is None or lo > end + 1:
            n += 1
            end = hi
        else:
            end = max(end, hi)
    return n


class SRBQueueModel:
    """Receiver side: per-sender FIFO delivery queue.

    slots[seq] is ("Q", label, handle) for a queued message; purged seqs
    (obsolete, inferred purged or marked purged) are closed intervals in
    `purged`, disjoint from the queued ones, so a jump of 2^40 costs nothing
    here either.  [head, ready) is the deliverable prefix (every seq there is
    settled: the paper's Q_i); TP4 applies only inside it, so newest[label] is
    the newest queued, undelivered seq of the prefix with that label.
    """

    def __init__(self, base=0, w=0, max_cap=1 << 26):
        self.head = self.ready = self.tail = base
        self.w = w
        self.max_cap = max_cap
        self.slots = {}
        self.purged_ivals = []      # sorted disjoint [lo, hi], all >= head
        self.newest = {}
        self.purged = []            # (seq, handle) purged by TP4, not yet taken
        self.counters = dict(queued=0, delivered=0, purged_queue=0,
                             purged_inferred=0, purged_marked=0)

    # -- purged intervals ---------------------------------------------------
    def _purged_at(self, s):
        for lo, hi in self.purged_ivals:
            if lo <= s <= hi:
                return lo, hi
        return None

    def _add_purged(self, lo, hi):
        ivals = sorted(self.purged_ivals + [[lo, hi]])
        out = []
        for a, b in ivals:
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        self.purged_ivals = out

    def _settled(self, s):
        return s in self.slots or self._purged_at(s) is not None

    def _fits(self, points=(), ivals=()):
        """The settled seqs, with these added, fit in max_cap intervals."""
        return _runs(list(self.slots) + list(points),
                     [tuple(v) for v in self.purged_ivals] + list(ivals)) <= self.max_cap

    def _empties(self, lo, hi):
        """Empty (neither queued nor purged) sub-intervals of [lo, hi]."""
        out, s = [], lo
        for a in sorted(set(self.slots) | {v[0] for v in self.purged_ivals}):
            if a > hi:
                break
            b = a if a in self.slots else self._purged_at(a)[1]
            if b < s:
                continue
            if a > s:
                out.append((s, a - 1))
            s = b + 1
        if s <= hi:
            out.append((s, hi))
        return out

    # -----------------------------------------------------------------------
    def _advance(self):
        """Extend the prefix; a labelled message entering it purges the
        older queued one with its label (TP4)."""
        self.ready = max(self.ready, self.head)
        while self.ready < self.tail:
            sl = self.slots.get(self.ready)
            if sl is None:
                p = self._purged_at(self.ready)
                if p is None:
                    break
                self.ready = p[1] + 1
                continue
            if sl[1] is not None:
                old = self.newest.get(sl[1])
                if old is not None:
                    kind, _, h = self.slots.pop(old)
                    assert kind == "Q"
                    self._add_purged(old, old)
                    self.counters["purged_queue"] += 1
                    self.purged.append((old, h))
                self.newest[sl[1]] = self.ready
            self.ready += 1

    def take_purged(self):
        out, self.purged = self.purged, []
        return out

    def insert(self, seq, label, handle):
        """Returns QUEUED or OLD; raises QueueFull."""
        if seq < self.head or self._settled(seq):
            return OLD
        if len(self.slots) >= self.max_cap or not self._fits(points=[seq]):
            raise QueueFull(seq)
        self.tail = max(self.tail, seq + 1)
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
        newly = self._empties(self.head, limit)
        if not newly:
            return 0, None, None
        if not self._fits(ivals=newly):
            raise QueueFull(limit)
        for lo, hi in newly:
            self._add_purged(lo, hi)
        self.tail = max(self.tail, limit + 1)
        n = sum(hi - lo + 1 for lo, hi in newly)
        self.counters["purged_inferred"] += n
        self._advance()
        return n, newly[0][0], newly[-1][1]

    def mark_purged_range(self, lo, hi):
        """Every empty seq in [lo, hi] is purged; returns how many."""
        if hi < self.head or lo > hi:
            return 0
        lo = max(lo, self.head)
        newly = self._empties(lo, hi)
        if not newly or not self._fits(ivals=newly):
            return 0
        for a, b in newly:
            self._add_purged(a, b)
        self.tail = max(self.tail, hi + 1)
        n = sum(b - a + 1 for a, b in newly)
        self.counters["purged_marked"] += n
        self._advance()
        return n

    def mark_purged(self, seq):
        return self.mark_purged_range(seq, seq) == 1

    def pop(self, max_n=1 << 30):
        """[(handle, seq)] in FIFO order, up to the first seq not received."""
        out = []
        while len(out) < max_n and self.head < self.tail:
            sl = self.slots.get(self.head)
            if sl is not None:
                _, label, handle = self.slots.pop(self.head)
                if label is not None and self.newest.get(label) == self.head:
                    del self.newest[label]
                out.append((handle, self.head))
                self.counters["delivered"] += 1
                self.head += 1
                continue
            p = self._purged_at(self.head)
            if p is None:
                break
            nxt = min([s for s in self.slots if s > self.head] + [p[1] + 1])
            self.head = min(p[1] + 1, nxt)
            self.purged_ivals = [[max(a, self.head), b] for a, b in self.purged_ivals
                                 if b >= self.head]
        return out

    def peek(self):
        """The handle pop() would deliver next, or None."""
        s = self.head
        while s < self.tail:
            if s in self.slots:
                return self.slots[s][2]
            p = self._purged_at(s)
            if p is None:
                return None
            s = p[1] + 1
        return None

    @property
    def pending(self):
        return self.tail - self.head

    def queued(self):
        """{seq: handle} of messages waiting for delivery."""
        return {s: v[2] for s, v in self.slots.items()}


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
