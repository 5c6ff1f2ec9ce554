/* Flow acknowledgment: the send window's fast feedback, entirely in the
 * data plane (no Python, no timer).
 *
 * Receiver side: after each receive batch and after each take by the
 * application, for every sender in the member table whose stream moved, a
 * FLOWACK (wire.h) goes to that sender's registered address -- "of your
 * stream every seq < f is here" -- once `every` new messages were taken, or
 * at once when nothing waits any more (the batch drained the socket, the
 * application emptied its queue: the sender should know now).  f is what
 * the application has taken: the received frontier less the delivery queue
 * (the whole path from publish to the application is what the window
 * bounds, not only the network's part).
 *
 * Sender side: a FLOWACK counts only from a member of the table, from the
 * address and incarnation registered for it, about our own current stream,
 * and never beyond what we sent (anything else is counted and dropped).  The
 * window's frontier is the least frontier of the counting members; a member
 * behind us and silent for `stale_ns` stops counting (a crashed or stopped
 * receiver must not stop the sender: the window is for latency, the release
 * strategy keeps what reliability needs) until it acknowledges again.
 *
 * The control plane (Python) sets the table from the membership
 * (rp_flowack_set_members), nothing else.  All calls with the node lock held. */
#ifndef RP_FLOWACK_H
#define RP_FLOWACK_H

#include "node.h"

#define RP_FLOWACK_MAX_MEMBERS 4096

typedef struct {
    uint32_t id, inc;
    uint64_t addr;        /* its unicast address (udpio packing) */
    uint8_t counts;       /* its acknowledgments hold our window */
    /* sender side: what it acknowledged of our stream */
    uint64_t front;       /* every own seq < front is at this member */
    int64_t heard;        /* when front last moved (or it was found caught up) */
    int64_t behind_since; /* when it was last found behind with nothing newer (0: caught up) */
    /* receiver side: what we acknowledged of its stream */
    uint64_t sent;
    int64_t sent_t;
} rp_flowmember_t;

typedef struct rp_flowack {
    rp_flowmember_t *m;   /* sorted by id */
    uint32_t n, cap;
    uint64_t limit;       /* own messages beyond the least frontier (0: the window is off) */
    uint32_t every;       /* receiver: acknowledge after this many new messages */
    int64_t resend_ns;    /* receiver: repeat an unchanged frontier this often while traffic comes */
    int64_t stale_ns;     /* sender: a behind member silent this long stops counting */
    uint64_t front;       /* the least frontier of the counting members (valid when active) */
    int active;           /* some member counts (the frontier binds) */
    int moved;            /* acknowledgments moved since the last batch end */
    uint64_t n_tx, n_rx, n_rejected, n_stale;
    uint64_t n_batches;   /* receive batches seen: a data-plane loop drives this node */
    /* sender side: time between acknowledgments that moved the frontier,
     * bucket b: [2^b, 2^(b+1)) microseconds (0: < 2 us, 15: >= 32 ms) */
    int64_t last_move;
    uint64_t gap_hist[16];
    /* sender side, the byte bound (rp_flowack_set_bytes): a window of 4,096
     * seqs is 256 KiB of 64 B messages but 4-6 MiB of 1 KB ones or of
     * fragments -- 10-15 ms of queue at this machine's rate, not a few */
    uint64_t limit_bytes;  /* own payload bytes beyond the least frontier (0: no byte bound) */
    uint64_t *cum;         /* cum[s & mask]: own payload bytes published through seq s */
    uint64_t mask;         /* ring size - 1 (a power of 2 above limit) */
    uint64_t pub_bytes;    /* own payload bytes published since cum_from */
    uint64_t cum_from;     /* the first own seq the ring knows */
} rp_flowack_t;

int  rp_flowack_init(rp_flowack_t *f, uint64_t limit, uint32_t every, int64_t stale_ns, int64_t resend_ns);
void rp_flowack_free(rp_flowack_t *f);

/* Replace the member table (ids need not be sorted; duplicates: the last
 * wins).  A member already known with the same incarnation and address keeps
 * its frontiers.  RP_EINVAL beyond RP_FLOWACK_MAX_MEMBERS. */
int rp_flowack_set_members(rp_flowack_t *f, const uint32_t *ids, const uint32_t *incs,
                           const uint64_t *addrs, const uint8_t *counts, uint32_t n, int64_t now);

/* Sender side: one FLOWACK message of a datagram from source (src: its address). */
void rp_flowack_rx(rp_node_t *n, const rp_msgview_t *m, const rp_dghdr_t *h, uint64_t src,
                   int64_t now);

/* Recompute the window's frontier (staleness is judged at `now`). */
void rp_flowack_update(rp_flowack_t *f, const rp_node_t *n, int64_t now);

/* Receiver side, after a receive batch: queue the FLOWACKs that are due
 * (drained: the batch emptied the socket).  Returns RP_FLOWACK_MOVED if
 * acknowledgments for our own stream moved since the last call (the window
 * may reopen), | RP_FLOWACK_QUEUED if FLOWACKs were queued (send them now:
 * the sender may be waiting for them). */
#define RP_FLOWACK_MOVED  1
#define RP_FLOWACK_QUEUED 2
int rp_flowack_after_batch(rp_node_t *n, int drained, int64_t now);

/* Receiver side, after the application took deliveries: queue the FLOWACKs
 * now due (the frontier acknowledged is what the application has taken, so
 * it moves here; the queue emptied counts as drained).  Returns how many
 * were queued. */
int rp_flowack_after_take(rp_node_t *n, int64_t now);

/* Sender side: payload bytes of own seqs beyond the frontier (UINT64_MAX
 * when more seqs are out than the ring holds: a message larger than the
 * window went out whole, and the window is full anyway). */
RP_INLINE uint64_t rp_flowack_bytes_out(const rp_flowack_t *f, const rp_node_t *n) {
    uint64_t inflight = n->next_seq > f->front ? n->next_seq - f->front : 0;
    if (!inflight)
        return 0;
    if (inflight > f->mask)
        return UINT64_MAX;
    if (f->front <= f->cum_from)
        return f->pub_bytes;
    return f->pub_bytes - f->cum[(f->front - 1) & f->mask];
}

/* Bytes the byte bound still lets out (UINT64_MAX: no byte bound). */
RP_INLINE uint64_t rp_flowack_room_bytes(const rp_flowack_t *f, const rp_node_t *n) {
    if (!f || !f->limit || !f->limit_bytes || !f->cum || !f->active)
        return UINT64_MAX;
    uint64_t b = rp_flowack_bytes_out(f, n);
    return b >= f->limit_bytes ? 0 : f->limit_bytes - b;
}

/* Own messages in flight beyond the window's frontier, and the room left
 * (UINT64_MAX: no flow window); none while the byte bound is reached. */
RP_INLINE uint64_t rp_flowack_room(const rp_flowack_t *f, const rp_node_t *n) {
    if (!f || !f->limit || !f->active)
        return UINT64_MAX;
    uint64_t inflight = n->next_seq > f->front ? n->next_seq - f->front : 0;
    if (inflight >= f->limit || !rp_flowack_room_bytes(f, n))
        return 0;
    return f->limit - inflight;
}

/* How many of a batch's messages (lens) may go now under the byte bound:
 * while the bytes out stay below it (the last may cross it, as one message
 * larger than the window goes once there is room). */
RP_INLINE size_t rp_flowack_fit(const rp_flowack_t *f, const rp_node_t *n, const uint32_t *lens,
                                size_t count) {
    uint64_t room = rp_flowack_room_bytes(f, n);
    if (room == UINT64_MAX)
        return count;
    size_t k = 0;
    uint64_t sum = 0;
    while (k < count && sum < room)
        sum += lens[k++];
    return k;
}

/* Sender side, per own seq published (its payload bytes): the byte bound's
 * account. */
RP_INLINE void rp_flowack_sent(rp_flowack_t *f, uint64_t seq, uint32_t len) {
    if (f && f->cum) {
        f->pub_bytes += len;
        f->cum[seq & f->mask] = f->pub_bytes;
    }
}

/* The byte bound (0: none), after the window's limit in seqs. */
void rp_flowack_set_bytes(rp_flowack_t *f, uint64_t limit_bytes);

/* Its account, a ring of cumulative bytes sized above the seq limit, from
 * next_seq on: made with the member table (what the control plane sets
 * only under a data-plane loop), so the simulator's thousands of nodes and
 * the in-memory network's never pay for one.  Without memory for it the
 * bound is dropped and the seq window holds alone. */
void rp_flowack_arm_bytes(rp_flowack_t *f, const rp_node_t *n);

#endif
