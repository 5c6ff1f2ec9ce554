/* Reassembly of large messages: frag.h. */
#include "frag.h"

#include <stdlib.h>
#include <string.h>

const char *const rp_frag_drop_names[RP_FRAG_D__COUNT] = {
    [RP_FRAG_D_BOUND] = "bound",
    [RP_FRAG_D_DEAD] = "dead",
    [RP_FRAG_D_LOST] = "lost",
    [RP_FRAG_D_BAD] = "bad",
};

void rp_frag_init(rp_frag_t *f, uint64_t max_bytes) {
    memset(f, 0, sizeof(*f));
    f->max_bytes = max_bytes;
}

static void part_free(rp_fragpart_t *m) {
    free(m->buf);
    free(m->bits);
    free(m);
}

/* A buffer of at least need bytes: a spare one if it fits, else new. */
static uint8_t *buf_get(rp_frag_t *f, size_t need, size_t *cap) {
    for (int i = 0; i < RP_FRAG_SPARES; i++)
        if (f->spare[i] && f->spare_cap[i] >= need && f->spare_cap[i] <= 2 * need + 65536) {
            uint8_t *b = f->spare[i];
            *cap = f->spare_cap[i];
            f->spare[i] = NULL;
            f->spare_bytes -= *cap;
            return b;
        }
    *cap = need;
    f->buf_fresh++;
    return (uint8_t *)malloc(need);
}

/* Keep m's buffer for a later message: in an empty spare slot within the
 * byte bound, or instead of the smallest spare when m's is larger. */
static void buf_keep(rp_frag_t *f, rp_fragpart_t *m) {
    int k = -1, small = 0;
    for (int i = 0; i < RP_FRAG_SPARES; i++) {
        if (!f->spare[i]) {
            if (k < 0)
                k = i;
        } else if (!f->spare[small] || f->spare_cap[i] < f->spare_cap[small]) {
            small = i;
        }
    }
    if (k < 0 || f->spare_bytes + m->cap > RP_FRAG_SPARE_BYTES) {
        k = small;          /* full: replace the smallest, if m's is larger */
        if (!f->spare[k] || f->spare_cap[k] >= m->cap ||
            f->spare_bytes - f->spare_cap[k] + m->cap > RP_FRAG_SPARE_BYTES)
            return;
        f->spare_bytes -= f->spare_cap[k];
        free(f->spare[k]);
    }
    f->spare[k] = m->buf;
    f->spare_cap[k] = m->cap;
    f->spare_bytes += m->cap;
    m->buf = NULL;
}

void rp_frag_free(rp_frag_t *f) {
    for (uint32_t i = 0; i < f->n; i++)
        part_free(f->v[i]);
    while (f->rhead) {
        rp_fragpart_t *m = f->rhead;
        f->rhead = m->next;
        part_free(m);
    }
    f->rtail = NULL;
    f->nready = 0;
    free(f->v);
    f->v = NULL;
    for (int i = 0; i < RP_FRAG_SPARES; i++) {
        free(f->spare[i]);
        f->spare[i] = NULL;
    }
    f->spare_bytes = 0;
    f->n = f->cap = 0;
    f->bytes = 0;
}

static void tomb_add(rp_frag_t *f, uint32_t slot, uint64_t first) {
    uint64_t *t = f->tomb[f->ntomb++ % RP_FRAG_TOMBS];
    t[0] = slot;
    t[1] = first;
}

static int tomb_has(const rp_frag_t *f, uint32_t slot, uint64_t first) {
    uint32_t k = f->ntomb < RP_FRAG_TOMBS ? f->ntomb : RP_FRAG_TOMBS;
    for (uint32_t i = 0; i < k; i++)
        if (f->tomb[i][0] == slot && f->tomb[i][1] == first)
            return 1;
    return 0;
}

/* Remove v[i] (order is not kept: the table is small and searched whole). */
static void part_remove(rp_frag_t *f, uint32_t i) {
    rp_fragpart_t *m = f->v[i];
    f->bytes -= m->x.total;
    f->v[i] = f->v[--f->n];
    part_free(m);
}

static void drop_at(rp_frag_t *f, uint32_t i, int reason) {
    tomb_add(f, f->v[i]->slot, f->v[i]->first);
    f->dropped[reason]++;
    part_remove(f, i);
}

static int32_t find(const rp_frag_t *f, uint32_t slot, uint64_t first) {
    for (uint32_t i = 0; i < f->n; i++)
        if (f->v[i]->first == first && f->v[i]->slot == slot)
            return (int32_t)i;
    return -1;
}

/* Make room for need more bytes and one more partial: drop the oldest
 * partials while they are stale.  -1: it can never fit; -2: not now (the
 * room is held by partials still progressing or by whole messages waiting
 * for the application, which are never dropped). */
static int make_room(rp_frag_t *f, uint64_t need, int64_t now) {
    if (need > f->max_bytes)
        return -1;
    while (f->n && (f->bytes + need > f->max_bytes || f->n >= RP_FRAG_MAX_PARTS)) {
        uint32_t old = 0;
        for (uint32_t i = 1; i < f->n; i++)
            if (f->v[i]->t_last < f->v[old]->t_last)
                old = i;
        if (now - f->v[old]->t_last < RP_FRAG_STALE_NS)
            return -2;
        drop_at(f, old, RP_FRAG_D_BOUND);
    }
    return f->bytes + need > f->max_bytes || f->n >= RP_FRAG_MAX_PARTS ? -2 : 0;
}

static rp_fragpart_t *part_new(rp_frag_t *f, uint32_t slot, uint64_t first, const rp_msgext_t *x,
                               int64_t now) {
    if (f->n == f->cap) {
        uint32_t nc = f->cap ? 2 * f->cap : 16;
        rp_fragpart_t **nv = (rp_fragpart_t **)realloc(f->v, nc * sizeof(*nv));
        if (!nv)
            return NULL;
        f->v = nv;
        f->cap = nc;
    }
    rp_fragpart_t *m = (rp_fragpart_t *)calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->buf = buf_get(f, (size_t)RP_EXT_HDR + x->total, &m->cap);
    m->bits = (uint64_t *)calloc((x->count + 63) / 64, 8);
    if (!m->buf || !m->bits) {
        part_free(m);
        return NULL;
    }
    m->slot = slot;
    m->first = first;
    m->count = x->count;
    m->born = f->born++;
    m->t = m->t_last = now;
    m->x = *x;
    m->x.index = 0;
    rp_msgext_t whole = m->x;
    whole.count = 1;            /* the stored form of the whole message */
    rp_msgext_store(m->buf, &whole);
    f->v[f->n++] = m;
    f->bytes += x->total;
    return m;
}

int rp_frag_add(rp_frag_t *f, uint32_t slot, uint64_t seq, const rp_msgext_t *x,
                const uint8_t *data, uint32_t len, int64_t now, rp_fragpart_t **out) {
    uint64_t first = seq - x->index;
    if (seq < x->index || tomb_has(f, slot, first))
        return RP_FRAG_IGNORED;
    int32_t i = find(f, slot, first);
    rp_fragpart_t *m;
    if (i < 0) {
        int room = make_room(f, x->total, now);
        if (room == -2)
            return RP_FRAG_FULL;
        if (room < 0 || !(m = part_new(f, slot, first, x, now))) {
            tomb_add(f, slot, first);
            f->dropped[RP_FRAG_D_BOUND]++;
            return RP_FRAG_DROPPED;
        }
    } else {
        m = f->v[i];
        if (m->x.count != x->count || m->x.total != x->total || m->x.stream != x->stream ||
            m->x.label != x->label) {
            drop_at(f, (uint32_t)i, RP_FRAG_D_BAD);
            return RP_FRAG_DROPPED;
        }
    }
    uint64_t bit = 1ull << (x->index & 63);
    if (m->bits[x->index >> 6] & bit)
        return RP_FRAG_IGNORED;          /* the caller's tracker lets no duplicate through */
    m->bits[x->index >> 6] |= bit;
    m->got++;
    m->t_last = now;
    f->fragments++;
    if (len)
        memcpy(m->buf + RP_EXT_HDR + (uint64_t)x->index * rp_msgext_chunk(x->total, x->count), data,
               len);
    if (m->got < m->count)
        return RP_FRAG_PARTIAL;
    *out = m;
    return RP_FRAG_WHOLE;
}

void rp_frag_done(rp_frag_t *f, rp_fragpart_t *m) {
    for (uint32_t i = 0; i < f->n; i++)
        if (f->v[i] == m) {
            f->whole++;
            buf_keep(f, m);
            part_remove(f, i);
            return;
        }
}

void rp_frag_ready(rp_frag_t *f, rp_fragpart_t *m) {
    for (uint32_t i = 0; i < f->n; i++)
        if (f->v[i] == m) {
            f->v[i] = f->v[--f->n];       /* out of the partials; its bytes still count */
            break;
        }
    f->whole++;
    m->next = NULL;
    if (f->rtail)
        f->rtail->next = m;
    else
        f->rhead = m;
    f->rtail = m;
    f->nready++;
}

void rp_frag_pop(rp_frag_t *f) {
    rp_fragpart_t *m = f->rhead;
    if (!m)
        return;
    f->rhead = m->next;
    if (!f->rhead)
        f->rtail = NULL;
    f->nready--;
    f->bytes -= m->x.total;
    buf_keep(f, m);
    part_free(m);
}

void rp_frag_forget(rp_frag_t *f, uint32_t slot) {
    uint32_t i = 0;
    while (i < f->n) {
        if (f->v[i]->slot == slot)
            part_remove(f, i);             /* moves the last partial into i */
        else
            i++;
    }
    rp_fragpart_t **pp = &f->rhead, *last = NULL;
    while (*pp) {
        rp_fragpart_t *m = *pp;
        if (m->slot == slot) {
            *pp = m->next;
            f->nready--;
            f->bytes -= m->x.total;
            part_free(m);
        } else {
            last = m;
            pp = &m->next;
        }
    }
    f->rtail = last;
    uint32_t k = f->ntomb < RP_FRAG_TOMBS ? f->ntomb : RP_FRAG_TOMBS;
    for (uint32_t t = 0; t < k; t++)
        if (f->tomb[t][0] == slot)
            f->tomb[t][0] = UINT64_MAX;
}

void rp_frag_undo(rp_frag_t *f, rp_fragpart_t *m, uint32_t index) {
    (void)f;
    m->bits[index >> 6] &= ~(1ull << (index & 63));
    m->got--;
    f->fragments--;
}

/* Does m lack a fragment with a seq in [lo, hi]? */
static int misses_in(const rp_fragpart_t *m, uint64_t lo, uint64_t hi) {
    uint64_t a = lo > m->first ? lo - m->first : 0;
    uint64_t b = hi - m->first < m->count - 1 ? hi - m->first : m->count - 1;
    if (hi < m->first)
        return 0;
    for (uint64_t i = a; i <= b; i++)
        if (!(m->bits[i >> 6] & (1ull << (i & 63))))
            return 1;
    return 0;
}

uint32_t rp_frag_drop(rp_frag_t *f, uint32_t slot, int all, uint64_t lo, uint64_t hi, int reason,
                      uint64_t *firsts, uint32_t max) {
    uint32_t k = 0, i = 0;
    while (i < f->n) {
        rp_fragpart_t *m = f->v[i];
        if (m->slot == slot && (all || misses_in(m, lo, hi))) {
            if (k == max)
                break;                     /* the caller calls again for the rest */
            if (firsts)
                firsts[k] = m->first;
            k++;
            drop_at(f, i, reason);     /* moves the last partial into i */
        } else {
            i++;
        }
    }
    return k;
}
