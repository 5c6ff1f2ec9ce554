#include "replay.h"

#include <stdlib.h>

int rp_replay_init(rp_replay_t *r, uint32_t cap) {
    r->e = NULL;
    r->head = NULL;
    r->n = 0;
    r->tick = 0;
    r->accepted = r->refused = r->evicted = r->stale = 0;
    r->cap = cap ? cap : RP_REPLAY_DEFAULT_CAP;
    r->nbuckets = 1;
    while (r->nbuckets < r->cap * 2)
        r->nbuckets <<= 1;
    r->e = (rp_replay_entry_t *)calloc(r->cap, sizeof(*r->e));
    r->head = (uint32_t *)calloc(r->nbuckets, sizeof(uint32_t));
    if (!r->e || !r->head) {
        rp_replay_free(r);
        return -1;
    }
    return 0;
}

void rp_replay_free(rp_replay_t *r) {
    free(r->e);
    free(r->head);
    r->e = NULL;
    r->head = NULL;
    r->n = r->cap = 0;
}

static uint32_t bucket(const rp_replay_t *r, uint32_t source, uint8_t key_id) {
    uint64_t h = ((uint64_t)source << 8 | key_id) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (r->nbuckets - 1);
}

static void unlink_entry(rp_replay_t *r, uint32_t i) {
    uint32_t *p = &r->head[bucket(r, r->e[i].source, r->e[i].key_id)];
    while (*p && *p != i + 1)
        p = &r->e[*p - 1].next;
    if (*p)
        *p = r->e[i].next;
}

static rp_replay_entry_t *entry(rp_replay_t *r, uint32_t source, uint8_t key_id, uint64_t floor) {
    uint32_t b = bucket(r, source, key_id);
    for (uint32_t k = r->head[b]; k; k = r->e[k - 1].next)
        if (r->e[k - 1].source == source && r->e[k - 1].key_id == key_id)
            return &r->e[k - 1];
    uint32_t i;
    if (r->n < r->cap) {
        i = r->n++;
    } else {
        /* full: the least recently used entry goes (a linear scan, only
         * when a new source appears at the bound) */
        i = 0;
        for (uint32_t k = 1; k < r->n; k++)
            if (r->e[k].used < r->e[i].used)
                i = k;
        unlink_entry(r, i);
        r->evicted++;
    }
    rp_replay_entry_t *e = &r->e[i];
    e->source = source;
    e->key_id = key_id;
    e->n = 0;
    e->lowest = 0;
    e->since = floor;
    e->used = ++r->tick;       /* a new entry is not the next to go */
    e->next = r->head[b];
    r->head[b] = i + 1;
    return e;
}

int rp_replay_check(rp_replay_t *r, uint32_t source, uint8_t key_id, uint64_t counter,
                    uint64_t floor) {
    rp_replay_entry_t *e = entry(r, source, key_id, floor);
    if (counter < e->since) {
        r->stale++;
        return RP_REPLAY_STALE;
    }
    if (counter < e->lowest)
        goto refuse;
    uint32_t low = 0;
    for (uint32_t k = 0; k < e->n; k++) {
        if (e->recent[k] == counter)
            goto refuse;
        if (e->recent[k] < e->recent[low])
            low = k;
    }
    if (e->n < RP_REPLAY_RECENT) {
        e->recent[e->n++] = counter;
    } else if (counter < e->recent[low]) {
        e->lowest = counter + 1;        /* accepted, and at once below the window */
    } else {
        e->lowest = e->recent[low] + 1;
        e->recent[low] = counter;
    }
    e->used = ++r->tick;
    r->accepted++;
    return RP_REPLAY_FRESH;
refuse:
    r->refused++;
    return RP_REPLAY_REPLAY;
}
