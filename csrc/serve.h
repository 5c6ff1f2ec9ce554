/* Serving repair requests.
 *
 * A request names ids of one stream (sender, inc).  This node answers each
 * id it can: a REPAIR when the message store (or a logger's log) holds it,
 * a PURGED pair when FIFO-SRB purged it as obsolete, and, when asked to, a
 * GcNOTE ("collected here, ask a logger") when it was received here but is
 * held no more.  The repair rate limit (a token per REPAIR, §7.1) and
 * max_scan (ids examined per stream) and RP_SERVE_MAX_SECTIONS bound the work
 * one request causes; a message the outbox refuses (outbox.h: full, or an
 * address that has not proven it receives there) ends the request.
 *
 * Requests travel as MISSING sections (GOSSIP, RTX).  rp_node_serve_missing
 * serves a whole body of them in one call -- walking the sections, decoding
 * the digests, sending the GcNOTEs -- and reports what the control plane
 * still has to act on: per section the stream, the ids asked for, the ids
 * left unanswered and the GcNOTE sent.
 */
#ifndef RP_SERVE_H
#define RP_SERVE_H

#include "node.h"

/* Repair rate limit: rate repairs/s, burst tokens; rate 0 = none. */
void rp_node_set_rate_limit(rp_node_t *n, double rate, double burst);

/* Serve a request for ids [iv] of (sender, inc) to dest.  from_logger marks
 * the REPAIRs.  Ids received here but no longer held go to gc_out (the
 * GcNOTE to send back) unless it is NULL or this node keeps a log.  Ids
 * neither repaired nor answered -- unknown here, or stopped by the rate
 * limit or max_scan -- go to left_out unless it is NULL.  Returns repairs
 * queued. */
size_t rp_node_serve(rp_node_t *n, uint32_t sender, uint32_t inc, const rp_ival_t *iv, size_t niv,
                     uint64_t dest, int from_logger, rp_iset_t *gc_out, rp_iset_t *left_out,
                     int64_t now);

/* How to answer a section (bits). */
enum {
    RP_SERVE_FROM_LOGGER = 1,     /* mark the REPAIRs as a logger's */
    RP_SERVE_GCNOTE = 2,          /* GcNOTE what was received here but is held no more */
    RP_SERVE_GCNOTE_AT_ONCE = 4,  /* send that GcNOTE before serving the next section (as
                                     RTX answers), not after the last section (as GOSSIP) */
};

/* Sections served per request (a body); the rest are not looked at.  With
 * max_scan ids per section this bounds the work of one request. */
#define RP_SERVE_MAX_SECTIONS 64

/* Ids examined for one whole request from an address that has not proven
 * it receives there (addrcheck.h): its credit pays for a few REPAIRs at
 * most, so a flood of such requests costs no scanning (nor log reads). */
#define RP_SERVE_UNVALIDATED_SCAN 256

/* Decoded digests of more intervals than this are skipped, not served. */
#define RP_SERVE_MAX_IVALS (1u << 20)

/* One MISSING section as served; its intervals are in rp_served_t.iv. */
typedef struct {
    uint32_t sender, inc;
    size_t asked, nasked;      /* ids asked for: iv[asked .. asked + nasked) */
    size_t left, nleft;        /* ids neither repaired nor answered */
    size_t gc, ngc;            /* ids answered with a GcNOTE */
    uint64_t gc_ids;           /* how many ids those are */
    uint64_t served;           /* REPAIRs queued */
} rp_served_sec_t;

/* What rp_node_serve_missing served; reused from call to call. */
typedef struct {
    rp_served_sec_t *sec;
    size_t nsec, seccap;
    rp_ival_t *iv;
    size_t niv, ivcap;
} rp_served_t;

void rp_served_init(rp_served_t *s);
void rp_served_free(rp_served_t *s);

/* Serve every MISSING section of body (GOSSIP sections after the fixed
 * part, or an RTX body) to dest; other kinds are skipped, and so is a
 * section whose digest does not decode.  Sections of our own stream are
 * answered as `own` says, others as `peers` says (RP_SERVE_* bits).
 * Returns the sections served, described in out; RP_EINVAL (nothing
 * served) when the sections' framing is malformed or a MISSING section is
 * shorter than its stream; RP_ENOMEM. */
int rp_node_serve_missing(rp_node_t *n, const uint8_t *body, size_t len, uint64_t dest,
                          unsigned peers, unsigned own, int64_t now, rp_served_t *out);

#endif
