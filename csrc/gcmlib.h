/* AES-128-GCM and GMAC from Intel's Multi-Buffer Crypto for IPsec library
 * (intel-ipsec-mb, Debian/Ubuntu libipsec-mb), the MAC's default engine
 * (docs/security.md, "Who computes it"; docs/performance.md, "MAC").
 *
 * Why this library: it is the maintained, reviewed AES-GCM of DPDK and
 * FD.io VPP; it picks at run time the widest constant-time code the CPU
 * has (AES-NI + PCLMULQDQ up to VAES + VPCLMULQDQ on AVX-512, the same
 * instructions for every key and datagram, no tables indexed by secrets),
 * and its "direct" GCM calls take an expanded key and a stack context, so
 * one datagram is one call with no per-call dispatch.  OpenSSL 3.0 computes
 * the same tag through EVP at 4-7x the cost (provider dispatch per call and
 * a 128-bit GHASH), which was a fifth of the 64 B line rate, and through
 * its public low-level CRYPTO_gcm128_* at ~3x (the same GHASH);
 * bench/bench_auth.c engines.
 *
 * Same algorithm as OpenSSL's EVP_aes_128_gcm (NIST SP 800-38D, 96-bit
 * IV): the wire does not change.  csrc/auth.c checks this engine against
 * OpenSSL on test vectors at every key installation and uses EVP when the
 * library is missing from the build (RP_HAVE_IPSECMB, setup.py), the CPU
 * lacks AES-NI/PCLMULQDQ (the library would emulate AES in software), or
 * the check fails.  The library is thread-safe for these calls: the
 * manager is set up once per process and only read after that. */
#ifndef RP_GCMLIB_H
#define RP_GCMLIB_H

#include "rp_common.h"

typedef struct rp_gcmlib_key rp_gcmlib_key_t;

/* 1 if this build has the library and the CPU runs it in hardware. */
int rp_gcmlib_available(void);
/* The library's version and the code path it chose ("1.3.0 avx512"), for
 * stats and benchmarks; "" when unavailable. */
const char *rp_gcmlib_describe(void);

/* An expanded 16-byte key (round keys and powers of H), or NULL when
 * unavailable or out of memory.  _free wipes it. */
rp_gcmlib_key_t *rp_gcmlib_new(const uint8_t key[16]);
void rp_gcmlib_free(rp_gcmlib_key_t *k);

/* The GMAC tag of aad[0, n) under IV iv (GCM with no plaintext). */
void rp_gcmlib_gmac(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad, size_t n,
                    uint8_t tag[16]);
/* GCM: aad[0, na) authenticated, in[0, nb) encrypted into out (may be in),
 * the tag of the ciphertext. */
void rp_gcmlib_encrypt(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                       size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]);
/* GCM decryption of in[0, nb) into out; tag = the tag of the ciphertext as
 * received, for the caller to compare in constant time. */
void rp_gcmlib_decrypt(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                       size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]);

#endif
