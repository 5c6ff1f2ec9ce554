/* FIFO Semantically Reliable Broadcast windows (Pereira et al., §2.3-§2.5).
 *
 * Messages carry an optional 64-bit label; m is obsoleted by m' when both
 * come from the same sender with the same label and m was sent first.
 * Unlabelled messages are never obsolete.  Label RP_SRB_NOLABEL is reserved.
 *
 * Sender side (rp_srbw_t): a window of w sequence numbers.  The sender
 * never sends seq s + w while s is still outstanding; s stops being
 * outstanding when it is stable (acknowledged by every member) or purged.
 * A message is purged (TP5) only once the message that obsoletes it is
 * *safe*: received by more than f members.  Purging frees its window slot.
 *
 * Receiver side (rp_srbq_t): the per-sender FIFO delivery queue.  Its
 * deliverable prefix [head, ready) -- every seq there queued or purged, the
 * paper's Q_i -- is where TP4 applies: a queued message is purged when a
 * newer one with its label enters the prefix.  A message queued beyond a gap
 * purges nothing yet: if the gap never fills (it reached nobody and the
 * sender crashed) it is never delivered, and an older value it had purged
 * would be lost although later messages were delivered (FIFO Completeness).
 * Seeing seq t proves every seq <= t - w was stable or purged, so any of
 * those still missing here were purged (§2.5) and delivery moves past them.
 *
 * Both sides store opaque 64-bit handles (e.g. message-store tickets); they
 * hand back the handles they release so the caller can free the payloads.
 */
#ifndef RP_SRB_H
#define RP_SRB_H

#include "hmap.h"
#include "iset.h"

#define RP_SRB_NOLABEL UINT64_MAX

/* ---- receiver queue ---------------------------------------------------- */

/* Sparse: what is held is kept as intervals of seqs (settled = queued or
 * purged; queued) and a hash map of the queued messages, so memory and
 * work follow what the queue holds, never the span of sequence numbers a
 * peer named (a DATA far ahead, a purge notice over 2^40 ids). */

enum {
    RP_SQ_R_QUEUED   = 1,   /* queued for delivery */
    RP_SQ_R_OLD      = 3    /* below head or already there: ignored */
};

typedef struct {
    uint64_t seq;           /* UINT64_MAX: free */
    uint64_t handle, label;
} rp_srbq_near_t;

typedef struct {
    uint64_t head;          /* next seq to deliver */
    uint64_t ready;         /* every seq in [head, ready) is queued or purged */
    uint64_t tail;          /* one past the highest seq known */
    uint64_t w;             /* sender window; 0 disables purge inference */
    uint64_t max_held;      /* bound on queued messages and on settled intervals */
    rp_iset_t settled;      /* seqs >= head queued or purged (purged = settled - queued) */
    rp_iset_t queued;       /* seqs >= head queued */
    rp_srbq_near_t *near;   /* queued messages by seq & near_mask (the common, dense case) */
    uint64_t near_mask;
    rp_hmap_t msgs;         /* the others: (seq, 0) -> handle; (seq, 1) -> label if labelled */
    rp_hmap_t labels;       /* label -> newest queued seq in [head, ready) with that label */
    uint64_t *purged;       /* (seq, handle) pairs purged by TP4, not yet taken */
    size_t npurged, purgedcap;
    uint64_t n_queued, n_delivered, n_purged_queue, n_purged_inferred, n_purged_marked;
} rp_srbq_t;

/* cap: a size hint; max_cap: the bound on messages held (and on intervals of
 * settled seqs), 0 for the default 2^26.  RP_EINVAL if cap > max_cap. */
int  rp_srbq_init(rp_srbq_t *q, uint64_t base, uint64_t w, uint64_t cap, uint64_t max_cap);
void rp_srbq_free(rp_srbq_t *q);

/* Insert a received message.  Returns RP_SQ_R_QUEUED, RP_SQ_R_OLD (caller
 * frees `handle`), or RP_EFULL (max_held reached) / RP_ENOMEM.  Messages
 * this (or infer / mark_purged) lets into the prefix may purge older ones:
 * take their handles with rp_srbq_take_purged. */
int rp_srbq_insert(rp_srbq_t *q, uint64_t seq, uint64_t label, uint64_t handle);

/* Handles of queued messages purged by TP4 since the last call: writes up
 * to max (handle, seq) pairs; call again while it returns max. */
size_t rp_srbq_take_purged(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t max);

/* The sender is known to have sent seq t.  Every seq <= t - w still empty
 * here is purged.  Returns how many were inferred; [*lo, *hi] bounds them
 * (the caller stops asking for repairs there). */
int64_t rp_srbq_infer(rp_srbq_t *q, uint64_t t, uint64_t *lo, uint64_t *hi);

/* An explicit purge notice for seq (from a peer's "purged" answer).
 * Returns 1 if an empty seq became purged, 0 otherwise. */
int rp_srbq_mark_purged(rp_srbq_t *q, uint64_t seq);

/* Every empty seq in [lo, hi] will never come (lost, purged): one interval,
 * whatever its length.  Returns how many became purged (0 on no room). */
uint64_t rp_srbq_mark_purged_range(rp_srbq_t *q, uint64_t lo, uint64_t hi);

/* Deliver in FIFO order: writes up to max (handle, seq) pairs, stopping at
 * the first seq not yet received.  Purged seqs are skipped. */
size_t rp_srbq_pop(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t max);

/* 1 and the handle of the message rp_srbq_pop would deliver next, or 0. */
int rp_srbq_peek(const rp_srbq_t *q, uint64_t *handle);

RP_INLINE uint64_t rp_srbq_pending(const rp_srbq_t *q) { return q->tail - q->head; }

/* ---- sender window ----------------------------------------------------- */

enum { RP_SW_FREE = 0, RP_SW_OUT = 1, RP_SW_OBSOLETE = 2, RP_SW_PURGED = 3, RP_SW_STABLE = 4 };

typedef struct {
    uint64_t label;
    uint64_t handle;
    uint64_t sup;           /* OBSOLETE/PURGED: seq of the message that obsoleted it */
    uint64_t prev;          /* seq of the previous message with this label, or UINT64_MAX */
    uint8_t state;
} rp_srbw_slot_t;

typedef struct {
    uint64_t low;           /* lowest seq still outstanding (or next) */
    uint64_t next;          /* next seq to send */
    uint64_t w;
    uint64_t safe;          /* every seq < safe is safe (received by > f) */
    uint64_t stable;        /* every seq < stable is stable */
    uint64_t cap;           /* ring size: power of two >= w */
    rp_srbw_slot_t *ring;
    rp_hmap_t labels;       /* label -> newest seq in the window */
    uint64_t n_sent, n_purged, n_stable;
} rp_srbw_t;

int  rp_srbw_init(rp_srbw_t *s, uint64_t base, uint64_t w);
void rp_srbw_free(rp_srbw_t *s);

RP_INLINE int rp_srbw_can_send(const rp_srbw_t *s) { return s->next - s->low < s->w; }

/* Record that seq == next was sent.  RP_EFULL if the window is closed. */
int rp_srbw_sent(rp_srbw_t *s, uint64_t label, uint64_t handle);

/* Every seq < upto is now safe.  Purges the messages these obsolete (TP5)
 * and writes (seq, superseded-by, handle) triples for them, at most max;
 * call again if it returns max.  Advances the window. */
size_t rp_srbw_set_safe(rp_srbw_t *s, uint64_t upto, uint64_t *seqs, uint64_t *sup,
                        uint64_t *handles, size_t max);

/* Every seq < upto is now stable.  Writes the handles of messages leaving
 * the window as stable (purged ones were handed back by set_safe). */
size_t rp_srbw_set_stable(rp_srbw_t *s, uint64_t upto, uint64_t *handles, size_t max);

/* If seq was purged and is still remembered, store what obsoleted it and
 * return 1; else 0. */
int rp_srbw_purged_by(const rp_srbw_t *s, uint64_t seq, uint64_t *sup);

#endif
