#include "outbox.h"

#include <stdlib.h>

int rp_out_init(rp_outbox_t *o, uint32_t mtu, uint32_t group, uint32_t src, uint32_t src_inc,
                size_t cap) {
    memset(o, 0, sizeof(*o));
    if (mtu < RP_DG_HDR + RP_MSG_HDR || mtu > RP_WIRE_MAX_DGRAM)
        return RP_EINVAL;
    o->mtu = mtu;
    o->group = group;
    o->src = src;
    o->src_inc = src_inc;
    o->cap = cap < 4 * (size_t)mtu ? 4 * (size_t)mtu : cap;
    o->reply_cap = RP_OUT_REPLY_CAP;
    o->buf = (uint8_t *)malloc(o->cap);
    o->dcap = 256;
    o->d = (rp_outd_t *)malloc(o->dcap * sizeof(rp_outd_t));
    if (!o->buf || !o->d) {
        rp_out_free(o);
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_out_free(rp_outbox_t *o) {
    rp_ac_free(o->ac);
    o->ac = NULL;
    free(o->buf);
    free(o->d);
    o->buf = NULL;
    o->d = NULL;
    o->cap = o->dcap = o->n = o->used = 0;
}

/* Finish open datagram k and append its descriptor. */
static int close_open(rp_outbox_t *o, int k) {
    if (!o->open[k])
        return RP_OK;
    if (o->n == o->dcap) {
        size_t nc = o->dcap * 2;
        rp_outd_t *nd = (rp_outd_t *)realloc(o->d, nc * sizeof(rp_outd_t));
        if (!nd)
            return RP_ENOMEM;
        o->d = nd;
        o->dcap = nc;
    }
    size_t len = rp_dgb_finish(&o->b[k]);
    o->open[k] = 0;
    if (len && o->auth && rp_auth_seal(o->auth, o->b[k].buf, len))
        len = 0;                    /* never send what could not be sealed */
    if (len == 0) {                 /* nothing in it: nothing to send */
        if (o->boff[k] + o->mtu == o->used)
            o->used = o->boff[k];
        return RP_OK;
    }
    o->d[o->n].dest = o->bdest[k];
    o->d[o->n].off = (uint32_t)o->boff[k];
    o->d[o->n].len = (uint32_t)len;
    o->n++;
    o->open[k] = 0;
    o->n_dgrams++;
    o->n_bytes += len;
    /* If this datagram is the last region in the buffer, give back the
     * unused part of its reservation. */
    if (o->boff[k] + o->mtu == o->used)
        o->used = o->boff[k] + len;
    return RP_OK;
}

/* Make sure mtu more bytes fit at the end of buf.  Open builders hold
 * pointers into buf, so fix them after a realloc. */
static int reserve(rp_outbox_t *o) {
    if (o->used + o->mtu <= o->cap)
        return RP_OK;
    size_t nc = o->cap * 2;
    while (nc < o->used + o->mtu)
        nc *= 2;
    uint8_t *nb = (uint8_t *)realloc(o->buf, nc);
    if (!nb)
        return RP_ENOMEM;
    o->buf = nb;
    o->cap = nc;
    for (int k = 0; k < 2; k++)
        if (o->open[k])
            o->b[k].buf = nb + o->boff[k];
    return RP_OK;
}

static int open_new(rp_outbox_t *o, int k, uint64_t dest) {
    if (reserve(o))
        return RP_ENOMEM;
    o->boff[k] = o->used;
    o->used += o->mtu;
    rp_dgb_begin(&o->b[k], o->buf + o->boff[k], o->mtu, o->group, o->src, o->src_inc, o->dseq++);
    o->b[k].mac_len = (uint16_t)o->mac_room;
    o->bdest[k] = dest;
    o->open[k] = 1;
    return RP_OK;
}

static uint8_t *out_msg(rp_outbox_t *o, uint64_t dest, uint8_t type, uint8_t flags, uint32_t sender,
                        uint32_t inc, uint32_t aux, uint64_t seq, size_t body_len);

/* A PING whose nonce is dest's cookie (addrcheck.h); its body the window. */
static void send_cookie(rp_outbox_t *o, uint64_t dest, int free_of_credit) {
    rp_addrcheck_t *ac = o->ac;
    size_t bytes = RP_DG_HDR + RP_MSG_HDR + 8 + o->mac_room;
    if (!rp_ac_cookie_sent(ac, dest, bytes, free_of_credit))
        return;
    uint64_t w = rp_ac_window(ac);
    uint8_t *p = out_msg(o, dest, RP_T_PING, 0, o->src, o->src_inc, 0, rp_ac_cookie(ac, dest, w), 8);
    if (p)
        rp_st64(p, w);
}

/* May a unicast message of body_len bytes go to dest?  Counts what it drops. */
static int reply_allowed(rp_outbox_t *o, uint64_t dest, size_t body_len) {
    size_t bytes = RP_MSG_HDR + body_len;
    if (o->reply_cap && o->used >= o->reply_cap) {
        o->drop_full_msgs++;
        o->drop_full_bytes += bytes;
        return 0;
    }
    if (!o->ac)
        return 1;
    /* a message that opens a datagram also costs the datagram's header */
    if (!(o->open[1] && o->bdest[1] == dest && rp_dgb_room(&o->b[1]) >= body_len))
        bytes += RP_DG_HDR + o->mac_room;
    int cookie = 0;
    int ok = rp_ac_charge(o->ac, dest, bytes, &cookie);
    if (cookie)
        send_cookie(o, dest, cookie == 2);
    return ok;
}

int rp_out_set_addrcheck(rp_outbox_t *o, double factor) {
    rp_ac_free(o->ac);
    o->ac = NULL;
    if (factor <= 0)
        return RP_OK;
    o->ac = rp_ac_new(factor);
    return o->ac ? RP_OK : RP_ENOMEM;
}

int rp_out_heard(rp_outbox_t *o, uint64_t src, uint8_t type, uint64_t seq, const uint8_t *body,
                 size_t len, int64_t now) {
    rp_addrcheck_t *ac = o->ac;
    if (!ac || src == RP_DEST_MCAST)
        return 1;
    if (type == RP_T_PONG && rp_ac_pong(ac, src, seq, body, len, now))
        return 1;
    int r = rp_ac_request(ac, src, RP_MSG_HDR + len, now);
    /* probes are answered, not cookied: a PONG must fit the PING's credit */
    if (r > 0 && type != RP_T_PING && type != RP_T_PONG)
        send_cookie(o, src, 0);
    return r >= 0;
}

uint8_t *rp_out_msg(rp_outbox_t *o, uint64_t dest, uint8_t type, uint8_t flags, uint32_t sender,
                    uint32_t inc, uint32_t aux, uint64_t seq, size_t body_len) {
    if (body_len > rp_out_max_body(o))
        return NULL;
    if (dest != RP_DEST_MCAST && !reply_allowed(o, dest, body_len))
        return NULL;
    return out_msg(o, dest, type, flags, sender, inc, aux, seq, body_len);
}

static uint8_t *out_msg(rp_outbox_t *o, uint64_t dest, uint8_t type, uint8_t flags, uint32_t sender,
                        uint32_t inc, uint32_t aux, uint64_t seq, size_t body_len) {
    int k = dest == RP_DEST_MCAST ? 0 : 1;
    if (o->open[k] && o->bdest[k] != dest) {
        if (close_open(o, k))
            return NULL;
    }
    if (o->open[k]) {
        uint8_t *p = rp_dgb_add(&o->b[k], type, flags, sender, inc, aux, seq, body_len);
        if (p)
            return p;
        if (close_open(o, k))
            return NULL;
    }
    if (open_new(o, k, dest))
        return NULL;
    return rp_dgb_add(&o->b[k], type, flags, sender, inc, aux, seq, body_len);
}

size_t rp_out_room(const rp_outbox_t *o, uint64_t dest) {
    int k = dest == RP_DEST_MCAST ? 0 : 1;
    if (!o->open[k] || o->bdest[k] != dest)
        return 0;
    return rp_dgb_room(&o->b[k]);
}

void rp_out_flush(rp_outbox_t *o) {
    /* Close in buffer order so descriptors stay in offset order. */
    int first = 0;
    if (o->open[0] && o->open[1])
        first = o->boff[0] < o->boff[1] ? 0 : 1;
    else if (o->open[1])
        first = 1;
    close_open(o, first);
    close_open(o, 1 - first);
}

void rp_out_clear(rp_outbox_t *o) {
    o->n = 0;
    o->used = 0;
    o->open[0] = o->open[1] = 0;
}

void rp_out_consume(rp_outbox_t *o, size_t k) {
    if (k >= o->n && !o->open[0] && !o->open[1]) {
        rp_out_clear(o);
        return;
    }
    if (k > o->n)
        k = o->n;
    memmove(o->d, o->d + k, (o->n - k) * sizeof(rp_outd_t));
    o->n -= k;
    /* Bytes stay where they are; the buffer is reclaimed on the next clear. */
}
