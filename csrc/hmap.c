#include "hmap.h"

#include <stdlib.h>

int rp_hmap_init(rp_hmap_t *m, uint64_t cap_hint, uint64_t max_n) {
    uint64_t cap = 16;
    while (cap < cap_hint * 2)
        cap *= 2;
    m->b = (rp_hbucket_t *)calloc(cap, sizeof(rp_hbucket_t));
    if (!m->b) {
        m->mask = 0;
        return RP_ENOMEM;
    }
    m->mask = cap - 1;
    m->n = 0;
    m->max_n = max_n;
    return RP_OK;
}

void rp_hmap_free(rp_hmap_t *m) {
    free(m->b);
    m->b = NULL;
    m->mask = 0;
    m->n = 0;
}

void rp_hmap_clear(rp_hmap_t *m) {
    memset(m->b, 0, (m->mask + 1) * sizeof(rp_hbucket_t));
    m->n = 0;
}

static void place(rp_hbucket_t *b, uint64_t mask, uint64_t key, uint32_t tag, uint64_t val) {
    uint64_t i = rp_hmap_hash(key, tag) & mask;
    while (b[i].used)
        i = (i + 1) & mask;
    b[i].key = key;
    b[i].tag = tag;
    b[i].val = val;
    b[i].used = 1;
}

static int rehash(rp_hmap_t *m, uint64_t ncap) {
    rp_hbucket_t *nb = (rp_hbucket_t *)calloc(ncap, sizeof(rp_hbucket_t));
    if (!nb)
        return RP_ENOMEM;
    for (uint64_t i = 0; i <= m->mask; i++)
        if (m->b[i].used)
            place(nb, ncap - 1, m->b[i].key, m->b[i].tag, m->b[i].val);
    free(m->b);
    m->b = nb;
    m->mask = ncap - 1;
    return RP_OK;
}

int rp_hmap_put(rp_hmap_t *m, uint64_t key, uint32_t tag, uint64_t val) {
    uint64_t *v = rp_hmap_get(m, key, tag);
    if (v) {
        *v = val;
        return 0;
    }
    if (m->max_n && m->n >= m->max_n)
        return RP_EFULL;
    if ((m->n + 1) * 2 > m->mask + 1) {
        int rc = rehash(m, (m->mask + 1) * 2);
        if (rc)
            return rc;
    }
    place(m->b, m->mask, key, tag, val);
    m->n++;
    return 1;
}

int rp_hmap_del(rp_hmap_t *m, uint64_t key, uint32_t tag, uint64_t *old) {
    uint64_t mask = m->mask;
    uint64_t i = rp_hmap_hash(key, tag) & mask;
    for (;;) {
        if (!m->b[i].used)
            return 0;
        if (m->b[i].key == key && m->b[i].tag == tag)
            break;
        i = (i + 1) & mask;
    }
    if (old)
        *old = m->b[i].val;
    /* Backward-shift: pull later members of the probe run into the hole if
     * their home slot is at or before it (cyclically). */
    uint64_t hole = i;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->b[j].used)
            break;
        uint64_t home = rp_hmap_hash(m->b[j].key, m->b[j].tag) & mask;
        /* Entry at j may move to hole iff home is not in (hole, j]. */
        int in_range = (hole <= j) ? (home > hole && home <= j)
                                   : (home > hole || home <= j);
        if (!in_range) {
            m->b[hole] = m->b[j];
            hole = j;
        }
    }
    m->b[hole].used = 0;
    m->n--;
    return 1;
}
