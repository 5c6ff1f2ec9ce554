#include "stability.h"

#include <stdlib.h>

static inline uint32_t words(uint32_t n) { return (n + 63) / 64; }

int rp_stab_init(rp_stab_t *s, uint32_t m, uint32_t n, uint32_t self) {
    memset(s, 0, sizeof(*s));
    if (self >= n)
        return RP_EINVAL;
    s->self = self;
    int rc = rp_stab_resize(s, m, n);
    if (rc)
        return rc;
    rp_stab_start_round(s);
    return RP_OK;
}

void rp_stab_free(rp_stab_t *s) {
    free(s->R); free(s->M); free(s->S);
    free(s->W); free(s->alive); free(s->L);
    memset(s, 0, sizeof(*s));
}

static int grow64(uint64_t **p, uint32_t old, uint32_t nw) {
    uint64_t *q = (uint64_t *)realloc(*p, (size_t)(nw ? nw : 1) * sizeof(uint64_t));
    if (!q)
        return RP_ENOMEM;
    if (nw > old)
        memset(q + old, 0, (size_t)(nw - old) * sizeof(uint64_t));
    *p = q;
    return RP_OK;
}

int rp_stab_resize(rp_stab_t *s, uint32_t m, uint32_t n) {
    if (m > s->mcap) {
        uint32_t cap = s->mcap ? s->mcap : 8;
        while (cap < m)
            cap *= 2;
        if (grow64(&s->R, s->mcap, cap) || grow64(&s->M, s->mcap, cap) ||
            grow64(&s->S, s->mcap, cap))
            return RP_ENOMEM;
        s->mcap = cap;
    }
    if (n > s->ncap) {
        uint32_t cap = s->ncap ? s->ncap : 64;
        while (cap < n)
            cap *= 2;
        if (grow64(&s->W, words(s->ncap), words(cap)) ||
            grow64(&s->alive, words(s->ncap), words(cap)))
            return RP_ENOMEM;
        uint32_t *nl = (uint32_t *)realloc(s->L, (size_t)cap * sizeof(uint32_t));
        if (!nl)
            return RP_ENOMEM;
        memset(nl + s->ncap, 0, (size_t)(cap - s->ncap) * sizeof(uint32_t));
        s->L = nl;
        s->ncap = cap;
    }
    if (m > s->m)
        s->m = m;       /* new senders: R = M = S = 0 (zeroed on growth) */
    for (uint32_t i = s->n; i < n; i++) {
        s->alive[i >> 6] |= 1ULL << (i & 63);
        s->W[i >> 6] &= ~(1ULL << (i & 63));    /* not heard from yet */
    }
    if (n > s->n)
        s->n = n;
    return RP_OK;
}

void rp_stab_start_round(rp_stab_t *s) {
    if (s->m)                   /* R and M are NULL until the first sender */
        memcpy(s->M, s->R, (size_t)s->m * sizeof(uint64_t));
    memset(s->W, 0, (size_t)words(s->n) * sizeof(uint64_t));
    s->W[s->self >> 6] |= 1ULL << (s->self & 63);
}

int rp_stab_complete(const rp_stab_t *s) {
    uint32_t nw = words(s->n);
    for (uint32_t k = 0; k < nw; k++)
        if ((s->W[k] & s->alive[k]) != s->alive[k])
            return 0;
    return 1;
}

/* W complete: S := max(S, M), next round. */
static int finish_round(rp_stab_t *s) {
    for (uint32_t j = 0; j < s->m; j++)
        if (s->M[j] > s->S[j])
            s->S[j] = s->M[j];
    s->round++;
    s->n_rounds++;
    rp_stab_start_round(s);
    return RP_STAB_COMPLETED;
}

int rp_stab_check(rp_stab_t *s) {
    return rp_stab_complete(s) ? finish_round(s) : 0;
}

/* Word k of a message's W restricted to its n_in members: bits at or above
 * n_in (the unused tail of the last word) count as 0, like members the
 * sender did not know.  Taking them as they came would mark members that
 * join later (resize) as heard from. */
static inline uint64_t w_in(const uint64_t *W, uint32_t k, uint32_t n_in) {
    if ((uint64_t)k * 64 >= n_in)
        return 0;
    uint32_t rest = n_in - k * 64;
    return rest >= 64 ? W[k] : W[k] & ((1ULL << rest) - 1);
}

static void merge_S(rp_stab_t *s, const uint64_t *S, uint32_t m_in) {
    for (uint32_t j = 0; j < m_in; j++)
        if (S[j] > s->S[j])
            s->S[j] = S[j];
}

/* Adopt (M, W) from a later round, folding in our own R and bit. */
static void adopt_later(rp_stab_t *s, const uint64_t *M, const uint64_t *W,
                        uint32_t m_in, uint32_t n_in) {
    for (uint32_t j = 0; j < s->m; j++) {
        uint64_t v = j < m_in ? M[j] : 0;
        s->M[j] = v < s->R[j] ? v : s->R[j];
    }
    uint32_t nw = words(s->n);
    for (uint32_t k = 0; k < nw; k++)
        s->W[k] = w_in(W, k, n_in);
    s->W[s->self >> 6] |= 1ULL << (s->self & 63);
}

int rp_stab_merge(rp_stab_t *s, const uint64_t *M, const uint64_t *W, const uint64_t *S,
                  uint64_t r, uint32_t m_in, uint32_t n_in) {
    if (m_in > s->m || n_in > s->n)
        return RP_EINVAL;
    uint32_t nw = words(s->n);
    int flags = 0;
    if (r == s->round) {
        /* Compare W (message) with our W: subset relations over all bits. */
        int msg_has_more = 0, we_have_more = 0;
        for (uint32_t k = 0; k < nw; k++) {
            uint64_t w = w_in(W, k, n_in);
            if (w & ~s->W[k]) msg_has_more = 1;
            if (s->W[k] & ~w) we_have_more = 1;
        }
        if (we_have_more && !msg_has_more) {
            flags |= RP_STAB_REDUNDANT;
        } else if (msg_has_more && !we_have_more) {
            for (uint32_t j = 0; j < s->m; j++)
                s->M[j] = j < m_in ? M[j] : 0;
            for (uint32_t k = 0; k < nw; k++)
                s->W[k] = w_in(W, k, n_in);
            flags |= RP_STAB_ADOPTED;
        } else {
            for (uint32_t j = 0; j < s->m; j++) {
                uint64_t v = j < m_in ? M[j] : 0;
                if (v < s->M[j])
                    s->M[j] = v;
            }
            for (uint32_t k = 0; k < nw; k++)
                s->W[k] |= w_in(W, k, n_in);
            flags |= RP_STAB_MERGED;
        }
        merge_S(s, S, m_in);
        if (rp_stab_complete(s))
            flags |= finish_round(s);
    } else if (r > s->round) {
        flags |= (r == s->round + 1) ? RP_STAB_NEXT : RP_STAB_FUTURE;
        adopt_later(s, M, W, m_in, n_in);
        merge_S(s, S, m_in);
        s->round = r;
        if (rp_stab_complete(s))
            flags |= finish_round(s);
    } else {
        flags |= RP_STAB_OLD;
    }
    return flags;
}

int rp_stab_merge_S(rp_stab_t *s, const uint64_t *S, uint32_t m_in, uint64_t r) {
    if (m_in > s->m)
        return RP_EINVAL;
    merge_S(s, S, m_in);
    if (r > s->round) {
        s->round = r;
        rp_stab_start_round(s);
        return RP_STAB_NEXT;
    }
    return 0;
}

void rp_stab_fd_step(rp_stab_t *s) {
    for (uint32_t i = 0; i < s->n; i++)
        if (i != s->self && s->L[i] != UINT32_MAX)
            s->L[i]++;
    s->L[s->self] = 0;
}

void rp_stab_fd_merge(rp_stab_t *s, const uint32_t *L, uint32_t n_in) {
    uint32_t n = n_in < s->n ? n_in : s->n;
    for (uint32_t i = 0; i < n; i++)
        if (L[i] < s->L[i])
            s->L[i] = L[i];
    s->L[s->self] = 0;
}

uint32_t rp_stab_fd_failed(rp_stab_t *s, uint32_t K) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (i == s->self)
            continue;
        if (s->L[i] >= K && rp_stab_is_alive(s, i)) {
            s->alive[i >> 6] &= ~(1ULL << (i & 63));
            k++;
        }
    }
    return k;
}

void rp_stab_set_alive(rp_stab_t *s, uint32_t i, int alive) {
    if (i >= s->n || i == s->self)
        return;
    if (alive)
        s->alive[i >> 6] |= 1ULL << (i & 63);
    else
        s->alive[i >> 6] &= ~(1ULL << (i & 63));
}
