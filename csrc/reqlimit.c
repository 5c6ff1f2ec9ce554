#include "reqlimit.h"

#include <stdlib.h>

int rp_reqlimit_init(rp_reqlimit_t *r, double rate, double burst, uint32_t max) {
    memset(r, 0, sizeof(*r));
    if (rate < 0 || max == 0)
        return RP_EINVAL;
    r->rate = rate;
    r->burst = burst;
    r->max = max;
    r->e = (rp_reqent_t *)calloc(max, sizeof(rp_reqent_t));
    if (!r->e || rp_hmap_init(&r->index, max < 1024 ? 2 * (uint64_t)max : 2048, 0)) {
        free(r->e);
        r->e = NULL;
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_reqlimit_free(rp_reqlimit_t *r) {
    free(r->e);
    r->e = NULL;
    rp_hmap_free(&r->index);
    r->n = 0;
}

rp_tbucket_t *rp_reqlimit_bucket(rp_reqlimit_t *r, uint64_t dest, int64_t now) {
    if (!r || r->rate <= 0 || !r->e)
        return NULL;
    uint64_t *at = rp_hmap_get(&r->index, dest, 0);
    uint32_t i;
    if (at) {
        i = (uint32_t)*at;
    } else {
        if (r->n < r->max) {
            i = r->n;
        } else {
            /* full: the least recently used goes (a linear scan, only when a
             * new requester arrives at a full table) */
            i = 0;
            for (uint32_t k = 1; k < r->n; k++)
                if (r->e[k].last < r->e[i].last)
                    i = k;
            rp_hmap_del(&r->index, r->e[i].dest, 0, NULL);
            r->n_evicted++;
        }
        if (rp_hmap_put(&r->index, dest, 0, i) < 0)
            return NULL;
        if (i == r->n)
            r->n++;
        r->e[i].dest = dest;
        rp_tb_init(&r->e[i].tb);
        rp_tb_set(&r->e[i].tb, r->rate, r->burst);
    }
    rp_reqent_t *e = &r->e[i];
    e->last = now;
    rp_tb_refill(&e->tb, now);
    return &e->tb;
}

int rp_node_set_requester_limit(rp_node_t *n, double rate, double burst, uint32_t max) {
    if (n->reqlimit) {
        rp_reqlimit_free(n->reqlimit);
        free(n->reqlimit);
        n->reqlimit = NULL;
    }
    if (rate <= 0)
        return rate < 0 ? RP_EINVAL : RP_OK;
    rp_reqlimit_t *r = (rp_reqlimit_t *)malloc(sizeof(*r));
    if (!r)
        return RP_ENOMEM;
    int rc = rp_reqlimit_init(r, rate, burst, max);
    if (rc) {
        free(r);
        return rc;
    }
    n->reqlimit = r;
    return RP_OK;
}
