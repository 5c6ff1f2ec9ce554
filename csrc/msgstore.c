#include "msgstore.h"

#include <stdlib.h>

#include "bigmem.h"

struct rp_msix_ctx {
    const rp_mstore_t *s;
    uint32_t sender;
};

/* Is ticket still the stored entry (sender, seq)? */
static int ix_live(const void *owner, uint64_t ticket, uint64_t seq) {
    const struct rp_msix_ctx *c = (const struct rp_msix_ctx *)owner;
    if (!rp_mstore_valid(c->s, ticket))
        return 0;
    const rp_msent_t *e = rp_mstore_entry(c->s, ticket);
    return e->seq == seq && e->sender == c->sender;
}

/* Position of sender's index, creating it when asked; -1 if none. */
static int64_t ix_pos(rp_mstore_t *s, uint32_t sender, int create) {
    if (s->nix && s->last_sender == sender)
        return s->last_pos;
    uint64_t *v = rp_hmap_get(&s->senders, sender, 0);
    if (v) {
        s->last_sender = sender;
        s->last_pos = (uint32_t)*v;
        return (int64_t)*v;
    }
    if (!create)
        return -1;
    if (s->nix == s->ixcap) {
        uint32_t nc = s->ixcap ? s->ixcap * 2 : 8;
        rp_seqidx_t *nx = (rp_seqidx_t *)realloc(s->ix, nc * sizeof(rp_seqidx_t));
        if (!nx)
            return RP_ENOMEM;
        s->ix = nx;
        struct rp_msix_ctx *nctx = (struct rp_msix_ctx *)malloc(nc * sizeof(struct rp_msix_ctx));
        if (!nctx)
            return RP_ENOMEM;
        /* The contexts move: the index keeps no pointer to them. */
        if (s->ixctx)
            memcpy(nctx, s->ixctx, s->nix * sizeof(struct rp_msix_ctx));
        free(s->ixctx);
        s->ixctx = nctx;
        s->ixcap = nc;
    }
    if (rp_seqidx_init(&s->ix[s->nix], 1024, s->emask + 1))
        return RP_ENOMEM;
    s->ixctx[s->nix].s = s;
    s->ixctx[s->nix].sender = sender;
    if (rp_hmap_put(&s->senders, sender, 0, s->nix) < 0) {
        rp_seqidx_free(&s->ix[s->nix]);
        return RP_ENOMEM;
    }
    s->last_sender = sender;
    s->last_pos = s->nix;
    return (int64_t)s->nix++;
}

int rp_mstore_init(rp_mstore_t *s, uint64_t arena_bytes, uint64_t max_entries, int prefault) {
    memset(s, 0, sizeof(*s));
    if (arena_bytes < 1024 || max_entries < 16)
        return RP_EINVAL;
    uint64_t ecap = 16;
    while (ecap < max_entries)
        ecap *= 2;
    s->arena = (uint8_t *)rp_bigmem_alloc(arena_bytes, prefault);
    s->ent = (rp_msent_t *)rp_bigmem_alloc(ecap * sizeof(rp_msent_t), prefault);
    if (!s->arena || !s->ent || rp_hmap_init(&s->senders, 16, 0)) {
        rp_bigmem_free(s->arena, arena_bytes);
        rp_bigmem_free(s->ent, ecap * sizeof(rp_msent_t));
        memset(s, 0, sizeof(*s));
        return RP_ENOMEM;
    }
    s->acap = arena_bytes;
    s->emask = ecap - 1;
    return RP_OK;
}

void rp_mstore_free(rp_mstore_t *s) {
    rp_bigmem_free(s->arena, s->acap);
    rp_bigmem_free(s->ent, (s->emask + 1) * sizeof(rp_msent_t));
    for (uint32_t i = 0; i < s->nix; i++)
        rp_seqidx_free(&s->ix[i]);
    free(s->ix);
    free(s->ixctx);
    rp_hmap_free(&s->senders);
    memset(s, 0, sizeof(*s));
}

/* Advance the tail over entries nobody holds any more. */
static void free_tail(rp_mstore_t *s) {
    while (s->tail < s->head) {
        rp_msent_t *e = rp_mstore_entry(s, s->tail);
        if (e->holds)
            break;
        s->tail++;
        s->n_freed++;
    }
    s->btail = s->tail < s->head ? rp_mstore_entry(s, s->tail)->mpos : s->bhead;
    if (s->gc_cursor < s->tail)
        s->gc_cursor = s->tail;
    if (s->deliver_cursor < s->tail)
        s->deliver_cursor = s->tail;
}

static inline void drop_gossip(rp_mstore_t *s, rp_msent_t *e) {
    if (e->holds & RP_MS_GOSSIP) {
        e->holds &= ~(uint32_t)RP_MS_GOSSIP;
        s->gossip_bytes -= e->len;
        s->gossip_count--;
    }
}

/* Evict the oldest entry if only evictable holds keep it. */
static int evict_one(rp_mstore_t *s, uint32_t evictable) {
    if (s->tail >= s->head)
        return 0;
    rp_msent_t *e = rp_mstore_entry(s, s->tail);
    if (e->holds & ~evictable)
        return 0;
    drop_gossip(s, e);
    e->holds = 0;
    s->n_evicted++;
    free_tail(s);
    return 1;
}

int64_t rp_mstore_put(rp_mstore_t *s, uint32_t sender, uint64_t seq, uint64_t label,
                      int64_t t, uint32_t age, uint32_t holds, uint32_t evictable,
                      const uint8_t *payload, uint32_t len) {
    if (len > s->acap / 2)
        return RP_EINVAL;
    for (;;) {
        if (s->head == s->tail) {
            /* Empty: realign so any len <= acap/2 fits without wrapping. */
            uint64_t a = (s->bhead + s->acap - 1) / s->acap * s->acap;
            s->bhead = s->btail = a;
        }
        uint64_t p = s->bhead % s->acap;
        uint64_t skip = (p + len > s->acap) ? s->acap - p : 0;
        int ent_ok = (s->head - s->tail) <= s->emask;
        int byte_ok = (s->bhead + skip + len - s->btail) <= s->acap;
        if (ent_ok && byte_ok) {
            uint64_t ticket = s->head;
            rp_msent_t *e = rp_mstore_entry(s, ticket);
            e->seq = seq;
            e->label = label;
            e->t = t;
            e->mpos = s->bhead + skip;
            e->len = len;
            e->sender = sender;
            e->holds = holds;
            e->age = age;
            int64_t pos = ix_pos(s, sender, 1);
            if (pos < 0 || rp_seqidx_put(&s->ix[pos], seq, ticket, ix_live, &s->ixctx[pos]))
                return RP_ENOMEM;
            if (len)
                memcpy(s->arena + (e->mpos % s->acap), payload, len);
            s->bhead = e->mpos + len;
            s->head++;
            if (holds & RP_MS_GOSSIP) {
                s->gossip_bytes += len;
                s->gossip_count++;
            }
            s->n_put++;
            return (int64_t)ticket;
        }
        if (!evict_one(s, evictable)) {
            s->n_full++;
            return RP_EFULL;
        }
    }
}

int64_t rp_mstore_find(const rp_mstore_t *s, uint32_t sender, uint64_t seq) {
    int64_t pos = ix_pos((rp_mstore_t *)s, sender, 0);
    if (pos < 0)
        return -1;
    int64_t t = rp_seqidx_get(&s->ix[pos], seq);
    if (t < 0 || !ix_live(&s->ixctx[pos], (uint64_t)t, seq))
        return -1;
    return t;
}

void rp_mstore_release(rp_mstore_t *s, uint64_t ticket, uint32_t holds) {
    if (rp_mstore_valid(s, ticket)) {
        rp_msent_t *e = rp_mstore_entry(s, ticket);
        if (holds & RP_MS_GOSSIP)
            drop_gossip(s, e);
        e->holds &= ~holds;
    }
    free_tail(s);
}

static void forget_entry(rp_mstore_t *s, rp_msent_t *e, uint32_t gone) {
    drop_gossip(s, e);
    e->holds &= RP_MS_APP;
    e->sender = gone;
}

void rp_mstore_forget_sender(rp_mstore_t *s, uint32_t sender, uint32_t gone) {
    int64_t pos = ix_pos(s, sender, 0);
    if (pos < 0)
        return;
    rp_seqidx_t *x = &s->ix[pos];
    if (x->n_dropped) {
        /* The index lost some entries at its bound: walk the store. */
        for (uint64_t c = s->tail; c < s->head; c++) {
            rp_msent_t *e = rp_mstore_entry(s, c);
            if (e->sender == sender)
                forget_entry(s, e, gone);
        }
        x->n_dropped = 0;
    }
    for (uint64_t i = 0; i <= x->mask; i++) {
        rp_sislot_t *sl = &x->s[i];
        if (sl->seq == UINT64_MAX)
            continue;
        if (ix_live(&s->ixctx[pos], sl->ticket, sl->seq))
            forget_entry(s, rp_mstore_entry(s, sl->ticket), gone);
        sl->seq = UINT64_MAX;
    }
    free_tail(s);
}

uint64_t rp_mstore_gc(rp_mstore_t *s, uint32_t min_age, uint64_t max_bytes) {
    uint64_t n = 0;
    uint64_t c = s->gc_cursor > s->tail ? s->gc_cursor : s->tail;
    for (; c < s->head; c++) {
        rp_msent_t *e = rp_mstore_entry(s, c);
        if (!(e->holds & RP_MS_GOSSIP))
            continue;
        /* Ages are non-decreasing along the ring; signed difference copes
         * with the round counter wrapping. */
        int too_old = (int32_t)(e->age - min_age) < 0;
        int over = max_bytes && s->gossip_bytes > max_bytes;
        if (!too_old && !over)
            break;
        drop_gossip(s, e);
        n++;
    }
    s->gc_cursor = c;
    free_tail(s);
    return n;
}

size_t rp_mstore_take_deliveries(rp_mstore_t *s, uint64_t *tickets, size_t max) {
    size_t n = 0;
    uint64_t c = s->deliver_cursor > s->tail ? s->deliver_cursor : s->tail;
    for (; c < s->head && n < max; c++) {
        rp_msent_t *e = rp_mstore_entry(s, c);
        if (e->holds & RP_MS_DELIVER) {
            e->holds &= ~(uint32_t)RP_MS_DELIVER;
            tickets[n++] = c;
        }
    }
    s->deliver_cursor = c;
    /* No free_tail here: the payloads of the returned tickets stay readable
     * until the next put/release/gc. */
    return n;
}
