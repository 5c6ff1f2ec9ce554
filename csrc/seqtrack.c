#include "seqtrack.h"

int rp_seqtrack_init(rp_seqtrack_t *t, uint64_t base, uint64_t max_gap, uint32_t max_intervals) {
    if (base >= RP_SEQ_LIMIT || max_gap == 0)
        return RP_EINVAL;
    memset(t, 0, sizeof(*t));
    t->base = base;
    t->next = base;
    t->max_gap = max_gap;
    return rp_iset_init(&t->missing, 8, max_intervals);
}

void rp_seqtrack_free(rp_seqtrack_t *t) {
    rp_iset_free(&t->missing);
}

/* Slow path of accept: anything that is not exactly `next`. */
static int accept_slow(rp_seqtrack_t *t, uint64_t seq, uint64_t *glo, uint64_t *ghi) {
    if (seq < t->next) {
        if (seq < t->base || !t->missing.n) {
            t->n_dup++;
            return RP_ACC_DUP;
        }
        int64_t r = rp_iset_remove(&t->missing, seq, seq);
        if (r == 1) {
            t->n_fill++;
            return RP_ACC_FILL;
        }
        if (r < 0) {            /* splitting an interval needed memory */
            t->n_nomem++;
            return RP_ACC_NOMEM;
        }
        t->n_dup++;
        return RP_ACC_DUP;
    }
    if (seq >= RP_SEQ_LIMIT || seq - t->next > t->max_gap) {
        t->n_far++;
        return RP_ACC_FAR;
    }
    /* seq > next: [next, seq-1] becomes missing. */
    int64_t r = rp_iset_add(&t->missing, t->next, seq - 1);
    if (r < 0) {
        t->n_nomem++;
        return RP_ACC_NOMEM;
    }
    if (glo) {
        *glo = t->next;
        *ghi = seq - 1;
    }
    t->next = seq + 1;
    t->n_new++;
    t->n_gaps++;
    return RP_ACC_NEW;
}

int rp_seqtrack_accept(rp_seqtrack_t *t, uint64_t seq, uint64_t *glo, uint64_t *ghi) {
    if (glo) {
        *glo = 1;
        *ghi = 0;
    }
    if (RP_LIKELY(seq == t->next && seq < RP_SEQ_LIMIT)) {
        t->next = seq + 1;
        t->n_new++;
        return RP_ACC_NEW;
    }
    return accept_slow(t, seq, glo, ghi);
}

int64_t rp_seqtrack_heartbeat(rp_seqtrack_t *t, uint64_t seq, uint64_t *glo, uint64_t *ghi) {
    if (glo) {
        *glo = 1;
        *ghi = 0;
    }
    if (seq < t->next)
        return 0;
    /* Same bound as accept(): a jump of at most max_gap past next. */
    if (seq >= RP_SEQ_LIMIT || seq - t->next > t->max_gap) {
        t->n_far++;
        return -RP_ACC_FAR;
    }
    int64_t r = rp_iset_add(&t->missing, t->next, seq);
    if (r < 0) {
        /* Always RP_ENOMEM: the iset's RP_EFULL (-3) is the same number as
         * -RP_ACC_FAR and would read as "too far ahead". */
        t->n_nomem++;
        return RP_ENOMEM;
    }
    if (glo) {
        *glo = t->next;
        *ghi = seq;
    }
    t->next = seq + 1;
    t->n_gaps++;
    return r;
}

size_t rp_seqtrack_accept_batch(rp_seqtrack_t *t, const uint64_t *seqs, size_t n, uint8_t *out) {
    size_t good = 0;
    uint64_t next = t->next;
    uint64_t fast = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = seqs[i];
        if (RP_LIKELY(s == next && s < RP_SEQ_LIMIT)) {
            next = s + 1;
            fast++;
            out[i] = RP_ACC_NEW;
            good++;
            continue;
        }
        t->next = next;
        int r = accept_slow(t, s, NULL, NULL);
        next = t->next;
        out[i] = (uint8_t)r;
        good += (r == RP_ACC_NEW || r == RP_ACC_FILL);
    }
    t->next = next;
    t->n_new += fast;
    return good;
}

int64_t rp_seqtrack_forget(rp_seqtrack_t *t, uint64_t lo, uint64_t hi) {
    if (lo > hi)
        return RP_EINVAL;
    return rp_iset_remove(&t->missing, lo, hi);
}

int rp_seqtrack_received(const rp_seqtrack_t *t, uint64_t seq) {
    if (seq < t->base || seq >= t->next)
        return 0;
    return !rp_iset_contains(&t->missing, seq);
}
