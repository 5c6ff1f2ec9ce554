#include "gcmfast.h"

#if defined(__x86_64__) && !defined(RP_NO_GCMFAST) && \
    ((defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))

#include <immintrin.h>

/* Every function that uses the instructions carries the target: the rest
 * of the build stays generic x86-64 (setup.py adds no -m flags). */
#define TGT __attribute__((target("aes,pclmul,ssse3,sse4.1,avx,avx2,avx512f,avx512bw,avx512vl,vaes,vpclmulqdq")))

int rp_gcmfast_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("vaes") && __builtin_cpu_supports("vpclmulqdq");
}

/* GHASH works on blocks with their bytes reversed (the field's bit order
 * then matches the carry-less multiply's). */
TGT static inline __m128i bswap128(__m128i x) {
    return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* Reduce the 256-bit carry-less product (lo, mid, hi: the middle term not
 * yet split) modulo the GHASH polynomial, in the reflected representation
 * (shift left by one, then the shift-and-xor reduction of Gueron and
 * Kounavis, "Intel Carry-Less Multiplication Instruction and its Usage for
 * Computing the GCM Mode", algorithm 5).  Linear: products of several
 * blocks are summed first and reduced once. */
TGT static inline __m128i reduce(__m128i lo, __m128i mid, __m128i hi) {
    __m128i a = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    __m128i b = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    __m128i c = _mm_srli_epi32(a, 31);
    __m128i d = _mm_srli_epi32(b, 31);
    a = _mm_slli_epi32(a, 1);
    b = _mm_slli_epi32(b, 1);
    __m128i e = _mm_srli_si128(c, 12);
    d = _mm_slli_si128(d, 4);
    c = _mm_slli_si128(c, 4);
    a = _mm_or_si128(a, c);
    b = _mm_or_si128(_mm_or_si128(b, d), e);
    c = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(a, 31), _mm_slli_epi32(a, 30)), _mm_slli_epi32(a, 25));
    d = _mm_srli_si128(c, 4);
    c = _mm_slli_si128(c, 12);
    a = _mm_xor_si128(a, c);
    e = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(a, 1), _mm_srli_epi32(a, 2)), _mm_srli_epi32(a, 7));
    e = _mm_xor_si128(e, d);
    a = _mm_xor_si128(a, e);
    return _mm_xor_si128(b, a);
}

TGT static inline __m128i gfmul(__m128i x, __m128i y) {
    return reduce(_mm_clmulepi64_si128(x, y, 0x00),
                  _mm_xor_si128(_mm_clmulepi64_si128(x, y, 0x01), _mm_clmulepi64_si128(x, y, 0x10)),
                  _mm_clmulepi64_si128(x, y, 0x11));
}

TGT static inline __m128i kexp(__m128i key, __m128i kg) {
    kg = _mm_shuffle_epi32(kg, 0xff);
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    return _mm_xor_si128(key, kg);
}

TGT static inline __m128i aes_block(const rp_gcmfast_key_t *k, __m128i x) {
    x = _mm_xor_si128(x, _mm_loadu_si128((const __m128i *)k->rk[0]));
    for (int r = 1; r < 10; r++)
        x = _mm_aesenc_si128(x, _mm_loadu_si128((const __m128i *)k->rk[r]));
    return _mm_aesenclast_si128(x, _mm_loadu_si128((const __m128i *)k->rk[10]));
}

TGT void rp_gcmfast_init(rp_gcmfast_key_t *k, const uint8_t key[16]) {
    __m128i rk[11];
    rk[0] = _mm_loadu_si128((const __m128i *)key);
#define KX(i, rcon) rk[i] = kexp(rk[i - 1], _mm_aeskeygenassist_si128(rk[i - 1], rcon))
    KX(1, 0x01); KX(2, 0x02); KX(3, 0x04); KX(4, 0x08); KX(5, 0x10);
    KX(6, 0x20); KX(7, 0x40); KX(8, 0x80); KX(9, 0x1b); KX(10, 0x36);
#undef KX
    for (int i = 0; i < 11; i++)
        _mm_storeu_si128((__m128i *)k->rk[i], rk[i]);
    __m128i h = bswap128(aes_block(k, _mm_setzero_si128()));
    __m128i p = h;
    memset(k->hp, 0, sizeof(k->hp));
    for (int i = 1; i <= RP_GCMFAST_POW; i++) {
        _mm_storeu_si128((__m128i *)k->hp[RP_GCMFAST_POW - i], p);
        p = gfmul(p, h);
    }
}

TGT static inline __m128i fold4(__m512i z) {
    __m256i t = _mm256_xor_si256(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
    return _mm_xor_si128(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* The GHASH state after y and the bytes p[0, n) zero-padded to whole
 * blocks, followed by the length block when lens is set:
 * y' = (y ^ X_0) H^r ^ X_1 H^(r-1) ^ ... ^ X_(r-1) H, r blocks in all.
 * Every product is independent of the others (the powers are precomputed)
 * and summed unreduced, four blocks to a 512-bit multiply; one reduction
 * per RP_GCMFAST_POW blocks: a datagram's GHASH is throughput, not a
 * chain of dependent multiplies.  The tail is read with a masked load
 * (zeros past n: the padding), never past p + n. */
TGT static __m128i ghash(const rp_gcmfast_key_t *k, __m128i y, const uint8_t *p, size_t n,
                         const uint8_t *lens) {
    const __m512i bs = _mm512_broadcast_i32x4(
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    for (;;) {
        size_t nd = (n + 15) / 16;              /* data blocks left */
        size_t r = nd + (lens ? 1 : 0);
        if (r == 0)
            return y;
        if (r > RP_GCMFAST_POW)
            r = RP_GCMFAST_POW;                 /* a whole chunk of data, more after it */
        size_t take = r * 16 < n ? r * 16 : n;  /* bytes of p in this chunk */
        const uint8_t *hp = k->hp[RP_GCMFAST_POW - r];
        __m512i lo = _mm512_setzero_si512(), mid = lo, hi = lo;
        __m128i yl = y;                         /* y goes into block 0 */
        for (size_t o = 0; o < take; o += 64) {
            __m512i d;
            if (take - o >= 64)
                d = _mm512_loadu_si512((const void *)(p + o));
            else
                d = _mm512_maskz_loadu_epi8(((__mmask64)1 << (take - o)) - 1, p + o);
            d = _mm512_shuffle_epi8(d, bs);
            if (o == 0) {
                d = _mm512_xor_si512(d, _mm512_inserti32x4(_mm512_setzero_si512(), y, 0));
                yl = _mm_setzero_si128();
            }
            __m512i h = _mm512_loadu_si512((const void *)(hp + o));
            lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(d, h, 0x00));
            hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(d, h, 0x11));
            mid = _mm512_xor_si512(mid, _mm512_xor_si512(_mm512_clmulepi64_epi128(d, h, 0x01),
                                                         _mm512_clmulepi64_epi128(d, h, 0x10)));
        }
        __m128i l = fold4(lo), m = fold4(mid), h = fold4(hi);
        p += take;
        n -= take;
        if (lens && r > (take + 15) / 16) {     /* the length block: times H */
            __m128i x = _mm_xor_si128(bswap128(_mm_loadu_si128((const __m128i *)lens)), yl);
            __m128i h1 = _mm_loadu_si128((const __m128i *)k->hp[RP_GCMFAST_POW - 1]);
            l = _mm_xor_si128(l, _mm_clmulepi64_si128(x, h1, 0x00));
            h = _mm_xor_si128(h, _mm_clmulepi64_si128(x, h1, 0x11));
            m = _mm_xor_si128(m, _mm_xor_si128(_mm_clmulepi64_si128(x, h1, 0x01),
                                               _mm_clmulepi64_si128(x, h1, 0x10)));
            lens = NULL;
        }
        y = reduce(l, m, h);
    }
}

TGT static __m128i ghash_last(const rp_gcmfast_key_t *k, __m128i y, const uint8_t *p, size_t n,
                              uint64_t abytes, uint64_t cbytes) {
    uint8_t lens[16];
    uint64_t la = __builtin_bswap64(abytes * 8), lc = __builtin_bswap64(cbytes * 8);
    memcpy(lens, &la, 8);
    memcpy(lens + 8, &lc, 8);
    return ghash(k, y, p, n, lens);
}

/* The tag: E_K(J0) xor the GHASH value, J0 = IV || 0^31 || 1. */
TGT static void finish(const rp_gcmfast_key_t *k, const uint8_t iv[12], __m128i y, uint8_t tag[16]) {
    uint8_t j0[16];
    memcpy(j0, iv, 12);
    j0[12] = j0[13] = j0[14] = 0;
    j0[15] = 1;
    __m128i t = aes_block(k, _mm_loadu_si128((const __m128i *)j0));
    _mm_storeu_si128((__m128i *)tag, _mm_xor_si128(t, bswap128(y)));
}

TGT void rp_gcmfast_gmac(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad, size_t n,
                         uint8_t tag[16]) {
    finish(k, iv, ghash_last(k, _mm_setzero_si128(), aad, n, n, 0), tag);
}

/* AES-CTR from counter block IV || 2 (GCM's first data block), four
 * blocks per instruction; the last partial 64 bytes masked. */
TGT static void ctr(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *in, uint8_t *out,
                    size_t n) {
    __m512i rk[11];
    for (int i = 0; i < 11; i++)
        rk[i] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k->rk[i]));
    uint8_t base[16] = {0};
    memcpy(base, iv, 12);
    const __m512i ivv = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)base));
    /* the counter little-endian in each lane's last word, swapped to big-endian */
    __m512i c = _mm512_set_epi32(5, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0);
    const __m512i four = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
    const __m512i be = _mm512_broadcast_i32x4(
        _mm_set_epi8(12, 13, 14, 15, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    while (n) {
        size_t b = n < 64 ? n : 64;
        __m512i x = _mm512_xor_si512(_mm512_or_si512(ivv, _mm512_shuffle_epi8(c, be)), rk[0]);
        for (int r = 1; r < 10; r++)
            x = _mm512_aesenc_epi128(x, rk[r]);
        x = _mm512_aesenclast_epi128(x, rk[10]);
        __mmask64 m = b == 64 ? ~(__mmask64)0 : (((__mmask64)1 << b) - 1);
        __m512i d = _mm512_maskz_loadu_epi8(m, in);
        _mm512_mask_storeu_epi8(out, m, _mm512_xor_si512(d, x));
        c = _mm512_add_epi32(c, four);
        in += b;
        out += b;
        n -= b;
    }
}

TGT void rp_gcmfast_encrypt(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                            size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    ctr(k, iv, in, out, nb);
    __m128i y = ghash(k, _mm_setzero_si128(), aad, na, NULL);
    finish(k, iv, ghash_last(k, y, out, nb, na, nb), tag);
}

TGT void rp_gcmfast_decrypt(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                            size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    __m128i y = ghash(k, _mm_setzero_si128(), aad, na, NULL);
    finish(k, iv, ghash_last(k, y, in, nb, na, nb), tag);
    ctr(k, iv, in, out, nb);
}

#else   /* no compiler support: EVP only */

int rp_gcmfast_available(void) { return 0; }
void rp_gcmfast_init(rp_gcmfast_key_t *k, const uint8_t key[16]) { (void)k; (void)key; }
void rp_gcmfast_gmac(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad, size_t n,
                     uint8_t tag[16]) {
    (void)k; (void)iv; (void)aad; (void)n; memset(tag, 0, 16);
}
void rp_gcmfast_encrypt(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                        size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    (void)k; (void)iv; (void)aad; (void)na; (void)in; (void)out; (void)nb; memset(tag, 0, 16);
}
void rp_gcmfast_decrypt(const rp_gcmfast_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                        size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    (void)k; (void)iv; (void)aad; (void)na; (void)in; (void)out; (void)nb; memset(tag, 0, 16);
}

#endif
