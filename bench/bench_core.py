"""Core structures: ns per message in batch calls, beside a same-run baseline.

    python bench/bench_core.py [--json out.json]

Baseline: NumPy summing the same uint64 array (one streaming read per
element), which tracks the machine's speed from run to run.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from harness import compare, report  # noqa: E402

from rpbcast.core import digest  # noqa: E402
from rpbcast.core.seqtrack import SeqTracker  # noqa: E402
from rpbcast.core.signature import Signature  # noqa: E402

N = 1_000_000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    rng = np.random.default_rng(42)
    inorder = np.arange(N, dtype=np.uint64)
    lossy = inorder[rng.random(N) >= 0.01].copy()
    # reordered: swap adjacent pairs 5% of the time (a gap then its fill)
    reord = inorder.copy()
    idx = np.nonzero(rng.random(N - 1) < 0.05)[0]
    idx = idx[np.diff(np.concatenate(([-2], idx))) > 1]
    reord[idx], reord[idx + 1] = inorder[idx + 1], inorder[idx]
    out = np.empty(N, np.uint8)
    base = lambda: inorder.sum()

    res = []
    for name, arr in (("seqtrack accept_batch: in order", inorder),
                      ("seqtrack accept_batch: 1% random loss", lossy),
                      ("seqtrack accept_batch: 5% adjacent reorder", reord)):
        def case(arr=arr):
            t = SeqTracker()
            t.accept_batch(arr, out)
        res.append(compare(name, case, base, len(arr), rounds=a.rounds))

    # digest of 10,000 missing ids (as ~10,000 single-id gaps, the worst case)
    gaps = np.sort(rng.choice(np.arange(0, 2_000_000, 2, dtype=np.uint64), 10_000, replace=False))
    iv = np.stack([gaps, gaps], axis=1)
    enc = digest.encode(iv, 0, 2_000_000, 1 << 20)[0]
    res.append(compare("digest encode: 10,000 missing ids", lambda: digest.encode(iv, 0, 2_000_000, 1 << 20),
                       lambda: inorder[:10_000].sum(), 10_000, rounds=a.rounds, unit="id"))
    res.append(compare("digest decode: 10,000 missing ids", lambda: digest.decode(enc),
                       lambda: inorder[:10_000].sum(), 10_000, rounds=a.rounds, unit="id"))
    print(f"  (digest of 10,000 single-id gaps: {len(enc)} bytes)")

    sig = Signature()
    for k in range(1000):
        sig.set(k, k, 1, 0)
    seqs = [int(x) for x in rng.integers(0, 1 << 40, 10_000)]

    def upd():
        s = sig.set
        for k, q in enumerate(seqs):
            s(k % 1000, k % 1000, 1, q)
    res.append(compare("signature update (incl. Python call)", upd, lambda: inorder[:10_000].sum(),
                       10_000, rounds=a.rounds, unit="update"))
    # the C path the data plane takes: one XXH64 of 16 bytes, subtract, add
    slots = (np.arange(10_000) % 1000).astype(np.uint32)
    ones = np.ones(10_000, np.uint32)
    bseq = np.array(seqs, np.uint64)
    res.append(compare("signature update, C batch (set_batch)", lambda: sig.set_batch(slots, slots, ones, bseq),
                       lambda: inorder[:10_000].sum(), 10_000, rounds=a.rounds, unit="update"))
    report(res, "bench_core", a.json)


if __name__ == "__main__":
    main()
