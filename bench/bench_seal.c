/* rp_auth_seal as a node calls it, ns per datagram: what reading the clock
 * for each counter (csrc/auth.h: counters are seal-time timestamps) adds
 * to a seal.  Build it against two checkouts' core libraries and run them
 * alternately (docs/security.md, "Nonces"):
 *
 *   cc -O2 -I$CHECKOUT/csrc bench/bench_seal.c $CHECKOUT/build/temp.linux-x86_64-cpython-311/librpbcore.a \
 *      -lIPSec_MB -lcrypto -o /tmp/seal_x && /tmp/seal_x [datagram bytes, default 1472]
 *
 * Prints the best of 5 runs of 2 M seals (a shared machine's preemptions
 * land in some runs, never in all). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    uint8_t id = 1, key[RP_AUTH_KEY_LEN] = {1, 2, 3};
    rp_auth_t *a = rp_auth_new(&id, key, 1, (uint64_t)time(NULL) * 1000000000ull);
    size_t len = argc > 1 ? (size_t)atoi(argv[1]) : 1472;
    static uint8_t buf[65536];
    if (!a || len < 24 + RP_AUTH_TRAILER || len > sizeof(buf))
        return 1;
    memset(buf, 7, sizeof(buf));
    buf[0] = 'R', buf[1] = 'P', buf[2] = 1, buf[3] = 1;     /* MAC */
    buf[18] = RP_AUTH_TRAILER, buf[19] = 0;
    const int n = 2000000;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++)
            rp_auth_seal(a, buf, len);
        double ns = (now_s() - t0) / n * 1e9;
        best = ns < best ? ns : best;
    }
    printf("%.1f\n", best);
    rp_auth_free(a);
    return 0;
}
