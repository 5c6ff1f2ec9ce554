/* Repair rate per requester: a token bucket per source address.
 *
 * The node's repair_rate (serve.h) bounds what it serves in all; this
 * bounds what one requester takes of it, so a member (or a host that really
 * receives at its address) asking for everything over and over gets its
 * rate and no more, while the others are still served.  The table is
 * bounded (max entries, least recently used evicted and counted), so a
 * flood of addresses costs no memory; an evicted requester comes back with
 * a full bucket, which a flood of addresses cannot turn into much: replies
 * to unproven addresses are capped by addrcheck.h anyway.
 *
 * A logger's catch-up queues (catchup.h) have their own per-requester pacing
 * (catchup_rate) and do not pass here.
 */
#ifndef RP_REQLIMIT_H
#define RP_REQLIMIT_H

#include "hmap.h"
#include "node.h"
#include "tbucket.h"

typedef struct {
    uint64_t dest;
    int64_t last;               /* last request (ns), for LRU eviction */
    rp_tbucket_t tb;
} rp_reqent_t;

typedef struct rp_reqlimit {
    double rate, burst;         /* per requester; rate 0: off */
    rp_reqent_t *e;
    uint32_t n, max;
    rp_hmap_t index;            /* dest -> index in e */
    uint64_t n_limited;         /* repairs not sent: the requester's bucket was empty */
    uint64_t n_evicted;         /* requesters pushed out of the table */
} rp_reqlimit_t;

/* rate repairs/s per requester, burst tokens (a burst below one is one), at
 * most max requesters tracked.  RP_OK, RP_EINVAL or RP_ENOMEM. */
int  rp_reqlimit_init(rp_reqlimit_t *r, double rate, double burst, uint32_t max);
void rp_reqlimit_free(rp_reqlimit_t *r);

/* The bucket of dest, refilled to now (found, or made: full, evicting the
 * least recently used when the table is full); NULL when off (r NULL or
 * rate 0) or out of memory -- the caller then serves unlimited by this. */
rp_tbucket_t *rp_reqlimit_bucket(rp_reqlimit_t *r, uint64_t dest, int64_t now);

/* The node's limiter: rate repairs/s per requester, burst tokens, at most
 * max requesters; rate 0 turns it off (and frees it).  RP_OK, RP_EINVAL or
 * RP_ENOMEM (then it is off). */
int rp_node_set_requester_limit(rp_node_t *n, double rate, double burst, uint32_t max);

#endif
