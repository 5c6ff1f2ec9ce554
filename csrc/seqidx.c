#include "seqidx.h"

#include <stdlib.h>

static rp_sislot_t *alloc_slots(uint64_t cap) {
    rp_sislot_t *s = (rp_sislot_t *)malloc(cap * sizeof(rp_sislot_t));
    if (s)
        for (uint64_t i = 0; i < cap; i++)
            s[i].seq = UINT64_MAX;
    return s;
}

int rp_seqidx_init(rp_seqidx_t *x, uint64_t cap, uint64_t max_cap) {
    uint64_t c = 64;
    while (c < cap)
        c *= 2;
    x->max_cap = max_cap < c ? c : max_cap;
    x->s = alloc_slots(c);
    x->mask = x->s ? c - 1 : 0;
    x->n_dropped = 0;
    return x->s ? RP_OK : RP_ENOMEM;
}

void rp_seqidx_free(rp_seqidx_t *x) {
    free(x->s);
    x->s = NULL;
    x->mask = 0;
}

/* Double the table, keeping the live entries. */
static int grow(rp_seqidx_t *x, rp_seqidx_live_fn live, const void *owner) {
    uint64_t cap = (x->mask + 1) * 2;
    rp_sislot_t *ns = alloc_slots(cap);
    if (!ns)
        return RP_ENOMEM;
    for (uint64_t i = 0; i <= x->mask; i++) {
        rp_sislot_t *o = &x->s[i];
        if (o->seq == UINT64_MAX || !live(owner, o->ticket, o->seq))
            continue;
        rp_sislot_t *d = &ns[o->seq & (cap - 1)];
        /* Two live entries can only meet again if their seqs differ by a
         * multiple of the new capacity; keep the newer ticket. */
        if (d->seq == UINT64_MAX || d->ticket < o->ticket)
            *d = *o;
    }
    free(x->s);
    x->s = ns;
    x->mask = cap - 1;
    return RP_OK;
}

int rp_seqidx_put(rp_seqidx_t *x, uint64_t seq, uint64_t ticket, rp_seqidx_live_fn live,
                  const void *owner) {
    for (;;) {
        rp_sislot_t *sl = &x->s[seq & x->mask];
        if (sl->seq == UINT64_MAX || sl->seq == seq || !live(owner, sl->ticket, sl->seq)) {
            sl->seq = seq;
            sl->ticket = ticket;
            return RP_OK;
        }
        if (x->mask + 1 >= x->max_cap) {
            x->n_dropped++;             /* push the older one out of the index */
            sl->seq = seq;
            sl->ticket = ticket;
            return RP_OK;
        }
        int rc = grow(x, live, owner);
        if (rc)
            return rc;
    }
}
