/* Streams within a group: streams.h. */
#include "streams.h"

#include <stdlib.h>
#include <string.h>

void rp_streams_init(rp_streams_t *s) {
    memset(s, 0, sizeof(*s));
    s->all = 1;
    s->other.id = UINT32_MAX;
}

void rp_streams_free(rp_streams_t *s) {
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

rp_stream_t *rp_streams_get(rp_streams_t *s, uint32_t id) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->v[i].id == id) {
            s->last = i;
            return &s->v[i];
        }
    if (s->n >= RP_STREAMS_MAX)
        return &s->other;
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? 2 * s->cap : 8;
        rp_stream_t *nv = (rp_stream_t *)realloc(s->v, nc * sizeof(*nv));
        if (!nv)
            return &s->other;
        s->v = nv;
        s->cap = nc;
    }
    rp_stream_t *e = &s->v[s->n];
    memset(e, 0, sizeof(*e));
    e->id = id;
    s->last = s->n++;
    return e;
}

int rp_streams_set(rp_streams_t *s, uint32_t id, int on) {
    rp_stream_t *e = rp_streams_get(s, id);
    if (e == &s->other)
        return RP_ENOMEM;
    e->subscribed = (uint8_t)(on != 0);
    return RP_OK;
}

int rp_streams_wants_slow(rp_streams_t *s, uint32_t id) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->v[i].id == id)
            return s->v[i].subscribed;
    return 0;
}
