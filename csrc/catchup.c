#include "catchup.h"

#include <stdlib.h>

int rp_catchup_enable(rp_node_t *n, double rate, double burst, uint32_t per_call) {
    if (!n->cu) {
        n->cu = (rp_catchup_t *)calloc(1, sizeof(rp_catchup_t));
        if (!n->cu)
            return RP_ENOMEM;
    }
    rp_catchup_t *cu = n->cu;
    cu->rate = rate;
    cu->burst = burst > 1 ? burst : 1;
    cu->per_call = per_call ? per_call : 1;
    for (uint32_t i = 0; i < cu->nr; i++)
        rp_tb_set(&cu->r[i].tb, cu->rate, cu->burst);
    return RP_OK;
}

static void req_clear(rp_catchup_t *cu, rp_cureq_t *r) {
    for (uint32_t k = 0; k < r->nq; k++) {
        cu->queued -= r->q[k].ids.count;
        rp_iset_free(&r->q[k].ids);
    }
    free(r->q);
    r->q = NULL;
    r->nq = r->qcap = 0;
}

void rp_catchup_free(rp_node_t *n) {
    rp_catchup_t *cu = n->cu;
    if (!cu)
        return;
    for (uint32_t i = 0; i < cu->nr; i++)
        req_clear(cu, &cu->r[i]);
    free(cu->r);
    free(cu);
    n->cu = NULL;
}

static uint64_t req_pending(const rp_cureq_t *r) {
    uint64_t k = 0;
    for (uint32_t i = 0; i < r->nq; i++)
        k += r->q[i].ids.count;
    return k;
}

/* The entry of dest, created (or an idle one reused) if new; NULL if the
 * table is full of busy requesters. */
static rp_cureq_t *req_of(rp_catchup_t *cu, uint64_t dest, int64_t now) {
    for (uint32_t i = 0; i < cu->nr; i++)
        if (cu->r[i].dest == dest)
            return &cu->r[i];
    rp_cureq_t *r = NULL;
    if (cu->nr < RP_CU_MAX_REQ) {
        if (cu->nr == cu->rcap) {
            uint32_t nc = cu->rcap ? cu->rcap * 2 : 4;
            rp_cureq_t *a = (rp_cureq_t *)realloc(cu->r, nc * sizeof(rp_cureq_t));
            if (!a)
                return NULL;
            cu->r = a;
            cu->rcap = nc;
        }
        r = &cu->r[cu->nr++];
    } else {
        for (uint32_t i = 0; i < cu->nr; i++)      /* the longest idle empty entry */
            if (!req_pending(&cu->r[i]) && (!r || cu->r[i].last < r->last))
                r = &cu->r[i];
        if (!r)
            return NULL;
        req_clear(cu, r);
    }
    memset(r, 0, sizeof(*r));
    r->dest = dest;
    rp_tb_init(&r->tb);
    rp_tb_set(&r->tb, cu->rate, cu->burst);
    r->last = now;
    return r;
}

static rp_cuq_t *queue_of(rp_cureq_t *r, uint32_t sender, uint32_t inc) {
    for (uint32_t k = 0; k < r->nq; k++)
        if (r->q[k].sender == sender && r->q[k].inc == inc)
            return &r->q[k];
    for (uint32_t k = 0; k < r->nq; k++)          /* reuse a drained one */
        if (!r->q[k].ids.count) {
            r->q[k].sender = sender;
            r->q[k].inc = inc;
            return &r->q[k];
        }
    if (r->nq == RP_CU_MAX_STREAMS)
        return NULL;
    if (r->nq == r->qcap) {
        uint32_t nc = r->qcap ? r->qcap * 2 : 2;
        rp_cuq_t *a = (rp_cuq_t *)realloc(r->q, nc * sizeof(rp_cuq_t));
        if (!a)
            return NULL;
        r->q = a;
        r->qcap = nc;
    }
    rp_cuq_t *q = &r->q[r->nq];
    if (rp_iset_init(&q->ids, 4, RP_CU_MAX_IVALS))
        return NULL;
    q->sender = sender;
    q->inc = inc;
    r->nq++;
    return q;
}

int64_t rp_catchup_add(rp_node_t *n, uint64_t dest, uint32_t sender, uint32_t inc, const rp_iset_t *set,
                       int64_t now) {
    rp_catchup_t *cu = n->cu;
    if (!cu || !set->n)
        return 0;
    rp_cureq_t *r = req_of(cu, dest, now);
    rp_cuq_t *q = r ? queue_of(r, sender, inc) : NULL;
    if (!q) {
        n->c[RP_C_CATCHUP_REFUSED] += set->count;
        return 0;
    }
    r->last = now;
    int64_t added = 0;
    for (uint32_t i = 0; i < set->n; i++) {
        uint64_t span = set->v[i].hi - set->v[i].lo + 1;
        int64_t k = rp_iset_add(&q->ids, set->v[i].lo, set->v[i].hi);
        if (k < 0) {
            n->c[RP_C_CATCHUP_REFUSED] += span;
            continue;
        }
        added += k;
        n->c[RP_C_CATCHUP_AGAIN] += span - (uint64_t)k;
    }
    cu->queued += (uint64_t)added;
    n->c[RP_C_CATCHUP_QUEUED] += (uint64_t)added;
    return added;
}

uint64_t rp_catchup_pending(const rp_node_t *n) {
    return n->cu ? n->cu->queued : 0;
}

/* One REPAIR from the log, marked as a logger's. */
static int emit(rp_node_t *n, uint64_t dest, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t label,
                const uint8_t *payload, uint32_t plen, int64_t now) {
    int lab = label != RP_SRB_NOLABEL;
    uint8_t *o = rp_node_out_msg(n, dest, RP_T_REPAIR, (lab ? RP_MF_LABEL : 0) | RP_MF_FROM_LOGGER, sender,
                                 inc, 0, seq, (size_t)plen + (lab ? 8 : 0));
    if (!o)
        return -1;
    if (lab) {
        rp_st64(o, label);
        o += 8;
    }
    if (plen)
        memcpy(o, payload, plen);
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_RTX_SERVED, sender, inc, seq, plen, dest, 1);
    return 0;
}

/* Stream up to `budget` messages of queue q to dest, lowest ids first.
 * Ids the log no longer holds (collected, or damaged when read) leave the
 * queue unserved: the requester's next request is answered for them.
 * Returns the REPAIRs sent. */
static size_t drain_queue(rp_node_t *n, rp_catchup_t *cu, uint64_t dest, rp_cuq_t *q, size_t budget,
                          int64_t now) {
    size_t sent = 0;
    rp_log_cursor_t c;
    int have = 0, refused = 0;
    while (sent < budget && q->ids.n && n->out.used < RP_CU_OUT_LIMIT) {
        uint64_t lo = q->ids.v[0].lo, hi = q->ids.v[0].hi;
        if (!have) {
            if (rp_log_seek(n->log, &c, q->sender, q->inc, lo) < 0) {
                cu->queued -= q->ids.count;
                rp_iset_clear(&q->ids);
                break;
            }
            have = 1;
        }
        c.seq = lo;
        uint64_t seq = lo, label;
        const uint8_t *pl;
        long plen = 0;
        uint64_t done_to = lo;          /* ids [lo, done_to) are answered */
        while (sent < budget && n->out.used < RP_CU_OUT_LIMIT) {
            plen = rp_log_next(n->log, &c, hi, &seq, &pl, &label);
            if (plen < 0)
                break;
            if (emit(n, dest, q->sender, q->inc, seq, label, pl, (uint32_t)plen, now)) {
                /* the outbox refused it (full, or dest no longer validated,
                 * outbox.h): not a log error; the rest stays queued */
                refused = 1;
                break;
            }
            sent++;
            done_to = seq + 1;
            if (seq == hi)
                break;
        }
        if (refused) {
            if (done_to > lo) {
                int64_t k = rp_iset_remove(&q->ids, lo, done_to - 1);
                if (k > 0)
                    cu->queued -= (uint64_t)k;
            }
            if (n->out.ac && !rp_ac_validated(n->out.ac, dest)) {
                cu->queued -= q->ids.count;     /* it will not be let through: forget it */
                rp_iset_clear(&q->ids);
            }
            break;
        }
        if (plen == RP_LOG_ABSENT || (plen >= 0 && seq == hi))
            done_to = hi + 1;           /* the rest of the interval is not in the log */
        else if (plen == RP_LOG_DAMAGED) {
            n->c[RP_C_LOG_ERRORS]++;
            done_to = c.seq > lo ? c.seq : lo;
        } else if (plen == RP_LOG_IOERR) {
            n->c[RP_C_LOG_ERRORS]++;
            if (done_to == lo)
                done_to = lo + 1;       /* never stuck on one id */
        }
        if (done_to > lo) {
            int64_t k = rp_iset_remove(&q->ids, lo, done_to - 1);
            if (k > 0)
                cu->queued -= (uint64_t)k;
        }
        if (plen == RP_LOG_DAMAGED)
            have = 0;                   /* the index changed: seek again */
    }
    return sent;
}

size_t rp_catchup_drain(rp_node_t *n, int64_t now) {
    rp_catchup_t *cu = n->cu;
    if (!cu || !cu->queued || !n->log)
        return 0;
    size_t total = 0, budget = cu->per_call;
    /* the node's repair rate (Config.repair_rate) bounds the logger's
     * serving in all, catch-up included: what it holds back waits queued */
    rp_tbucket_t *g = &n->repair_rate;
    if (g->rate > 0) {
        rp_tb_refill(g, now);
        size_t room = g->tokens > 0 ? (size_t)g->tokens : 0;
        if (room < budget) {
            uint64_t held = (cu->queued < budget ? cu->queued : budget) - (room < cu->queued ? room : cu->queued);
            n->c[RP_C_SERVE_LIMITED] += held;
            budget = room;
        }
    }
    for (uint32_t k = 0; k < cu->nr && total < budget; k++) {
        rp_cureq_t *r = &cu->r[(cu->turn + k) % cu->nr];
        if (!req_pending(r))
            continue;
        rp_tb_refill(&r->tb, now);
        size_t want = budget - total;
        if (r->tb.rate > 0 && r->tb.tokens < (double)want)
            want = (size_t)r->tb.tokens;
        for (uint32_t s = 0; s < r->nq && want; s++) {
            rp_cuq_t *q = &r->q[(r->turn + s) % r->nq];
            if (!q->ids.n)
                continue;
            size_t got = drain_queue(n, cu, r->dest, q, want, now);
            want -= got;
            total += got;
            if (r->tb.rate > 0)
                r->tb.tokens -= (double)got;
            if (!q->ids.n)
                r->turn++;
        }
        if (n->out.used >= RP_CU_OUT_LIMIT)
            break;
    }
    cu->turn++;
    if (g->rate > 0)
        g->tokens -= (double)total;
    n->c[RP_C_SERVED] += total;
    n->c[RP_C_SERVED_FROM_LOG] += total;
    return total;
}
