/* A set of uint64 values kept as sorted, disjoint, non-adjacent closed
 * intervals.  Memory is O(number of intervals), never O(span).
 *
 * Used for the missing set of a sequence tracker (gap list), the logger-phase
 * subset of it, and anything else that is "a set of sequence numbers".
 * Operations at the high end (the common case: a new gap above everything
 * known) are O(1); operations in the middle are a binary search plus, at
 * worst, one memmove.
 */
#ifndef RP_ISET_H
#define RP_ISET_H

#include "rp_common.h"

typedef struct {
    rp_ival_t *v;        /* sorted by lo; v[i].hi + 1 < v[i+1].lo */
    uint32_t n;          /* intervals in use */
    uint32_t cap;        /* intervals allocated */
    uint32_t max_n;      /* bound on n (0 = unbounded); RP_EFULL when hit */
    uint64_t count;      /* number of values in the set (saturating) */
} rp_iset_t;

int  rp_iset_init(rp_iset_t *s, uint32_t cap_hint, uint32_t max_n);
void rp_iset_free(rp_iset_t *s);
void rp_iset_clear(rp_iset_t *s);

/* Add [lo, hi] (lo <= hi).  Returns how many values were newly added (>= 0)
 * or RP_ENOMEM / RP_EFULL / RP_EINVAL; on error the set is unchanged. */
int64_t rp_iset_add(rp_iset_t *s, uint64_t lo, uint64_t hi);

/* Remove [lo, hi].  Returns how many values were removed, or an error (a
 * removal in the middle of an interval splits it and may need memory). */
int64_t rp_iset_remove(rp_iset_t *s, uint64_t lo, uint64_t hi);

/* 1 if x is in the set, else 0. */
int rp_iset_contains(const rp_iset_t *s, uint64_t x);

/* Index of the interval containing x, or -1. */
int64_t rp_iset_find(const rp_iset_t *s, uint64_t x);

/* Smallest value >= x in the set; returns 1 and stores it, or 0 if none. */
int rp_iset_next(const rp_iset_t *s, uint64_t x, uint64_t *out);

RP_INLINE uint64_t rp_iset_count(const rp_iset_t *s) { return s->count; }
RP_INLINE uint32_t rp_iset_nivals(const rp_iset_t *s) { return s->n; }

#endif
