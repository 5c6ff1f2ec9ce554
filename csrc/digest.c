#include "digest.h"

size_t rp_varint_put(uint8_t *p, uint64_t v) {
    size_t k = 0;
    while (v >= 0x80) {
        p[k++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[k++] = (uint8_t)v;
    return k;
}

size_t rp_varint_get(const uint8_t *p, size_t len, uint64_t *v) {
    uint64_t r = 0;
    size_t max = len < RP_VARINT_MAX ? len : RP_VARINT_MAX;
    for (size_t k = 0; k < max; k++) {
        uint8_t b = p[k];
        if (k == 9 && b > 1)          /* more than 64 bits */
            return 0;
        r |= (uint64_t)(b & 0x7f) << (7 * k);
        if (!(b & 0x80)) {
            *v = r;
            return k + 1;
        }
    }
    return 0;
}

static inline uint64_t clip_lo(const rp_ival_t *v, uint64_t from) {
    return v->lo < from ? from : v->lo;
}

size_t rp_digest_encode(const rp_ival_t *iv, size_t n, uint64_t from, uint64_t upto,
                        uint8_t *buf, size_t budget, uint64_t *out_upto, size_t *out_n) {
    if (upto < from)
        return 0;
    size_t first = 0;                       /* first interval reaching the window */
    while (first < n && iv[first].hi < from)
        first++;
    size_t last = first;                    /* one past the last one starting in it */
    while (last < n && iv[last].lo <= upto)
        last++;

    /* Greedy prefix: take intervals first..k while the header (whose window
     * end depends on where we stop) plus the body still fit. */
    size_t hdr_from = rp_varint_len(from);
    size_t body = 0, nfit = 0;
    uint64_t cut = upto;
    int can_stop = 1;                       /* is there a truthful window yet? */
    uint64_t prev_hi = 0;
    /* Stopping before any interval: the window ends below the first one. */
    if (first < last) {
        if (clip_lo(&iv[first], from) == from)
            can_stop = 0;                   /* cannot stop before it truthfully */
        else
            cut = clip_lo(&iv[first], from) - 1;
    }
    for (size_t k = first; k < last; k++) {
        uint64_t lo = clip_lo(&iv[k], from);
        uint64_t hi = iv[k].hi > upto ? upto : iv[k].hi;
        uint64_t gap = (k == first) ? lo - from : lo - prev_hi - 2;
        size_t need = rp_varint_len(gap) + rp_varint_len(hi - lo);
        uint64_t cand = (k + 1 < last) ? clip_lo(&iv[k + 1], from) - 1 : upto;
        size_t hdr = hdr_from + rp_varint_len(cand - from) + rp_varint_len(nfit + 1);
        if (hdr + body + need > budget)
            break;
        body += need;
        nfit++;
        cut = cand;
        can_stop = 1;
        prev_hi = hi;
    }
    if (!can_stop)
        return 0;
    size_t hdr = hdr_from + rp_varint_len(cut - from) + rp_varint_len(nfit);
    if (hdr + body > budget)
        return 0;

    size_t w = 0;
    w += rp_varint_put(buf + w, from);
    w += rp_varint_put(buf + w, cut - from);
    w += rp_varint_put(buf + w, nfit);
    prev_hi = 0;
    for (size_t k = first; k < first + nfit; k++) {
        uint64_t lo = clip_lo(&iv[k], from);
        uint64_t hi = iv[k].hi > upto ? upto : iv[k].hi;
        uint64_t gap = (k == first) ? lo - from : lo - prev_hi - 2;
        w += rp_varint_put(buf + w, gap);
        w += rp_varint_put(buf + w, hi - lo);
        prev_hi = hi;
    }
    if (out_upto)
        *out_upto = cut;
    if (out_n)
        *out_n = nfit;
    return w;
}

/* Shared decoder; out may be NULL (check only). */
static long decode(const uint8_t *buf, size_t len, rp_ival_t *out, size_t max_out,
                   size_t *n_out, uint64_t *pfrom, uint64_t *pupto) {
    size_t r = 0, k;
    uint64_t from, span, n;
    if (!(k = rp_varint_get(buf + r, len - r, &from)))
        return len - r < RP_VARINT_MAX ? RP_DIG_TRUNCATED : RP_DIG_BAD_VARINT;
    r += k;
    if (!(k = rp_varint_get(buf + r, len - r, &span)))
        return len - r < RP_VARINT_MAX ? RP_DIG_TRUNCATED : RP_DIG_BAD_VARINT;
    r += k;
    if (!(k = rp_varint_get(buf + r, len - r, &n)))
        return len - r < RP_VARINT_MAX ? RP_DIG_TRUNCATED : RP_DIG_BAD_VARINT;
    r += k;
    uint64_t upto = from + span;
    if (upto < from)
        return RP_DIG_BAD_RANGE;
    /* Each interval takes at least two bytes: reject absurd counts before
     * looping. */
    if (n > (len - r) / 2)
        return RP_DIG_TRUNCATED;
    if (out && n > max_out)
        return RP_DIG_TOO_MANY;
    uint64_t prev_hi = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t gap, ext;
        if (!(k = rp_varint_get(buf + r, len - r, &gap)))
            return len - r < RP_VARINT_MAX ? RP_DIG_TRUNCATED : RP_DIG_BAD_VARINT;
        r += k;
        if (!(k = rp_varint_get(buf + r, len - r, &ext)))
            return len - r < RP_VARINT_MAX ? RP_DIG_TRUNCATED : RP_DIG_BAD_VARINT;
        r += k;
        uint64_t lo;
        if (i == 0) {
            lo = from + gap;
            if (lo < from)
                return RP_DIG_BAD_RANGE;
        } else {
            lo = prev_hi + 2 + gap;
            if (lo < prev_hi + 2 || prev_hi + 2 < prev_hi)
                return RP_DIG_BAD_RANGE;
        }
        uint64_t hi = lo + ext;
        if (hi < lo || hi > upto)
            return RP_DIG_BAD_RANGE;
        if (out) {
            out[i].lo = lo;
            out[i].hi = hi;
        }
        prev_hi = hi;
    }
    if (n_out)
        *n_out = (size_t)n;
    if (pfrom)
        *pfrom = from;
    if (pupto)
        *pupto = upto;
    return (long)r;
}

long rp_digest_decode(const uint8_t *buf, size_t len, rp_ival_t *out, size_t max_out,
                      size_t *n_out, uint64_t *from, uint64_t *upto) {
    return decode(buf, len, out, max_out, n_out, from, upto);
}

long rp_digest_check(const uint8_t *buf, size_t len, size_t *n_out) {
    return decode(buf, len, NULL, 0, n_out, NULL, NULL);
}

const char *rp_digest_error_name(long code) {
    switch (code) {
    case RP_DIG_TRUNCATED: return "truncated";
    case RP_DIG_BAD_VARINT: return "bad varint";
    case RP_DIG_BAD_RANGE: return "interval outside its window or overflowing";
    case RP_DIG_TOO_MANY: return "more intervals than allowed";
    default: return NULL;
    }
}
