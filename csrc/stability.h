/* GSGC stability arrays (Guo et al., Fig. 2) and gossip failure detection
 * (Fig. 3), indexed by local sender index j (0..m) and member index i (0..n).
 *
 *   R  sequence array: R[j] = smallest seq of sender j not yet received here
 *   M  min-so-far array for the current round
 *   W  whom-I've-heard-from bitmap for the current round
 *   S  stability array: every seq < S[j] has reached every live member
 *   r  round number
 *   L  live array: steps since each member was last heard from
 *   alive  bitmap of members whose bits a round waits for
 *
 * Merge follows Fig. 2 with two corrections, both documented in
 * docs/reproduction.md and exercised by tests:
 *  1. Adopting a message from a later round also folds in our own R and
 *     sets our own bit.  Fig. 2 adopts (M, W) as is; since only member i ever
 *     sets bit i, a round adopted that way can never complete.
 *  2. S never decreases (S := max(S, M) when a round completes), so that a
 *     released message is never "un-released" when membership changes.
 * A message from more than one round ahead (Fig. 2: "should never happen")
 * is treated like one from the next round; it can happen after a partition.
 */
#ifndef RP_STABILITY_H
#define RP_STABILITY_H

#include "rp_common.h"

enum {
    RP_STAB_REDUNDANT = 1 << 0,  /* same round, carried nothing new */
    RP_STAB_ADOPTED   = 1 << 1,  /* same round, strictly more members: adopted */
    RP_STAB_MERGED    = 1 << 2,  /* same round, normal min/max merge */
    RP_STAB_NEXT      = 1 << 3,  /* from the next round: adopted */
    RP_STAB_FUTURE    = 1 << 4,  /* from a later round: adopted (resync) */
    RP_STAB_OLD       = 1 << 5,  /* from an earlier round: ignored */
    RP_STAB_COMPLETED = 1 << 6,  /* a round completed here: S grew */
};

typedef struct {
    uint32_t m, n;          /* senders, members in use */
    uint32_t mcap, ncap;    /* allocated */
    uint32_t self;          /* my member index */
    uint64_t round;
    uint64_t *R, *M, *S;    /* mcap each */
    uint64_t *W, *alive;    /* ncap/64 words each */
    uint32_t *L;            /* ncap */
    uint64_t n_rounds;      /* rounds completed here */
} rp_stab_t;

int  rp_stab_init(rp_stab_t *s, uint32_t m, uint32_t n, uint32_t self);
void rp_stab_free(rp_stab_t *s);

/* Grow to m senders / n members; new senders get R = M = S = 0, new members
 * are alive with W bit 0 (the round now also waits for them, §3.3). */
int  rp_stab_resize(rp_stab_t *s, uint32_t m, uint32_t n);

/* R only moves forward. */
RP_INLINE void rp_stab_set_R(rp_stab_t *s, uint32_t j, uint64_t v) {
    if (j < s->m && v > s->R[j])
        s->R[j] = v;
}

/* Start a new round: M := R, W := {self}. */
void rp_stab_start_round(rp_stab_t *s);

/* Merge a gossip (M, W, S, r) with dimensions m_in <= m senders and
 * n_in <= n members (the caller maps remote ids to local indices and
 * resizes first).  Entries the sender did not know count as 0 in M (nothing
 * received, conservative), 0 in W and 0 in S.  Returns RP_STAB_* flags. */
int  rp_stab_merge(rp_stab_t *s, const uint64_t *M, const uint64_t *W, const uint64_t *S,
                   uint64_t r, uint32_t m_in, uint32_t n_in);

/* A multicast stability array for round r (the sender has completed r-1). */
int  rp_stab_merge_S(rp_stab_t *s, const uint64_t *S, uint32_t m_in, uint64_t r);

/* 1 if W covers every alive member. */
int  rp_stab_complete(const rp_stab_t *s);

/* Complete the round if W already covers the alive members (after a member
 * was declared failed).  Returns RP_STAB_COMPLETED or 0. */
int  rp_stab_check(rp_stab_t *s);

/* Failure detection (Fig. 3).  step(): L[j]++ for j != self.  heard(j):
 * L[j] = 0.  merge_L: element-wise min.  failed(K): clear alive for every
 * member with L >= K, return how many were newly declared failed. */
void rp_stab_fd_step(rp_stab_t *s);
RP_INLINE void rp_stab_fd_heard(rp_stab_t *s, uint32_t i) {
    if (i < s->n)
        s->L[i] = 0;
}
void rp_stab_fd_merge(rp_stab_t *s, const uint32_t *L, uint32_t n_in);
uint32_t rp_stab_fd_failed(rp_stab_t *s, uint32_t K);

/* Membership of the computation. */
void rp_stab_set_alive(rp_stab_t *s, uint32_t i, int alive);
RP_INLINE int rp_stab_is_alive(const rp_stab_t *s, uint32_t i) {
    return i < s->n && ((s->alive[i >> 6] >> (i & 63)) & 1);
}
RP_INLINE int rp_stab_heard(const rp_stab_t *s, uint32_t i) {
    return i < s->n && ((s->W[i >> 6] >> (i & 63)) & 1);
}

#endif
