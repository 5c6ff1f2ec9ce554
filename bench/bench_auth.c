/* MAC candidates for authenticated datagrams (docs/performance.md, "MAC").
 * One MAC per datagram, contexts reused as csrc/auth.c would: ns per
 * datagram at 1472 B (a full datagram of 64 B messages), 64 KB (a GSO
 * run of 44 such segments, MACed segment by segment) and 96 B (a PING or
 * PONG datagram: what a round trip pays, twice each way).
 *
 *   cc -O2 bench/bench_auth.c -lcrypto -o /tmp/bench_auth && /tmp/bench_auth
 */
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint8_t key[32], buf[65536], tag[32];

typedef void (*mac_fn)(const uint8_t *p, size_t n, uint64_t ctr);

static EVP_CIPHER_CTX *gcm, *ccp;
static void gmac(const uint8_t *p, size_t n, uint64_t ctr) {
    uint8_t iv[12] = {0};
    memcpy(iv + 4, &ctr, 8);
    int ol;
    EVP_EncryptInit_ex(gcm, NULL, NULL, NULL, iv);
    EVP_EncryptUpdate(gcm, NULL, &ol, p, (int)n);
    EVP_EncryptFinal_ex(gcm, tag, &ol);
    EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_GET_TAG, 16, tag);
}
static void chapoly(const uint8_t *p, size_t n, uint64_t ctr) {
    uint8_t iv[12] = {0};
    memcpy(iv + 4, &ctr, 8);
    int ol;
    EVP_EncryptInit_ex(ccp, NULL, NULL, NULL, iv);
    EVP_EncryptUpdate(ccp, NULL, &ol, p, (int)n);
    EVP_EncryptFinal_ex(ccp, tag, &ol);
    EVP_CIPHER_CTX_ctrl(ccp, EVP_CTRL_AEAD_GET_TAG, 16, tag);
}
static EVP_MAC_CTX *mctx;
static void evpmac(const uint8_t *p, size_t n, uint64_t ctr) {
    size_t ol;
    (void)ctr;
    EVP_MAC_init(mctx, NULL, 0, NULL);
    EVP_MAC_update(mctx, p, n);
    EVP_MAC_final(mctx, tag, &ol, sizeof(tag));
}

static void run(const char *name, mac_fn f) {
    size_t sizes[3] = {1472, 44 * 1472, 96};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        size_t seg = s == 2 ? 96 : 1472, iters = s == 1 ? 2000 : 200000;
        double best = 1e18;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now_ns();
            for (size_t i = 0; i < iters; i++)
                for (size_t o = 0; o < n; o += seg)
                    f(buf + o, seg, i);
            double per = (now_ns() - t0) / (double)iters / (double)(n / seg);
            if (per < best)
                best = per;
        }
        printf("%-22s %s  %7.1f ns/datagram  %5.2f GB/s\n", name,
               s == 1 ? "GSO 44x1472" : s == 2 ? "96 B (PING)" : "1472 B     ", best, (double)seg / best);
    }
}

static EVP_MAC_CTX *mac_ctx(const char *alg, const char *digest, const char *cipher, size_t klen) {
    EVP_MAC *m = EVP_MAC_fetch(NULL, alg, NULL);
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(m);
    OSSL_PARAM ps[3], *pp = ps;
    if (digest) *pp++ = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0);
    if (cipher) *pp++ = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)cipher, 0);
    *pp = OSSL_PARAM_construct_end();
    if (!EVP_MAC_init(c, key, klen, ps)) { printf("init %s failed\n", alg); return NULL; }
    return c;
}

int main(void) {
    for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (uint8_t)(i * 131);
    gcm = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(gcm, EVP_aes_128_gcm(), NULL, key, NULL);
    run("AES-128-GMAC (EVP)", gmac);
    EVP_EncryptInit_ex(gcm, EVP_aes_256_gcm(), NULL, key, NULL);
    run("AES-256-GMAC (EVP)", gmac);
    ccp = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(ccp, EVP_chacha20_poly1305(), NULL, key, NULL);
    run("ChaCha20-Poly1305 AAD", chapoly);
    if ((mctx = mac_ctx("HMAC", "SHA256", NULL, 32))) run("HMAC-SHA256", evpmac);
    if ((mctx = mac_ctx("SIPHASH", NULL, NULL, 16))) run("SipHash-2-4 (128)", evpmac);
    if ((mctx = mac_ctx("BLAKE2BMAC", NULL, NULL, 32))) run("BLAKE2b-MAC", evpmac);
    if ((mctx = mac_ctx("CMAC", NULL, "AES-128-CBC", 16))) run("AES-128-CMAC", evpmac);
    return 0;
}
