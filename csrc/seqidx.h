/* Per-sender index from sequence number to message-store ticket.
 *
 * A direct-mapped table per sender: slot = seq mod capacity, holding
 * (seq, ticket).  A sender's stored messages have nearby, mostly increasing
 * seqs, so consecutive messages land in consecutive slots: no hashing, no
 * cache miss per message (a global hash table cost ~50 ns/message in random
 * accesses).  When a put would overwrite a slot whose message is still
 * stored, the table doubles (up to max_cap); at max_cap the older entry is
 * dropped from the index (the message stays stored but is no longer found,
 * which at worst makes a peer answer GcNOTE a little early).
 */
#ifndef RP_SEQIDX_H
#define RP_SEQIDX_H

#include "rp_common.h"

typedef struct {
    uint64_t seq;         /* UINT64_MAX = empty */
    uint64_t ticket;
} rp_sislot_t;

typedef struct {
    rp_sislot_t *s;
    uint64_t mask;        /* capacity - 1 */
    uint64_t max_cap;
    uint64_t n_dropped;   /* live entries pushed out at max capacity */
} rp_seqidx_t;

/* Is `ticket` still the live entry for `seq`?  Supplied by the owner (the
 * message store), so the index never holds stale answers. */
typedef int (*rp_seqidx_live_fn)(const void *owner, uint64_t ticket, uint64_t seq);

int  rp_seqidx_init(rp_seqidx_t *x, uint64_t cap, uint64_t max_cap);
void rp_seqidx_free(rp_seqidx_t *x);

RP_INLINE int64_t rp_seqidx_get(const rp_seqidx_t *x, uint64_t seq) {
    const rp_sislot_t *sl = &x->s[seq & x->mask];
    return sl->seq == seq ? (int64_t)sl->ticket : -1;
}

/* Index seq -> ticket (replacing any older mapping of seq). */
int rp_seqidx_put(rp_seqidx_t *x, uint64_t seq, uint64_t ticket, rp_seqidx_live_fn live,
                  const void *owner);

/* Forget seq if it still maps to ticket. */
RP_INLINE void rp_seqidx_del(rp_seqidx_t *x, uint64_t seq, uint64_t ticket) {
    rp_sislot_t *sl = &x->s[seq & x->mask];
    if (sl->seq == seq && sl->ticket == ticket)
        sl->seq = UINT64_MAX;
}

#endif
