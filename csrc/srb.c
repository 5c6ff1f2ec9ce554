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
    q->cap = pow2_at_least(cap ? cap : 64);
    q->max_cap = max_cap ? max_cap : ((uint64_t)1 << 26);
    if (q->cap > q->max_cap)
        return RP_EINVAL;
    q->ring = (rp_srbq_slot_t *)calloc(q->cap, sizeof(rp_srbq_slot_t));
    if (!q->ring)
        return RP_ENOMEM;
    if (rp_hmap_init(&q->labels, 64, 0)) {
        free(q->ring);
        q->ring = NULL;
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_srbq_free(rp_srbq_t *q) {
    free(q->ring);
    q->ring = NULL;
    free(q->purged);
    q->purged = NULL;
    rp_hmap_free(&q->labels);
}

/* Make [head, upto] addressable. */
static int q_reserve(rp_srbq_t *q, uint64_t upto) {
    uint64_t need = upto - q->head + 1;
    if (need <= q->cap)
        return RP_OK;
    uint64_t ncap = pow2_at_least(need);
    if (ncap > q->max_cap)
        return RP_EFULL;
    rp_srbq_slot_t *nr = (rp_srbq_slot_t *)calloc(ncap, sizeof(rp_srbq_slot_t));
    if (!nr)
        return RP_ENOMEM;
    for (uint64_t s = q->head; s < q->tail; s++)
        nr[s & (ncap - 1)] = q->ring[s & (q->cap - 1)];
    free(q->ring);
    q->ring = nr;
    q->cap = ncap;
    return RP_OK;
}

static inline rp_srbq_slot_t *q_slot(rp_srbq_t *q, uint64_t seq) {
    return &q->ring[seq & (q->cap - 1)];
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

/* Extend the deliverable prefix [head, ready) over every slot no longer
 * empty, in seq order.  A queued labelled message entering it purges the
 * older queued one with its label (TP4): the newer is now certain to be
 * delivered (everything before it is here or purged). */
static void q_advance(rp_srbq_t *q) {
    if (q->ready < q->head)
        q->ready = q->head;
    while (q->ready < q->tail) {
        rp_srbq_slot_t *sl = q_slot(q, q->ready);
        if (sl->state == RP_SQ_EMPTY)
            break;
        if (sl->state == RP_SQ_QUEUED && sl->label != RP_SRB_NOLABEL) {
            uint64_t *newest = rp_hmap_get(&q->labels, sl->label, 0);
            if (newest) {
                rp_srbq_slot_t *old = q_slot(q, *newest);
                /* Without memory to hand the purge back, keep the old value:
                 * delivering it too is always allowed. */
                if (old->state == RP_SQ_QUEUED && q_note_purged(q, *newest, old->handle) == 0) {
                    old->state = RP_SQ_PURGED;          /* TP4 */
                    q->n_purged_queue++;
                }
                *newest = q->ready;
            } else {
                rp_hmap_put(&q->labels, sl->label, 0, q->ready);   /* no room: no purge */
            }
        }
        q->ready++;
    }
}

int rp_srbq_insert(rp_srbq_t *q, uint64_t seq, uint64_t label, uint64_t handle) {
    if (seq < q->head)
        return RP_SQ_R_OLD;
    if (seq < q->tail) {
        if (q_slot(q, seq)->state != RP_SQ_EMPTY)
            return RP_SQ_R_OLD;
    } else {
        int rc = q_reserve(q, seq);
        if (rc)
            return rc;
        q->tail = seq + 1;      /* slots in between are EMPTY (cleared on pop) */
    }
    rp_srbq_slot_t *sl = q_slot(q, seq);
    sl->state = RP_SQ_QUEUED;
    sl->label = label;
    sl->handle = handle;
    q->n_queued++;
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
    if (limit >= q->tail) {
        int rc = q_reserve(q, limit);
        if (rc)
            return rc;
        q->tail = limit + 1;
    }
    int64_t k = 0;
    uint64_t first = NONE, last = 0;
    for (uint64_t s = q->head; s <= limit; s++) {
        rp_srbq_slot_t *sl = q_slot(q, s);
        if (sl->state == RP_SQ_EMPTY) {
            sl->state = RP_SQ_PURGED;
            k++;
            if (first == NONE)
                first = s;
            last = s;
        }
    }
    q->n_purged_inferred += (uint64_t)k;
    q_advance(q);
    if (k && lo) {
        *lo = first;
        *hi = last;
    }
    return k;
}

int rp_srbq_mark_purged(rp_srbq_t *q, uint64_t seq) {
    if (seq < q->head)
        return 0;
    if (seq >= q->tail) {
        if (q_reserve(q, seq))
            return 0;
        q->tail = seq + 1;
    }
    rp_srbq_slot_t *sl = q_slot(q, seq);
    if (sl->state != RP_SQ_EMPTY)
        return 0;
    sl->state = RP_SQ_PURGED;
    q->n_purged_marked++;
    if (seq == q->ready)
        q_advance(q);
    return 1;
}

size_t rp_srbq_pop(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t max) {
    size_t n = 0;
    while (n < max && q->head < q->tail) {
        rp_srbq_slot_t *sl = q_slot(q, q->head);
        if (sl->state == RP_SQ_QUEUED) {
            if (sl->label != RP_SRB_NOLABEL) {
                uint64_t *newest = rp_hmap_get(&q->labels, sl->label, 0);
                if (newest && *newest == q->head)
                    rp_hmap_del(&q->labels, sl->label, 0, NULL);
            }
            handles[n] = sl->handle;
            if (seqs)
                seqs[n] = q->head;
            n++;
            q->n_delivered++;
        } else if (sl->state != RP_SQ_PURGED) {
            break;                      /* still missing: FIFO waits */
        }
        sl->state = RP_SQ_EMPTY;
        q->head++;
    }
    return n;
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
