/* Raw UDP multicast blaster: the ceiling the transport benchmark compares
 * rpbcast against, measured in the same run.  No protocol: every datagram
 * carries an 8-byte sequence number; the receiver counts unique arrivals.
 *
 *   blaster send GROUP:PORT SIZE COUNT SEGS   (SEGS > 1: UDP GSO with SEGS segments per send;
 *                                              SEGS == 1: sendmmsg batches of 64)
 *   blaster recv GROUP:PORT SIZE COUNT GRO    (GRO 1: UDP_GRO on)
 *
 * Output: one JSON line.  Build: cc -O2 -o blaster blaster.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: blaster send|recv GROUP:PORT SIZE COUNT SEGS|GRO\n");
        return 2;
    }
    int recv_mode = strcmp(argv[1], "recv") == 0;
    char host[64];
    int port;
    if (sscanf(argv[2], "%63[^:]:%d", host, &port) != 2)
        return 2;
    int size = atoi(argv[3]);
    long count = atol(argv[4]);
    int k = atoi(argv[5]);
    struct sockaddr_in grp = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &grp.sin_addr);
    int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 64 << 20;
    struct in_addr lo;
    inet_pton(AF_INET, "127.0.0.1", &lo);
    if (recv_mode) {
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
        if (bind(s, (struct sockaddr *)&grp, sizeof grp)) { perror("bind"); return 1; }
        struct ip_mreqn m = {0};
        m.imr_multiaddr = grp.sin_addr;
        m.imr_address = lo;
        if (setsockopt(s, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m)) { perror("join"); return 1; }
        if (k) setsockopt(s, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
        struct timeval tv = {1, 0};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        enum { B = 64 };
        static char buf[B][65536];
        static char ctl[B][64];
        struct mmsghdr mm[B];
        struct iovec io[B];
        uint8_t *seen = calloc(count, 1);
        long segs = 0, calls = 0, dups = 0;
        double t0 = 0, t1 = 0;
        printf("{\"ready\": true}\n");
        fflush(stdout);
        for (;;) {
            for (int i = 0; i < B; i++) {
                io[i].iov_base = buf[i];
                io[i].iov_len = sizeof buf[i];
                mm[i].msg_hdr = (struct msghdr){.msg_iov = &io[i], .msg_iovlen = 1,
                                                .msg_control = ctl[i], .msg_controllen = 64};
            }
            int n = recvmmsg(s, mm, B, MSG_WAITFORONE, NULL);
            if (n <= 0)
                break;
            if (!t0) t0 = now();
            t1 = now();
            calls++;
            for (int i = 0; i < n; i++) {
                int len = mm[i].msg_len, gs = len;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mm[i].msg_hdr); c; c = CMSG_NXTHDR(&mm[i].msg_hdr, c))
                    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
                        memcpy(&gs, CMSG_DATA(c), sizeof(int));
                for (int off = 0; off < len; off += gs) {
                    long q;
                    memcpy(&q, buf[i] + off, 8);
                    if (q >= 0 && q < count) {
                        if (seen[q]) dups++;
                        seen[q] = 1;
                    }
                    segs++;
                }
            }
        }
        long got = 0;
        for (long q = 0; q < count; q++) got += seen[q];
        printf("{\"received\": %ld, \"unique\": %ld, \"dups\": %ld, \"calls\": %ld, \"rate\": %.0f}\n",
               segs, got, dups, calls, t1 > t0 ? got / (t1 - t0) : 0.0);
        return 0;
    }
    setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof lo);
    int ttl = 0;
    setsockopt(s, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);
    setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
    if (connect(s, (struct sockaddr *)&grp, sizeof grp)) { perror("connect"); return 1; }
    enum { B = 64 };
    char *buf = calloc(B, 65536);
    long q = 0, calls = 0;
    double t0 = now();
    while (q < count) {
        if (k > 1) {
            int n = 0;
            for (; n < k && q < count; n++, q++)
                memcpy(buf + (size_t)n * size, &q, 8);
            char c[CMSG_SPACE(sizeof(uint16_t))] = {0};
            struct iovec io = {buf, (size_t)n * size};
            struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = c, .msg_controllen = sizeof c};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t seg = (uint16_t)size;
            memcpy(CMSG_DATA(cm), &seg, sizeof seg);
            while (sendmsg(s, &mh, 0) < 0) {
                if (errno == ENOBUFS || errno == EAGAIN) { usleep(20); continue; }
                perror("sendmsg");
                return 1;
            }
        } else {
            struct mmsghdr mm[B];
            struct iovec io[B];
            int n = 0;
            for (; n < B && q < count; n++, q++) {
                memcpy(buf + (size_t)n * 65536, &q, 8);
                io[n].iov_base = buf + (size_t)n * 65536;
                io[n].iov_len = size;
                mm[n].msg_hdr = (struct msghdr){.msg_iov = &io[n], .msg_iovlen = 1};
            }
            int done = 0;
            while (done < n) {
                int r = sendmmsg(s, mm + done, n - done, 0);
                if (r < 0) {
                    if (errno == ENOBUFS || errno == EAGAIN) { usleep(20); continue; }
                    perror("sendmmsg");
                    return 1;
                }
                done += r;
            }
        }
        calls++;
    }
    double dt = now() - t0;
    printf("{\"sent\": %ld, \"calls\": %ld, \"rate\": %.0f}\n", count, calls, count / dt);
    return 0;
}
