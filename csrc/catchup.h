/* A logger's catch-up: serving the ids a requester lacks from the log, paced.
 *
 * A member far behind (back from an outage, restarted) asks a logger for
 * hundreds of thousands of ids.  Served at once that is a burst no socket
 * holds, and it keeps the logger's loop from receiving and logging the
 * live stream meanwhile; asked again before the answers arrived, every id
 * is served twice.  So a request to a logger only adds ids to its
 * requester's queue -- ids already queued are not queued again -- and
 * rp_catchup_drain streams each queue from the log in seq order (log
 * cursors: consecutive records cost one pread per read-ahead), at most
 * `rate` messages a second per requester (a token bucket each) and at most
 * `per_call` messages per call, a little every loop iteration rather than
 * one giant burst under the node lock.  While the outbox holds more than
 * RP_CU_OUT_LIMIT bytes the socket is behind: nothing more is queued there.
 *
 * Memory is bounded: at most RP_CU_MAX_REQ requesters, RP_CU_MAX_STREAMS
 * streams each, RP_CU_MAX_IVALS intervals per queue.  What does not fit is
 * refused and counted; the requester asks again later.
 */
#ifndef RP_CATCHUP_H
#define RP_CATCHUP_H

#include "node.h"

#define RP_CU_MAX_REQ 64
#define RP_CU_MAX_STREAMS 64
#define RP_CU_MAX_IVALS 1024
#define RP_CU_OUT_LIMIT (4u << 20)

/* One stream's ids queued for one requester. */
typedef struct {
    uint32_t sender, inc;
    rp_iset_t ids;
} rp_cuq_t;

typedef struct {
    uint64_t dest;
    rp_tbucket_t tb;
    rp_cuq_t *q;
    uint32_t nq, qcap;
    uint32_t turn;              /* the stream that drains next */
    int64_t last;               /* last request (ns): an idle entry may be reused */
} rp_cureq_t;

struct rp_catchup {
    rp_cureq_t *r;
    uint32_t nr, rcap;
    uint32_t turn;              /* the requester that drains next */
    double rate, burst;         /* per requester */
    uint32_t per_call;
    uint64_t queued;            /* ids in all queues */
};
typedef struct rp_catchup rp_catchup_t;

/* Serve catch-up for node n: rate messages/s per requester (burst: tokens
 * saved up), at most per_call messages per rp_catchup_drain.  Replaces any
 * earlier settings; RP_OK or RP_ENOMEM. */
int rp_catchup_enable(rp_node_t *n, double rate, double burst, uint32_t per_call);
void rp_catchup_free(rp_node_t *n);

/* Queue ids (the intervals of set) of (sender, inc) for dest.  Returns the
 * ids newly queued; ids already queued for dest are counted as asked again
 * (counter catchup_again), ids that do not fit as refused. */
int64_t rp_catchup_add(rp_node_t *n, uint64_t dest, uint32_t sender, uint32_t inc, const rp_iset_t *set,
                       int64_t now);

/* Serve from the queues: requesters in turn, each within its tokens, at
 * most per_call messages in all.  Returns the REPAIRs queued in the outbox. */
size_t rp_catchup_drain(rp_node_t *n, int64_t now);

/* Ids waiting in all queues (0: nothing to drain). */
uint64_t rp_catchup_pending(const rp_node_t *n);

#endif
