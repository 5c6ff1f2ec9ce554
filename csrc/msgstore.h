/* Message store: every payload a node keeps (delivery queue, gossip buffer,
 * send buffer) lives here, in one preallocated byte arena, described by a
 * ring of fixed-size entries addressed by 64-bit tickets.  No per-message
 * allocation and no per-message Python object.
 *
 * Entries are appended in arrival order.  Each entry carries "holds" (bits
 * saying who still needs it: the application, the gossip buffer, the send
 * buffer, ...).  When the oldest entry has no holds left, the tail advances
 * and its bytes are reused.  Because arrival order is also age order, GC by
 * age (GCLIMIT rounds) is a cursor walking forward, and the byte bound on the
 * gossip buffer is the same cursor walking further.
 *
 * When the arena is full and the oldest entry is held only by evictable
 * holds (the gossip buffer), it is evicted; when it is pinned (undelivered,
 * or unacknowledged by a logger), put() fails with RP_EFULL and the caller
 * treats the incoming message as lost: it will be repaired later.  That is
 * the receiver-side flow control of a receiver-reliable protocol.
 */
#ifndef RP_MSGSTORE_H
#define RP_MSGSTORE_H

#include "hmap.h"
#include "seqidx.h"

enum {
    RP_MS_DELIVER = 1 << 0,   /* not yet handed to the application */
    RP_MS_GOSSIP  = 1 << 1,   /* in the gossip (repair) buffer */
    RP_MS_SEND    = 1 << 2,   /* sender: not yet acknowledged by a logger */
    RP_MS_SRB     = 1 << 3,   /* sender: still in the FIFO-SRB window */
    RP_MS_LOG     = 1 << 4,   /* logger: in the in-memory cache */
    RP_MS_APP     = 1 << 5,   /* pinned by the application (conflation view) */
    RP_MS_QUEUE   = 1 << 6,   /* in a FIFO / FIFO-SRB delivery queue */
};

typedef struct {
    uint64_t seq;
    uint64_t label;
    int64_t  t;          /* caller's timestamp (ns): arrival or send time */
    uint64_t mpos;       /* monotonic byte position of the payload */
    uint32_t len;
    uint32_t sender;     /* caller's sender slot */
    uint32_t holds;
    uint32_t age;        /* caller's round number at insertion */
} rp_msent_t;

typedef struct {
    uint8_t *arena;
    uint64_t acap;               /* arena bytes */
    uint64_t bhead, btail;       /* monotonic byte positions */
    rp_msent_t *ent;
    uint64_t emask;              /* entry ring size - 1 */
    uint64_t head, tail;         /* tickets: [tail, head) are stored */
    uint64_t gc_cursor;          /* tickets below it have no GOSSIP hold */
    uint64_t deliver_cursor;     /* tickets below it have no DELIVER hold */
    uint64_t gossip_bytes;       /* payload bytes held by RP_MS_GOSSIP */
    uint64_t gossip_count;
    /* (sender, seq) -> ticket: one direct-mapped index per sender; stale
     * slots are recognised by checking the entry, so frees need no index
     * work. */
    rp_hmap_t senders;           /* sender -> position in ix */
    rp_seqidx_t *ix;
    struct rp_msix_ctx *ixctx;
    uint32_t nix, ixcap;
    uint32_t last_sender, last_pos;
    uint64_t n_put, n_full, n_evicted, n_freed;
} rp_mstore_t;

/* prefault: touch the arena and the entry ring now (csrc/bigmem.h). */
int  rp_mstore_init(rp_mstore_t *s, uint64_t arena_bytes, uint64_t max_entries, int prefault);
void rp_mstore_free(rp_mstore_t *s);

/* Store a copy of payload.  Returns the ticket (>= 0) or RP_EFULL.  May evict
 * old entries whose only holds are in `evictable`. */
int64_t rp_mstore_put(rp_mstore_t *s, uint32_t sender, uint64_t seq, uint64_t label,
                      int64_t t, uint32_t age, uint32_t holds, uint32_t evictable,
                      const uint8_t *payload, uint32_t len);

RP_INLINE int rp_mstore_valid(const rp_mstore_t *s, uint64_t ticket) {
    return ticket >= s->tail && ticket < s->head;
}
RP_INLINE rp_msent_t *rp_mstore_entry(const rp_mstore_t *s, uint64_t ticket) {
    return &s->ent[ticket & s->emask];
}
RP_INLINE uint8_t *rp_mstore_data(const rp_mstore_t *s, const rp_msent_t *e) {
    return s->arena + (e->mpos % s->acap);
}

/* Ticket of (sender, seq) if stored, else -1. */
int64_t rp_mstore_find(const rp_mstore_t *s, uint32_t sender, uint64_t seq);

/* The sender slot was retired (node.h, rp_node_take_retired): each of its
 * entries loses every hold but RP_MS_APP (the application's view stays
 * readable) and is renamed `gone`, and its index is emptied, so nothing of
 * it is delivered, served or found under the slot when the slot names
 * another stream.  Costs the sender's index size, not the store's. */
void rp_mstore_forget_sender(rp_mstore_t *s, uint32_t sender, uint32_t gone);

/* Drop holds from an entry; frees space once the oldest entries are idle. */
void rp_mstore_release(rp_mstore_t *s, uint64_t ticket, uint32_t holds);

/* Gossip-buffer GC: drop the GOSSIP hold from every entry with age < min_age,
 * then keep dropping the oldest until gossip bytes <= max_bytes (0 = no
 * byte bound).  Returns how many entries left the gossip buffer.  Ages must
 * not decrease along the ring (callers insert with the current round): the
 * walk stops at the first entry young enough. */
uint64_t rp_mstore_gc(rp_mstore_t *s, uint32_t min_age, uint64_t max_bytes);

/* Walk the delivery cursor: write up to max tickets that still hold
 * RP_MS_DELIVER, in arrival order, and clear that hold.  Their payloads
 * stay readable until the next call that can free space (release, gc, or a
 * put that has to evict). */
size_t rp_mstore_take_deliveries(rp_mstore_t *s, uint64_t *tickets, size_t max);

RP_INLINE uint64_t rp_mstore_bytes_used(const rp_mstore_t *s) { return s->bhead - s->btail; }
RP_INLINE uint64_t rp_mstore_count(const rp_mstore_t *s) { return s->head - s->tail; }

#endif
