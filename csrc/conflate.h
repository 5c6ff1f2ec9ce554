/* Latest value per (sender, label): conflation for consumers of a FIFO-SRB
 * feed.  Updated on receipt, keeping the highest seq per key, so a repair
 * that arrives late never rolls a value back.  Its own storage (a buffer
 * per key, reused), not the message store: a label updated once must not pin
 * the store's ring. */
#ifndef RP_CONFLATE_H
#define RP_CONFLATE_H

#include "hmap.h"

typedef struct {
    uint32_t sender, inc;
    uint64_t label, seq;
    int64_t t;
    uint8_t *buf;
    uint32_t len, cap;
} rp_cval_t;

typedef struct {
    rp_hmap_t map;        /* (label, sender) -> index */
    rp_cval_t *v;
    uint32_t n, cap;
    uint64_t updates, stale;
} rp_conflate_t;

int  rp_conflate_init(rp_conflate_t *c);
void rp_conflate_free(rp_conflate_t *c);
/* Returns 1 if the value was taken, 0 if an equal or newer one is there,
 * negative on allocation failure. */
int  rp_conflate_put(rp_conflate_t *c, uint32_t sender, uint32_t inc, uint64_t label, uint64_t seq,
                     int64_t t, const uint8_t *payload, uint32_t len);
/* Index of (sender, label), or -1. */
int64_t rp_conflate_find(const rp_conflate_t *c, uint32_t sender, uint64_t label);

#endif
