"""The stress job's exactly-once checker (rpbcast.tools.stress.tally.Tally) against
a plain reference: its NumPy fast paths must count exactly what a Counter
over every delivered id counts, whatever the batches look like."""
import collections
import struct
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rpbcast.tools.stress.tally import LAT_BINS, Tally, lat_bin, send_stamps

NOW = 10 ** 12


def batch(msgs):
    """A recv_batch-shaped batch of (sender, inc, seq, payload) messages,
    payloads back to back as recv_batch lays them out."""
    payloads = [p for *_, p in msgs]
    lens = np.array([len(p) for p in payloads], np.uint32)
    offs = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.uint32) if msgs else np.zeros(0, np.uint32)
    return SimpleNamespace(
        count=len(msgs),
        senders=np.array([m[0] for m in msgs], np.uint32),
        incs=np.array([m[1] for m in msgs], np.uint32),
        seqs=np.array([m[2] for m in msgs], np.uint64),
        labels=np.zeros(len(msgs), np.uint64),
        buf=bytearray(b"".join(payloads) + b"\0" * 16),
        offs=offs, lens=lens)


def payload(sent_ns, size):
    return struct.pack("<Q", sent_ns) + bytes(size - 8) if size >= 8 else bytes(size)


STREAMS = st.sampled_from([(1, 1), (1, 2), (7, 1)])
MSG = st.tuples(STREAMS, st.integers(0, 3000), st.integers(0, 40), st.integers(1, 10 ** 10))


def runs():
    """Batches shaped like real ones (a contiguous run of one stream, equal
    sizes) or arbitrary (repeats, several streams, any order, short payloads)."""
    contiguous = st.builds(lambda s, lo, n, size, lat: [(s, lo + j, size, lat) for j in range(n)],
                           STREAMS, st.integers(0, 3000), st.integers(1, 60), st.sampled_from([8, 64]),
                           st.integers(1, 10 ** 10))
    arbitrary = st.lists(MSG, max_size=40)
    return st.lists(st.one_of(contiguous, arbitrary), max_size=8)


@settings(max_examples=300, deadline=None)
@given(runs())
def test_tally_counts_and_latencies_match_a_reference(batches):
    t = Tally()
    ref = collections.Counter()
    ref_hist = np.zeros(len(LAT_BINS) + 1, np.int64)
    for msgs in batches:
        b = batch([(s, i, q, payload(NOW - lat, size)) for (s, i), q, size, lat in msgs])
        t.add(b, NOW)
        for (s, i), q, size, lat in msgs:
            ref[(s, i, q)] += 1
            if size >= 8:
                ref_hist[np.searchsorted(LAT_BINS, lat, side="right")] += 1
    got = collections.Counter()
    for (s, i), arr in t.counts.items():
        for q in np.nonzero(arr)[0].tolist():
            got[(s, i, q)] = int(arr[q])
    assert got == ref
    assert t.delivered == sum(ref.values())
    assert np.array_equal(t.hist, ref_hist)
    # the report's view: missing and duplicated ids per stream
    expect = {(s, i): 3100 for s, i in [(1, 1), (1, 2), (7, 1)]}      # above every seq drawn
    for key, r in t.check(expect).items():
        s, i = map(int, key.split("/"))
        assert r["duplicates"] == sum(1 for (a, b, _), c in ref.items() if (a, b) == (s, i) and c > 1)
        assert r["missing"] == 3100 - sum(1 for (a, b, _) in ref if (a, b) == (s, i))


def test_a_duplicate_inside_a_batch_is_counted_twice():
    t = Tally()
    t.add(batch([(1, 1, q, payload(NOW - 5, 64)) for q in (0, 1, 2, 2, 3)]), NOW)
    r = t.check({(1, 1): 4})["1/1"]
    assert r["duplicates"] == 1 and r["duplicate_ids"] == [2] and r["missing"] == 0


@given(st.lists(st.integers(-10, 2 ** 40), max_size=200))
def test_latency_bins_are_the_edges_of_LAT_BINS(lat):
    lat = np.array(lat, np.int64)
    assert np.array_equal(lat_bin(lat), np.searchsorted(LAT_BINS, lat, side="right"))


def test_send_stamps_strided_and_gathered_agree():
    sizes = [64] * 50
    b = batch([(1, 1, q, payload(1000 + q, s)) for q, s in enumerate(sizes)])
    assert send_stamps(b.buf, b.offs, b.lens).tolist() == [1000 + q for q in range(50)]
    b = batch([(1, 1, q, payload(1000 + q, s)) for q, s in enumerate([64, 8, 3, 100, 9])])
    assert send_stamps(b.buf, b.offs, b.lens).tolist() == [1000, 1001, 1003, 1004]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50), st.integers(1, 60), st.sets(st.integers(0, 59)), st.sets(st.integers(0, 59)),
       st.sets(st.integers(0, 3000)))
def test_a_stream_of_fragmented_messages_is_checked_per_message(f, n, missing, twice, stray):
    """Messages larger than a datagram take a seq per fragment and are
    delivered with their first one's: message k is seq k * f.  The check
    counts messages (missing, delivered twice) and names seqs; a delivered
    seq that is no message's is unexpected."""
    missing, twice = {k for k in missing if k < n}, {k for k in twice if k < n}
    stray = {q for q in stray if q % f and q < n * f} if f > 1 else set()
    seqs = [k * f for k in range(n) if k not in missing] + [k * f for k in twice if k not in missing]
    seqs += sorted(stray)
    t = Tally()
    t.strides = {(1, 1): f}
    t.add(batch([(1, 1, q, payload(NOW - 5, 64)) for q in seqs]), NOW)
    r = t.check({(1, 1): n})["1/1"]
    assert r["expected"] == n and r["delivered"] == n - len(missing)
    assert r["missing"] == len(missing) and r["missing_ids"] == [k * f for k in sorted(missing)][:20]
    dup = sorted(twice - missing)
    assert r["duplicates"] == len(dup) and r["duplicate_ids"] == [k * f for k in dup][:20]
    assert r["unexpected"] == len(stray)
    assert t.complete({(1, 1): n}) == (not missing)
    # pbcast: a message given up (its first fragment's seq in a lost range) is accounted for
    lost = {(1, 1): [(k * f, k * f + f - 1) for k in missing]}
    assert t.accounted({(1, 1): n}, lost)
