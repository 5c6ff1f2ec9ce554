"""Reference model of csrc/digest.h: interval digests under a byte budget.

Written from the header's description only: LEB128 varints
``from, upto - from, n`` then per interval ``gap, hi - lo`` with
gap = lo - from for the first interval and lo - prev_hi - 2 after.

The encoder tries every prefix of the intervals inside the window, from the
longest down, and keeps the longest one whose encoding fits the budget and
whose window is truthful; a prefix of k intervals ends its window just
before interval k + 1 (or at ``upto`` when it holds them all).
"""


def varint(v):
    assert 0 <= v < 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def clip(intervals, lo, hi):
    """The parts of ``intervals`` inside [lo, hi]."""
    out = []
    for a, b in intervals:
        a, b = max(a, lo), min(b, hi)
        if a <= b:
            out.append((a, b))
    return out


def encode_window(frm, upto, ivs):
    """The digest bytes for exactly ``ivs`` (already inside the window)."""
    body = b""
    prev = None
    for lo, hi in ivs:
        gap = lo - frm if prev is None else lo - prev - 2
        assert gap >= 0
        body += varint(gap) + varint(hi - lo)
        prev = hi
    return varint(frm) + varint(upto - frm) + varint(len(ivs)) + body


def encode(intervals, frm, upto, budget):
    """Returns (bytes, covered_upto, n) like rpbcast.core.digest.encode."""
    inside = clip(intervals, frm, upto)
    for k in range(len(inside), -1, -1):
        cut = upto if k == len(inside) else inside[k][0] - 1
        if cut < frm:          # interval k starts at frm: no truthful window
            continue
        data = encode_window(frm, cut, inside[:k])
        if len(data) <= budget:
            return data, cut, k
    return b"", None, 0


def members(intervals):
    s = set()
    for lo, hi in intervals:
        s.update(range(lo, hi + 1))
    return s


def well_formed(intervals, frm, upto):
    """Sorted, disjoint, non-adjacent, lo <= hi, all inside [frm, upto]."""
    prev = None
    for lo, hi in intervals:
        if not (frm <= lo <= hi <= upto):
            return False
        if prev is not None and lo <= prev + 1:
            return False
        prev = hi
    return True


class Malformed(Exception):
    pass


def read_varint(buf, pos):
    """LEB128 at buf[pos:]: at most 10 bytes and at most 64 bits."""
    v = 0
    for k in range(10):
        if pos + k >= len(buf):
            raise Malformed("truncated")
        b = buf[pos + k]
        v |= (b & 0x7F) << (7 * k)
        if not b & 0x80:
            if v >= 1 << 64:
                raise Malformed("more than 64 bits")
            return v, pos + k + 1
    raise Malformed("longer than 10 bytes")


def decode(buf):
    """Returns (intervals, frm, upto, consumed) or raises Malformed."""
    frm, p = read_varint(buf, 0)
    span, p = read_varint(buf, p)
    n, p = read_varint(buf, p)
    upto = frm + span
    if upto >= 1 << 64:
        raise Malformed("window overflows")
    out = []
    prev = None
    for _ in range(n):
        gap, p = read_varint(buf, p)
        ext, p = read_varint(buf, p)
        lo = frm + gap if prev is None else prev + 2 + gap
        hi = lo + ext
        if hi > upto:
            raise Malformed("interval leaves the window")
        out.append((lo, hi))
        prev = hi
    return out, frm, upto, p
