#include "msgstore.h"

#include <stdlib.h>

int rp_mstore_init(rp_mstore_t *s, uint64_t arena_bytes, uint64_t max_entries) {
    memset(s, 0, sizeof(*s));
    if (arena_bytes < 1024 || max_entries < 16)
        return RP_EINVAL;
    uint64_t ecap = 16;
    while (ecap < max_entries)
        ecap *= 2;
    s->arena = (uint8_t *)malloc(arena_bytes);
    s->ent = (rp_msent_t *)calloc(ecap, sizeof(rp_msent_t));
    if (!s->arena || !s->ent || rp_hmap_init(&s->index, ecap < 4096 ? ecap : 4096, 0)) {
        free(s->arena);
        free(s->ent);
        memset(s, 0, sizeof(*s));
        return RP_ENOMEM;
    }
    s->acap = arena_bytes;
    s->emask = ecap - 1;
    return RP_OK;
}

void rp_mstore_free(rp_mstore_t *s) {
    free(s->arena);
    free(s->ent);
    rp_hmap_free(&s->index);
    memset(s, 0, sizeof(*s));
}

/* Advance the tail over entries nobody holds any more. */
static void free_tail(rp_mstore_t *s) {
    while (s->tail < s->head) {
        rp_msent_t *e = rp_mstore_entry(s, s->tail);
        if (e->holds)
            break;
        uint64_t *t = rp_hmap_get(&s->index, e->seq, e->sender);
        if (t && *t == s->tail)
            rp_hmap_del(&s->index, e->seq, e->sender, NULL);
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
            if (rp_hmap_put(&s->index, seq, sender, ticket) < 0)
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
    uint64_t *t = rp_hmap_get(&s->index, seq, sender);
    if (!t || !rp_mstore_valid(s, *t))
        return -1;
    return (int64_t)*t;
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
