/* Outbox: datagrams a node wants sent, packed and laid out for batch I/O.
 *
 * Messages are appended to an open datagram per stream: one for multicast
 * and one for unicast (closed whenever the unicast destination changes).
 * A datagram is closed when the next message does not fit the MTU.  The
 * finished datagrams sit back to back in one buffer with a descriptor each,
 * so a transport can hand runs of them to sendmmsg, or to one UDP GSO send
 * when consecutive datagrams go to the same place with the same size.
 *
 * Destinations are opaque 64-bit addresses chosen by the driver (an IPv4
 * address and port, a simulator node index, ...); RP_DEST_MCAST is the group.
 *
 * Unicast is bounded (issue 14: a flood must not grow the outbox or turn
 * the node into an amplifier).  A unicast message is dropped, and counted
 * by reason, when the outbox holds reply_cap bytes or more (the socket is
 * behind: a requester asks again, our own requests are retried), or when
 * its destination has not proven it receives there and its credit is
 * spent (addrcheck.h).  That covers requests we send on our own too: in a
 * group without a key a forged JOIN or MEMBERS entry names any address,
 * and our gossip to it would flood that address; a member that really is
 * there answers the cookie and is validated within a round trip.  The
 * node's own stream (multicast) is never dropped for either.
 */
#ifndef RP_OUTBOX_H
#define RP_OUTBOX_H

#include "addrcheck.h"
#include "auth.h"
#include "wire.h"

#define RP_DEST_MCAST UINT64_MAX

typedef struct {
    uint64_t dest;
    uint32_t off;
    uint32_t len;
} rp_outd_t;

typedef struct {
    uint8_t *buf;
    size_t cap, used;        /* finished + open datagrams occupy [0, used) */
    rp_outd_t *d;
    size_t n, dcap;          /* finished datagrams */
    uint32_t mtu;            /* largest datagram */
    uint32_t group, src, src_inc;
    uint32_t dseq;           /* per-source datagram counter */
    /* open datagrams: [0] multicast, [1] unicast */
    rp_dgb_t b[2];
    size_t boff[2];
    uint64_t bdest[2];
    int open[2];
    uint64_t n_dgrams, n_bytes;
    /* keyed group: every datagram gets a MAC trailer (auth.h), sealed when
     * it is closed, so nothing leaves the outbox unauthenticated */
    rp_auth_t *auth;           /* owned by the node */
    uint32_t mac_room;         /* trailer bytes reserved per datagram (0 unkeyed) */
    /* bounded unicast */
    size_t reply_cap;          /* unicast dropped while used >= this (0: no cap) */
    rp_addrcheck_t *ac;        /* address validation, owned here (NULL: off) */
    uint64_t drop_full_msgs, drop_full_bytes;   /* unicast dropped: outbox at reply_cap */
} rp_outbox_t;

/* Default reply_cap (bytes); the logger's catch-up stops queueing at
 * RP_CU_OUT_LIMIT, below it. */
#define RP_OUT_REPLY_CAP (8u << 20)

int  rp_out_init(rp_outbox_t *o, uint32_t mtu, uint32_t group, uint32_t src, uint32_t src_inc,
                 size_t cap);
void rp_out_free(rp_outbox_t *o);

/* Largest body one message can have in a datagram of this outbox. */
RP_INLINE size_t rp_out_max_body(const rp_outbox_t *o) {
    return (size_t)o->mtu - RP_DG_HDR - RP_MSG_HDR - o->mac_room;
}

/* Reserve a message of body_len bytes towards dest; returns where to write
 * the body, or NULL if body_len cannot fit any datagram (or memory fails). */
uint8_t *rp_out_msg(rp_outbox_t *o, uint64_t dest, uint8_t type, uint8_t flags, uint32_t sender,
                    uint32_t inc, uint32_t aux, uint64_t seq, size_t body_len);

/* Body bytes a message to dest could still have in its open datagram
 * without starting a new one (0 if none is open for dest). */
size_t rp_out_room(const rp_outbox_t *o, uint64_t dest);

/* Close the open datagrams so everything is in d[0..n). */
void rp_out_flush(rp_outbox_t *o);

/* Forget everything (after the driver sent it). */
void rp_out_clear(rp_outbox_t *o);

/* Drop the first k finished datagrams (after a partial send), keeping the
 * rest in order.  Open datagrams are kept. */
void rp_out_consume(rp_outbox_t *o, size_t k);

/* Cap replies to unvalidated addresses at factor x what they sent
 * (factor 0: off).  RP_OK or RP_ENOMEM. */
int rp_out_set_addrcheck(rp_outbox_t *o, double factor);

/* A control message from src reached the control plane's door: credit
 * src, and send it a cookie if one is due (addrcheck.h); a PONG is checked
 * as a cookie echo.  Returns 0 if the message is not admitted (drop it),
 * 1 if it is.  Call for every control message (with ac set). */
int rp_out_heard(rp_outbox_t *o, uint64_t src, uint8_t type, uint64_t seq, const uint8_t *body,
                 size_t len, int64_t now);

RP_INLINE size_t rp_out_pending(const rp_outbox_t *o) {
    return o->n + (size_t)o->open[0] + (size_t)o->open[1];
}

#endif
