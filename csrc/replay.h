/* Replay windows for authenticated control datagrams.
 *
 * A keyed datagram's MAC trailer carries its sender's nonce counter
 * (auth.h): strictly increasing per node, and a timestamp -- the wall
 * clock in ns when the datagram was sealed (to within the sender's clock
 * error).  A captured datagram resent verbatim carries a counter already
 * seen; this table remembers, per (source node id, key id), which counters
 * were accepted.
 *
 * Why not an IPsec/DTLS bitmap over the last W counters: the table sees
 * only control datagrams (node.c), and they are sparse in the sender's
 * counter space -- thousands of DATA datagrams (and unicast to others)
 * between two GOSSIPs -- and a receiver that drains its multicast socket
 * before its unicast one reorders them by whole batches.  A bitmap 1024
 * wide would call a GOSSIP overtaken by 1,024 DATA datagrams a replay.
 * Instead each entry keeps the RP_REPLAY_RECENT highest counters accepted
 * and a floor: a counter is fresh iff it is above the floor and not among
 * them; when the set is full its lowest leaves and becomes the floor.
 * (A counter of UINT64_MAX would wrap the floor; a sender reaches it after
 * 584 years of wall-clock ns.)  So
 * every counter is accepted at most once while the entry lives, and a
 * genuine datagram is refused only when more than RP_REPLAY_RECENT newer
 * control datagrams of its source were accepted before it arrived.
 *
 * Bounded: at most `cap` entries; a new source beyond it evicts the least
 * recently used entry (counted).  Only datagrams with a valid MAC reach
 * the table, so only key holders create entries.
 *
 * The table is volatile: after this process restarts, or after a source's
 * entry was evicted, it does not know what it accepted before.  Because
 * counters are timestamps, an entry is born with a clock floor (`since`,
 * the caller's wall clock less the allowed clock skew): a counter below it
 * was sealed before this entry could have seen it, and is refused as
 * stale (-1, counted apart from replays).  So a datagram captured before
 * the receiver started (or before the entry was re-created) is refused,
 * except one sealed within the skew before that moment
 * (docs/security.md, "Replay").  The floor is fixed when the entry is
 * created, also by a datagram it refuses: a member whose clock is behind
 * by more than the skew is heard once its clock passes the floor.
 */
#ifndef RP_REPLAY_H
#define RP_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#define RP_REPLAY_RECENT      64
#define RP_REPLAY_DEFAULT_CAP 1024

typedef struct {
    uint32_t source;
    uint32_t next;             /* hash chain: index + 1, 0 ends */
    uint8_t key_id;
    uint8_t n;                 /* counters in recent[] */
    uint64_t lowest;           /* every counter below it is refused (a replay) */
    uint64_t since;            /* every counter below it is stale (0: no clock floor) */
    uint64_t used;             /* tick of the last accepted datagram (LRU) */
    uint64_t recent[RP_REPLAY_RECENT];
} rp_replay_entry_t;

typedef struct {
    rp_replay_entry_t *e;      /* cap entries, the first n in use */
    uint32_t *head;            /* nbuckets chain heads: index + 1, 0 empty */
    uint32_t cap, n, nbuckets;
    uint64_t tick;
    uint64_t accepted, refused, evicted, stale;
} rp_replay_t;

/* 0, or -1 when memory is short.  cap 0 takes the default. */
int rp_replay_init(rp_replay_t *r, uint32_t cap);
void rp_replay_free(rp_replay_t *r);

#define RP_REPLAY_FRESH   1
#define RP_REPLAY_REPLAY  0
#define RP_REPLAY_STALE  (-1)

/* Whether `counter` from (source, key_id) is fresh: RP_REPLAY_FRESH (and
 * now remembered), RP_REPLAY_REPLAY (seen before or below the window) or
 * RP_REPLAY_STALE (below the entry's clock floor).  `floor` is the clock
 * floor an entry created by this call gets (0: none); an existing entry
 * keeps its own. */
int rp_replay_check(rp_replay_t *r, uint32_t source, uint8_t key_id, uint64_t counter,
                    uint64_t floor);

#endif
