/* MAC candidates for authenticated datagrams (docs/performance.md, "MAC").
 * One MAC per datagram, contexts reused as csrc/auth.c would: ns per
 * datagram at 1472 B (a full datagram of 64 B messages), 64 KB (a GSO
 * run of 44 such segments, MACed segment by segment) and 96 B (a PING or
 * PONG datagram: what a round trip pays, twice each way).
 *
 * With an argument, one part only: "mac" (the candidates above), "encrypt"
 * (AES-128-GMAC against AES-128-GCM encrypting the datagram in place, as
 * csrc/auth.c seals with Config.encrypt), "sign" (Ed25519 sign and verify
 * of a control datagram: the identity design in docs/security.md).
 *
 * "direct": the path csrc/auth.c takes on CPUs with VAES/VPCLMULQDQ/AVX-512
 * (csrc/gcmfast.c) against EVP, GMAC and GCM, alternating in the run; the
 * datagram sizes are those of a keyed datagram of 16 x 64 B messages
 * (1457 B: 1432 B MACed) and a PING.
 *
 *   cc -O2 -Icsrc bench/bench_auth.c csrc/gcmfast.c -lcrypto -o /tmp/bench_auth && /tmp/bench_auth [mac|encrypt|sign|direct]
 */
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gcmfast.h"

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
/* AES-128-GCM sealing a datagram with its body encrypted in place: the
 * 24-byte header as additional data, the rest ciphertext. */
static void gcm_enc(const uint8_t *p, size_t n, uint64_t ctr) {
    uint8_t iv[12] = {0};
    memcpy(iv + 4, &ctr, 8);
    int ol;
    uint8_t *q = (uint8_t *)p;
    EVP_EncryptInit_ex(gcm, NULL, NULL, NULL, iv);
    EVP_EncryptUpdate(gcm, NULL, &ol, q, 24);
    EVP_EncryptUpdate(gcm, q + 24, &ol, q + 24, (int)n - 24);
    EVP_EncryptFinal_ex(gcm, tag, &ol);
    EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_GET_TAG, 16, tag);
}

/* Ed25519: one-shot sign / verify (no prehash; EVP_DigestSign with a NULL
 * digest), ns per operation at a control datagram's size. */
static void ed25519(void) {
    EVP_PKEY_CTX *kc = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
    EVP_PKEY *k = NULL;
    if (!kc || EVP_PKEY_keygen_init(kc) != 1 || EVP_PKEY_keygen(kc, &k) != 1) {
        printf("Ed25519 unavailable\n");
        return;
    }
    uint8_t sig[64];
    size_t sizes[2] = {96, 1472};
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s], iters = 20000;
        double best_s = 1e18, best_v = 1e18;
        for (int rep = 0; rep < 5; rep++) {
            EVP_MD_CTX *m = EVP_MD_CTX_new();
            double t0 = now_ns();
            for (size_t i = 0; i < iters; i++) {
                size_t sl = sizeof(sig);
                buf[0] = (uint8_t)i;
                EVP_DigestSignInit(m, NULL, NULL, NULL, k);
                EVP_DigestSign(m, sig, &sl, buf, n);
            }
            double ps = (now_ns() - t0) / (double)iters;
            int ok = 0;
            t0 = now_ns();
            for (size_t i = 0; i < iters; i++) {
                EVP_DigestVerifyInit(m, NULL, NULL, NULL, k);
                ok += EVP_DigestVerify(m, sig, 64, buf, n) == 1;
            }
            double pv = (now_ns() - t0) / (double)iters;
            EVP_MD_CTX_free(m);
            if (ok != (int)iters)
                printf("Ed25519: %d of %zu verified\n", ok, iters);
            if (ps < best_s) best_s = ps;
            if (pv < best_v) best_v = pv;
        }
        printf("Ed25519 %4zu B            sign %7.0f ns   verify %7.0f ns\n", n, best_s, best_v);
    }
    EVP_PKEY_free(k);
    EVP_PKEY_CTX_free(kc);
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

static rp_gcmfast_key_t fkey;
static void direct_gmac(const uint8_t *p, size_t n, uint64_t ctr) {
    uint8_t iv[12] = {0};
    memcpy(iv + 4, &ctr, 8);
    rp_gcmfast_gmac(&fkey, iv, p, n, tag);
}
static void direct_gcm(const uint8_t *p, size_t n, uint64_t ctr) {
    uint8_t iv[12] = {0};
    memcpy(iv + 4, &ctr, 8);
    uint8_t *q = (uint8_t *)p;
    rp_gcmfast_encrypt(&fkey, iv, q, 24, q + 24, q + 24, n - 24, tag);
}

/* ns per datagram of n bytes, best of 5 x iters. */
static double best_of(mac_fn f, size_t n, size_t iters) {
    double best = 1e18;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_ns();
        for (size_t i = 0; i < iters; i++)
            f(buf, n, i);
        double per = (now_ns() - t0) / (double)iters;
        if (per < best)
            best = per;
    }
    return best;
}

static void direct(void) {
    if (!rp_gcmfast_available()) {
        printf("direct path: this CPU lacks VAES/VPCLMULQDQ/AVX-512\n");
        return;
    }
    rp_gcmfast_init(&fkey, key);
    static const struct { const char *name; mac_fn evp, fast; } c[2] = {
        {"GMAC (MAC only)", gmac, direct_gmac}, {"GCM (encrypt) ", gcm_enc, direct_gcm}};
    size_t sizes[2] = {1432, 96};
    for (int r = 0; r < 2; r++)             /* alternating, same run */
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < 2; s++) {
                double e = best_of(c[k].evp, sizes[s], 200000), d = best_of(c[k].fast, sizes[s], 200000);
                printf("%s %4zu B   EVP %6.1f ns   direct %6.1f ns   direct/EVP %.2f\n", c[k].name,
                       sizes[s], e, d, d / e);
            }
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "all";
    int all = !strcmp(part, "all");
    for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (uint8_t)(i * 131);
    gcm = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(gcm, EVP_aes_128_gcm(), NULL, key, NULL);
    if (all || !strcmp(part, "encrypt")) {
        for (int r = 0; r < 2; r++) {          /* alternating, same run */
            run("AES-128-GMAC (MAC)", gmac);
            run("AES-128-GCM (encrypt)", gcm_enc);
        }
    }
    if (all || !strcmp(part, "sign"))
        ed25519();
    if (all || !strcmp(part, "direct"))
        direct();
    if (!all && strcmp(part, "mac"))
        return 0;
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
