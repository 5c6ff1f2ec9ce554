/* Open-addressing hash map from (u64 key, u32 tag) to u64 value.
 *
 * Linear probing with backward-shift deletion (no tombstones, so lookups
 * stay short under churn), power-of-two capacity, load kept <= 1/2.
 * Used for message-store lookup by (sender slot, seq) and for label indexes.
 */
#ifndef RP_HMAP_H
#define RP_HMAP_H

#include "rp_common.h"

typedef struct {
    uint64_t key;
    uint64_t val;
    uint32_t tag;
    uint32_t used;
} rp_hbucket_t;

typedef struct {
    rp_hbucket_t *b;
    uint64_t mask;      /* capacity - 1 */
    uint64_t n;         /* entries */
    uint64_t max_n;     /* bound (0 = unbounded) */
} rp_hmap_t;

int  rp_hmap_init(rp_hmap_t *m, uint64_t cap_hint, uint64_t max_n);
void rp_hmap_free(rp_hmap_t *m);
void rp_hmap_clear(rp_hmap_t *m);

RP_INLINE uint64_t rp_hmap_hash(uint64_t key, uint32_t tag) {
    uint64_t h = key ^ ((uint64_t)tag * 0x9E3779B97F4A7C15ULL);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

/* Pointer to the value for (key, tag), or NULL. */
RP_INLINE uint64_t *rp_hmap_get(const rp_hmap_t *m, uint64_t key, uint32_t tag) {
    uint64_t i = rp_hmap_hash(key, tag) & m->mask;
    for (;;) {
        rp_hbucket_t *b = &m->b[i];
        if (!b->used)
            return NULL;
        if (b->key == key && b->tag == tag)
            return &b->val;
        i = (i + 1) & m->mask;
    }
}

/* Insert or overwrite.  Returns 1 if inserted, 0 if overwritten, or
 * RP_ENOMEM / RP_EFULL. */
int rp_hmap_put(rp_hmap_t *m, uint64_t key, uint32_t tag, uint64_t val);

/* Remove; returns 1 if it was there (and stores the old value), else 0. */
int rp_hmap_del(rp_hmap_t *m, uint64_t key, uint32_t tag, uint64_t *old);

#endif
