/* Interval digest: a set of sequence numbers of one sender, as intervals,
 * in a compact byte form, under a byte budget.
 *
 * rpbcast gossips the set a receiver *lacks* (negative gossip); pbcast
 * gossips the set it *has*.  Either way the digest says "inside the window
 * [from, upto], the set is exactly these intervals".  When the budget is too
 * small, the window is cut short (upto moves down) instead of dropping
 * intervals from the middle, so a truncated digest never claims anything it
 * does not know: an id that is absent from the intervals but inside the window
 * is really absent from the set.
 *
 * Encoding (all unsigned LEB128 varints):
 *   from, (upto - from), n,
 *   then per interval: gap, (hi - lo)
 *   where gap = lo - from for the first interval and lo - prev_hi - 2 after
 *   (intervals are disjoint and non-adjacent, so that is never negative).
 */
#ifndef RP_DIGEST_H
#define RP_DIGEST_H

#include "rp_common.h"

#define RP_VARINT_MAX 10

enum {
    RP_DIG_OK = 0,
    RP_DIG_TRUNCATED = -10,   /* input ended inside the digest */
    RP_DIG_BAD_VARINT = -11,  /* varint longer than 10 bytes or > 64 bits */
    RP_DIG_BAD_RANGE = -12,   /* interval leaves the window or overflows */
    RP_DIG_TOO_MANY = -13,    /* more intervals than the caller allowed */
};

/* What a negative RP_DIG_* code means, in a few words (NULL if unknown). */
const char *rp_digest_error_name(long code);

/* Encode the parts of iv[0..n) (sorted, disjoint, non-adjacent) that fall in
 * [from, upto] into buf (at most `budget` bytes).  Returns bytes written (>0)
 * or 0 if not even the header fits.  *out_upto receives the window actually
 * covered (<= upto) and *out_n the number of intervals written.
 * When the budget runs out, the window ends just before the first interval
 * that did not fit. */
size_t rp_digest_encode(const rp_ival_t *iv, size_t n, uint64_t from, uint64_t upto,
                        uint8_t *buf, size_t budget, uint64_t *out_upto, size_t *out_n);

/* Decode a digest at buf[0..len).  Writes up to max_out intervals to out.
 * Returns bytes consumed (>0) or a negative RP_DIG_* code.  Every count and
 * length is checked against len before anything is read. */
long rp_digest_decode(const uint8_t *buf, size_t len, rp_ival_t *out, size_t max_out,
                      size_t *n_out, uint64_t *from, uint64_t *upto);

/* Check a digest without writing intervals (for the wire validator). */
long rp_digest_check(const uint8_t *buf, size_t len, size_t *n_out);

/* Varint helpers shared with the wire code. */
size_t rp_varint_put(uint8_t *p, uint64_t v);
RP_INLINE size_t rp_varint_len(uint64_t v) {
    size_t k = 1;
    while (v >= 0x80) { v >>= 7; k++; }
    return k;
}
/* Returns bytes read, or 0 on truncation / overlong encoding. */
size_t rp_varint_get(const uint8_t *p, size_t len, uint64_t *v);

#endif
