/* IPv6 addresses as the transport's 64-bit address handle.
 *
 * Everything above the sockets (node, outbox, addrcheck, loop, the Python
 * engine) sees an address as one uint64: for IPv4 the address itself
 * (ip << 16 | port, bits 0..47).  An IPv6 endpoint (16-byte address, port,
 * scope id) does not fit, so a per-process table gives each one a handle:
 * RP_ADDR6_TAG (bit 62, never set in an IPv4 address; RP_DEST_MCAST, all
 * ones, is told apart by RP_ADDR_IS6) | generation << 20 | slot.  udpio converts sockaddr_in6 <-> handle on
 * receive and send; nothing else needs to know the family.
 *
 * The table is bounded (RP_ADDR6_DEFAULT_CAP entries): a flood of spoofed
 * IPv6 sources must not grow it.  When it is full a new source evicts the
 * least recently used entry that is not pinned (a clock with second
 * chance: entries used since the hand last passed are spared once).  The
 * slot's generation changes on eviction, so a stale handle never names
 * another host: looking it up fails (counted) and a send to it is skipped.
 * Pinned entries (the configuration's addresses: group, bind, static
 * members) are never evicted; if everything is pinned a new source is
 * refused (handle 0, counted).
 *
 * The table is process state (the one global of the C core besides the
 * sockets themselves) behind a mutex: several nodes in one process share
 * handles, and a handle means the same endpoint to every one of them.
 * Handles never go on the wire (member entries carry the address itself).
 */
#ifndef RP_ADDR6_H
#define RP_ADDR6_H

#include "rp_common.h"

#define RP_ADDR6_DEFAULT_CAP 4096
#define RP_ADDR6_MAX_CAP (1u << 20)
#define RP_ADDR6_SLOT_BITS 20

typedef struct {
    uint64_t entries;      /* in the table now */
    uint64_t pinned;
    uint64_t cap;
    uint64_t inserted;     /* new endpoints given a handle */
    uint64_t evicted;      /* entries dropped to make room */
    uint64_t refused;      /* new endpoints refused (everything pinned) */
    uint64_t stale;        /* lookups of an evicted (or never issued) handle */
} rp_addr6_stats_t;

/* Handle of [ip]:port%scope, adding it if new (0: refused, the table is
 * all pinned).  pin: never evict it. */
uint64_t rp_addr6_intern(const uint8_t ip[16], uint16_t port, uint32_t scope, int pin);

/* The endpoint of handle h: RP_OK, or RP_EINVAL if h is not a live handle. */
int rp_addr6_lookup(uint64_t h, uint8_t ip[16], uint16_t *port, uint32_t *scope);

/* The same, for a batch under one lock (udpio): lock, *_locked calls, unlock. */
void rp_addr6_lock(void);
void rp_addr6_unlock(void);
uint64_t rp_addr6_intern_locked(const uint8_t ip[16], uint16_t port, uint32_t scope, int pin);
int rp_addr6_lookup_locked(uint64_t h, uint8_t ip[16], uint16_t *port, uint32_t *scope);

void rp_addr6_stats(rp_addr6_stats_t *st);

/* Empty the table and size it for cap entries (tests: a small table shows
 * eviction).  Every handle issued before is stale afterwards. */
int rp_addr6_reset(uint32_t cap);

#endif
