#include "serve.h"

#include <stdlib.h>

#include "catchup.h"
#include "digest.h"
#include "reqlimit.h"

void rp_node_set_rate_limit(rp_node_t *n, double rate, double burst) {
    rp_tb_set(&n->repair_rate, rate, burst);
}

/* ---- one stream's request ---------------------------------------------- */

#define PURGED_BATCH 64           /* (seq, superseded-by) pairs per PURGED message */

/* A request being served: the stream, where answers go, what was done. */
typedef struct {
    rp_node_t *n;
    uint32_t sender, inc, slot;
    rp_peer_t *p;                 /* NULL: our own stream */
    uint64_t dest;
    rp_tbucket_t *req;            /* dest's own repair bucket (reqlimit.h), or NULL */
    int from_logger;
    rp_iset_t *gc_out;
    int64_t now;
    size_t served, limited;
    int refused;                  /* the outbox refused a message to dest: stop */
    uint64_t gc;
    uint64_t purged[2 * PURGED_BATCH];   /* pairs not sent yet */
    size_t npurged;
} serve_t;

/* REPAIR of a stored message. */
static int emit_repair(rp_node_t *n, uint64_t ticket, uint32_t sender, uint32_t inc,
                       uint64_t dest, int from_logger) {
    rp_msent_t *e = rp_mstore_entry(&n->store, ticket);
    int lab = e->label != RP_SRB_NOLABEL;
    uint8_t fl = (lab ? RP_MF_LABEL : 0) | (from_logger ? RP_MF_FROM_LOGGER : 0);
    uint8_t *p = rp_node_out_msg(n, dest, RP_T_REPAIR, fl, sender, inc, 0, e->seq,
                                 e->len + (lab ? 8 : 0));
    if (!p)
        return -1;
    if (lab) {
        rp_st64(p, e->label);
        p += 8;
    }
    if (e->len)
        memcpy(p, rp_mstore_data(&n->store, e), e->len);
    return 0;
}

/* PURGED: (seq, superseded-by) pairs of one stream. */
static void emit_purged(serve_t *s) {
    rp_node_t *n = s->n;
    uint8_t *b = rp_node_out_msg(n, s->dest, RP_T_PURGED, 0, s->sender, s->inc, 0, 0,
                                 16 * s->npurged);
    if (b) {
        for (size_t i = 0; i < 2 * s->npurged; i++)
            rp_st64(b + 8 * i, s->purged[i]);
        n->c[RP_C_PURGED_NOTICES] += s->npurged;
    } else {
        s->refused = 1;
    }
    s->npurged = 0;
}

/* A token for one REPAIR: from the requester's own bucket and the node's. */
static int take_token(serve_t *s) {
    if (s->req && s->req->tokens < 1.0) {
        s->n->reqlimit->n_limited++;
        return 0;
    }
    if (!rp_tb_take(&s->n->repair_rate))
        return 0;
    if (s->req)
        rp_tb_take(s->req);
    return 1;
}

static int repair_from_store(serve_t *s, uint64_t ticket, uint64_t id) {
    rp_node_t *n = s->n;
    if (!take_token(s)) {
        s->limited++;
        return 0;
    }
    if (emit_repair(n, ticket, s->sender, s->inc, s->dest, s->from_logger)) {
        s->refused = 1;
        return 0;
    }
    s->served++;
    if (n->tracing)
        rp_trace(&n->trace, s->now, RP_EV_RTX_SERVED, s->sender, s->inc, id,
                 rp_mstore_entry(&n->store, ticket)->len, s->dest, s->from_logger ? 1 : 0);
    return 1;
}

/* A logger's REPAIR read back from its log (always marked as a logger's). */
static int repair_from_log(serve_t *s, uint64_t id) {
    rp_node_t *n = s->n;
    if (!take_token(s)) {
        s->limited++;
        return 0;
    }
    const uint8_t *pl;
    uint64_t label;
    long plen = rp_log_read(n->log, s->sender, s->inc, id, &pl, &label);
    if (plen < 0) {
        n->c[RP_C_LOG_ERRORS]++;    /* damaged: a logger answers it as lost */
        return 0;
    }
    int lab = label != RP_SRB_NOLABEL;
    uint8_t *o = rp_node_out_msg(n, s->dest, RP_T_REPAIR,
                                 (lab ? RP_MF_LABEL : 0) | RP_MF_FROM_LOGGER, s->sender, s->inc,
                                 0, id, (size_t)plen + (lab ? 8 : 0));
    if (!o) {
        s->refused = 1;
        return 0;
    }
    if (lab) {
        rp_st64(o, label);
        o += 8;
    }
    if (plen)
        memcpy(o, pl, (size_t)plen);
    s->served++;
    n->c[RP_C_SERVED_FROM_LOG]++;
    if (n->tracing)
        rp_trace(&n->trace, s->now, RP_EV_RTX_SERVED, s->sender, s->inc, id, (uint32_t)plen,
                 s->dest, 1);
    return 1;
}

/* "Purged, superseded by": the requester stops asking (FIFO-SRB). */
static int answer_purged(serve_t *s, uint64_t id, uint64_t sup) {
    if (s->npurged == PURGED_BATCH)
        emit_purged(s);
    s->purged[2 * s->npurged] = id;
    s->purged[2 * s->npurged + 1] = sup;
    s->npurged++;
    return 1;
}

/* Received here once, held no more: the GcNOTE sends the requester to a
 * logger. */
static int answer_collected(serve_t *s, uint64_t id) {
    int had = s->p ? rp_seqtrack_received(&s->p->st, id) : id < s->n->next_seq;
    if (!had)
        return 0;
    int64_t r = rp_iset_add(s->gc_out, id, id);
    if (r > 0)
        s->gc++;
    return r >= 0;
}

/* Answer one id; 1 if answered (REPAIR, PURGED pair or GcNOTE). */
static int serve_id(serve_t *s, uint64_t id) {
    rp_node_t *n = s->n;
    uint64_t sup = 0;
    int64_t t = rp_mstore_find(&n->store, s->slot, id);
    if (t >= 0)
        return repair_from_store(s, (uint64_t)t, id);
    if (n->log && rp_log_has(n->log, s->sender, s->inc, id))
        return repair_from_log(s, id);
    if (n->srb_w && rp_node_srb_purged_by(n, s->sender, s->inc, id, &sup))
        return answer_purged(s, id, sup);
    if (s->gc_out && !n->log)
        return answer_collected(s, id);
    return 0;
}

static void add_all(rp_iset_t *set, const rp_ival_t *iv, size_t niv) {
    for (size_t k = 0; k < niv; k++)
        if (iv[k].lo <= iv[k].hi)
            rp_iset_add(set, iv[k].lo, iv[k].hi);
}

/* Ids [a, b] a logger's log does not hold: purged (FIFO-SRB), or left
 * for the control plane to answer. */
static void hole(serve_t *s, uint64_t a, uint64_t b, rp_iset_t *left_out) {
    rp_node_t *n = s->n;
    if (!n->srb_w) {
        if (left_out)
            rp_iset_add(left_out, a, b);
        return;
    }
    for (uint64_t id = a;; id++) {
        uint64_t sup;
        if (rp_node_srb_purged_by(n, s->sender, s->inc, id, &sup))
            answer_purged(s, id, sup);
        else if (left_out)
            rp_iset_add(left_out, id, id);
        if (id == b)
            break;
    }
}

/* A logger with catch-up queues: the logged ids among the first max_scan
 * asked go to dest's queue (catchup.h) and are streamed from there, paced;
 * the rest are left for the control plane (or answered PURGED). */
static size_t serve_queued(serve_t *s, const rp_ival_t *iv, size_t niv, rp_iset_t *left_out) {
    rp_node_t *n = s->n;
    int64_t sid = rp_log_find_stream(n->log, s->sender, s->inc);
    rp_iset_t cov;
    if (rp_iset_init(&cov, 8, 0)) {
        if (left_out)
            add_all(left_out, iv, niv);
        return 0;
    }
    uint64_t scan = n->max_scan;    /* ids still to examine */
    for (size_t k = 0; k < niv; k++) {
        uint64_t lo = iv[k].lo, hi = iv[k].hi;
        if (lo > hi)
            continue;
        if (!scan) {
            if (left_out)
                rp_iset_add(left_out, lo, hi);
            continue;
        }
        uint64_t end = hi - lo >= scan ? lo + scan - 1 : hi;
        scan -= end - lo + 1;
        if (left_out && end < hi)
            rp_iset_add(left_out, end + 1, hi);
        if (sid >= 0)
            rp_log_cover(n->log, (uint32_t)sid, lo, end, &cov);
        /* the holes of [lo, end] in what the log holds */
        uint64_t q = lo, nx;
        while (q <= end) {
            uint64_t stop = end;
            int more = rp_iset_next(&cov, q, &nx) && nx <= end;
            if (more)
                stop = nx - 1;
            if (!more || nx > q)
                hole(s, q, stop, left_out);
            if (!more)
                break;
            int64_t at = rp_iset_find(&cov, nx);
            if (at < 0 || cov.v[at].hi >= end)
                break;
            q = cov.v[at].hi + 1;
        }
    }
    if (s->npurged)
        emit_purged(s);
    if (cov.n)
        rp_catchup_add(n, s->dest, s->sender, s->inc, &cov, s->now);
    rp_iset_free(&cov);
    /* answer at once what the requester's tokens allow */
    size_t sent = rp_catchup_drain(n, s->now);
    return sent;
}

/* rp_node_serve with the ids still to examine for an unvalidated dest in
 * *budget (NULL: dest is validated, max_scan per section). */
static size_t serve_ids(rp_node_t *n, uint32_t sender, uint32_t inc, const rp_ival_t *iv, size_t niv,
                        uint64_t dest, int from_logger, rp_iset_t *gc_out, rp_iset_t *left_out,
                        int64_t now, uint64_t *budget);

size_t rp_node_serve(rp_node_t *n, uint32_t sender, uint32_t inc, const rp_ival_t *iv, size_t niv,
                     uint64_t dest, int from_logger, rp_iset_t *gc_out, rp_iset_t *left_out,
                     int64_t now) {
    uint64_t budget = RP_SERVE_UNVALIDATED_SCAN;
    int valid = !n->out.ac || rp_ac_validated(n->out.ac, dest);
    return serve_ids(n, sender, inc, iv, niv, dest, from_logger, gc_out, left_out, now,
                     valid ? NULL : &budget);
}

static size_t serve_ids(rp_node_t *n, uint32_t sender, uint32_t inc, const rp_ival_t *iv, size_t niv,
                        uint64_t dest, int from_logger, rp_iset_t *gc_out, rp_iset_t *left_out,
                        int64_t now, uint64_t *budget) {
    serve_t s = {.n = n, .sender = sender, .inc = inc, .dest = dest, .from_logger = from_logger,
                 .gc_out = gc_out, .now = now};
    if (sender == n->id && inc == n->inc) {
        s.slot = RP_SELF_SLOT;
    } else {
        s.slot = rp_node_find_peer(n, sender, inc);
        if (s.slot == RP_NO_SLOT) {
            if (left_out)           /* never heard of it: nothing to say */
                add_all(left_out, iv, niv);
            return 0;
        }
        s.p = n->peers[s.slot];
    }
    /* catch-up queues are for members: an address that has not proven it
     * receives there gets what its credit allows, at once, and no queue */
    if (n->cu && n->log && !budget)
        return serve_queued(&s, iv, niv, left_out);
    rp_tb_refill(&n->repair_rate, now);
    s.req = rp_reqlimit_bucket(n->reqlimit, dest, now);
    uint64_t scan = budget ? *budget : n->max_scan;    /* ids still to examine */
    for (size_t k = 0; k < niv; k++) {
        for (uint64_t id = iv[k].lo; id <= iv[k].hi; id++) {
            if (!scan || s.refused) {
                if (left_out)
                    rp_iset_add(left_out, id, iv[k].hi);
                break;
            }
            scan--;
            if (!serve_id(&s, id) && left_out)
                rp_iset_add(left_out, id, id);
            if (id == iv[k].hi)
                break;              /* hi may be UINT64_MAX */
        }
    }
    if (budget)
        *budget = scan;
    if (s.npurged)
        emit_purged(&s);
    n->c[RP_C_SERVED] += s.served;
    n->c[RP_C_SERVE_LIMITED] += s.limited;
    n->c[RP_C_GCNOTE_IDS] += s.gc;
    return s.served;
}

/* ---- a body of MISSING sections ---------------------------------------- */

void rp_served_init(rp_served_t *s) { memset(s, 0, sizeof(*s)); }

void rp_served_free(rp_served_t *s) {
    free(s->sec);
    free(s->iv);
    memset(s, 0, sizeof(*s));
}

/* Room for k more intervals; 0 or RP_ENOMEM. */
static int reserve_ivals(rp_served_t *s, size_t k) {
    if (s->niv + k <= s->ivcap)
        return RP_OK;
    size_t cap = s->ivcap ? s->ivcap : 64;
    while (cap < s->niv + k)
        cap *= 2;
    rp_ival_t *v = (rp_ival_t *)realloc(s->iv, cap * sizeof(rp_ival_t));
    if (!v)
        return RP_ENOMEM;
    s->iv = v;
    s->ivcap = cap;
    return RP_OK;
}

/* Append a set's intervals; sets *at to where they start.  Returns how many. */
static int64_t append_set(rp_served_t *s, const rp_iset_t *set, size_t *at) {
    if (reserve_ivals(s, set->n))
        return RP_ENOMEM;
    *at = s->niv;
    if (set->n)
        memcpy(s->iv + s->niv, set->v, set->n * sizeof(rp_ival_t));
    s->niv += set->n;
    return set->n;
}

static rp_served_sec_t *push_section(rp_served_t *s) {
    if (s->nsec == s->seccap) {
        size_t cap = s->seccap ? 2 * s->seccap : 8;
        rp_served_sec_t *v = (rp_served_sec_t *)realloc(s->sec, cap * sizeof(rp_served_sec_t));
        if (!v)
            return NULL;
        s->sec = v;
        s->seccap = cap;
    }
    rp_served_sec_t *sec = &s->sec[s->nsec++];
    memset(sec, 0, sizeof(*sec));
    return sec;
}

/* Well-formed section framing, and every MISSING section long enough to
 * name its stream: checked before anything is served. */
static int check_framing(const uint8_t *body, size_t len) {
    rp_secit_t it;
    uint8_t kind, fl;
    const uint8_t *d;
    uint16_t l;
    int r;
    rp_secit_init(&it, body, len);
    while ((r = rp_secit_next(&it, &kind, &fl, &d, &l)) == 1)
        if (kind == RP_SEC_MISSING && l < 8)
            return -1;
    return r;
}

/* GcNOTE of ids iv to dest: as many MISSING sections, one per message, as
 * the digests of them take at budget bytes each. */
static void send_gcnote(rp_node_t *n, uint64_t dest, uint32_t sender, uint32_t inc,
                        const rp_ival_t *iv, size_t niv, uint8_t *scratch, size_t budget) {
    uint64_t from = iv[0].lo, last = iv[niv - 1].hi, covered;
    size_t k;
    for (;;) {
        size_t w = rp_digest_encode(iv, niv, from, last, scratch, budget, &covered, &k);
        if (!w)
            return;
        uint8_t *b = rp_node_out_msg(n, dest, RP_T_GCNOTE, 0, n->id, n->inc, 0, 0,
                                     RP_SEC_HDR + 8 + w);
        if (b) {
            b[0] = RP_SEC_MISSING;
            b[1] = 0;
            rp_st16(b + 2, (uint16_t)(8 + w));
            rp_st32(b + 4, sender);
            rp_st32(b + 8, inc);
            memcpy(b + RP_SEC_HDR + 8, scratch, w);
        }
        if (covered >= last)
            return;
        from = covered + 1;
    }
}

/* Messages the outbox refused so far (full, or beyond an unvalidated
 * address's credit): once one is refused, the rest of a request is not
 * looked at -- a flood costs no scanning. */
static uint64_t refusals(const rp_outbox_t *o) {
    return o->drop_full_msgs + (o->ac ? o->ac->st.capped_msgs : 0);
}

/* What serving one body needs besides its result. */
typedef struct {
    rp_node_t *n;
    uint64_t dest;
    unsigned peers, own;
    int64_t now;
    rp_iset_t gc, left;
    int valid;                 /* dest is validated (addrcheck.h) */
    uint64_t scan;             /* else: ids it may still have examined */
    uint8_t *scratch;          /* a GcNOTE digest */
    size_t budget;             /* its size: what one GcNOTE message can carry */
} body_t;

static int gcnote_section(body_t *b, const rp_served_t *out, const rp_served_sec_t *sec) {
    if (!b->scratch) {
        b->scratch = (uint8_t *)malloc(b->budget ? b->budget : 1);
        if (!b->scratch)
            return RP_ENOMEM;
    }
    send_gcnote(b->n, b->dest, sec->sender, sec->inc, out->iv + sec->gc, sec->ngc, b->scratch,
                b->budget);
    return RP_OK;
}

static inline unsigned how_for(const body_t *b, uint32_t sender, uint32_t inc) {
    return sender == b->n->id && inc == b->n->inc ? b->own : b->peers;
}

/* Serve one MISSING section (d: u32 sender, u32 inc, digest).  A digest
 * that does not decode is skipped.  RP_OK or RP_ENOMEM. */
static int serve_section(body_t *b, const uint8_t *d, size_t l, rp_served_t *out) {
    size_t niv = 0;
    uint64_t from, upto;
    long r = rp_digest_check(d + 8, l - 8, &niv);
    if (r < 0 || niv > RP_SERVE_MAX_IVALS)
        return RP_OK;
    if (reserve_ivals(out, niv))
        return RP_ENOMEM;
    if (rp_digest_decode(d + 8, l - 8, out->iv + out->niv, niv, &niv, &from, &upto) < 0)
        return RP_OK;
    rp_served_sec_t *sec = push_section(out);
    if (!sec)
        return RP_ENOMEM;
    sec->sender = rp_ld32(d);
    sec->inc = rp_ld32(d + 4);
    sec->asked = out->niv;
    sec->nasked = niv;
    out->niv += niv;
    unsigned how = how_for(b, sec->sender, sec->inc);
    rp_iset_clear(&b->gc);
    rp_iset_clear(&b->left);
    sec->served = serve_ids(b->n, sec->sender, sec->inc, out->iv + sec->asked, niv, b->dest,
                            how & RP_SERVE_FROM_LOGGER, how & RP_SERVE_GCNOTE ? &b->gc : NULL,
                            &b->left, b->now, b->valid ? NULL : &b->scan);
    int64_t k;
    if ((k = append_set(out, &b->gc, &sec->gc)) < 0)
        return RP_ENOMEM;
    sec->ngc = (size_t)k;
    sec->gc_ids = b->gc.count;
    if ((k = append_set(out, &b->left, &sec->left)) < 0)
        return RP_ENOMEM;
    sec->nleft = (size_t)k;
    if (sec->ngc && (how & RP_SERVE_GCNOTE_AT_ONCE))
        return gcnote_section(b, out, sec);
    return RP_OK;
}

int rp_node_serve_missing(rp_node_t *n, const uint8_t *body, size_t len, uint64_t dest,
                          unsigned peers, unsigned own, int64_t now, rp_served_t *out) {
    out->nsec = out->niv = 0;
    if (check_framing(body, len) < 0)
        return RP_EINVAL;
    body_t b = {.n = n, .dest = dest, .peers = peers, .own = own, .now = now,
                .valid = !n->out.ac || rp_ac_validated(n->out.ac, dest),
                .scan = RP_SERVE_UNVALIDATED_SCAN};
    int64_t budget = (int64_t)rp_out_max_body(&n->out) - RP_SEC_HDR - 8;
    b.budget = budget > 0 ? (size_t)budget : 0;
    if (rp_iset_init(&b.gc, 8, 0) || rp_iset_init(&b.left, 8, 0)) {
        rp_iset_free(&b.gc);
        return RP_ENOMEM;
    }
    rp_secit_t it;
    uint8_t kind, fl;
    const uint8_t *d;
    uint16_t l;
    int rc = RP_OK;
    uint64_t refused0 = refusals(&n->out);
    rp_secit_init(&it, body, len);
    while (rc == RP_OK && out->nsec < RP_SERVE_MAX_SECTIONS && refusals(&n->out) == refused0 &&
           rp_secit_next(&it, &kind, &fl, &d, &l) == 1)
        if (kind == RP_SEC_MISSING)
            rc = serve_section(&b, d, l, out);
    /* The GcNOTEs not sent at once go after every section was served. */
    for (size_t i = 0; rc == RP_OK && i < out->nsec; i++) {
        const rp_served_sec_t *sec = &out->sec[i];
        if (sec->ngc && !(how_for(&b, sec->sender, sec->inc) & RP_SERVE_GCNOTE_AT_ONCE))
            rc = gcnote_section(&b, out, sec);
    }
    free(b.scratch);
    rp_iset_free(&b.gc);
    rp_iset_free(&b.left);
    return rc == RP_OK ? (int)out->nsec : rc;
}
