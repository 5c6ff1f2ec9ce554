/* Per-sender sequence tracker: gap detection for a receiver-reliable protocol.
 *
 * State is the thesis's lastseen[j] plus the missing set (§3.3), with the
 * missing set kept as sorted intervals.  `next` is lastseen + 1, so an empty
 * tracker has next == base and nothing missing.
 *
 * Property 3.5 holds by construction: every seq in [base, next) is either
 * accepted (NEW/FILL was returned once) or in `missing`.
 */
#ifndef RP_SEQTRACK_H
#define RP_SEQTRACK_H

#include "iset.h"

/* Sequence numbers live in [0, RP_SEQ_LIMIT); anything above is rejected as
 * malformed so that interval arithmetic can never overflow. */
#define RP_SEQ_LIMIT ((uint64_t)1 << 62)

enum {
    RP_ACC_DUP   = 0,  /* seen before (or below base): drop */
    RP_ACC_NEW   = 1,  /* first time, at or above next */
    RP_ACC_FILL  = 2,  /* first time, was missing: a repair filled a gap */
    RP_ACC_FAR   = 3,  /* more than max_gap ahead of next: rejected */
    RP_ACC_NOMEM = 4,  /* gap list bound hit: treated as not received */
};

typedef struct {
    uint64_t base;     /* first seq this tracker is responsible for */
    uint64_t next;     /* lastseen + 1 */
    uint64_t max_gap;  /* largest jump past next accepted in one step */
    rp_iset_t missing;
    /* counters */
    uint64_t n_new, n_fill, n_dup, n_far, n_nomem, n_gaps;
} rp_seqtrack_t;

int  rp_seqtrack_init(rp_seqtrack_t *t, uint64_t base, uint64_t max_gap, uint32_t max_intervals);
void rp_seqtrack_free(rp_seqtrack_t *t);

/* Accept one sequence number.  On RP_ACC_NEW with a jump, [*gap_lo, *gap_hi]
 * is the newly missing range and the function returns RP_ACC_NEW; *gap_lo >
 * *gap_hi when there was no gap.  gap_lo/gap_hi may be NULL. */
int rp_seqtrack_accept(rp_seqtrack_t *t, uint64_t seq, uint64_t *gap_lo, uint64_t *gap_hi);

/* A heartbeat saying the sender's latest seq is `seq`: everything in
 * [next, seq] becomes missing.  Returns the number newly missing (0 if the
 * heartbeat is old), or a negative: -RP_ACC_FAR when more than max_gap
 * ahead of next (the same bound as accept), RP_ENOMEM when the gap-list
 * bound is hit or allocation fails (never RP_EFULL, which equals -RP_ACC_FAR);
 * on a negative result the tracker is unchanged. */
int64_t rp_seqtrack_heartbeat(rp_seqtrack_t *t, uint64_t seq, uint64_t *gap_lo, uint64_t *gap_hi);

/* Batch accept: out[i] receives the RP_ACC_* code for seqs[i].  Returns the
 * number of seqs that were NEW or FILL.  No allocation in the in-order case. */
size_t rp_seqtrack_accept_batch(rp_seqtrack_t *t, const uint64_t *seqs, size_t n, uint8_t *out);

/* Stop waiting for [lo, hi]: removes it from missing without delivery
 * (used for ids announced lost or inferred purged).  Returns count removed. */
int64_t rp_seqtrack_forget(rp_seqtrack_t *t, uint64_t lo, uint64_t hi);

/* 1 if seq < next and not missing (i.e. it was received), else 0. */
int rp_seqtrack_received(const rp_seqtrack_t *t, uint64_t seq);

/* Contiguous prefix: the smallest seq not yet received (GSGC's R[j]). */
RP_INLINE uint64_t rp_seqtrack_contiguous(const rp_seqtrack_t *t) {
    return t->missing.n ? t->missing.v[0].lo : t->next;
}

#endif
