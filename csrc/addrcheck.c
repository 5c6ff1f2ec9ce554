#include "addrcheck.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- SipHash-2-4 (Aumasson & Bernstein): the cookie's keyed hash ------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                              \
    do {                                                                                      \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                             \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                             \
    } while (0)

static uint64_t ld64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* SipHash-2-4 of two 64-bit words (a 16-byte message). */
static uint64_t siphash_2w(const uint8_t key[16], uint64_t m0, uint64_t m1) {
    uint64_t k0 = ld64le(key), k1 = ld64le(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t m[3] = {m0, m1, (uint64_t)16 << 56};
    for (int i = 0; i < 3; i++) {
        v3 ^= m[i];
        SIPROUND;
        SIPROUND;
        v0 ^= m[i];
    }
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- the table --------------------------------------------------------- */

rp_addrcheck_t *rp_ac_new(double factor) {
    rp_addrcheck_t *ac = (rp_addrcheck_t *)calloc(1, sizeof(*ac));
    if (!ac)
        return NULL;
    ac->t = (rp_acent_t *)calloc((size_t)RP_AC_SETS * RP_AC_WAYS, sizeof(rp_acent_t));
    if (!ac->t) {
        free(ac);
        return NULL;
    }
    ac->factor = factor > 0 ? factor : 0;
    rp_tb_init(&ac->admit);
    if (getrandom(ac->secret, sizeof(ac->secret), 0) != (ssize_t)sizeof(ac->secret)) {
        /* no entropy source: a clock-derived secret is still per process */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30), b = (uint64_t)(uintptr_t)ac;
        memcpy(ac->secret, &a, 8);
        memcpy(ac->secret + 8, &b, 8);
    }
    return ac;
}

void rp_ac_free(rp_addrcheck_t *ac) {
    if (!ac)
        return;
    free(ac->members);
    free(ac->t);
    free(ac);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int rp_ac_set_members(rp_addrcheck_t *ac, const uint64_t *addrs, size_t n) {
    uint64_t *m = NULL;
    if (n) {
        m = (uint64_t *)malloc(n * sizeof(uint64_t));
        if (!m)
            return RP_ENOMEM;
        memcpy(m, addrs, n * sizeof(uint64_t));
        qsort(m, n, sizeof(uint64_t), cmp_u64);
    }
    free(ac->members);
    ac->members = m;
    ac->nmembers = n;
    return RP_OK;
}

static int is_member(const rp_addrcheck_t *ac, uint64_t addr) {
    size_t lo = 0, hi = ac->nmembers;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ac->members[mid] < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ac->nmembers && ac->members[lo] == addr;
}

static rp_acent_t *set_of(const rp_addrcheck_t *ac, uint64_t addr) {
    uint64_t h = addr * 0x9E3779B97F4A7C15ULL;
    return &ac->t[(size_t)(h >> 54) % RP_AC_SETS * RP_AC_WAYS];
}

static rp_acent_t *find(const rp_addrcheck_t *ac, uint64_t addr) {
    rp_acent_t *s = set_of(ac, addr);
    for (int k = 0; k < RP_AC_WAYS; k++)
        if (s[k].used && s[k].addr == addr)
            return &s[k];
    return NULL;
}

static int entry_valid(const rp_addrcheck_t *ac, const rp_acent_t *e) {
    return e->valid_at != INT64_MIN && ac->now - e->valid_at < RP_AC_VALID_NS;
}

/* addr's entry, made if new: a free way, else the longest idle unvalidated
 * one, else the longest idle. */
static rp_acent_t *entry_of(rp_addrcheck_t *ac, uint64_t addr) {
    rp_acent_t *e = find(ac, addr);
    if (e)
        return e;
    rp_acent_t *s = set_of(ac, addr), *victim = NULL;
    for (int k = 0; k < RP_AC_WAYS && !victim; k++)
        if (!s[k].used)
            victim = &s[k];
    for (int k = 0; k < RP_AC_WAYS && !victim; k++)
        if (!entry_valid(ac, &s[k]) && (!victim || s[k].seen < victim->seen))
            victim = &s[k];
    if (!victim) {
        victim = &s[0];
        for (int k = 1; k < RP_AC_WAYS; k++)
            if (s[k].seen < victim->seen)
                victim = &s[k];
    }
    memset(victim, 0, sizeof(*victim));
    victim->used = 1;
    victim->addr = addr;
    victim->seen = ac->now;
    victim->cookie_at = INT64_MIN;
    victim->valid_at = INT64_MIN;
    return victim;
}

int rp_ac_validated(rp_addrcheck_t *ac, uint64_t addr) {
    if (is_member(ac, addr))
        return 1;
    rp_acent_t *e = find(ac, addr);
    return e && entry_valid(ac, e);
}

uint64_t rp_ac_cookie(const rp_addrcheck_t *ac, uint64_t addr, uint64_t w) {
    return siphash_2w(ac->secret, addr, w);
}

uint64_t rp_ac_window(const rp_addrcheck_t *ac) {
    return ac->now > 0 ? (uint64_t)(ac->now / RP_AC_WINDOW_NS) : 0;
}

static int cookie_due(const rp_acent_t *e, int64_t now) {
    return e->cookie_at == INT64_MIN || now - e->cookie_at >= RP_AC_COOKIE_GAP_NS;
}

void rp_ac_set_admit(rp_addrcheck_t *ac, double rate, double burst) {
    rp_tb_set(&ac->admit, rate, burst);
}

int rp_ac_request(rp_addrcheck_t *ac, uint64_t src, size_t bytes, int64_t now) {
    ac->now = now;
    if (is_member(ac, src))
        return 0;
    rp_acent_t *e = find(ac, src);
    if (e && entry_valid(ac, e)) {
        e->seen = now;
        return 0;
    }
    ac->st.requests++;
    rp_tb_refill(&ac->admit, now);
    if (!rp_tb_take(&ac->admit)) {
        ac->st.not_admitted++;
        return -1;
    }
    if (!e)
        e = entry_of(ac, src);
    e->seen = now;
    e->asked = 1;
    uint64_t c = e->credit + (uint64_t)(ac->factor * (double)bytes);
    uint64_t cap = (uint64_t)(ac->factor * RP_AC_MAX_CREDIT);
    e->credit = c < cap ? c : cap;
    return cookie_due(e, now);
}

int rp_ac_pong(rp_addrcheck_t *ac, uint64_t src, uint64_t seq, const uint8_t *body, size_t len,
               int64_t now) {
    ac->now = now;
    if (len != 8)
        return 0;                   /* a cookie PING's body is its window (u64) */
    uint64_t w = ld64le(body), cur = rp_ac_window(ac);
    if (w != cur && w + 1 != cur)
        return 0;
    if (rp_ac_cookie(ac, src, w) != seq) {
        ac->st.cookies_bad++;
        return 0;
    }
    rp_acent_t *e = entry_of(ac, src);
    e->valid_at = now;
    e->seen = now;
    e->credit = 0;
    ac->st.cookies_echoed++;
    return 1;
}

int rp_ac_charge(rp_addrcheck_t *ac, uint64_t dest, size_t bytes, int *want_cookie) {
    *want_cookie = 0;
    if (is_member(ac, dest))
        return 1;
    rp_acent_t *e = find(ac, dest);
    if (e && entry_valid(ac, e)) {
        /* half-way through a validation: ask for a fresh echo */
        if (ac->now - e->valid_at > RP_AC_VALID_NS / 2 && cookie_due(e, ac->now))
            *want_cookie = 2;
        return 1;
    }
    if (e && e->credit >= bytes) {
        e->credit -= bytes;
        return 1;
    }
    /* An address we talk to on our own (a member table entry in a group
     * without a key, which anyone can forge) gets nothing and no cookie
     * either: it is validated once it sends us something, as members do. */
    if (e && e->asked && cookie_due(e, ac->now))
        *want_cookie = 1;
    ac->st.capped_msgs++;
    ac->st.capped_bytes += bytes;
    return 0;
}

int rp_ac_cookie_sent(rp_addrcheck_t *ac, uint64_t dest, size_t bytes, int free_of_credit) {
    rp_acent_t *e = entry_of(ac, dest);
    if (!entry_valid(ac, e) && !free_of_credit) {
        if (e->credit < bytes)
            return 0;
        e->credit -= bytes;
    }
    e->cookie_at = ac->now;
    ac->st.cookies_sent++;
    return 1;
}
