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
 * "engines": every way to compute the datagram MAC from a maintained
 * library, seal (tag) and verify (tag + constant-time compare), ns per
 * datagram of 64, 512 and 1472 B (the MACed bytes: all but the 25-byte
 * trailer) and per GSO run of 64 x 1472 B; candidates round-robin in
 * short bursts, the minimum kept (a shared machine's preemptions land in
 * some bursts, never in all):
 *   openssl-evp   EVP_aes_128_gcm, context per key kept (the fallback)
 *   openssl-gcm128 OpenSSL's public low-level GCM (<openssl/modes.h>:
 *                 CRYPTO_gcm128_*; its GHASH is OpenSSL's CLMUL/AVX
 *                 assembly), AES by a kept EVP AES-128-ECB context (AES-NI)
 *   ipsec-mb      intel-ipsec-mb's AES-128-GCM (csrc/gcmlib.c, the default)
 *   sodium-aes256 libsodium's AES-256-GCM, precomputed state (not the
 *                 wire's algorithm: for scale)
 * and then GCM encrypting a datagram's body (Config.encrypt), EVP against
 * intel-ipsec-mb.
 *
 *   cc -O2 -Icsrc -DRP_HAVE_IPSECMB bench/bench_auth.c csrc/gcmlib.c \
 *      -lIPSec_MB -lsodium -lcrypto -o /tmp/bench_auth && /tmp/bench_auth [mac|encrypt|sign|engines]
 * (without intel-ipsec-mb drop -DRP_HAVE_IPSECMB and -lIPSec_MB; without
 * libsodium's header its row is left out, then drop -lsodium)
 */
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/modes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gcmlib.h"
#if __has_include(<sodium.h>)
#include <sodium.h>
#define HAVE_SODIUM 1
#endif

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint8_t key[32], buf[131072], tag[32];

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

/* ---- "engines" ------------------------------------------------------- */

typedef struct {
    const char *name;
    /* tag of aad[0, n) under IV (0, ctr); verify: 1 if tag matches */
    void (*seal)(const uint8_t *aad, size_t n, uint64_t ctr, uint8_t t[16]);
    int (*verify)(const uint8_t *aad, size_t n, uint64_t ctr, const uint8_t t[16]);
} engine_t;

static void iv12(uint8_t iv[12], uint64_t ctr) {
    memset(iv, 0, 12);
    memcpy(iv + 4, &ctr, 8);
}

static EVP_CIPHER_CTX *e_gcm, *e_ecb;
static void evp_seal(const uint8_t *p, size_t n, uint64_t ctr, uint8_t t[16]) {
    uint8_t iv[12];
    int ol;
    iv12(iv, ctr);
    EVP_EncryptInit_ex(e_gcm, NULL, NULL, NULL, iv);
    EVP_EncryptUpdate(e_gcm, NULL, &ol, p, (int)n);
    EVP_EncryptFinal_ex(e_gcm, t, &ol);
    EVP_CIPHER_CTX_ctrl(e_gcm, EVP_CTRL_GCM_GET_TAG, 16, t);
}
static int evp_verify(const uint8_t *p, size_t n, uint64_t ctr, const uint8_t t[16]) {
    uint8_t x[16];
    evp_seal(p, n, ctr, x);
    return CRYPTO_memcmp(x, t, 16) == 0;
}

/* AES for OpenSSL's GCM128: one block through a kept EVP ECB context
 * (AES-NI, constant time).  Not AES_encrypt: OpenSSL 3.0's x86-64
 * AES_encrypt is the table-based aes-x86_64 code. */
static void ecb_block(const unsigned char in[16], unsigned char out[16], const void *key) {
    int ol;
    EVP_EncryptUpdate((EVP_CIPHER_CTX *)key, out, &ol, in, 16);
}
static GCM128_CONTEXT *g128;
static void g128_seal(const uint8_t *p, size_t n, uint64_t ctr, uint8_t t[16]) {
    uint8_t iv[12];
    iv12(iv, ctr);
    CRYPTO_gcm128_setiv(g128, iv, 12);
    CRYPTO_gcm128_aad(g128, p, n);
    CRYPTO_gcm128_tag(g128, t, 16);
}
static int g128_verify(const uint8_t *p, size_t n, uint64_t ctr, const uint8_t t[16]) {
    uint8_t iv[12];
    iv12(iv, ctr);
    CRYPTO_gcm128_setiv(g128, iv, 12);
    CRYPTO_gcm128_aad(g128, p, n);
    return CRYPTO_gcm128_finish(g128, t, 16) == 0;     /* constant-time compare */
}

static rp_gcmlib_key_t *lkey;
static void lib_seal(const uint8_t *p, size_t n, uint64_t ctr, uint8_t t[16]) {
    uint8_t iv[12];
    iv12(iv, ctr);
    rp_gcmlib_gmac(lkey, iv, p, n, t);
}
static int lib_verify(const uint8_t *p, size_t n, uint64_t ctr, const uint8_t t[16]) {
    uint8_t x[16];
    lib_seal(p, n, ctr, x);
    return CRYPTO_memcmp(x, t, 16) == 0;
}

#ifdef HAVE_SODIUM
static crypto_aead_aes256gcm_state sst;
static void sod_seal(const uint8_t *p, size_t n, uint64_t ctr, uint8_t t[16]) {
    uint8_t iv[12], none[1] = {0};
    unsigned long long ml;
    iv12(iv, ctr);
    crypto_aead_aes256gcm_encrypt_detached_afternm(none, t, &ml, none, 0, p, n, NULL, iv, &sst);
}
static int sod_verify(const uint8_t *p, size_t n, uint64_t ctr, const uint8_t t[16]) {
    uint8_t iv[12], none[1] = {0};
    iv12(iv, ctr);
    return crypto_aead_aes256gcm_decrypt_detached_afternm(none, NULL, none, 0, t, p, n, iv, &sst) == 0;
}
#endif

static void engines(void) {
    engine_t e[5];
    int ne = 0;
    OPENSSL_init_crypto(0, NULL);   /* OPENSSL_ia32cap before CRYPTO_gcm128_init picks its GHASH */
    e_gcm = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(e_gcm, EVP_aes_128_gcm(), NULL, key, NULL);
    e[ne++] = (engine_t){"openssl-evp", evp_seal, evp_verify};
    e_ecb = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(e_ecb, EVP_aes_128_ecb(), NULL, key, NULL);
    EVP_CIPHER_CTX_set_padding(e_ecb, 0);
    g128 = CRYPTO_gcm128_new(e_ecb, ecb_block);
    e[ne++] = (engine_t){"openssl-gcm128", g128_seal, g128_verify};
    if ((lkey = rp_gcmlib_new(key)))
        e[ne++] = (engine_t){"ipsec-mb", lib_seal, lib_verify};
    else
        printf("ipsec-mb: not in this build or not on this CPU\n");
#ifdef HAVE_SODIUM
    if (sodium_init() >= 0 && crypto_aead_aes256gcm_is_available()) {
        crypto_aead_aes256gcm_beforenm(&sst, key);
        e[ne++] = (engine_t){"sodium-aes256", sod_seal, sod_verify};
    }
#endif
    printf("ipsec-mb %s\n", rp_gcmlib_describe());
    /* every AES-128 engine gives OpenSSL's tag, and verifies it */
    uint8_t ref[16], t[16];
    evp_seal(buf, 1447, 42, ref);
    for (int k = 0; k < ne; k++) {
        e[k].seal(buf, 1447, 42, t);
        int same = !memcmp(t, ref, 16);
        if (strcmp(e[k].name, "sodium-aes256") && !same)
            printf("%s: tag differs from OpenSSL's\n", e[k].name);
        if (!e[k].verify(buf, 1447, 42, t) || (t[3] ^= 1, e[k].verify(buf, 1447, 42, t)))
            printf("%s: verify is wrong\n", e[k].name);
    }
    static const size_t dg[4] = {64, 512, 1472, 64 * 1472};
    printf("ns per datagram (seal / verify); the GSO run: ns per run of 64 x 1472 B\n");
    printf("%-15s %15s %15s %15s %19s\n", "engine", "64 B", "512 B", "1472 B", "GSO 64 x 1472 B");
    double best[5][4][2];
    for (int k = 0; k < ne; k++)
        for (int s = 0; s < 4; s++)
            best[k][s][0] = best[k][s][1] = 1e18;
    for (int round = 0; round < 200; round++)
        for (int s = 0; s < 4; s++)
            for (int k = 0; k < ne; k++)
                for (int v = 0; v < 2; v++) {
                    size_t seg = s == 3 ? 1472 : dg[s], nseg = s == 3 ? 64 : 1, iters = s == 3 ? 2 : 100;
                    uint8_t tg[16] = {0};
                    int ok = 0;
                    double t0 = now_ns();
                    for (size_t i = 0; i < iters; i++)
                        for (size_t j = 0; j < nseg; j++) {
                            uint64_t ctr = (uint64_t)round * 100000 + i * 64 + j;
                            if (v)
                                ok += e[k].verify(buf + j * seg, seg - 25, ctr, tg);
                            else
                                e[k].seal(buf + j * seg, seg - 25, ctr, tg);
                        }
                    double per = (now_ns() - t0) / (double)iters;
                    (void)ok;
                    if (per < best[k][s][v])
                        best[k][s][v] = per;
                }
    for (int k = 0; k < ne; k++) {
        printf("%-15s", e[k].name);
        for (int s = 0; s < 4; s++)
            printf(s == 3 ? " %9.0f / %7.0f" : " %7.1f / %5.1f", best[k][s][0], best[k][s][1]);
        printf("\n");
    }
    /* Config.encrypt: the datagram's body encrypted in place, its 24-byte
     * header the additional data (csrc/auth.c seals so); EVP against the
     * library, same round-robin */
    if (lkey) {
        static const size_t es[3] = {64, 512, 1472};
        double be[2][3];
        for (int k = 0; k < 2; k++)
            for (int z = 0; z < 3; z++)
                be[k][z] = 1e18;
        for (int round = 0; round < 200; round++)
            for (int z = 0; z < 3; z++)
                for (int k = 0; k < 2; k++) {
                    size_t n = es[z] - 25;
                    double t0 = now_ns();
                    for (size_t i = 0; i < 100; i++) {
                        uint64_t ctr = (uint64_t)round * 1000 + i;
                        if (k == 0) {
                            gcm = e_gcm;
                            gcm_enc(buf, n, ctr);
                        } else {
                            uint8_t iv[12];
                            iv12(iv, ctr);
                            rp_gcmlib_encrypt(lkey, iv, buf, 24, buf + 24, buf + 24, n - 24, tag);
                        }
                    }
                    double per = (now_ns() - t0) / 100.0;
                    if (per < be[k][z])
                        be[k][z] = per;
                }
        printf("GCM encrypting the body, ns per datagram: 64 B / 512 B / 1472 B\n");
        printf("%-15s %7.1f %7.1f %7.1f\n", "openssl-evp", be[0][0], be[0][1], be[0][2]);
        printf("%-15s %7.1f %7.1f %7.1f\n", "ipsec-mb", be[1][0], be[1][1], be[1][2]);
    }
    printf("relative to openssl-evp (seal):");
    for (int k = 1; k < ne; k++) {
        printf("  %s", e[k].name);
        for (int s = 0; s < 4; s++)
            printf(" %.2f", best[k][s][0] / best[0][s][0]);
    }
    printf("\n");
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
    if (all || !strcmp(part, "engines"))
        engines();
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
