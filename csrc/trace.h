/* Trace events, recorded in columns so a writer can hand whole arrays to
 * pyarrow without touching each event.  Recording is a few stores; when the
 * buffer is full the event is counted as dropped (tracing never blocks the
 * data path).  Schema: docs/traces.md. */
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

typedef struct {
    size_t cap, n;
    int64_t *t;
    uint8_t *ev;
    uint32_t *sender, *inc, *size, *aux;
    uint64_t *seq, *peer;
    uint64_t dropped;
} rp_trace_t;

int  rp_trace_init(rp_trace_t *tr, size_t cap);
void rp_trace_free(rp_trace_t *tr);

RP_INLINE void rp_trace(rp_trace_t *tr, int64_t t, uint8_t ev, uint32_t sender, uint32_t inc,
                        uint64_t seq, uint32_t size, uint64_t peer, uint32_t aux) {
    if (RP_UNLIKELY(tr->n >= tr->cap)) {
        tr->dropped++;
        return;
    }
    size_t i = tr->n++;
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
