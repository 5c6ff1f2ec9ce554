/* AES-128-GMAC and AES-128-GCM without the EVP layer, for CPUs with
 * AES-NI, VAES, VPCLMULQDQ and AVX-512 (docs/performance.md, "MAC").
 *
 * Why: a datagram of 64 B messages is ~1.5 KB, and through OpenSSL's EVP
 * one GMAC costs ~350 ns: ~150 ns of EVP/provider calls (setting the IV,
 * OSSL_PARAM lookups for the tag) and ~200 ns of 128-bit GHASH.  At half
 * a million datagrams a second on each side that was a fifth of the line
 * rate.  Here the key schedule and the powers H^1..H^128 are computed once
 * per key; per datagram: one AES block for the tag mask (E_K(J0)), GHASH
 * four blocks per carry-less multiply (512-bit VPCLMULQDQ, all products
 * independent, one reduction per 128 blocks) and, when encrypting, AES-CTR four blocks per instruction.
 *
 * The algorithm is NIST SP 800-38D with a 96-bit IV, exactly as OpenSSL
 * computes it: csrc/auth.c checks this code against OpenSSL's EVP on test
 * vectors whenever it installs a key, and uses EVP (as before) if the CPU
 * lacks the instructions, the compiler cannot target them, or the check
 * fails.  Nothing is compiled with machine flags: the functions here carry
 * their own target attribute and are only called after the CPU said yes.
 */
#ifndef RP_GCMFAST_H
#define RP_GCMFAST_H

#include "rp_common.h"

#define RP_GCMFAST_POW 128  /* powers of H kept: blocks summed per reduction */

typedef struct {
    uint8_t rk[11][16];     /* AES-128 round keys */
    /* hp[j] = H^(POW - j) (GHASH byte-reflected) for j < POW; zero after
     * (a chunk's last 512-bit load may reach 3 entries past) */
    uint8_t hp[RP_GCMFAST_POW + 4][16];
} rp_gcmfast_key_t;

/* 1 if this build and this CPU can run the functions below. */
int rp_gcmfast_available(void);

/* Expand a 16-byte key (only when available). */
void rp_gcmfast_init(rp_gcmfast_key_t *k, const uint8_t key[16]);

/* The GMAC tag of aad[0, n) (GCM with no plaintext) under IV iv. */
void rp_gcmfast_gmac(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad, size_t n,
                     uint8_t tag[16]);

/* GCM: aad[0, na) authenticated, in[0, nb) encrypted into out (may be in)
 * and authenticated; the tag of the ciphertext. */
void rp_gcmfast_encrypt(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                        size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]);

/* GCM decryption of in[0, nb) into out (not in place); *tag_out = the tag
 * of the ciphertext as received, for the caller to compare in constant time. */
void rp_gcmfast_decrypt(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                        size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]);

#endif
