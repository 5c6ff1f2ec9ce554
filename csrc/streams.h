/* Streams within a group (docs/api.md "Streams"): which stream ids this node
 * delivers, and per-stream counters.
 *
 * Every message has a stream id (0 unless its extension header says
 * otherwise, wire.h).  A node delivers the streams it subscribed to (all
 * when `all` is set); messages of the others are still tracked for
 * reliability -- gap detection, repair, logging, serving -- but never queued
 * for the application, so no Python object is made for them.
 *
 * Counters are kept for at most RP_STREAMS_MAX stream ids (the subscribed
 * ones first); messages of further ids a peer invents are counted together
 * under `other`, so a hostile sender cannot grow this table.
 */
#ifndef RP_STREAMS_H
#define RP_STREAMS_H

#include "rp_common.h"

#define RP_STREAMS_MAX 1024

typedef struct {
    uint32_t id;
    uint8_t subscribed;
    uint64_t received, filtered, delivered, bytes;   /* whole messages; payload bytes received */
} rp_stream_t;

typedef struct {
    uint8_t all;               /* deliver every stream */
    rp_stream_t *v;
    uint32_t n, cap;
    uint32_t last;             /* cache: index of the last stream looked up */
    rp_stream_t other;         /* ids beyond the table */
} rp_streams_t;

void rp_streams_init(rp_streams_t *s);
void rp_streams_free(rp_streams_t *s);

/* The entry of stream id (created if there is room, else &s->other). */
rp_stream_t *rp_streams_get(rp_streams_t *s, uint32_t id);

/* Subscribe (on = 1) or unsubscribe; RP_OK or RP_ENOMEM (table full). */
int rp_streams_set(rp_streams_t *s, uint32_t id, int on);

/* Deliver every stream (all = 1), or only the subscribed ones. */
RP_INLINE void rp_streams_all(rp_streams_t *s, int all) { s->all = (uint8_t)(all != 0); }

/* A whole message of stream id arrived (len payload bytes); on: it is
 * delivered here (rp_streams_wants). */
RP_INLINE void rp_streams_count(rp_streams_t *s, uint32_t id, uint32_t len, int on) {
    rp_stream_t *e = s->last < s->n && s->v[s->last].id == id ? &s->v[s->last] : rp_streams_get(s, id);
    e->received++;
    e->bytes += len;
    if (!on)
        e->filtered++;
}

/* A message of stream id was handed to the application. */
RP_INLINE void rp_streams_delivered(rp_streams_t *s, uint32_t id) {
    rp_stream_t *e = s->last < s->n && s->v[s->last].id == id ? &s->v[s->last] : rp_streams_get(s, id);
    e->delivered++;
}

/* Would a message of stream id be delivered?  (No counting.) */
int rp_streams_wants_slow(rp_streams_t *s, uint32_t id);
RP_INLINE int rp_streams_wants(rp_streams_t *s, uint32_t id) {
    return s->all || rp_streams_wants_slow(s, id);
}

#endif
