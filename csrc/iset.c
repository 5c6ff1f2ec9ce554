#include "iset.h"

#include <stdlib.h>

#define U64MAX UINT64_MAX

/* Size of [lo, hi], saturating (only [0, 2^64-1] itself saturates). */
static inline uint64_t ival_size(uint64_t lo, uint64_t hi) {
    uint64_t d = hi - lo;
    return d == U64MAX ? U64MAX : d + 1;
}

static inline uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t c = a + b;
    return c < a ? U64MAX : c;
}

int rp_iset_init(rp_iset_t *s, uint32_t cap_hint, uint32_t max_n) {
    s->n = 0;
    s->count = 0;
    s->max_n = max_n;
    s->cap = cap_hint ? cap_hint : 4;
    s->v = (rp_ival_t *)malloc((size_t)s->cap * sizeof(rp_ival_t));
    if (!s->v) {
        s->cap = 0;
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_iset_free(rp_iset_t *s) {
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
    s->count = 0;
}

void rp_iset_clear(rp_iset_t *s) {
    s->n = 0;
    s->count = 0;
}

/* Make room for `extra` more intervals. */
static int reserve(rp_iset_t *s, uint32_t extra) {
    uint64_t need = (uint64_t)s->n + extra;
    if (s->max_n && need > s->max_n)
        return RP_EFULL;
    if (need <= s->cap)
        return RP_OK;
    uint64_t ncap = s->cap ? (uint64_t)s->cap * 2 : 4;
    while (ncap < need)
        ncap *= 2;
    if (s->max_n && ncap > s->max_n)
        ncap = s->max_n;
    if (ncap > UINT32_MAX)
        return RP_ENOMEM;
    rp_ival_t *nv = (rp_ival_t *)realloc(s->v, (size_t)ncap * sizeof(rp_ival_t));
    if (!nv)
        return RP_ENOMEM;
    s->v = nv;
    s->cap = (uint32_t)ncap;
    return RP_OK;
}

/* First index k with v[k].hi >= x (n if none). */
static inline uint32_t lb_hi(const rp_iset_t *s, uint64_t x) {
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + ((hi - lo) >> 1);
        if (s->v[mid].hi < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First index k with v[k].lo > x (n if none). */
static inline uint32_t ub_lo(const rp_iset_t *s, uint64_t x) {
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + ((hi - lo) >> 1);
        if (s->v[mid].lo <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t rp_iset_add(rp_iset_t *s, uint64_t lo, uint64_t hi) {
    if (lo > hi)
        return RP_EINVAL;
    uint64_t sz = ival_size(lo, hi);
    if (sz > (uint64_t)INT64_MAX)
        return RP_EINVAL;

    /* Fast path: strictly above everything (the usual new gap). */
    if (s->n == 0 || lo > s->v[s->n - 1].hi) {
        if (s->n && s->v[s->n - 1].hi + 1 == lo) {
            s->v[s->n - 1].hi = hi;
        } else {
            int rc = reserve(s, 1);
            if (rc)
                return rc;
            s->v[s->n].lo = lo;
            s->v[s->n].hi = hi;
            s->n++;
        }
        s->count = sat_add(s->count, sz);
        return (int64_t)sz;
    }

    /* Intervals that overlap or touch [lo, hi]: indices [i, j). */
    uint32_t i = lb_hi(s, lo == 0 ? 0 : lo - 1);
    uint32_t j = hi == U64MAX ? s->n : ub_lo(s, hi + 1);
    if (i >= j) {
        int rc = reserve(s, 1);
        if (rc)
            return rc;
        memmove(&s->v[i + 1], &s->v[i], (size_t)(s->n - i) * sizeof(rp_ival_t));
        s->v[i].lo = lo;
        s->v[i].hi = hi;
        s->n++;
        s->count = sat_add(s->count, sz);
        return (int64_t)sz;
    }
    uint64_t nlo = lo < s->v[i].lo ? lo : s->v[i].lo;
    uint64_t nhi = hi > s->v[j - 1].hi ? hi : s->v[j - 1].hi;
    uint64_t old = 0;
    for (uint32_t k = i; k < j; k++)
        old += ival_size(s->v[k].lo, s->v[k].hi);
    uint64_t added = ival_size(nlo, nhi) - old;
    s->v[i].lo = nlo;
    s->v[i].hi = nhi;
    if (j - i > 1) {
        memmove(&s->v[i + 1], &s->v[j], (size_t)(s->n - j) * sizeof(rp_ival_t));
        s->n -= (j - i - 1);
    }
    s->count = sat_add(s->count, added);
    return (int64_t)added;
}

int64_t rp_iset_remove(rp_iset_t *s, uint64_t lo, uint64_t hi) {
    if (lo > hi)
        return RP_EINVAL;
    if (s->n == 0)
        return 0;
    uint32_t i = lb_hi(s, lo);
    uint32_t j = ub_lo(s, hi);
    if (i >= j)
        return 0;
    int has_left = s->v[i].lo < lo;
    int has_right = s->v[j - 1].hi > hi;
    uint32_t replaced = j - i;
    uint32_t keep = (uint32_t)has_left + (uint32_t)has_right;
    if (keep > replaced) {              /* split of a single interval */
        int rc = reserve(s, 1);
        if (rc)
            return rc;
    }
    rp_ival_t left = {s->v[i].lo, lo - 1};
    rp_ival_t right = {hi + 1, s->v[j - 1].hi};
    uint64_t removed = 0;
    for (uint32_t k = i; k < j; k++) {
        uint64_t a = s->v[k].lo > lo ? s->v[k].lo : lo;
        uint64_t b = s->v[k].hi < hi ? s->v[k].hi : hi;
        removed += ival_size(a, b);
    }
    /* Shift the tail so exactly `keep` slots sit at i. */
    memmove(&s->v[i + keep], &s->v[j], (size_t)(s->n - j) * sizeof(rp_ival_t));
    s->n = s->n - replaced + keep;
    uint32_t w = i;
    if (has_left)
        s->v[w++] = left;
    if (has_right)
        s->v[w++] = right;
    s->count = s->count == U64MAX ? U64MAX : s->count - removed;
    return (int64_t)removed;
}

int64_t rp_iset_find(const rp_iset_t *s, uint64_t x) {
    uint32_t k = lb_hi(s, x);
    if (k < s->n && s->v[k].lo <= x)
        return (int64_t)k;
    return -1;
}

int rp_iset_contains(const rp_iset_t *s, uint64_t x) {
    return rp_iset_find(s, x) >= 0;
}

int rp_iset_next(const rp_iset_t *s, uint64_t x, uint64_t *out) {
    uint32_t k = lb_hi(s, x);
    if (k >= s->n)
        return 0;
    *out = s->v[k].lo > x ? s->v[k].lo : x;
    return 1;
}
