"""The receiving side of the exactly-once check of `rpbcast stress`: per
sender, how often each seq was delivered, and a one-way latency histogram.

Payloads carry their send time (CLOCK_MONOTONIC ns, shared by all processes
on a host) in their first 8 bytes.  A receiver's ``Tally`` counts every
``recv_batch`` and checkpoints its counts, so a restarted receiver resumes
from what it had delivered; ``LAT_BINS`` are also read by the summary.
"""
from __future__ import annotations

import os

import numpy as np

# Latency histogram bins, log-linear as in HDR histograms: 16 per octave
# (4.4 % wide) from 64 ns to 2**35 ns (34 s).  LAT_BINS are the bin edges:
# hist[0] counts latencies below LAT_BINS[0], hist[i] those in
# [LAT_BINS[i-1], LAT_BINS[i]), hist[-1] those from LAT_BINS[-1] on.  The
# index of a latency is read off its float64 bits (exponent and top four
# mantissa bits), a few ns per message on the receiving thread.
_LAT_SUB_BITS = 4
_LAT_MIN_EXP, _LAT_MAX_EXP = 6, 35
LAT_BINS = np.array([2.0 ** e * (1 + m / (1 << _LAT_SUB_BITS))
                     for e in range(_LAT_MIN_EXP, _LAT_MAX_EXP) for m in range(1 << _LAT_SUB_BITS)]
                    + [2.0 ** _LAT_MAX_EXP])


def lat_bin(lat):
    """Histogram index of each latency (int64 ns): see LAT_BINS."""
    bits = np.asarray(lat, np.float64).view(np.int64) >> (52 - _LAT_SUB_BITS)
    i = bits - (((1023 + _LAT_MIN_EXP) << _LAT_SUB_BITS) - 1)
    np.clip(i, 0, len(LAT_BINS), out=i)
    return i


def count_seqs(arr, q):
    """arr[q] += 1 for every element of q, repeats counted (np.add.at), with
    fast paths for a contiguous increasing run (a slice) and a strictly
    increasing one (no repeats: plain fancy indexing)."""
    if len(q) > 1:
        d = np.diff(q)
        if (d > 0).all():
            if int(q[-1]) - int(q[0]) + 1 == len(q):
                arr[int(q[0]):int(q[-1]) + 1] += 1
            else:
                arr[q] += 1
            return
        np.add.at(arr, q, 1)
    elif len(q):
        arr[int(q[0])] += 1


def send_stamps(buf, offs, lens):
    """The send time in the first 8 bytes of each payload (payloads shorter
    than 8 bytes are skipped), as int64 ns."""
    k = len(offs)
    if k and int(lens.min()) >= 8:
        size = int(lens[0])
        # recv_batch writes payloads back to back, in order: equal sizes
        # spanning (k - 1) sizes mean a uniform stride, read in one strided view
        if int(lens.max()) == size and int(offs[-1]) - int(offs[0]) == size * (k - 1):
            return np.ndarray((k,), "<u8", buf, int(offs[0]), (size,)).astype(np.int64)
    raw = np.frombuffer(buf, np.uint8)
    ok = lens >= 8
    idx = offs.astype(np.int64)[ok][:, None] + np.arange(8)
    return raw[idx].copy().view("<u8").ravel().astype(np.int64)


class Tally:
    """Per-sender delivery counts (exactly-once check) and latency histogram;
    for FIFO-SRB also FIFO order and the latest value seen per label."""

    semantic = False              # FIFO-SRB: obsolete values may be skipped (set by the receiver)
    # (sender, inc) -> seqs per message: a message larger than a datagram
    # goes out as fragments, each a seq, and is delivered whole with its
    # first fragment's seq -- message k of a stream of equal sizes is seq
    # k * stride (set by the receiver from the orchestrator's expectation)
    strides: dict = {}

    def __init__(self):
        self.last_seq = {}        # (sender, inc) -> last seq delivered (FIFO check)
        self.fifo_violations = {}
        self.label_last = {}      # (sender, inc) -> {label: seq}
        self.counts = {}          # (sender, inc) -> np.uint8 array
        self.hist = np.zeros(len(LAT_BINS) + 1, np.int64)
        self.delivered = 0
        self.first = None
        self.last = None

    def add(self, b, now):
        """Count one recv_batch.  Runs on the receiving application's thread
        at millions of messages per second, so every step is a NumPy pass
        with a fast path for the common shapes (one stream per batch, seqs
        increasing, equal payload sizes); the slow paths give the same
        counts (tests/test_stress_tally.py).  `now` is when the application
        took the batch (ns), or an array of one time per message for a
        batch merged from several takes (the receiver defers its counting)."""
        k = b.count
        if not k:
            return
        each = np.ndim(now) != 0
        if self.first is None:
            self.first = int(now[0]) if each else now
        self.last = int(now[k - 1]) if each else now
        self.delivered += k
        senders, incs, seqs = b.senders[:k], b.incs[:k], b.seqs[:k].astype(np.int64)
        if senders.min() == senders.max() and incs.min() == incs.max():
            groups = [((int(senders[0]), int(incs[0])), None)]
        else:
            keys = (senders.astype(np.uint64) << np.uint64(32)) | incs.astype(np.uint64)
            groups = [((int(u >> np.uint64(32)), int(u & np.uint64(0xFFFFFFFF))), keys == u)
                      for u in np.unique(keys)]
        for key, sel in groups:
            q = seqs if sel is None else seqs[sel]
            if self.semantic:
                self._track_order(key, q, b.labels[:k] if sel is None else b.labels[:k][sel])
            self._count(key, q)
        sent_ns = send_stamps(b.buf, b.offs[:k], b.lens[:k])
        if each and len(sent_ns) != k:
            now = now[:k][b.lens[:k] >= 8]          # (send_stamps skips shorter payloads)
        elif each:
            now = now[:k]
        self.hist += np.bincount(lat_bin(now - sent_ns), minlength=len(LAT_BINS) + 1)

    def _track_order(self, key, q, labs):
        """FIFO-SRB: count seqs not above their predecessor (FIFO order
        broken), and keep the highest seq seen per label."""
        prev = self.last_seq.get(key, -1)
        order = np.concatenate(([prev], q))
        bad = int((np.diff(order) <= 0).sum())
        if bad:
            self.fifo_violations[key] = self.fifo_violations.get(key, 0) + bad
        self.last_seq[key] = int(q[-1])
        ll = self.label_last.setdefault(key, {})
        for lab, sq in zip(labs.tolist(), q.tolist()):
            if sq > ll.get(lab, -1):
                ll[lab] = sq

    def _count(self, key, q):
        """One more delivery of each seq in q, the counts grown to fit."""
        arr = self.counts.get(key)
        need = int(q.max()) + 1
        if arr is None or len(arr) < need:
            # grown fourfold: each growth is a fresh array whose pages the
            # copy faults in, and doubling paid the final size again in
            # faults (4 % of a line-rate receiver's CPU while it grew); the
            # pages past the counted end are never touched
            new = np.zeros(max(need, 4 * (len(arr) if arr is not None else 0), 1024), np.uint8)
            if arr is not None:
                new[:len(arr)] = arr
            arr = self.counts[key] = new
        count_seqs(arr, q)

    def have(self) -> int:
        """Distinct messages delivered, over every stream (and every life of
        this receiver: the counts are checkpointed)."""
        return sum(int(np.count_nonzero(a)) for a in self.counts.values())

    def prefixes(self) -> dict:
        """{"s/inc": how many seqs from 0 on were all delivered}, per stream:
        what catching up means (a count of distinct deliveries can pass the
        number sent while old ids are still missing).  Incremental: each
        call scans on from the last call's answer."""
        memo = self.__dict__.setdefault("_prefix", {})
        out = {}
        for key, arr in self.counts.items():
            p = memo.get(key, 0)
            zero = np.flatnonzero(arr[p:] == 0)
            p = p + int(zero[0]) if len(zero) else len(arr)
            memo[key] = p
            out[f"{key[0]}/{key[1]}"] = p
        return out

    def digests(self, keys):
        """{"s/inc": [distinct delivered, highest seq, CRC of the delivered
        set]} of streams whose count nobody knows (a killed sender's): the
        receivers must agree on them."""
        import zlib
        out = {}
        for s, i in keys:
            arr = self.counts.get((s, i), np.zeros(0, np.uint8))
            got = np.nonzero(arr)[0]
            top = int(got[-1]) if len(got) else -1
            out[f"{s}/{i}"] = [int(len(got)), top, zlib.crc32(np.packbits(arr[:top + 1] > 0).tobytes())]
        return out

    def check(self, expect, latest=None, agree=()):
        """{sender: {...}} against expected counts {(s, inc): n}; for the
        streams in `agree`, what was delivered (for the cross-receiver
        agreement check) and whether anything twice."""
        out = {}
        for key, (n, top, crc) in self.digests(agree).items():
            arr = self.counts.get(tuple(map(int, key.split("/"))), np.zeros(0, np.uint8))
            out[key] = {"expected": None, "delivered": n, "highest": top, "digest": crc, "missing": 0,
                        "duplicates": int((arr > 1).sum()), "unexpected": 0, "agree": True}
        for (s, i), n in expect.items():
            a, extra = self.per_message((s, i), n)
            f = max(1, int(self.strides.get((s, i), 1)))
            missing = np.nonzero(a == 0)[0]
            dups = np.nonzero(a > 1)[0]
            # the ids named are seqs, the library's ids (a message's first fragment's)
            out[f"{s}/{i}"] = {"expected": n, "delivered": int((a > 0).sum()), "missing": int(len(missing)),
                               "missing_ids": (missing[:20] * f).tolist(), "duplicates": int(len(dups)),
                               "duplicate_ids": (dups[:20] * f).tolist(), "unexpected": extra}
            if f > 1:
                out[f"{s}/{i}"]["seqs_per_message"] = f
            if self.semantic:
                want = (latest or {}).get(f"{s}/{i}") or {}
                have = self.label_last.get((s, i), {})
                stale = {lab: (have.get(int(lab)), q) for lab, q in want.items() if have.get(int(lab)) != q}
                out[f"{s}/{i}"].update(fifo_violations=self.fifo_violations.get((s, i), 0),
                                       stale_labels=len(stale), stale_examples=dict(list(stale.items())[:5]),
                                       labels_converged=len(want) - len(stale))
        return out

    def complete(self, expect, latest=None):
        """Whether everything expected has arrived (FIFO-SRB: the latest
        value of every label)."""
        if self.semantic:
            # done when the latest value of every label has arrived
            for key, want in (latest or {}).items():
                s, i = map(int, key.split("/"))
                have = self.label_last.get((s, i), {})
                if any(have.get(int(lab)) != q for lab, q in (want or {}).items()):
                    return False
            return True
        for key, n in expect.items():
            view = self._messages(key, n)
            if view is None or len(view) < n or not view.all():
                return False
        return True

    def _messages(self, key, n):
        """A view of the counts of the stream's first n messages (fewer if
        not all were seen; None if none): message k is seq k * stride.
        complete() runs on every turn of a receiver waiting for the end of
        a run: a view, no copy."""
        arr = self.counts.get(key)
        return None if arr is None else arr[::max(1, int(self.strides.get(key, 1)))][:n]

    def per_message(self, key, n):
        """(how often each of the stream's first n messages was delivered,
        how many seqs were delivered that are no message's)."""
        a = np.zeros(n, np.uint8)
        view = self._messages(key, n)
        if view is None:
            return a, 0
        a[:len(view)] = view
        return a, int(np.count_nonzero(self.counts[key])) - int(np.count_nonzero(view))

    def accounted(self, expect, lost) -> bool:
        """Whether every expected id was delivered or given up by the
        protocol (pbcast's "lost" events: {(s, inc): [(lo, hi)]}): the end
        of a probabilistic protocol's run, which the check then reports as
        a delivered fraction, never as exactly once."""
        for key, n in expect.items():
            have = self.per_message(key, n)[0] != 0
            f = max(1, int(self.strides.get(key, 1)))
            for lo, hi in lost.get(key, ()):
                # a message is given up when its first fragment's seq is
                lo, hi = -(-lo // f), hi // f
                if lo < n:
                    have[lo:min(hi, n - 1) + 1] = True
            if not have.all():
                return False
        return True

    def save(self, path):
        """Checkpoint the counts (atomically: a kill mid-write leaves the last one)."""
        tmp = path + ".tmp.npz"
        np.savez(tmp, **{f"{s}_{i}": a for (s, i), a in self.counts.items()})
        os.replace(tmp, path)

    @classmethod
    def load(cls, path):
        """A tally with the counts of a checkpoint, if there is one."""
        t = cls()
        if path and os.path.exists(path):
            with np.load(path) as z:
                for k in z.files:
                    s, i = map(int, k.split("_"))
                    t.counts[(s, i)] = z[k].copy()
        return t

    def delivered_seqs(self):
        """The seqs delivered, per sender incarnation: what a restarted
        receiver resumes from (a first-undelivered frontier would deliver the
        ids above a hole a second time)."""
        return {key: np.flatnonzero(arr) for key, arr in self.counts.items()}

