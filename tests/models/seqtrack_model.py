"""Reference model of csrc/seqtrack.h (+ the interval set of csrc/iset.h).

State is the thesis's lastseen[j] (as ``next`` = lastseen + 1) and the
missing set as a plain Python set.  No intervals, no cleverness: the interval
count, needed only for the ``max_intervals`` bound, is recomputed from the set.
"""

DUP, NEW, FILL, FAR, NOMEM = 0, 1, 2, 3, 4
SEQ_LIMIT = 1 << 62


def intervals(values):
    """Sorted disjoint non-adjacent closed intervals covering ``values``."""
    out = []
    for x in sorted(values):
        if out and out[-1][1] + 1 == x:
            out[-1][1] = x
        else:
            out.append([x, x])
    return [tuple(iv) for iv in out]


class SeqTrackModel:
    def __init__(self, base=0, max_gap=1 << 32, max_intervals=0):
        assert 0 <= base < SEQ_LIMIT and max_gap >= 1
        self.base = base
        self.next = base
        self.max_gap = max_gap
        self.max_intervals = max_intervals
        self.missing = set()
        self.accepted = set()   # NEW or FILL returned for it (delivered once)
        self.forgotten = set()  # dropped from missing by forget()
        self.counters = dict(new=0, fill=0, dup=0, far=0, nomem=0, gaps=0)

    # -- helpers ---------------------------------------------------------
    def _fits(self, new_missing):
        return not self.max_intervals or len(intervals(new_missing)) <= self.max_intervals

    @property
    def lastseen(self):
        return self.next - 1

    # -- operations ------------------------------------------------------
    def accept(self, seq):
        """Returns (code, gap or None)."""
        if seq < self.next:
            if seq < self.base or seq not in self.missing:
                self.counters["dup"] += 1
                return DUP, None
            new_missing = self.missing - {seq}
            if not self._fits(new_missing):
                self.counters["nomem"] += 1
                return NOMEM, None
            self.missing = new_missing
            self.accepted.add(seq)
            self.counters["fill"] += 1
            return FILL, None
        if seq >= SEQ_LIMIT or seq - self.next > self.max_gap:
            self.counters["far"] += 1
            return FAR, None
        gap = set(range(self.next, seq))
        new_missing = self.missing | gap
        if not self._fits(new_missing):
            self.counters["nomem"] += 1
            return NOMEM, None
        self.missing = new_missing
        g = (self.next, seq - 1) if gap else None
        self.next = seq + 1
        self.accepted.add(seq)
        self.counters["new"] += 1
        if gap:
            self.counters["gaps"] += 1
        return NEW, g

    def heartbeat(self, seq):
        """Returns ('ok', gap or None), ('far', None) or ('nomem', None)."""
        if seq < self.next:
            return "ok", None
        if seq >= SEQ_LIMIT or seq - self.next > self.max_gap:
            self.counters["far"] += 1
            return "far", None
        gap = set(range(self.next, seq + 1))
        new_missing = self.missing | gap
        if not self._fits(new_missing):
            self.counters["nomem"] += 1
            return "nomem", None
        self.missing = new_missing
        g = (self.next, seq)
        self.next = seq + 1
        self.counters["gaps"] += 1
        return "ok", g

    def forget(self, lo, hi):
        """Returns the number removed, or None when the bound forbids the split."""
        gone = {x for x in self.missing if lo <= x <= hi}
        new_missing = self.missing - gone
        if not self._fits(new_missing):
            return None
        self.missing = new_missing
        self.forgotten |= gone
        return len(gone)

    # -- queries ---------------------------------------------------------
    def received(self, seq):
        return self.base <= seq < self.next and seq not in self.missing

    def is_missing(self, seq):
        return seq in self.missing

    @property
    def contiguous(self):
        return min(self.missing) if self.missing else self.next

    def missing_intervals(self):
        return intervals(self.missing)
