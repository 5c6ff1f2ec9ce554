"""Interval digests (csrc/digest.h) against tests/models/digest_model.py."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models import digest_model as model
from rpbcast.core.digest import DigestError, decode, encode

U64 = (1 << 64) - 1


@st.composite
def interval_sets(draw):
    """Canonical interval lists (sorted, disjoint, non-adjacent), anywhere in
    the uint64 range, including right up against 2**64 - 1."""
    start = draw(st.sampled_from([0, 0, 1, 5, 1000, 2**32 - 3, 2**62, U64 - 300, U64 - 40]))
    parts = draw(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=25))
    out = []
    pos = start
    for i, (gap, ext) in enumerate(parts):
        lo = pos + gap + (2 if i else 0)
        hi = lo + ext
        if hi > U64:
            break
        out.append((lo, hi))
        pos = hi
    if draw(st.booleans()) and out and out[-1][1] < U64:
        # sometimes a set running to the top of the space
        lo = out[-1][1] + 2
        if lo <= U64:
            out.append((lo, U64))
    return start, out


@st.composite
def digest_cases(draw):
    start, ivs = draw(interval_sets())
    end = ivs[-1][1] if ivs else start
    if draw(st.integers(0, 9)) == 0:
        frm, upto = 0, U64
    else:
        frm = min(U64, max(0, start + draw(st.integers(-20, end - start + 20))))
        upto = min(U64, frm + draw(st.integers(0, end - frm + 30 if end >= frm else 30)))
    return ivs, frm, upto


def as_list(a):
    return [tuple(int(x) for x in row) for row in np.asarray(a).reshape(-1, 2)]


@given(digest_cases())
def test_round_trip_with_room(case):
    ivs, frm, upto = case
    data, cov, n = encode(ivs, frm, upto, budget=4096)
    assert cov == upto
    expect = model.clip(ivs, frm, upto)
    assert n == len(expect)
    out, dfrm, dupto, used = decode(data)
    assert (dfrm, dupto, used) == (frm, upto, len(data))
    assert as_list(out) == expect
    assert data == model.encode_window(frm, upto, expect)


@given(digest_cases(), st.one_of(st.integers(0, 70), st.sampled_from([1400, 100000])))
def test_truthful_under_budget(case, budget):
    ivs, frm, upto = case
    data, cov, n = encode(ivs, frm, upto, budget=budget)
    # exactly what the written-from-the-spec model produces
    assert (data, cov, n) == model.encode(ivs, frm, upto, budget)
    assert len(data) <= budget
    if not data:
        assert cov is None and n == 0
        return
    assert frm <= cov <= upto
    out, dfrm, dupto, used = decode(data)
    assert (dfrm, dupto, used, len(out)) == (frm, cov, len(data), n)
    got = as_list(out)
    assert model.well_formed(got, frm, cov)
    # decoded == original restricted to the covered window, i.e. for every id
    # in [frm, cov]: in decoded iff in original, and nothing outside it
    assert got == model.clip(ivs, frm, cov)
    if cov - frm <= 3000:
        orig = model.members(model.clip(ivs, frm, cov))   # original ∩ window
        dec = model.members(got)
        assert dec <= orig
        for x in range(frm, cov + 1):
            assert (x in dec) == (x in orig)
    if cov < upto:
        # cut short: the window ends just before an interval that did not fit
        assert any(lo == cov + 1 for lo, _ in model.clip(ivs, frm, upto))


@given(digest_cases(), st.integers(0, 70))
def test_more_budget_never_covers_less(case, budget):
    ivs, frm, upto = case
    a = encode(ivs, frm, upto, budget=budget)
    b = encode(ivs, frm, upto, budget=budget + 1)
    if a[0]:
        assert b[0] and b[1] >= a[1] and b[2] >= a[2]


def test_examples():
    data, cov, n = encode([(3, 5), (9, 9)], 0, 20)
    assert (cov, n) == (20, 2)
    assert data == bytes([0, 20, 2, 3, 2, 2, 0])    # gap 9 - 5 - 2 = 2
    out, f, u, used = decode(data)
    assert as_list(out) == [(3, 5), (9, 9)] and (f, u, used) == (0, 20, 7)
    # clipped at both ends
    data, cov, n = encode([(0, 10), (20, 30)], 5, 25)
    assert as_list(decode(data)[0]) == [(5, 10), (20, 25)]
    # empty set: a header only
    data, cov, n = encode([], 7, 9)
    assert data == bytes([7, 2, 0]) and (cov, n) == (9, 0)


def test_budget_cuts_window_before_interval():
    ivs = [(10, 12), (20, 21), (30, 40)]
    # header 3 bytes + 2 bytes per interval; window must end at 19 or 29
    data, cov, n = encode(ivs, 0, 100, budget=5)
    assert (cov, n) == (19, 1)
    data, cov, n = encode(ivs, 0, 100, budget=3)
    assert (cov, n) == (9, 0)
    assert data == bytes([0, 9, 0])


def test_no_truthful_window():
    # the set contains `from` itself and the first interval does not fit
    assert encode([(0, 5)], 0, 10, budget=4) == (b"", None, 0)
    assert encode([(0, 5)], 0, 10, budget=5)[1:] == (10, 1)
    assert encode([], 0, 10, budget=2) == (b"", None, 0)
    assert encode([(2, 3)], 0, 10, budget=0) == (b"", None, 0)


def test_top_of_range():
    ivs = [(U64 - 5, U64)]
    data, cov, n = encode(ivs, U64 - 10, U64)
    out, f, u, _ = decode(data)
    assert as_list(out) == ivs and (f, u) == (U64 - 10, U64)
    data, cov, n = encode([(0, U64)], 0, U64)
    assert as_list(decode(data)[0]) == [(0, U64)]


def test_encode_rejects_bad_input():
    with pytest.raises(ValueError):
        encode([(5, 3)], 0, 10)
    with pytest.raises(ValueError):
        encode([(1, 3), (4, 6)], 0, 10)            # adjacent
    with pytest.raises(ValueError):
        encode([(1, 5), (3, 6)], 0, 10)            # overlapping
    with pytest.raises(ValueError):
        encode([(5, 6), (1, 2)], 0, 10)            # unsorted
    with pytest.raises(ValueError):
        encode([], 10, 9)


def test_encode_rejects_interval_after_top_of_range():
    """Regression: the wrapper's non-adjacency check computed prev_hi + 1 in
    uint64, which wraps for prev_hi == 2**64 - 1, so an interval after one
    ending at the top of the range was accepted and encoded as garbage."""
    with pytest.raises(ValueError):
        encode([(0, U64), (5, 6)], 0, 100)
    with pytest.raises(ValueError):
        encode([(10, U64), (0, 1)], 0, 100)


# ---------------------------------------------------------------------------
# decoding hostile input: DigestError or well-formed intervals, never a crash

def check_decode(buf):
    buf = bytes(buf)
    try:
        expect = model.decode(buf)
    except model.Malformed:
        expect = None
    try:
        got = decode(buf) if buf else None
    except DigestError:
        got = None
    if not buf:
        with pytest.raises(DigestError):
            decode(buf)
    if expect is None:
        assert got is None
        return
    assert got is not None
    out, frm, upto, used = got
    ivs = as_list(out)
    assert (ivs, frm, upto, used) == expect
    assert model.well_formed(ivs, frm, upto)
    assert 0 < used <= len(buf)


@given(st.binary(max_size=40))
def test_decode_random_bytes(buf):
    check_decode(buf)


@given(st.lists(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF]), max_size=30))
def test_decode_varint_edge_bytes(buf):
    check_decode(buf)


@given(digest_cases(), st.integers(0, 200))
def test_decode_truncated(case, cut):
    ivs, frm, upto = case
    data, _, _ = encode(ivs, frm, upto, budget=4096)
    cut = cut % len(data)
    with pytest.raises(DigestError):
        decode(data[:cut])


@given(digest_cases(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                min_size=1, max_size=4),
       st.binary(max_size=6))
def test_decode_mutated(case, edits, tail):
    ivs, frm, upto = case
    data = bytearray(encode(ivs, frm, upto, budget=4096)[0])
    for pos, val in edits:
        data[pos % len(data)] = val
    check_decode(data)
    check_decode(data + tail)            # trailing bytes are not consumed


def test_decode_specific_errors():
    with pytest.raises(DigestError, match="truncated"):
        decode(bytes([0, 10]))
    with pytest.raises(DigestError, match="varint"):
        decode(bytes([0xFF] * 11))
    with pytest.raises(DigestError, match="varint"):
        decode(bytes([0xFF] * 9 + [0x02]) + bytes(5))   # 65 bits
    with pytest.raises(DigestError, match="outside"):
        decode(bytes([0, 5, 1, 3, 3]))                  # [3, 6] leaves [0, 5]
    # upto = from + span overflows 2**64
    with pytest.raises(DigestError):
        decode(bytes([0xFF] * 9 + [0x01]) + bytes([1, 0]))
    # a huge count with few bytes is rejected before looping
    with pytest.raises(DigestError):
        decode(bytes([0, 5]) + bytes([0xFF] * 9 + [0x01]))
    # more intervals than the caller allows
    data = encode([(1, 1), (3, 3), (5, 5)], 0, 10)[0]
    assert len(decode(data, max_intervals=3)[0]) == 3
    with pytest.raises(DigestError, match="more intervals"):
        decode(data, max_intervals=2)


def test_decode_accepts_max_varint():
    buf = model.varint(U64) + model.varint(0) + model.varint(0)
    out, frm, upto, used = decode(buf)
    assert (frm, upto, used, len(out)) == (U64, U64, len(buf), 0)
