/* Reassembly of messages larger than a datagram (docs/api.md "Large
 * messages", docs/wire-format.md 4.1.1).
 *
 * A large message travels as `count` ordinary sequence-numbered messages of
 * its sender (seqs first .. first + count - 1), each with an extension
 * header (wire.h, rp_msgext_t).  Gap detection, repair, logging and serving
 * see only those fragments; this table sees the payload bytes of the
 * fragments that arrived, copied straight into one buffer per message, and
 * says when a message is whole.  No allocation per fragment: one buffer per
 * partial message, laid out as the message's stored form (extension header,
 * then the payload) so the whole message is stored with one copy.
 *
 * Bounded: the bytes of partial messages (max_bytes) and the number of
 * partials (RP_FRAG_MAX_PARTS).  At the bound a new message waits (its
 * fragment is not taken: the caller asks for it again later) unless the
 * oldest partial made no progress for RP_FRAG_STALE_NS: that one is dropped
 * to make room (a sender that never completes its messages cannot hold the
 * room for ever, and one that is merely slow loses nothing).
 * Every drop is counted by reason; fragments of a dropped message that
 * arrive later are recognised (a ring of recent drops) and not reassembled.
 */
#ifndef RP_FRAG_H
#define RP_FRAG_H

#include "wire.h"

#define RP_FRAG_MAX_PARTS 4096
#define RP_FRAG_TOMBS     256
#define RP_FRAG_SPARES    32
#define RP_FRAG_SPARE_BYTES (64ull << 20)   /* at most this much kept in spare buffers */
#define RP_FRAG_STALE_NS  (5 * 1000000000LL)   /* a partial without progress this long may be dropped */

/* Why a partial message was dropped (rp_frag_t.dropped[]). */
enum {
    RP_FRAG_D_BOUND = 0,    /* at the bound, the oldest partial, stale, dropped to make room */
    RP_FRAG_D_DEAD,         /* its sender's incarnation died */
    RP_FRAG_D_LOST,         /* a fragment was declared lost (GAPNOTE) or given up */
    RP_FRAG_D_BAD,          /* a fragment disagreed with the others (count, total, stream, label) */
    RP_FRAG_D__COUNT
};
extern const char *const rp_frag_drop_names[RP_FRAG_D__COUNT];

/* Result of rp_frag_add. */
enum {
    RP_FRAG_PARTIAL = 0,    /* kept; the message is not whole yet */
    RP_FRAG_WHOLE = 1,      /* the message is whole: *out, store it, then rp_frag_done */
    RP_FRAG_IGNORED = 2,    /* fragment of a message dropped earlier */
    RP_FRAG_DROPPED = 3,    /* this fragment's message was dropped now (BAD, or no room) */
    RP_FRAG_FULL = 4        /* the bound is reached (partials still progressing, or whole
                               messages waiting for the application): not taken, the
                               caller asks for it again later */
};

typedef struct rp_fragpart {
    uint32_t slot;          /* sender (the caller's peer slot) */
    uint32_t count, got;    /* fragments, fragments arrived */
    uint64_t first;         /* seq of fragment 0 */
    uint64_t born;          /* creation order (for dropping the oldest) */
    int64_t t;              /* arrival of the first fragment that came */
    int64_t t_last;         /* arrival of the latest fragment */
    rp_msgext_t x;          /* the message: label, stream, count, total (index 0) */
    uint8_t *buf;           /* RP_EXT_HDR + total bytes: the message's stored form */
    size_t cap;             /* bytes allocated at buf */
    uint64_t *bits;         /* fragments arrived */
    struct rp_fragpart *next;   /* ready list */
    uint64_t at;                /* ready: the caller's position in its arrival order (store ticket) */
} rp_fragpart_t;

typedef struct {
    rp_fragpart_t **v;
    uint32_t n, cap;
    uint64_t bytes, max_bytes;  /* payload bytes of partials and ready messages, and their bound */
    rp_fragpart_t *rhead, *rtail;  /* whole messages waiting for the application, oldest first */
    uint64_t nready;
    uint64_t born;
    uint64_t tomb[RP_FRAG_TOMBS][2];  /* (slot, first) of recent drops */
    uint32_t ntomb;
    uint64_t whole, fragments;  /* messages reassembled, fragments taken */
    /* buffers of finished messages kept for the next ones: a fresh 1 MB
     * malloc is a fresh mmap, whose page faults cost more than the copy.
     * As many as a stream had in use at once (whole messages waiting for
     * the application included: four were too few, the loop thread then
     * spent a sixth of its time in page faults and munmap), up to
     * RP_FRAG_SPARE_BYTES. */
    uint8_t *spare[RP_FRAG_SPARES];
    size_t spare_cap[RP_FRAG_SPARES];
    uint64_t spare_bytes;
    uint64_t buf_fresh;         /* buffers allocated (not a spare) */
    uint64_t dropped[RP_FRAG_D__COUNT];
} rp_frag_t;

void rp_frag_init(rp_frag_t *f, uint64_t max_bytes);
void rp_frag_free(rp_frag_t *f);

/* Take fragment x (seq of slot; data = its payload bytes, already checked
 * against x by the decoder).  RP_FRAG_WHOLE: *out is the whole message
 * (out->buf holds RP_EXT_HDR + x.total bytes); the caller stores it and calls
 * rp_frag_done, or rp_frag_undo to give the fragment back (no room yet). */
int rp_frag_add(rp_frag_t *f, uint32_t slot, uint64_t seq, const rp_msgext_t *x,
                const uint8_t *data, uint32_t len, int64_t now, rp_fragpart_t **out);
void rp_frag_done(rp_frag_t *f, rp_fragpart_t *m);
/* Or keep the whole message m here for the application (unordered
 * delivery: no second copy into the store); rp_frag_peek / rp_frag_pop
 * hand them out oldest first. */
void rp_frag_ready(rp_frag_t *f, rp_fragpart_t *m);
RP_INLINE rp_fragpart_t *rp_frag_peek(const rp_frag_t *f) { return f->rhead; }
void rp_frag_pop(rp_frag_t *f);
void rp_frag_undo(rp_frag_t *f, rp_fragpart_t *m, uint32_t index);

/* Drop up to max partials of slot (all, or those lacking a fragment in
 * [lo, hi]), counted under reason; their first seqs go to firsts so FIFO
 * delivery can move past them.  Returns how many were dropped (max: call
 * again for more). */
uint32_t rp_frag_drop(rp_frag_t *f, uint32_t slot, int all, uint64_t lo, uint64_t hi, int reason,
                      uint64_t *firsts, uint32_t max);

/* The slot was retired (node.h): its partials and its whole messages not
 * yet taken are freed (not counted as drops: the stream is gone), and its
 * drop records are cleared, so the stream that takes the slot next starts
 * with nothing of the old one. */
void rp_frag_forget(rp_frag_t *f, uint32_t slot);

/* Count a whole message dropped elsewhere (e.g. purged from a FIFO queue). */
RP_INLINE void rp_frag_count_drop(rp_frag_t *f, int reason) { f->dropped[reason]++; }

#endif
