"""A quick end-to-end exercise of the C core, for a fresh install.

Each check does real work through the compiled extensions and compares the
result with an independent computation; any mismatch makes the command exit
non-zero.
"""
import struct
import time

import numpy as np


def _seqtrack_and_digest():
    from rpbcast.core import digest
    from rpbcast.core.seqtrack import SeqTracker

    # Sequence tracker: 1% loss over 1M seqs, gaps must equal what we dropped.
    rng = np.random.default_rng(1)
    seqs = np.arange(1_000_000, dtype=np.uint64)
    keep = rng.random(seqs.size) >= 0.01
    t = SeqTracker()
    t0 = time.perf_counter()
    codes, good = t.accept_batch(seqs[keep])
    dt = time.perf_counter() - t0
    last = int(seqs[keep][-1])
    expect_missing = int((~keep[: last + 1]).sum())
    yield ("seqtrack: 1M seqs at 1% loss", good == keep.sum() and t.missing_count == expect_missing,
           f"{dt / keep.sum() * 1e9:.1f} ns/seq, {t.missing_count} missing in {len(t.missing)} gaps")

    # Digest round trip of the tracker's missing set.
    iv = t.missing_array()
    b, upto, n = digest.encode(iv, 0, t.lastseen, budget=1 << 20)
    back, frm, upto2, _ = digest.decode(b)
    yield ("digest: encode/decode the missing set", np.array_equal(back, iv) and upto2 == t.lastseen,
           f"{len(iv)} intervals in {len(b)} bytes")


def _signature():
    from rpbcast.core import signature

    # Signature equals the xxhash package's value.
    entries = [(k, k % 3, 1000 + 7 * k) for k in range(100)]
    sig = signature.Signature()
    for slot, e in enumerate(entries):
        sig.set(slot, *e)
    yield ("signature: C XXH64 sum == xxhash package", sig.value == signature.reference(entries),
           f"0x{sig.value:016x}")


def _stability():
    from rpbcast.core import stability

    # Stability: 4 members exchange gossip until a round completes.
    members = [stability.StabilityArrays(1, 4, i) for i in range(4)]
    for i, m in enumerate(members):
        m.set_R(0, 10 + i)
        m.start_round()
    for _ in range(4):
        for i, m in enumerate(members):
            for j, o in enumerate(members):
                if i != j:
                    o.merge(m.M, m.W, m.S, m.round)
    ok = all(int(m.S[0]) == 10 for m in members)
    yield ("stability: 4 members agree S = min R", ok, f"S={[int(m.S[0]) for m in members]}")


def _srb():
    from rpbcast.core import srb

    # FIFO-SRB: newest value per label survives, FIFO order kept.
    q = srb.SRBQueue()
    for seq, label in enumerate([1, 2, 1, 3, 1]):
        q.insert(seq, label, seq)
    got = [s for _, s in q.pop()]
    yield ("srb: queue purges obsolete values", got == [1, 3, 4], f"delivered seqs {got}")


def _msgstore():
    from rpbcast.core.msgstore import MessageStore

    # Message store: put, find, release, reuse.
    st = MessageStore(1 << 16, 64)
    tickets = [st.put(1, s, struct.pack("<Q", s)) for s in range(32)]
    found = all(st.get(st.find(1, s))[6] == struct.pack("<Q", s) for s in range(32))
    for tk in tickets:
        st.release(tk, 0xFF)
    yield ("msgstore: put/find/release", found and len(st) == 0, "32 entries stored and freed")


def _wire():
    from rpbcast.core import wire

    # Wire: build, parse, reject a corrupted copy.
    dg = wire.datagram([(wire.MsgType.DATA, 0, 7, 1, 0, 42, b"payload")])
    h, msgs = wire.parse(dg)
    bad = bytearray(dg)
    bad[0] ^= 0xFF
    yield ("wire: round trip and rejection", msgs[0].seq == 42 and wire.check(bytes(bad)) == wire.Reason.MAGIC,
           f"{len(dg)}-byte datagram")


CHECKS = [_seqtrack_and_digest, _signature, _stability, _srb, _msgstore, _wire]


def _checks():
    """(name, ok, detail) for every check, in order."""
    for check in CHECKS:
        yield from check()


def run(verbose=True):
    failed = 0
    for name, ok, detail in _checks():
        failed += not ok
        if verbose:
            print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}")
    if verbose:
        print("selfcheck: all passed" if not failed else f"selfcheck: {failed} FAILED")
    return 1 if failed else 0
