#include "flowack.h"

#include <stdlib.h>

int rp_flowack_init(rp_flowack_t *f, uint64_t limit, uint32_t every, int64_t stale_ns, int64_t resend_ns) {
    memset(f, 0, sizeof(*f));
    f->limit = limit;
    f->every = every ? every : 1;
    f->stale_ns = stale_ns;
    f->resend_ns = resend_ns;
    return RP_OK;
}

void rp_flowack_free(rp_flowack_t *f) {
    free(f->m);
    f->m = NULL;
    f->n = f->cap = 0;
    free(f->cum);
    f->cum = NULL;
    f->mask = 0;
}

void rp_flowack_set_bytes(rp_flowack_t *f, uint64_t limit_bytes) {
    f->limit_bytes = limit_bytes;
    if (f->cum && (!limit_bytes || f->mask < f->limit)) {
        free(f->cum);                   /* off, or too small for a larger window: a new one later */
        f->cum = NULL;
        f->mask = 0;
    }
}

void rp_flowack_arm_bytes(rp_flowack_t *f, const rp_node_t *n) {
    if (!f->limit_bytes || !f->limit || f->cum)
        return;
    uint64_t cap = 1024;
    while (cap <= f->limit && cap < ((uint64_t)1 << 32))
        cap <<= 1;
    uint64_t *c = (uint64_t *)calloc(cap, sizeof(uint64_t));
    if (!c) {
        f->limit_bytes = 0;             /* the seq window still holds */
        return;
    }
    f->cum = c;
    f->mask = cap - 1;
    f->pub_bytes = 0;
    f->cum_from = n->next_seq;
}

static int by_id(const void *a, const void *b) {
    uint32_t x = ((const rp_flowmember_t *)a)->id, y = ((const rp_flowmember_t *)b)->id;
    return x < y ? -1 : x > y;
}

static rp_flowmember_t *find(rp_flowack_t *f, uint32_t id) {
    uint32_t lo = 0, hi = f->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (f->m[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->n && f->m[lo].id == id ? &f->m[lo] : NULL;
}

int rp_flowack_set_members(rp_flowack_t *f, const uint32_t *ids, const uint32_t *incs,
                           const uint64_t *addrs, const uint8_t *counts, uint32_t n, int64_t now) {
    if (n > RP_FLOWACK_MAX_MEMBERS)
        return RP_EINVAL;
    rp_flowmember_t *m = (rp_flowmember_t *)calloc(n ? n : 1, sizeof(*m));
    if (!m)
        return RP_ENOMEM;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        rp_flowmember_t *e = NULL;
        for (uint32_t j = 0; j < k; j++)       /* a duplicate id: the last entry wins */
            if (m[j].id == ids[i])
                e = &m[j];
        if (!e)
            e = &m[k++];
        rp_flowmember_t *old = find(f, ids[i]);
        if (old && old->inc == incs[i] && old->addr == addrs[i]) {
            *e = *old;                          /* the same member: keep what it acknowledged */
        } else {
            memset(e, 0, sizeof(*e));
            e->heard = now;
        }
        e->id = ids[i];
        e->inc = incs[i];
        e->addr = addrs[i];
        e->counts = counts[i] != 0;
    }
    qsort(m, k, sizeof(*m), by_id);
    free(f->m);
    f->m = m;
    f->n = f->cap = k;
    return RP_OK;
}

void rp_flowack_rx(rp_node_t *n, const rp_msgview_t *m, const rp_dghdr_t *h, uint64_t src,
                   int64_t now) {
    rp_flowack_t *f = n->flowack;
    if (!f)
        return;
    rp_flowmember_t *e = find(f, h->source);
    /* Only a member's own report, from where the membership says it is,
     * about our current stream, and never beyond what we sent: a forged
     * frontier would open the window (wire.h: DATA's rule, by analogy). */
    if (!e || e->inc != h->source_inc || e->addr != src || m->sender != n->id ||
        m->inc != n->inc || m->seq > n->next_seq) {
        f->n_rejected++;
        return;
    }
    if (!e->counts)
        return;                         /* a member that does not hold the window (a logger) */
    f->n_rx++;
    if (m->seq > e->front) {
        e->front = m->seq;
        e->heard = now;
        e->behind_since = 0;
        f->moved = 1;
        if (f->last_move) {
            uint64_t us = (uint64_t)(now > f->last_move ? now - f->last_move : 0) / 1000;
            int b = 0;
            while (us > 1 && b < 15) {
                us >>= 1;
                b++;
            }
            f->gap_hist[b]++;
        }
        f->last_move = now;
    }
}

void rp_flowack_update(rp_flowack_t *f, const rp_node_t *n, int64_t now) {
    uint64_t least = UINT64_MAX;
    int active = 0;
    for (uint32_t i = 0; i < f->n; i++) {
        rp_flowmember_t *e = &f->m[i];
        if (!e->counts)
            continue;
        if (e->front >= n->next_seq) {
            e->heard = now;             /* caught up: its silence does not count */
            e->behind_since = 0;
        } else if (!e->behind_since) {
            e->behind_since = now;
        }
        int64_t since = e->heard > e->behind_since ? e->heard : e->behind_since;
        if (e->front < n->next_seq && f->stale_ns && now - since > f->stale_ns) {
            if (e->behind_since != -1)
                f->n_stale++;
            e->behind_since = -1;       /* counted once until it acknowledges again */
            continue;
        }
        active = 1;
        if (e->front < least)
            least = e->front;
    }
    f->active = active;
    f->front = active ? least : n->next_seq;
}

/* How far our application has taken a sender's stream: its received
 * frontier less what still waits for the application (`backlog`: the
 * peer's own FIFO queue, or the node's unordered delivery queue, every
 * sender's alike).  A receiver that acknowledged what its loop received
 * let the sender fill its delivery queue: the queueing the window is for
 * moved from the network to the application, unbounded (at line rate, 2/3
 * of the p99 was waiting there).  With nothing waiting it is the received
 * frontier. */
static uint64_t taken_front(const rp_node_t *n, const rp_peer_t *p, uint64_t backlog) {
    uint64_t fr = rp_seqtrack_contiguous(&p->st);
    if (p->q)
        backlog = rp_srbq_pending(p->q);
    return fr > backlog ? fr - backlog : 0;
}

/* Queue the acknowledgments due; idle: nothing waits (the receive batch
 * drained the socket, or the application took the whole queue). */
static int ack_due(rp_node_t *n, int idle, int64_t now) {
    rp_flowack_t *f = n->flowack;
    uint64_t backlog = n->fifo || n->no_deliver ? 0 : rp_node_pending(n);
    int queued = 0;
    for (uint32_t i = 0; i < f->n; i++) {
        rp_flowmember_t *e = &f->m[i];
        if (!e->addr || e->id == n->id)
            continue;
        uint32_t slot = rp_node_find_peer(n, e->id, e->inc);
        if (slot == RP_NO_SLOT)
            continue;
        uint64_t fr = taken_front(n, n->peers[slot], backlog);
        /* Never below what we said: the estimate dips while other senders'
         * messages queue up, and what was taken stays taken. */
        uint64_t ack = fr > e->sent ? fr : e->sent;
        /* Every `every` messages; else, once nothing waits, at most one per
         * resend_ns: a sender of lone messages to many receivers must not
         * get an acknowledgment per message from each of them. */
        int idle_due = idle && ack && now - e->sent_t >= f->resend_ns;
        int due = fr > e->sent ? (fr - e->sent >= f->every || idle_due) : idle_due;
        if (!due)
            continue;
        if (!rp_node_out_msg(n, e->addr, RP_T_FLOWACK, 0, e->id, e->inc, 0, ack, 0))
            break;                      /* the outbox is full: next time */
        e->sent = ack;
        e->sent_t = now;
        f->n_tx++;
        queued++;
    }
    return queued;
}

int rp_flowack_after_batch(rp_node_t *n, int drained, int64_t now) {
    rp_flowack_t *f = n->flowack;
    if (!f)
        return 0;
    f->n_batches++;
    int r = ack_due(n, drained, now) ? RP_FLOWACK_QUEUED : 0;
    int moved = f->moved;
    f->moved = 0;
    if (moved)
        rp_flowack_update(f, n, now);
    return r | (moved ? RP_FLOWACK_MOVED : 0);
}

int rp_flowack_after_take(rp_node_t *n, int64_t now) {
    rp_flowack_t *f = n->flowack;
    if (!f || !f->n)
        return 0;
    return ack_due(n, rp_node_pending(n) == 0, now);
}
