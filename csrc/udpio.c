#define _GNU_SOURCE
#include "udpio.h"
#include "addr6.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define GSO_MAX_SEGS 64
#define GSO_MAX_BYTES 65000
#define TX_BATCH 256

typedef union {
    struct sockaddr sa;
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
} sockaddr_any;

static void sa_from(struct sockaddr_in *sa, uint64_t a) {
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(RP_ADDR_IP(a));
    sa->sin_port = htons(RP_ADDR_PORT(a));
}

/* The socket address of handle a for a socket of `family`: its length, or 0
 * if a is of the other family or a stale IPv6 handle.  IPv6: the caller
 * holds the addr6 lock. */
static socklen_t sa_any_locked(sockaddr_any *u, int family, uint64_t a) {
    if (family != 6) {
        if (RP_ADDR_IS6(a))
            return 0;
        sa_from(&u->v4, a);
        return sizeof(u->v4);
    }
    if (!RP_ADDR_IS6(a))
        return 0;
    memset(&u->v6, 0, sizeof(u->v6));
    uint16_t port;
    uint32_t scope;
    if (rp_addr6_lookup_locked(a, u->v6.sin6_addr.s6_addr, &port, &scope) != RP_OK)
        return 0;
    u->v6.sin6_family = AF_INET6;
    u->v6.sin6_port = htons(port);
    u->v6.sin6_scope_id = scope;
    return sizeof(u->v6);
}

/* The handle of a received source address (IPv6: under the addr6 lock);
 * 0 if the table refused it. */
static uint64_t handle_of_locked(const sockaddr_any *u) {
    if (u->sa.sa_family == AF_INET6)
        return rp_addr6_intern_locked(u->v6.sin6_addr.s6_addr, ntohs(u->v6.sin6_port),
                                      u->v6.sin6_scope_id, 0);
    return RP_ADDR(ntohl(u->v4.sin_addr.s_addr), ntohs(u->v4.sin_port));
}

/* Ask for a buffer size; if the kernel caps it (rmem_max/wmem_max), try the
 * FORCE variant (root), then report what was granted. */
static int set_buf(int fd, int opt, int force_opt, int want) {
    if (want <= 0)
        goto read;
    setsockopt(fd, SOL_SOCKET, opt, &want, sizeof(want));
    int got;
    socklen_t gl = sizeof(got);
    if (getsockopt(fd, SOL_SOCKET, opt, &got, &gl) == 0 && got / 2 < want)
        setsockopt(fd, SOL_SOCKET, force_opt, &want, sizeof(want));
read:;
    int v = 0;
    socklen_t vl = sizeof(v);
    getsockopt(fd, SOL_SOCKET, opt, &v, &vl);
    return v / 2;   /* Linux reports double the usable size */
}

/* Options both families set the same way after the group is joined, and
 * the bound address. */
static int open_tail(rp_sock_t *s, const rp_sockopt_t *o, int fd, const char **st) {
    int one = 1;
    if (o->gro && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0)
        s->gro = 1;
    if (o->timestamps && setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) == 0)
        s->timestamps = 1;
    sockaddr_any u;
    socklen_t sl = sizeof(u);
    *st = "getsockname";
    if (getsockname(fd, &u.sa, &sl) < 0)
        return -1;
    if (u.sa.sa_family == AF_INET6) {
        s->family = 6;
        s->port = ntohs(u.v6.sin6_port);
        s->addr = rp_addr6_intern(u.v6.sin6_addr.s6_addr, s->port, u.v6.sin6_scope_id, 1);
        *st = "address table";
        if (!s->addr) {
            errno = ENOSPC;
            return -1;
        }
    } else {
        s->family = 4;
        s->ip = ntohl(u.v4.sin_addr.s_addr);
        s->port = ntohs(u.v4.sin_port);
        s->addr = RP_ADDR(s->ip, s->port);
    }
    s->fd = fd;
    return 0;
}

int rp_sock_open6(rp_sock_t *s, const rp_sockopt_t *o, const uint8_t *group6, const char **stage) {
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->gso = -1;
    const char *st = "socket";
    int one = 1, fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    st = "IPV6_V6ONLY";         /* one family per socket: no v4-mapped sources */
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
        goto fail;
    st = "SO_REUSEADDR";
    if (o->reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        goto fail;
    s->rcvbuf = set_buf(fd, SO_RCVBUF, SO_RCVBUFFORCE, o->rcvbuf);
    s->sndbuf = set_buf(fd, SO_SNDBUF, SO_SNDBUFFORCE, o->sndbuf);
    struct sockaddr_in6 sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin6_family = AF_INET6;
    memcpy(sa.sin6_addr.s6_addr, o->ip6, 16);
    sa.sin6_port = htons(o->port);
    sa.sin6_scope_id = o->scope;
    st = "bind";
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        goto fail;
    int ifindex = o->ifindex;
    st = "IPV6_MULTICAST_IF";
    if (ifindex && setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifindex, sizeof(ifindex)) < 0)
        goto fail;
    /* as IPv4's TTL: 0 this host only (the looped-back copy is delivered,
     * the outgoing one discarded), 1 the link */
    int hops = o->ttl, loop = o->loop;
    st = "IPV6_MULTICAST_HOPS";
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof(hops)) < 0)
        goto fail;
    st = "IPV6_MULTICAST_LOOP";
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &loop, sizeof(loop)) < 0)
        goto fail;
    if (group6) {
        st = "IPV6_JOIN_GROUP";
        if (!ifindex) {
            errno = ENODEV;     /* IPv6 multicast names its interface */
            goto fail;
        }
#ifndef IPV6_MULTICAST_ALL
#define IPV6_MULTICAST_ALL 29
#endif
        int zero = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &zero, sizeof(zero));
        struct ipv6_mreq mr;
        memcpy(mr.ipv6mr_multiaddr.s6_addr, group6, 16);
        mr.ipv6mr_interface = (unsigned)ifindex;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mr, sizeof(mr)) < 0)
            goto fail;
    }
    if (open_tail(s, o, fd, &st) < 0)
        goto fail;
    return 0;
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (stage)
        *stage = st;
    return -e;
}

int rp_sock_open(rp_sock_t *s, const rp_sockopt_t *o, uint32_t group, const char **stage) {
    if (o->family == 6)
        return rp_sock_open6(s, o, NULL, stage);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->gso = -1;
    const char *st = "socket";
    int one = 1, fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    if (o->reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) {
        st = "SO_REUSEADDR";
        goto fail;
    }
    s->rcvbuf = set_buf(fd, SO_RCVBUF, SO_RCVBUFFORCE, o->rcvbuf);
    s->sndbuf = set_buf(fd, SO_SNDBUF, SO_SNDBUFFORCE, o->sndbuf);
    struct sockaddr_in sa;
    sa_from(&sa, RP_ADDR(o->ip, o->port));
    st = "bind";
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        goto fail;
    struct ip_mreqn mr;
    memset(&mr, 0, sizeof(mr));
    mr.imr_address.s_addr = htonl(o->if_ip);
    mr.imr_ifindex = o->ifindex;
    st = "IP_MULTICAST_IF";
    if ((o->if_ip || o->ifindex) && setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mr, sizeof(mr)) < 0)
        goto fail;
    int ttl = o->ttl, loop = o->loop;
    st = "IP_MULTICAST_TTL";
    if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl)) < 0)
        goto fail;
    st = "IP_MULTICAST_LOOP";
    if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop)) < 0)
        goto fail;
    if (group) {
        /* Only our group, even if other sockets on the host joined others. */
        int zero = 0;
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
        mr.imr_multiaddr.s_addr = htonl(group);
        st = "IP_ADD_MEMBERSHIP";
        if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof(mr)) < 0)
            goto fail;
    }
    if (open_tail(s, o, fd, &st) < 0)
        goto fail;
    return 0;
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (stage)
        *stage = st;
    return -e;
}

void rp_sockopt_family(rp_sockopt_t *o, int family, const uint8_t *ip6, uint32_t scope) {
    o->family = family == 6 ? 6 : 4;
    memset(o->ip6, 0, sizeof(o->ip6));
    if (family == 6 && ip6)
        memcpy(o->ip6, ip6, 16);
    o->scope = family == 6 ? scope : 0;
}

uint64_t rp_sock_addr(const rp_sock_t *s) { return s->addr; }
int rp_sock_family(const rp_sock_t *s) { return s->family; }
uint64_t rp_sock_unresolved(const rp_sock_t *s) { return s->n_tx_unresolved; }
uint64_t rp_sock_unnamed(const rp_sock_t *s) { return s->n_rx_unnamed; }

void rp_sock_close(rp_sock_t *s) {
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* ---- the own multicast copy -------------------------------------------- */

/* A classic BPF socket filter runs on a UDP socket with the packet starting
 * at the UDP header (8 bytes), so the rpbcast datagram header is at 8: magic
 * (16 bits) at 8, group at 12, sender id at 16, incarnation at 20, all
 * little-endian on the wire, while BPF loads are big-endian: the constants
 * are byte-swapped.  Anything shorter than a header passes (the node counts
 * it as malformed). */
int rp_sock_drop_own(rp_sock_t *s, uint32_t group, uint32_t id, uint32_t inc) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 8 + 24, 0, 8),              /* short: accept */
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 8),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __builtin_bswap16(0x5052u), 0, 6),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 16),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __builtin_bswap32(id), 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 20),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __builtin_bswap32(inc), 0, 2),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 12),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __builtin_bswap32(group), 1, 0),
        BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFFu),                          /* accept whole */
        BPF_STMT(BPF_RET | BPF_K, 0),                                    /* our own: drop */
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    if (setsockopt(s->fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0)
        return -errno;
    return 0;
}

/* ---- busy polling ------------------------------------------------------- */

#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif

int rp_sock_busy_poll(rp_sock_t *s, int usec) {
    if (setsockopt(s->fd, SOL_SOCKET, SO_BUSY_POLL, &usec, sizeof(usec)) < 0)
        return -errno;
    /* prefer: the device's interrupts stay deferred while we poll (best
     * effort: kernels before 5.11 do not have it) */
    int prefer = usec > 0;
    setsockopt(s->fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &prefer, sizeof(prefer));
    int got = 0;
    socklen_t gl = sizeof(got);
    if (getsockopt(s->fd, SOL_SOCKET, SO_BUSY_POLL, &got, &gl) < 0)
        return -errno;
    return got;
}

/* ---- receive ----------------------------------------------------------- */

#define CTRL_LEN 64

int rp_rx_init(rp_rxbatch_t *b, uint32_t cap, int gro) {
    memset(b, 0, sizeof(*b));
    b->cap = cap ? cap : 64;
    b->bufsize = gro ? 65536 : 2048;
    b->ncap = gro ? b->cap * GSO_MAX_SEGS * 2 : b->cap;
    b->mem = (uint8_t *)malloc((size_t)b->cap * b->bufsize);
    b->mmsg = calloc(b->cap, sizeof(struct mmsghdr));
    b->iov = calloc(b->cap, sizeof(struct iovec));
    b->names = calloc(b->cap, sizeof(sockaddr_any));
    b->ctrl = (uint8_t *)calloc(b->cap, CTRL_LEN);
    b->off = (uint32_t *)malloc(b->ncap * sizeof(uint32_t));
    b->len = (uint32_t *)malloc(b->ncap * sizeof(uint32_t));
    b->src = (uint64_t *)malloc(b->ncap * sizeof(uint64_t));
    b->ts = (int64_t *)malloc(b->ncap * sizeof(int64_t));
    if (!b->mem || !b->mmsg || !b->iov || !b->names || !b->ctrl || !b->off || !b->len || !b->src ||
        !b->ts) {
        rp_rx_free(b);
        return RP_ENOMEM;
    }
    return RP_OK;
}

void rp_rx_free(rp_rxbatch_t *b) {
    free(b->mem); free(b->mmsg); free(b->iov); free(b->names); free(b->ctrl);
    free(b->off); free(b->len); free(b->src); free(b->ts);
    memset(b, 0, sizeof(*b));
}

int rp_sock_recv(rp_sock_t *s, rp_rxbatch_t *b) {
    struct mmsghdr *mm = (struct mmsghdr *)b->mmsg;
    struct iovec *iov = (struct iovec *)b->iov;
    sockaddr_any *nm = (sockaddr_any *)b->names;
    uint32_t cap = b->cap;
    for (uint32_t i = 0; i < cap; i++) {
        iov[i].iov_base = b->mem + (size_t)i * b->bufsize;
        iov[i].iov_len = b->bufsize;
        mm[i].msg_hdr.msg_name = &nm[i];
        mm[i].msg_hdr.msg_namelen = sizeof(nm[i]);
        mm[i].msg_hdr.msg_iov = &iov[i];
        mm[i].msg_hdr.msg_iovlen = 1;
        mm[i].msg_hdr.msg_control = b->ctrl + (size_t)i * CTRL_LEN;
        mm[i].msg_hdr.msg_controllen = CTRL_LEN;
        mm[i].msg_hdr.msg_flags = 0;
    }
    b->n = 0;
    int k = recvmmsg(s->fd, mm, cap, MSG_DONTWAIT, NULL);
    if (k < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    s->n_rx_calls++;
    if (s->family == 6)
        rp_addr6_lock();        /* once per batch, not per datagram */
    for (int i = 0; i < k; i++) {
        uint32_t len = mm[i].msg_len;
        int seg = 0;
        int64_t ts = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mm[i].msg_hdr); c; c = CMSG_NXTHDR(&mm[i].msg_hdr, c)) {
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
                memcpy(&seg, CMSG_DATA(c), sizeof(int));
            else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec t;
                memcpy(&t, CMSG_DATA(c), sizeof(t));
                ts = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
            }
        }
        uint64_t src = handle_of_locked(&nm[i]);
        if (!src)
            s->n_rx_unnamed++;  /* still delivered: a reply to it is skipped */
        uint32_t base = (uint32_t)((size_t)i * b->bufsize);
        if (seg <= 0 || (uint32_t)seg >= len)
            seg = (int)len;
        for (uint32_t o = 0; o < len && b->n < b->ncap; o += (uint32_t)seg) {
            uint32_t l = len - o < (uint32_t)seg ? len - o : (uint32_t)seg;
            b->off[b->n] = base + o;
            b->len[b->n] = l;
            b->src[b->n] = src;
            b->ts[b->n] = ts;
            b->n++;
        }
    }
    if (s->family == 6)
        rp_addr6_unlock();
    s->n_rx_dgrams += b->n;
    return (int)b->n;
}

/* ---- send -------------------------------------------------------------- */

int rp_sock_sendto(rp_sock_t *s, const uint8_t *buf, size_t len, uint64_t addr) {
    sockaddr_any sa;
    if (s->family == 6)
        rp_addr6_lock();
    socklen_t sl = sa_any_locked(&sa, s->family, addr);
    if (s->family == 6)
        rp_addr6_unlock();
    if (!sl) {
        s->n_tx_unresolved++;
        return -EAFNOSUPPORT;
    }
    ssize_t r = sendto(s->fd, buf, len, 0, &sa.sa, sl);
    if (r < 0)
        return -errno;
    s->n_tx_dgrams++;
    s->n_tx_calls++;
    return 0;
}

typedef struct {
    size_t first, count;   /* datagrams d[first .. first+count) */
    uint64_t dest;
    uint16_t seg;          /* GSO segment size, 0 = none */
} run_t;

/* One sendmmsg call being put together: runs of datagrams (a GSO run, or a
 * single datagram), each times its destinations (one, or every fan-out
 * address for a multicast run). */
typedef struct {
    struct mmsghdr mm[TX_BATCH];
    struct iovec iov[TX_BATCH * 4];
    sockaddr_any sa[TX_BATCH];
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[TX_BATCH];
    run_t runs[TX_BATCH];
    size_t run_of_msg[TX_BATCH];
    size_t nm, niov, nr;
} tx_call_t;

/* Datagrams from o->d[i] on that can go as one GSO send: same destination,
 * equal sizes (the last may be shorter), within the kernel's limits. */
static size_t gso_run(const rp_sock_t *s, const rp_outbox_t *o, size_t i) {
    const rp_outd_t *d = &o->d[i];
    size_t k = 1, bytes = d->len;
    if (s->gso == 0)
        return 1;
    while (i + k < o->n && k < GSO_MAX_SEGS && o->d[i + k].dest == d->dest &&
           o->d[i + k].len <= d->len && bytes + o->d[i + k].len <= GSO_MAX_BYTES &&
           o->d[i + k - 1].len == d->len) {
        bytes += o->d[i + k].len;
        k++;
    }
    return k;
}

/* One message of the call: run nr's iovecs to addr, with a UDP_SEGMENT
 * control message when the run has more than one datagram. */
static void add_copy(tx_call_t *c, rp_sock_t *s, uint64_t addr, size_t iv0) {
    const run_t *run = &c->runs[c->nr];
    size_t m = c->nm;
    socklen_t sl = sa_any_locked(&c->sa[m], s->family, addr);
    if (!sl) {
        s->n_tx_unresolved++;   /* the run is consumed without this copy */
        return;
    }
    c->nm++;
    struct msghdr *h = &c->mm[m].msg_hdr;
    memset(&c->mm[m], 0, sizeof(c->mm[m]));
    h->msg_name = &c->sa[m];
    h->msg_namelen = sl;
    h->msg_iov = &c->iov[iv0];
    h->msg_iovlen = run->count;
    if (run->count > 1) {
        memset(c->ctl[m].buf, 0, sizeof(c->ctl[m].buf));
        h->msg_control = c->ctl[m].buf;
        h->msg_controllen = sizeof(c->ctl[m].buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(h);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = run->seg;
        memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    }
    c->run_of_msg[m] = c->nr;
}

/* Group the datagrams from o->d[i] on into runs, and runs x destinations
 * into messages, as many as fit one call. */
static void plan_call(tx_call_t *c, rp_sock_t *s, const rp_outbox_t *o, size_t i,
                      uint64_t mcast_addr, const uint64_t *fan, uint32_t nfan) {
    c->nm = c->niov = c->nr = 0;
    while (i < o->n && c->nm < TX_BATCH && c->nr < TX_BATCH) {
        const rp_outd_t *d = &o->d[i];
        size_t k = gso_run(s, o, i);
        uint32_t ndest = (d->dest == RP_DEST_MCAST && fan) ? nfan : 1;
        if (c->nm + ndest > TX_BATCH || c->niov + k > sizeof(c->iov) / sizeof(c->iov[0]))
            break;
        run_t *run = &c->runs[c->nr];
        run->first = i;
        run->count = k;
        run->dest = d->dest;
        run->seg = k > 1 ? (uint16_t)d->len : 0;
        size_t iv0 = c->niov;
        for (size_t j = 0; j < k; j++) {
            c->iov[c->niov].iov_base = o->buf + o->d[i + j].off;
            c->iov[c->niov].iov_len = o->d[i + j].len;
            c->niov++;
        }
        for (uint32_t f = 0; f < ndest; f++)
            add_copy(c, s, d->dest == RP_DEST_MCAST ? (fan ? fan[f] : mcast_addr) : d->dest, iv0);
        c->nr++;
        i += k;
    }
}

/* The call failed with errno e: if it carried GSO sends and the kernel has
 * no UDP GSO, turn GSO off (the caller tries again without it). */
static int gso_refused(rp_sock_t *s, const tx_call_t *c, int e) {
    if (!(e == EIO || e == EINVAL || e == ENOPROTOOPT || e == EOPNOTSUPP) || s->gso == 0)
        return 0;
    for (size_t m = 0; m < c->nm; m++)
        if (c->mm[m].msg_hdr.msg_iovlen > 1) {
            s->gso = 0;
            return 1;
        }
    return 0;
}

/* Count the first r messages of the call as sent. */
static void count_sent(rp_sock_t *s, const tx_call_t *c, int r) {
    if (r > 0 && s->gso == -1) {
        for (int m = 0; m < r; m++)
            if (c->mm[m].msg_hdr.msg_iovlen > 1)
                s->gso = 1;         /* it worked: GSO is there */
    }
    s->n_tx_calls++;
    for (int m = 0; m < r; m++) {
        s->n_tx_dgrams += c->mm[m].msg_hdr.msg_iovlen;
        if (c->mm[m].msg_hdr.msg_iovlen > 1)
            s->n_tx_gso++;
    }
}

/* Datagrams are consumed when every copy of their run went out: the end of
 * the last run whose messages are all among the first r (from `done`). */
static size_t consumed_upto(const tx_call_t *c, size_t done, int r) {
    for (size_t rr = 0; rr < c->nr; rr++) {
        for (size_t m = (size_t)r; m < c->nm; m++)
            if (c->run_of_msg[m] == rr)
                return done;
        done = c->runs[rr].first + c->runs[rr].count;
    }
    return done;
}

int rp_sock_send(rp_sock_t *s, rp_outbox_t *o, uint64_t mcast_addr, const uint64_t *fan,
                 uint32_t nfan, size_t *consumed) {
    tx_call_t c;
    size_t done = 0;
    int sent_total = 0;
    *consumed = 0;
    while (done < o->n) {
        if (s->family == 6)
            rp_addr6_lock();
        plan_call(&c, s, o, done, mcast_addr, fan, nfan);
        if (s->family == 6)
            rp_addr6_unlock();
        int r = sendmmsg(s->fd, c.mm, (unsigned)c.nm, MSG_DONTWAIT);
        if (r < 0) {
            int e = errno;
            if (gso_refused(s, &c, e))
                continue;           /* again, one datagram per message */
            if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == EINTR)
                break;
            /* Anything else (EMSGSIZE, unreachable, ...): drop the first run
             * rather than spin on it; the protocol repairs what is lost. */
            s->n_tx_errors++;
            done = c.runs[0].first + c.runs[0].count;
            continue;
        }
        count_sent(s, &c, r);
        sent_total += r;
        done = consumed_upto(&c, done, r);
        if ((size_t)r < c.nm)
            break;
    }
    *consumed = done;
    return sent_total;
}
