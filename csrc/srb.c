#include "srb.h"

#include <stdlib.h>

#define NONE UINT64_MAX

static uint64_t pow2_at_least(uint64_t x) {
    uint64_t c = 16;
    while (c < x)
        c *= 2;
    return c;
}

/* ---- receiver queue ---------------------------------------------------- */

int rp_srbq_init(rp_srbq_t *q, uint64_t base, uint64_t w, uint64_t cap, uint64_t max_cap) {
    memset(q, 0, sizeof(*q));
    q->head = q->ready = q->tail = base;
    q->w = w;
    if (!cap)
        cap = 64;
    if (!max_cap)
        max_cap = (uint64_t)1 << 26;
    if (cap > max_cap || max_cap > UINT32_MAX)
        return RP_EINVAL;
    q->max_held = max_cap;
    uint64_t nc = pow2_at_least(cap < 4096 ? cap : 4096);
    q->near = (rp_srbq_near_t *)malloc(nc * sizeof(rp_srbq_near_t));
    if (!q->near)
        goto fail;
    for (uint64_t i = 0; i < nc; i++)
        q->near[i].seq = NONE;
    q->near_mask = nc - 1;
    if (rp_iset_init(&q->settled, 4, (uint32_t)max_cap))
        goto fail;
    if (rp_iset_init(&q->queued, 4, (uint32_t)max_cap))
        goto fail;
    if (rp_hmap_init(&q->msgs, cap < 1024 ? cap : 1024, 0))
        goto fail;
    if (rp_hmap_init(&q->labels, 64, 0))
        goto fail;
    return RP_OK;
fail:
    rp_srbq_free(q);
    return RP_ENOMEM;
}

void rp_srbq_free(rp_srbq_t *q) {
    free(q->near);
    q->near = NULL;
    rp_iset_free(&q->settled);
    rp_iset_free(&q->queued);
    rp_hmap_free(&q->msgs);
    rp_hmap_free(&q->labels);
    free(q->purged);
    q->purged = NULL;
}

/* Add seq to s: a value one past its last interval (a stream in order)
 * extends it in place, anything else goes through rp_iset_add. */
static inline int64_t iset_put(rp_iset_t *s, uint64_t seq) {
    if (s->n && s->v[s->n - 1].hi + 1 == seq) {
        s->v[s->n - 1].hi = seq;
        s->count++;
        return 1;
    }
    return rp_iset_add(s, seq, seq);
}

/* Remove every value below upto from the low end of s. */
static void iset_trim_below(rp_iset_t *s, uint64_t upto) {
    uint32_t k = 0;
    while (k < s->n && s->v[k].hi < upto) {
        s->count -= s->v[k].hi - s->v[k].lo + 1;
        k++;
    }
    if (k < s->n && s->v[k].lo < upto) {
        s->count -= upto - s->v[k].lo;
        s->v[k].lo = upto;
    }
    if (k) {
        memmove(s->v, s->v + k, (size_t)(s->n - k) * sizeof(rp_ival_t));
        s->n -= k;
    }
}

/* The queued messages: a direct-mapped table for seqs near each other (no
 * hashing for a stream's usual traffic), a hash map for the rest. */
static int m_put(rp_srbq_t *q, uint64_t seq, uint64_t label, uint64_t handle) {
    rp_srbq_near_t *sl = &q->near[seq & q->near_mask];
    if (sl->seq == NONE) {
        sl->seq = seq;
        sl->handle = handle;
        sl->label = label;
        return 0;
    }
    int rc = rp_hmap_put(&q->msgs, seq, 0, handle);
    if (rc >= 0 && label != RP_SRB_NOLABEL) {
        rc = rp_hmap_put(&q->msgs, seq, 1, label);
        if (rc < 0)
            rp_hmap_del(&q->msgs, seq, 0, NULL);
    }
    return rc < 0 ? rc : 0;
}

/* 1 and the handle and label (RP_SRB_NOLABEL: none) of queued seq, or 0. */
static inline int m_get(const rp_srbq_t *q, uint64_t seq, uint64_t *handle, uint64_t *label) {
    const rp_srbq_near_t *sl = &q->near[seq & q->near_mask];
    if (sl->seq == seq) {
        *handle = sl->handle;
        *label = sl->label;
        return 1;
    }
    if (!q->msgs.n)
        return 0;
    uint64_t *h = rp_hmap_get(&q->msgs, seq, 0);
    if (!h)
        return 0;
    *handle = *h;
    uint64_t *l = rp_hmap_get(&q->msgs, seq, 1);
    *label = l ? *l : RP_SRB_NOLABEL;
    return 1;
}

static inline void m_del(rp_srbq_t *q, uint64_t seq) {
    rp_srbq_near_t *sl = &q->near[seq & q->near_mask];
    if (sl->seq == seq) {
        sl->seq = NONE;
    } else if (q->msgs.n) {
        rp_hmap_del(&q->msgs, seq, 0, NULL);
        rp_hmap_del(&q->msgs, seq, 1, NULL);
    }
}

/* Remember a TP4 purge for the caller.  0, or -1 if out of memory. */
static int q_note_purged(rp_srbq_t *q, uint64_t seq, uint64_t handle) {
    if (q->npurged == q->purgedcap) {
        size_t nc = q->purgedcap ? q->purgedcap * 2 : 16;
        uint64_t *np = (uint64_t *)realloc(q->purged, 2 * nc * sizeof(uint64_t));
        if (!np)
            return -1;
        q->purged = np;
        q->purgedcap = nc;
    }
    q->purged[2 * q->npurged] = seq;
    q->purged[2 * q->npurged + 1] = handle;
    q->npurged++;
    return 0;
}

/* Queued seq enters the deliverable prefix.  Labelled, it purges the older
 * queued one with its label (TP4): the newer is now certain to be delivered
 * (everything before it is here or purged).  The older one stays settled
 * (now purged), so nothing about the prefix changes. */
static void q_enter(rp_srbq_t *q, uint64_t seq, uint64_t label) {
    if (label == RP_SRB_NOLABEL)
        return;                             /* unlabelled: never obsolete */
    uint64_t *newest = rp_hmap_get(&q->labels, label, 0);
    if (!newest) {
        rp_hmap_put(&q->labels, label, 0, seq);     /* no room: no purge */
        return;
    }
    uint64_t old = *newest, oh, ol;
    /* Without memory to hand the purge back (or to split the queued set),
     * keep the old value: delivering it too is always allowed. */
    if (m_get(q, old, &oh, &ol) && rp_iset_remove(&q->queued, old, old) == 1) {
        if (q_note_purged(q, old, oh) == 0) {
            m_del(q, old);
            q->n_purged_queue++;
        } else {
            rp_iset_add(&q->queued, old, old);      /* merges back: no memory */
        }
    }
    *newest = seq;
}

/* Extend the deliverable prefix [head, ready) over every settled seq, in
 * seq order: a whole run of purged seqs in one step, queued ones one by one
 * (work follows what is held, not the span). */
static void q_advance(rp_srbq_t *q) {
    if (q->ready < q->head)
        q->ready = q->head;
    while (q->ready < q->tail) {
        int64_t k = rp_iset_find(&q->settled, q->ready);
        if (k < 0)
            break;
        uint64_t end = q->settled.v[k].hi;
        uint64_t s = q->ready, x;
        while (rp_iset_next(&q->queued, s, &x) && x <= end) {
            uint64_t qhi = q->queued.v[rp_iset_find(&q->queued, x)].hi;
            if (qhi > end)
                qhi = end;
            for (uint64_t y = x;; y++) {
                uint64_t h, label;
                /* may drop an older seq (< x) from `queued` */
                if (m_get(q, y, &h, &label))
                    q_enter(q, y, label);
                if (y == qhi)
                    break;
            }
            if (qhi == end)
                break;
            s = qhi + 1;
        }
        q->ready = end + 1;
    }
}

int rp_srbq_insert(rp_srbq_t *q, uint64_t seq, uint64_t label, uint64_t handle) {
    if (seq < q->head || (seq < q->tail && rp_iset_contains(&q->settled, seq)))
        return RP_SQ_R_OLD;
    if (rp_iset_count(&q->queued) >= q->max_held)
        return RP_EFULL;
    int64_t rc = iset_put(&q->settled, seq);
    if (rc < 0)
        return (int)rc;
    rc = iset_put(&q->queued, seq);
    if (rc >= 0) {
        rc = m_put(q, seq, label, handle);
        if (rc < 0)
            rp_iset_remove(&q->queued, seq, seq);   /* was just added: no split */
    }
    if (rc < 0) {
        rp_iset_remove(&q->settled, seq, seq);
        return (int)rc;
    }
    q->n_queued++;
    if (seq >= q->tail) {
        q->tail = seq + 1;
        if (seq == q->ready) {          /* in order: the usual case, no search */
            q_enter(q, seq, label);
            q->ready = seq + 1;
            return RP_SQ_R_QUEUED;
        }
    }
    if (seq == q->ready)
        q_advance(q);
    return RP_SQ_R_QUEUED;
}

size_t rp_srbq_take_purged(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t max) {
    size_t k = q->npurged < max ? q->npurged : max;
    for (size_t i = 0; i < k; i++) {
        if (seqs)
            seqs[i] = q->purged[2 * i];
        handles[i] = q->purged[2 * i + 1];
    }
    if (k < q->npurged)
        memmove(q->purged, q->purged + 2 * k, 2 * (q->npurged - k) * sizeof(uint64_t));
    q->npurged -= k;
    return k;
}

int64_t rp_srbq_infer(rp_srbq_t *q, uint64_t t, uint64_t *lo, uint64_t *hi) {
    if (q->w == 0 || t < q->w)
        return 0;
    uint64_t limit = t - q->w;          /* every seq <= limit left the window */
    if (limit < q->head)
        return 0;
    /* The first and last empty seqs in [head, limit]: past the settled runs
     * at either end. */
    int64_t k = rp_iset_find(&q->settled, q->head);
    uint64_t first = k < 0 ? q->head : q->settled.v[k].hi + 1;
    if (k >= 0 && (q->settled.v[k].hi == NONE || first > limit))
        return 0;
    k = rp_iset_find(&q->settled, limit);
    uint64_t last = k < 0 ? limit : q->settled.v[k].lo - 1;
    int64_t n = rp_iset_add(&q->settled, q->head, limit);
    if (n < 0)
        return n;
    if (limit >= q->tail)
        q->tail = limit + 1;
    q->n_purged_inferred += (uint64_t)n;
    q_advance(q);
    if (n && lo) {
        *lo = first;
        *hi = last;
    }
    return n;
}

uint64_t rp_srbq_mark_purged_range(rp_srbq_t *q, uint64_t lo, uint64_t hi) {
    if (hi < q->head || lo > hi || hi == NONE)
        return 0;
    if (lo < q->head)
        lo = q->head;
    int64_t n = rp_iset_add(&q->settled, lo, hi);
    if (n <= 0)
        return 0;
    if (hi >= q->tail)
        q->tail = hi + 1;
    q->n_purged_marked += (uint64_t)n;
    if (lo <= q->ready && q->ready <= hi)
        q_advance(q);
    return (uint64_t)n;
}

int rp_srbq_mark_purged(rp_srbq_t *q, uint64_t seq) {
    return rp_srbq_mark_purged_range(q, seq, seq) == 1;
}

size_t rp_srbq_pop(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t max) {
    size_t n = 0;
    while (n < max && q->head < q->tail) {
        if (!q->settled.n || q->settled.v[0].lo != q->head)
            break;                      /* still missing: FIFO waits */
        uint64_t s = q->head;
        if (q->queued.n && q->queued.v[0].lo == s) {
            uint64_t h = 0, label = RP_SRB_NOLABEL;
            m_get(q, s, &h, &label);
            m_del(q, s);
            if (label != RP_SRB_NOLABEL) {
                uint64_t *newest = rp_hmap_get(&q->labels, label, 0);
                if (newest && *newest == s)
                    rp_hmap_del(&q->labels, label, 0, NULL);
            }
            handles[n] = h;
            if (seqs)
                seqs[n] = s;
            n++;
            q->n_delivered++;
            q->head = s + 1;
            iset_trim_below(&q->queued, q->head);
        } else {
            /* a run of purged seqs, up to the next queued one */
            uint64_t end = q->settled.v[0].hi;
            if (q->queued.n && q->queued.v[0].lo <= end)
                end = q->queued.v[0].lo - 1;
            q->head = end + 1;
        }
        iset_trim_below(&q->settled, q->head);
    }
    return n;
}

int rp_srbq_peek(const rp_srbq_t *q, uint64_t *handle) {
    if (q->head >= q->tail || !q->settled.n || q->settled.v[0].lo != q->head)
        return 0;
    /* head is queued, or the start of a purged run followed (in the same
     * settled run) by a queued seq */
    if (!q->queued.n || q->queued.v[0].lo > q->settled.v[0].hi)
        return 0;
    uint64_t label;
    return m_get(q, q->queued.v[0].lo, handle, &label);
}

/* ---- sender window ----------------------------------------------------- */

int rp_srbw_init(rp_srbw_t *s, uint64_t base, uint64_t w) {
    memset(s, 0, sizeof(*s));
    if (w == 0 || w > ((uint64_t)1 << 24))
        return RP_EINVAL;
    s->low = s->next = s->safe = s->stable = base;
    s->w = w;
    s->cap = pow2_at_least(w);
    s->ring = (rp_srbw_slot_t *)calloc(s->cap, sizeof(rp_srbw_slot_t));
    if (!s->ring)
        return RP_ENOMEM;
    if (rp_hmap_init(&s->labels, 64, 0)) {
        free(s->ring);
        s->ring = NULL;
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_srbw_free(rp_srbw_t *s) {
    free(s->ring);
    s->ring = NULL;
    rp_hmap_free(&s->labels);
}

static inline rp_srbw_slot_t *w_slot(const rp_srbw_t *s, uint64_t seq) {
    return &s->ring[seq & (s->cap - 1)];
}

static void advance_low(rp_srbw_t *s) {
    while (s->low < s->next) {
        uint8_t st = w_slot(s, s->low)->state;
        if (st != RP_SW_PURGED && st != RP_SW_STABLE)
            break;
        s->low++;
    }
}

int rp_srbw_sent(rp_srbw_t *s, uint64_t label, uint64_t handle) {
    if (!rp_srbw_can_send(s))
        return RP_EFULL;
    uint64_t seq = s->next;
    rp_srbw_slot_t *sl = w_slot(s, seq);
    sl->state = RP_SW_OUT;
    sl->label = label;
    sl->handle = handle;
    sl->sup = NONE;
    sl->prev = NONE;
    if (label != RP_SRB_NOLABEL) {
        uint64_t *newest = rp_hmap_get(&s->labels, label, 0);
        if (newest) {
            uint64_t p = *newest;
            if (p >= s->low && w_slot(s, p)->state == RP_SW_OUT) {
                w_slot(s, p)->state = RP_SW_OBSOLETE;
                w_slot(s, p)->sup = seq;
                sl->prev = p;
            }
            *newest = seq;
        } else {
            int rc = rp_hmap_put(&s->labels, label, 0, seq);
            if (rc < 0)
                return rc;
        }
    }
    s->next++;
    s->n_sent++;
    return RP_OK;
}

size_t rp_srbw_set_safe(rp_srbw_t *s, uint64_t upto, uint64_t *seqs, uint64_t *sup,
                        uint64_t *handles, size_t max) {
    if (upto > s->next)
        upto = s->next;
    size_t n = 0;
    uint64_t q = s->safe > s->low ? s->safe : s->low;
    for (; q < upto; q++) {
        rp_srbw_slot_t *sl = w_slot(s, q);
        uint64_t p = sl->prev;
        if (p == NONE || p < s->low)
            continue;
        rp_srbw_slot_t *ps = w_slot(s, p);
        if (ps->state == RP_SW_OBSOLETE && ps->sup == q) {
            if (n == max)
                break;                  /* resume here next call */
            ps->state = RP_SW_PURGED;   /* TP5: its successor is safe */
            seqs[n] = p;
            sup[n] = q;
            handles[n] = ps->handle;
            n++;
            s->n_purged++;
        }
    }
    /* q < upto only when we stopped at max; q > upto when the window had
     * already moved past upto (low), which says nothing about safety. */
    uint64_t end = q < upto ? q : upto;
    if (end > s->safe)
        s->safe = end;
    advance_low(s);
    return n;
}

size_t rp_srbw_set_stable(rp_srbw_t *s, uint64_t upto, uint64_t *handles, size_t max) {
    if (upto > s->next)
        upto = s->next;
    size_t n = 0;
    uint64_t q = s->stable > s->low ? s->stable : s->low;
    for (; q < upto; q++) {
        rp_srbw_slot_t *sl = w_slot(s, q);
        if (sl->state == RP_SW_OUT || sl->state == RP_SW_OBSOLETE) {
            if (n == max)
                break;
            sl->state = RP_SW_STABLE;
            handles[n++] = sl->handle;
            s->n_stable++;
        }
    }
    /* As in set_safe: never move `stable` past upto just because low did
     * (seqs below low may be purged, not stable). */
    uint64_t end = q < upto ? q : upto;
    if (end > s->stable)
        s->stable = end;
    if (s->stable > s->safe)
        s->safe = s->stable;            /* stable implies safe */
    advance_low(s);
    return n;
}

int rp_srbw_purged_by(const rp_srbw_t *s, uint64_t seq, uint64_t *sup) {
    /* A slot keeps its record until seq + cap reuses it. */
    if (seq >= s->next || s->next - seq > s->cap)
        return 0;
    const rp_srbw_slot_t *sl = w_slot(s, seq);
    if (sl->state != RP_SW_PURGED)
        return 0;
    /* The slot may hold a newer seq with the same index only if that seq was
     * sent, i.e. seq + cap < next, excluded above. */
    if (sup)
        *sup = sl->sup;
    return 1;
}
