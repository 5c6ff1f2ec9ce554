/* UDP I/O for the real transport: batch receive and send.
 *
 * Receive: recvmmsg into a ring of buffers; with UDP_GRO the kernel may
 * coalesce several datagrams of one flow into one buffer (all of gso_size
 * bytes but the last), which we split back into datagrams.  Send: the
 * outbox's datagrams go out with sendmmsg; runs of consecutive datagrams to
 * the same destination with the same size (the last may be shorter) go as
 * one UDP GSO send (UDP_SEGMENT) when the kernel supports it.  Both offloads
 * are detected at run time and fall back to plain batching.
 *
 * Addresses are the transport's 64-bit form: IPv4 address << 16 | port,
 * or an IPv6 endpoint's handle (csrc/addr6.h).  A socket is of one family
 * (the group's); a destination of the other family is skipped and counted
 * (n_tx_unresolved), as is a stale IPv6 handle.
 */
#ifndef RP_UDPIO_H
#define RP_UDPIO_H

#include "outbox.h"

#define RP_ADDR(ip, port) (((uint64_t)(ip) << 16) | (uint16_t)(port))
#define RP_ADDR_IP(a) ((uint32_t)((a) >> 16))
#define RP_ADDR_PORT(a) ((uint16_t)((a) & 0xFFFF))

typedef struct {
    uint32_t ip;             /* host byte order */
    uint16_t port;
    uint32_t if_ip;          /* multicast interface address (host order), 0 = default */
    int ifindex;             /* multicast interface index, 0 = by if_ip */
    int rcvbuf, sndbuf;      /* requested sizes, 0 = leave */
    int ttl, loop;           /* multicast TTL and loopback */
    int gro, timestamps;     /* try UDP_GRO / SO_TIMESTAMPNS */
    int reuse;               /* SO_REUSEADDR (multicast receivers share a port) */
    int family;              /* 6: IPv6 (ip6/scope below), else IPv4 */
    uint8_t ip6[16];         /* IPv6 bind address */
    uint32_t scope;          /* its scope id (link-local), 0 = none */
} rp_sockopt_t;

typedef struct {
    int fd;
    int gro;                 /* UDP_GRO enabled */
    int gso;                 /* UDP_SEGMENT usable (1), unknown (-1), off (0) */
    int timestamps;
    int rcvbuf, sndbuf;      /* what the kernel granted */
    uint32_t ip;
    uint16_t port;           /* bound port (after an ephemeral bind) */
    uint64_t n_rx_dgrams, n_rx_calls, n_tx_dgrams, n_tx_calls, n_tx_gso, n_tx_errors;
    int family;              /* 4 or 6 */
    uint64_t addr;           /* bound address as a handle (IPv6: pinned in addr6) */
    uint64_t n_tx_unresolved; /* datagram copies not sent: destination of the other family or stale */
    uint64_t n_rx_unnamed;   /* datagrams whose IPv6 source got no handle (table all pinned) */
} rp_sock_t;

/* Open and bind a UDP socket; join `group` (host order, 0 = none) on the
 * interface of o.  Returns 0 or -errno (stage of failure in *stage). */
int rp_sock_open(rp_sock_t *s, const rp_sockopt_t *o, uint32_t group, const char **stage);
/* The same for IPv6 (o->family 6): join group6 (NULL = none) on interface
 * o->ifindex, which a multicast socket must name. */
int rp_sock_open6(rp_sock_t *s, const rp_sockopt_t *o, const uint8_t *group6, const char **stage);
void rp_sock_close(rp_sock_t *s);

/* Set o's family (6: IPv6 bind address ip6 with scope; else IPv4, ip6
 * cleared).  For callers that declare only the IPv4 fields of the struct. */
void rp_sockopt_family(rp_sockopt_t *o, int family, const uint8_t *ip6, uint32_t scope);
/* The socket's bound address as a handle; its family; its skipped copies. */
uint64_t rp_sock_addr(const rp_sock_t *s);
int rp_sock_family(const rp_sock_t *s);
uint64_t rp_sock_unresolved(const rp_sock_t *s);
uint64_t rp_sock_unnamed(const rp_sock_t *s);
/* Multicast loopback hands our own datagrams back to our own receiving
 * socket (it must stay on for the other members on this host): a socket
 * filter drops those whose rpbcast header names (group, id, inc) in the
 * kernel, so they never wake a thread.  Returns 0 or -errno. */
int rp_sock_drop_own(rp_sock_t *s, uint32_t group, uint32_t id, uint32_t inc);
/* SO_BUSY_POLL (usec) with SO_PREFER_BUSY_POLL: a receive on this socket
 * polls its device queue (NAPI) itself, busy, before it sleeps -- one pass
 * for a non-blocking receive.  0 turns it off.  Returns the value the
 * kernel holds (getsockopt) or -errno. */
int rp_sock_busy_poll(rp_sock_t *s, int usec);

/* A batch of received datagrams, laid out for rp_node_rx. */
typedef struct {
    uint32_t cap;            /* buffers */
    uint32_t bufsize;        /* bytes per buffer (64 KiB with GRO) */
    uint8_t *mem;
    void *mmsg;              /* struct mmsghdr[cap] */
    void *iov;               /* struct iovec[cap] */
    void *names;             /* struct sockaddr_in6[cap] (room for either family) */
    uint8_t *ctrl;           /* control buffers */
    /* output: datagrams after GRO splitting */
    uint32_t n, ncap;
    uint32_t *off, *len;
    uint64_t *src;
    int64_t *ts;             /* kernel receive time (ns), 0 if none */
} rp_rxbatch_t;

int  rp_rx_init(rp_rxbatch_t *b, uint32_t cap, int gro);
void rp_rx_free(rp_rxbatch_t *b);

/* Receive what is there without blocking: returns datagrams (>= 0) or -errno. */
int rp_sock_recv(rp_sock_t *s, rp_rxbatch_t *b);

/* Send the outbox's finished datagrams.  DEST_MCAST goes to mcast_addr, or,
 * in unicast fan-out mode (fan != NULL), to each of fan[0..nfan).  Returns
 * datagrams handed to the kernel; on EAGAIN/ENOBUFS stops early and the
 * caller keeps the rest (rp_out_consume). */
int rp_sock_send(rp_sock_t *s, rp_outbox_t *o, uint64_t mcast_addr, const uint64_t *fan,
                 uint32_t nfan, size_t *consumed);

/* Send one datagram (control path, tests). */
int rp_sock_sendto(rp_sock_t *s, const uint8_t *buf, size_t len, uint64_t addr);

#endif
