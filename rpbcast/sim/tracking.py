"""What each receiver's application got: the delivery records of a run and
the count of distinct expected deliveries that tells when it is complete.

Deliveries come from the engines' data planes in batches: at the periodic
drain (straight from the C data plane for engines on the C path, through
``recv_batch`` otherwise) or when a consumer application reads
(consumers.py).  Each batch is kept as arrays (sender, inc, seq, receipt
time), counted against the workload's plan and, with ``check``, its
payloads compared with their ids (workload.payload).
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np


class DeliveryTracker:
    def __init__(self, net, engines: Dict[int, object], receivers: List[int], pub, size: int, check: bool):
        self.net = net
        self.engines = engines
        self.receivers = receivers
        self.size = size
        self.check = check and size >= 16
        self.parts: Dict[int, List[tuple]] = {v: [] for v in receivers}
        self.read_times: Dict[int, List[np.ndarray]] = {}     # consumers: when the application read
        self.records = 0
        self.distinct = 0
        self.corrupt = 0
        self._plan_index(pub, net.topo.n + 1, receivers)
        self._buf = bytearray(4 << 20)
        self._bufnp = np.frombuffer(self._buf, np.uint8)
        self._fast = None                  # receivers drained through the C data plane ...
        self._slow = None                  # ... and through recv_batch
        self._version = None               # of the network's hosts when they were sorted

    def _plan_index(self, pub, n1, receivers):
        """got[receiver row, message] for the completion check: messages are
        numbered per sender from the workload's plan."""
        plan = {s: sum(k for _, k in arr) for s, arr in pub.plan.items()}
        self._base = np.full(n1, -1, np.int64)
        self._cnt = np.zeros(n1, np.int64)
        self._inc = np.full(n1, -1, np.int64)
        off = 0
        for s in sorted(plan):
            self._base[s], self._cnt[s], self._inc[s] = off, plan[s], pub.inc[s]
            off += plan[s]
        self._M = max(off, 1)
        self._row = np.full(n1, -1, np.int64)
        self._row[receivers] = np.arange(len(receivers))
        self._got = np.zeros(len(receivers) * self._M, bool)
        self._stamp = np.zeros(len(receivers) * self._M, np.int32)

    # ------------------------------------------------------------------ taking deliveries
    def drain(self, skip=()):
        """Take every receiver's deliveries but those of skip (consumers read their own)."""
        core = self.net.core
        if self._fast is None or self._version != self.net.version:
            drained = [v for v in self.receivers if v not in skip]
            self._fast = np.array([v for v in drained if core.is_fast(v)], np.int32)
            self._slow = [v for v in drained if not core.is_fast(v)]
            self._version = self.net.version
        if len(self._fast):
            self._drain_data_planes()
        for v in self._slow:
            self._drain_engine(v)

    def _drain_data_planes(self):
        counts, snd, inc, seq, rxt, bad = self.net.core.drain(self._fast, self.size, self.check)
        self.corrupt += int(bad)
        k = int(counts.sum())
        if not k:
            return
        self.records += k
        self._note(np.repeat(self._fast.astype(np.int64), counts), snd, inc, seq)
        ends = np.cumsum(counts)
        starts = ends - counts
        for v, a, b in zip(self._fast.tolist(), starts.tolist(), ends.tolist()):
            if b > a:
                self.parts[v].append((snd[a:b], inc[a:b], seq[a:b], rxt[a:b]))

    def _drain_engine(self, v):
        node = getattr(self.engines[v], "node", None)
        pending = node is not None and hasattr(node, "pending")
        while True:
            if pending:
                pend = node.pending
                if not pend:
                    return
                max_n = self.batch(pend)
            else:
                max_n = 4096
            if not self.take(v, max_n):
                return

    def batch(self, n) -> int:
        """n, or fewer: what fits the receive buffer and one call."""
        return int(min(n, len(self._buf) // max(self.size, 1), 1 << 16))

    def track_reads(self, v):
        """v's application reads its deliveries itself: keep when (take(read=True))."""
        self.read_times[v] = []

    def take(self, v, max_n, read=False) -> int:
        """Up to max_n of v's deliveries now, through recv_batch; read: the
        application read them (their read times are kept)."""
        now = self.net.now
        k, snd, inc, seq, lab, rxt, offs, lens = self.engines[v].recv_batch(max_n, self._buf, now)
        if not k:
            return 0
        self.parts[v].append((snd, inc, seq, rxt))
        if read:
            self.read_times[v].append(np.full(k, now, np.int64))
        self.records += k
        self._note(np.full(k, v, np.int64), snd, inc, seq)
        if self.check:
            self._check_payloads(k, snd, inc, seq, offs, lens)
        return k

    # ------------------------------------------------------------------ counting
    def _note(self, node, snd, inc, seq):
        """Count distinct expected deliveries (receiver, message)."""
        snd = snd.astype(np.int64)
        seq = seq.astype(np.int64)
        sc = np.clip(snd, 0, len(self._base) - 1)
        ok = ((self._base[sc] >= 0) & (inc.astype(np.int64) == self._inc[sc]) & (seq < self._cnt[sc])
              & (snd != node) & (self._row[node] >= 0))
        flat = self._row[node[ok]] * self._M + self._base[sc[ok]] + seq[ok]
        new = flat[~self._got[flat]]
        if not len(new):
            return
        # duplicates inside this batch: the last write of a position wins
        pos = np.arange(len(new), dtype=np.int32)
        self._stamp[new] = pos
        if not np.array_equal(self._stamp[new], pos):
            new = np.unique(new)
        self._got[new] = True
        self.distinct += len(new)

    def _check_payloads(self, k, snd, inc, seq, offs, lens):
        """Count delivered payloads (in self._buf) whose header does not
        name their own id (workload.payload) as corrupt."""
        size = self.size
        if int(lens.min()) == size == int(lens.max()) and int(offs[-1]) == (k - 1) * size:
            # payloads back to back: a strided view of their headers
            h = self._bufnp[:k * size].reshape(k, size)[:, :16].copy().view(np.uint32)
        else:
            idx = offs.astype(np.int64)[:, None] + np.arange(16)
            h = self._bufnp[idx].copy().view(np.uint32)
            h = np.where((lens == size)[:, None], h, 0xFFFFFFFF)
        ok = ((h[:, 0] == snd) & (h[:, 1] == inc) & (h[:, 2] == (seq & 0xFFFFFFFF))
              & (h[:, 3] == (seq >> 32)))
        self.corrupt += int(k - np.count_nonzero(ok))

    # ------------------------------------------------------------------ the records
    def records_of(self, v):
        """(senders, incs, seqs, rx_times) of v's deliveries, in order, as int64 arrays."""
        parts = self.parts[v]
        if not parts:
            return tuple(np.zeros(0, np.int64) for _ in range(4))
        return tuple(np.concatenate([x[i] for x in parts]).astype(np.int64) for i in range(4))

    def of(self, v) -> dict:
        """What receiver v's application got, in order: sender, inc, seq,
        rx (receipt time at the node) and, for consumers, read (when the
        application read it); virtual ns."""
        out = dict(zip(("sender", "inc", "seq", "rx"), self.records_of(v)))
        if v in self.read_times:
            r = self.read_times[v]
            out["read"] = np.concatenate(r) if r else np.zeros(0, np.int64)
        return out
