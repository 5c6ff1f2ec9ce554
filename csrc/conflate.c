#include "conflate.h"

#include <stdlib.h>

int rp_conflate_init(rp_conflate_t *c) {
    memset(c, 0, sizeof(*c));
    return rp_hmap_init(&c->map, 64, 0);
}

void rp_conflate_free(rp_conflate_t *c) {
    for (uint32_t i = 0; i < c->n; i++)
        free(c->v[i].buf);
    free(c->v);
    rp_hmap_free(&c->map);
    memset(c, 0, sizeof(*c));
}

int64_t rp_conflate_find(const rp_conflate_t *c, uint32_t sender, uint64_t label) {
    uint64_t *ix = rp_hmap_get(&c->map, label, sender);
    return ix ? (int64_t)*ix : -1;
}

int rp_conflate_put(rp_conflate_t *c, uint32_t sender, uint32_t inc, uint64_t label, uint64_t seq,
                    int64_t t, const uint8_t *payload, uint32_t len) {
    uint64_t *ix = rp_hmap_get(&c->map, label, sender);
    rp_cval_t *v;
    if (ix) {
        v = &c->v[*ix];
        /* A newer incarnation restarts the sequence numbers. */
        if (inc == v->inc && seq <= v->seq) {
            c->stale++;
            return 0;
        }
        if (inc < v->inc) {
            c->stale++;
            return 0;
        }
    } else {
        if (c->n == c->cap) {
            uint32_t nc = c->cap ? c->cap * 2 : 64;
            rp_cval_t *nv = (rp_cval_t *)realloc(c->v, nc * sizeof(rp_cval_t));
            if (!nv)
                return RP_ENOMEM;
            c->v = nv;
            c->cap = nc;
        }
        if (rp_hmap_put(&c->map, label, sender, c->n) < 0)
            return RP_ENOMEM;
        v = &c->v[c->n++];
        memset(v, 0, sizeof(*v));
        v->sender = sender;
        v->label = label;
    }
    if (len > v->cap) {
        uint8_t *nb = (uint8_t *)realloc(v->buf, len);
        if (!nb)
            return RP_ENOMEM;
        v->buf = nb;
        v->cap = len;
    }
    if (len)
        memcpy(v->buf, payload, len);
    v->len = len;
    v->inc = inc;
    v->seq = seq;
    v->t = t;
    c->updates++;
    return 1;
}
