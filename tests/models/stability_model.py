"""Reference model of csrc/stability.h: GSGC stability detection (Guo et al.,
Fig. 2) and gossip failure detection (Fig. 3), with Python lists and sets.

Merge rules, as the header documents them:

  same round   W_i ⊋ W            REDUNDANT  nothing
               W_i ⊊ W            ADOPTED    M_i := M, W_i := W
               otherwise          MERGED     M_i := min(M_i, M), W_i := W_i ∪ W
               then S_i := max(S_i, S); complete => finish the round
  r > r_i      r == r_i + 1: NEXT, else FUTURE (Fig. 2: "error"; resync)
               M_i := min(M, R_i), W_i := W ∪ {i}      (correction 1)
               S_i := max(S_i, S); r_i := r; complete => finish the round
  r < r_i      OLD: ignored (S too)
  finish       S_i := max(S_i, M_i) (correction 2), r_i += 1, M_i := R_i,
               W_i := {i}; flag COMPLETED

``literal=True`` drops correction 1 (Fig. 2 as printed: the later round's
(M, W) are adopted as they are) to show why the implementation deviates.

A gossip's arrays may be shorter than ours: missing M and S entries count as
0 and members at or above the message's n_in are not in its W.
"""

REDUNDANT, ADOPTED, MERGED, NEXT, FUTURE, OLD, COMPLETED = (1 << k for k in range(7))
U32MAX = 2**32 - 1


class StabilityModel:
    def __init__(self, m, n, self_index, literal=False):
        assert self_index < n
        self.literal = literal
        self.self = self_index
        self.m = 0
        self.n = 0
        self.R, self.M, self.S = [], [], []
        self.alive = set()
        self.L = []
        self.W = set()
        self.round = 0
        self.rounds_completed = 0
        self.resize(m, n)
        self.start_round()

    # -- membership / senders ------------------------------------------------
    def resize(self, m, n):
        while self.m < m:
            self.R.append(0)
            self.M.append(0)
            self.S.append(0)
            self.m += 1
        while self.n < n:
            i = self.n
            self.alive.add(i)           # new members are alive ...
            self.W.discard(i)           # ... with W bit 0: the round waits for them
            self.L.append(0)
            self.n += 1

    def set_R(self, j, v):
        self.R[j] = max(self.R[j], v)

    def set_alive(self, i, alive):
        if i >= self.n or i == self.self:
            return
        if alive:
            self.alive.add(i)
        else:
            self.alive.discard(i)

    # -- rounds --------------------------------------------------------------
    def start_round(self):
        self.M = list(self.R)
        self.W = {self.self}

    @property
    def complete(self):
        return self.alive <= self.W

    def _finish(self):
        self.S = [max(s, m) for s, m in zip(self.S, self.M)]
        self.round += 1
        self.rounds_completed += 1
        self.start_round()
        return COMPLETED

    def check(self):
        return self._finish() if self.complete else 0

    def _pad(self, arr):
        return [arr[j] if j < len(arr) else 0 for j in range(self.m)]

    def merge(self, M, W, S, r, n_in):
        """M, S: lists (len <= m); W: set of member indices; only indices
        below n_in count.  Returns the flags."""
        assert len(M) == len(S) <= self.m and n_in <= self.n
        M, S = self._pad(M), self._pad(S)
        W = {i for i in W if i < n_in}
        if r == self.round:
            if W < self.W:
                flags = REDUNDANT
            elif W > self.W:
                self.M = list(M)
                self.W = set(W)
                flags = ADOPTED
            else:
                self.M = [min(a, b) for a, b in zip(self.M, M)]
                self.W |= W
                flags = MERGED
            self.S = [max(a, b) for a, b in zip(self.S, S)]
            if self.complete:
                flags |= self._finish()
            return flags
        if r > self.round:
            flags = NEXT if r == self.round + 1 else FUTURE
            if self.literal:
                self.M = list(M)
                self.W = set(W)
            else:
                self.M = [min(a, b) for a, b in zip(M, self.R)]
                self.W = set(W) | {self.self}
            self.S = [max(a, b) for a, b in zip(self.S, S)]
            self.round = r
            if self.complete:
                flags |= self._finish()
            return flags
        return OLD

    def merge_S(self, S, r):
        S = self._pad(S)
        self.S = [max(a, b) for a, b in zip(self.S, S)]
        if r > self.round:
            self.round = r
            self.start_round()
            return NEXT
        return 0

    def message(self):
        """The gossip this member would send: (M, W, S, r)."""
        return list(self.M), set(self.W), list(self.S), self.round

    # -- failure detection (Fig. 3) --------------------------------------------
    def fd_step(self):
        for i in range(self.n):
            if i != self.self:
                self.L[i] = min(self.L[i] + 1, U32MAX)
        self.L[self.self] = 0

    def fd_heard(self, i):
        if i < self.n:
            self.L[i] = 0

    def fd_merge(self, L):
        for i in range(min(len(L), self.n)):
            self.L[i] = min(self.L[i], L[i])
        self.L[self.self] = 0

    def fd_failed(self, K):
        newly = [i for i in range(self.n)
                 if i != self.self and i in self.alive and self.L[i] >= K]
        self.alive -= set(newly)
        return len(newly)
