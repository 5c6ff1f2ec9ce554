/* Trace events, recorded in columns so a writer can hand whole arrays to
 * pyarrow without touching each event.  Recording is a few stores; when the
 * buffer is full the event is counted as dropped (tracing never blocks the
 * data path).  Schema: docs/traces.md.
 *
 * Per-message events (send, recv, recv_dup, deliver, rtx_served, purge) of
 * consecutive ids that agree in everything else -- same time, which a whole
 * batch shares, same stream, size, peer and detail -- extend the previous
 * event's `count` instead of taking a row: at line rate a batch of 65,536
 * in-order deliveries is one row, not 65,536, and nothing is lost (the
 * analysis expands runs back into ids). */
#ifndef RP_TRACE_H
#define RP_TRACE_H

#include "rp_common.h"

enum {
    RP_EV_SEND = 1,        /* published: sender/inc/seq, size = payload bytes */
    RP_EV_RECV = 2,        /* first receipt: aux = 1 if it filled a gap, 2 if a repair */
    RP_EV_RECV_DUP = 3,    /* duplicate receipt */
    RP_EV_DELIVER = 4,     /* handed to the application */
    RP_EV_GAP = 5,         /* gap detected: seq = first missing, size = count */
    RP_EV_GOSSIP_OUT = 6,  /* gossip sent: peer = target, size = bytes, aux = missing ids */
    RP_EV_GOSSIP_IN = 7,   /* gossip received: peer = gossiper, size = bytes */
    RP_EV_RTX_REQ = 8,     /* RTX to a logger: peer = logger, size = ids */
    RP_EV_RTX_SERVED = 9,  /* repair sent: peer = requester, aux = 1 if as logger */
    RP_EV_GCNOTE = 10,     /* GcNOTE: aux = 0 sent / 1 received, size = ids */
    RP_EV_HEARTBEAT = 11,  /* heartbeat: aux = 0 sent / 1 received */
    RP_EV_MEMBER = 12,     /* membership change: sender = member, aux = new status */
    RP_EV_PURGE = 13,      /* obsolete message dropped (FIFO-SRB) */
    RP_EV_LOST = 14,       /* ids given up: seq = first, size = count */
    RP_EV__COUNT
};

/* Event names as traces store them (docs/traces.md); [0] is NULL. */
extern const char *const rp_trace_event_names[RP_EV__COUNT];

/* The newest row's key, packed in one cache line: comparing an event with
 * it touches one line instead of one per column. */
typedef struct {
    int64_t t;
    uint64_t next_seq;     /* seq + count of the newest row */
    uint64_t peer;
    uint32_t sender, inc, size, aux;
    uint8_t ev;            /* 0: no row can be extended */
} rp_trace_tail_t;

typedef struct {
    rp_trace_tail_t tail;
    size_t cap, n;
    int64_t *t;
    uint8_t *ev;
    uint32_t *sender, *inc, *size, *aux;
    uint32_t *count;       /* ids seq .. seq + count - 1 (1 for most events) */
    uint64_t *seq, *peer;
    uint64_t dropped;
} rp_trace_t;

int  rp_trace_init(rp_trace_t *tr, size_t cap);

/* Forget every row (after a reader took them): no run continues past it. */
RP_INLINE void rp_trace_clear(rp_trace_t *tr) {
    tr->n = 0;
    tr->tail.ev = 0;
}
void rp_trace_free(rp_trace_t *tr);

/* Events that stand for one message each, and so may form runs. */
#define RP_EV_RUNS ((1u << RP_EV_SEND) | (1u << RP_EV_RECV) | (1u << RP_EV_RECV_DUP) | \
                    (1u << RP_EV_DELIVER) | (1u << RP_EV_RTX_SERVED) | (1u << RP_EV_PURGE))

RP_INLINE void rp_trace(rp_trace_t *tr, int64_t t, uint8_t ev, uint32_t sender, uint32_t inc,
                        uint64_t seq, uint32_t size, uint64_t peer, uint32_t aux) {
    rp_trace_tail_t *L = &tr->tail;
    if (L->ev == ev && L->next_seq == seq && L->t == t && L->sender == sender && L->inc == inc &&
        L->size == size && L->peer == peer && L->aux == aux) {
        size_t j = tr->n - 1;
        if (RP_LIKELY(tr->count[j] != UINT32_MAX)) {
            tr->count[j]++;
            L->next_seq++;
            return;
        }
    }
    if (RP_UNLIKELY(tr->n >= tr->cap)) {
        tr->dropped++;
        return;
    }
    size_t i = tr->n++;
    tr->count[i] = 1;
    if ((RP_EV_RUNS >> ev) & 1u) {
        L->ev = ev;
        L->t = t;
        L->next_seq = seq + 1;
        L->sender = sender;
        L->inc = inc;
        L->size = size;
        L->peer = peer;
        L->aux = aux;
    } else {
        L->ev = 0;
    }
    tr->t[i] = t;
    tr->ev[i] = ev;
    tr->sender[i] = sender;
    tr->inc[i] = inc;
    tr->seq[i] = seq;
    tr->size[i] = size;
    tr->peer[i] = peer;
    tr->aux[i] = aux;
}

#endif
