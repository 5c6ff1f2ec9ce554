#include "signature.h"

#include <stdlib.h>

/* XXH64, written from the published specification
 * (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md). */

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t xround(uint64_t acc, uint64_t in) {
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t xmerge(uint64_t acc, uint64_t v) {
    acc ^= xround(0, v);
    return acc * P1 + P4;
}

uint64_t rp_xxh64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = (const uint8_t *)data;
    const uint8_t *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        const uint8_t *limit = end - 32;
        do {
            v1 = xround(v1, rp_ld64(p));
            v2 = xround(v2, rp_ld64(p + 8));
            v3 = xround(v3, rp_ld64(p + 16));
            v4 = xround(v4, rp_ld64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = xmerge(h, v1);
        h = xmerge(h, v2);
        h = xmerge(h, v3);
        h = xmerge(h, v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;
    while (end - p >= 8) {
        h ^= xround(0, rp_ld64(p));
        h = rotl(h, 27) * P1 + P4;
        p += 8;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)rp_ld32(p) * P1;
        h = rotl(h, 23) * P2 + P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p) * P5;
        h = rotl(h, 11) * P1;
        p++;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

int rp_sigvec_init(rp_sigvec_t *v, uint32_t cap, uint64_t seed) {
    v->seed = seed;
    v->sig = 0;
    v->count = 0;
    v->cap = cap ? cap : 16;
    v->hash = (uint64_t *)calloc(v->cap, sizeof(uint64_t));
    v->present = (uint8_t *)calloc(v->cap, 1);
    if (!v->hash || !v->present) {
        free(v->hash);
        free(v->present);
        v->hash = NULL;
        v->present = NULL;
        v->cap = 0;
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_sigvec_free(rp_sigvec_t *v) {
    free(v->hash);
    free(v->present);
    v->hash = NULL;
    v->present = NULL;
    v->cap = v->count = 0;
}

static int grow(rp_sigvec_t *v, uint32_t slot) {
    uint64_t ncap = v->cap ? v->cap : 16;
    while (ncap <= slot)
        ncap *= 2;
    if (ncap > UINT32_MAX)
        return RP_ENOMEM;
    uint64_t *nh = (uint64_t *)realloc(v->hash, ncap * sizeof(uint64_t));
    if (!nh)
        return RP_ENOMEM;
    v->hash = nh;
    uint8_t *np = (uint8_t *)realloc(v->present, ncap);
    if (!np)
        return RP_ENOMEM;
    v->present = np;
    memset(v->hash + v->cap, 0, (ncap - v->cap) * sizeof(uint64_t));
    memset(v->present + v->cap, 0, ncap - v->cap);
    v->cap = (uint32_t)ncap;
    return RP_OK;
}

int rp_sigvec_set(rp_sigvec_t *v, uint32_t slot, uint32_t key, uint32_t a, uint64_t b) {
    if (slot >= v->cap) {
        int rc = grow(v, slot);
        if (rc)
            return rc;
    }
    uint64_t h = rp_sig_entry(key, a, b, v->seed);
    if (v->present[slot]) {
        v->sig -= v->hash[slot];
    } else {
        v->present[slot] = 1;
        v->count++;
    }
    v->hash[slot] = h;
    v->sig += h;
    return RP_OK;
}

void rp_sigvec_del(rp_sigvec_t *v, uint32_t slot) {
    if (slot < v->cap && v->present[slot]) {
        v->sig -= v->hash[slot];
        v->present[slot] = 0;
        v->hash[slot] = 0;
        v->count--;
    }
}
