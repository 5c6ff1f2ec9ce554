#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gcmlib.h"
#include "wire.h"

/* Plaintexts of decrypted datagrams: fixed chunks (never moved, control
 * messages point into them until the control plane has read them), at most
 * RP_AUTH_ARENA_CHUNKS of them. */
#define RP_AUTH_ARENA_CHUNK  (128u * 1024u)     /* > RP_WIRE_MAX_DGRAM */
#define RP_AUTH_ARENA_CHUNKS 32                 /* 4 MiB */

#define RP_AUTH_SALT_MASK ((1ull << RP_AUTH_SALT_BITS) - 1)

/* The coarse clock: a read of the kernel's last tick (no TSC), a few ns;
 * its resolution (1-4 ms) is far below any clock skew between hosts. */
#ifdef CLOCK_REALTIME_COARSE
#define RP_AUTH_CLOCK CLOCK_REALTIME_COARSE
#else
#define RP_AUTH_CLOCK CLOCK_REALTIME
#endif

struct rp_auth {
    int nkeys;
    int encrypt;
    uint8_t id[RP_AUTH_MAX_KEYS];
    /* one context per key and direction: the key schedule is computed once */
    EVP_CIPHER_CTX *seal;
    EVP_CIPHER_CTX *open[RP_AUTH_MAX_KEYS];
    EVP_CIPHER_CTX *dec[RP_AUTH_MAX_KEYS];
    /* the same keys for gcmlib.h (NULL: that build or CPU cannot, or it
     * disagreed with OpenSSL), and which engine runs */
    rp_gcmlib_key_t *lk[RP_AUTH_MAX_KEYS];
    int impl;
    uint64_t next;              /* the least the next counter may be (its low bits the salt) */
    uint64_t salt;              /* low RP_AUTH_SALT_BITS bits of every counter of this run */
    int64_t clock_offset;       /* added to the wall clock (tests) */
    uint64_t skew;              /* clock skew allowed: a new replay entry's floor is now - skew */
    uint64_t sealed;
    rp_replay_t replay;
    uint8_t *arena[RP_AUTH_ARENA_CHUNKS];
    uint32_t arena_cur;
    size_t arena_off;
    uint64_t arena_full;
    /* signatures: own private key (or NULL), public keys by node id */
    EVP_PKEY *own;
    uint32_t npub;
    uint32_t *pub_id;
    EVP_PKEY **pub;
    /* one context and scratch per direction, like the MAC's: sealing (the
     * sending thread) and opening (the receiving one) may run at once */
    EVP_MD_CTX *md_sign, *md_verify;
    uint8_t *msg_sign, *msg_verify;     /* the signed bytes, laid out contiguously */
    uint64_t signatures;
    rp_replay_t replay_signed;  /* signed datagrams' counters: a key holder
                                   forging a source cannot move them */
};

static EVP_CIPHER_CTX *gcm_ctx(const uint8_t *key, int enc) {
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c)
        return NULL;
    if (EVP_CipherInit_ex(c, EVP_aes_128_gcm(), NULL, key, NULL, enc) != 1) {
        EVP_CIPHER_CTX_free(c);
        return NULL;
    }
    return c;
}

static int gmac(EVP_CIPHER_CTX *c, const uint8_t *aad, size_t n, uint32_t source,
                uint64_t counter, uint8_t tag[RP_AUTH_TAG_LEN]);

static void drop_lib(rp_auth_t *a) {
    for (int k = 0; k < RP_AUTH_MAX_KEYS; k++) {
        rp_gcmlib_free(a->lk[k]);       /* wipes */
        a->lk[k] = NULL;
    }
}


/* Whether gcmlib.h computes what OpenSSL computes under key k: GMAC tags
 * at lengths around every boundary its code paths handle (blocks, 512-bit
 * loads, 16- and 48-block loops) and one GCM encryption and decryption.
 * Run at every key installation; any difference and EVP does the work. */
static int lib_agrees(const rp_auth_t *a, int k) {
    const rp_gcmlib_key_t *lk = a->lk[k];
    EVP_CIPHER_CTX *enc = a->open[k];
    static const size_t lens[] = {0,   1,   15,  16,   17,   63,   64,   65,   96,   255,  256,  257, 767,
                                  768, 769, 1457, 1472, 2047, 2048, 2049, 3071, 3072, 4100};
    uint8_t buf[4100], ct[4100], back[4100], t1[RP_AUTH_TAG_LEN], t2[RP_AUTH_TAG_LEN], iv[12];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
        size_t n = lens[j];
        rp_st32(iv, (uint32_t)j);
        rp_st64(iv + 4, 0x0123456789abcdefULL + j);
        if (gmac(enc, buf, n, (uint32_t)j, 0x0123456789abcdefULL + j, t1))
            return 0;
        rp_gcmlib_gmac(lk, iv, buf, n, t2);
        if (memcmp(t1, t2, RP_AUTH_TAG_LEN))
            return 0;
    }
    size_t na = 24, nb = 1433;
    int ol;
    if (EVP_EncryptInit_ex(enc, NULL, NULL, NULL, iv) != 1 ||
        EVP_EncryptUpdate(enc, NULL, &ol, buf, (int)na) != 1 ||
        EVP_EncryptUpdate(enc, ct, &ol, buf + na, (int)nb) != 1 ||
        EVP_EncryptFinal_ex(enc, ct + nb, &ol) != 1 ||
        EVP_CIPHER_CTX_ctrl(enc, EVP_CTRL_GCM_GET_TAG, RP_AUTH_TAG_LEN, t1) != 1)
        return 0;
    rp_gcmlib_encrypt(lk, iv, buf, na, buf + na, back, nb, t2);
    if (memcmp(t1, t2, RP_AUTH_TAG_LEN) || memcmp(ct, back, nb))
        return 0;
    rp_gcmlib_decrypt(lk, iv, buf, na, ct, back, nb, t2);
    return !memcmp(t1, t2, RP_AUTH_TAG_LEN) && !memcmp(back, buf + na, nb);
}

int rp_auth_impl(const rp_auth_t *a) { return a->impl; }

int rp_auth_impl_available(const rp_auth_t *a, int impl) {
    if (impl == RP_MAC_OPENSSL)
        return 1;
    if (impl == RP_MAC_IPSECMB)
        return a->lk[0] && (a->nkeys < 2 || a->lk[1]);
    return 0;
}

int rp_auth_set_impl(rp_auth_t *a, int impl) {
    if (!rp_auth_impl_available(a, impl))
        return -1;
    a->impl = impl;
    return 0;
}

const char *rp_auth_impl_name(int impl) {
    return impl == RP_MAC_IPSECMB ? "ipsec-mb" : "openssl";
}

const char *rp_auth_lib_describe(void) { return rp_gcmlib_describe(); }

rp_auth_t *rp_auth_new(const uint8_t *ids, const uint8_t *keys, int nkeys, uint64_t counter0) {
    if (nkeys < 1 || nkeys > RP_AUTH_MAX_KEYS)
        return NULL;
    if (nkeys == 2 && ids[0] == ids[1])
        return NULL;
    rp_auth_t *a = (rp_auth_t *)calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    if (rp_replay_init(&a->replay, 0)) {
        free(a);
        return NULL;
    }
    if (rp_replay_init(&a->replay_signed, 0)) {
        rp_replay_free(&a->replay);
        free(a);
        return NULL;
    }
    a->nkeys = nkeys;
    /* the salt: a restart whose wall clock was stepped back shares no
     * counter with the run before unless both drew the same salt */
    uint16_t r = 0;
    if (RAND_bytes((uint8_t *)&r, sizeof(r)) != 1)
        goto fail;
    a->salt = r & RP_AUTH_SALT_MASK;
    a->next = (counter0 & ~RP_AUTH_SALT_MASK) | a->salt;
    if (a->next < counter0)
        a->next += RP_AUTH_SALT_MASK + 1;
    a->skew = RP_AUTH_REPLAY_SKEW_NS;
    a->seal = gcm_ctx(keys, 1);
    for (int k = 0; k < nkeys; k++) {
        a->id[k] = ids[k];
        a->open[k] = gcm_ctx(keys + (size_t)k * RP_AUTH_KEY_LEN, 1);
        a->dec[k] = gcm_ctx(keys + (size_t)k * RP_AUTH_KEY_LEN, 0);
        if (!a->open[k] || !a->dec[k])
            goto fail;
    }
    if (!a->seal)
        goto fail;
    /* intel-ipsec-mb (gcmlib.h) where it agrees with OpenSSL under every
     * key, else EVP */
    a->impl = RP_MAC_OPENSSL;
    if (rp_gcmlib_available()) {
        int ok = 1;
        for (int k = 0; k < nkeys && ok; k++)
            ok = (a->lk[k] = rp_gcmlib_new(keys + (size_t)k * RP_AUTH_KEY_LEN)) != NULL &&
                 lib_agrees(a, k);
        if (ok)
            a->impl = RP_MAC_IPSECMB;
        else
            drop_lib(a);
    }
    return a;
fail:
    rp_auth_free(a);
    return NULL;
}

void rp_auth_free(rp_auth_t *a) {
    if (!a)
        return;
    drop_lib(a);
    EVP_CIPHER_CTX_free(a->seal);
    for (int k = 0; k < RP_AUTH_MAX_KEYS; k++) {
        EVP_CIPHER_CTX_free(a->open[k]);
        EVP_CIPHER_CTX_free(a->dec[k]);
    }
    for (int k = 0; k < RP_AUTH_ARENA_CHUNKS; k++)
        free(a->arena[k]);
    rp_replay_free(&a->replay);
    rp_replay_free(&a->replay_signed);
    EVP_PKEY_free(a->own);
    for (uint32_t k = 0; k < a->npub; k++)
        EVP_PKEY_free(a->pub[k]);
    free(a->pub);
    free(a->pub_id);
    EVP_MD_CTX_free(a->md_sign);
    EVP_MD_CTX_free(a->md_verify);
    free(a->msg_sign);
    free(a->msg_verify);
    free(a);
}

int rp_auth_authority(uint8_t t) {
    return t == RP_T_JOIN || t == RP_T_LEAVE || t == RP_T_MEMBERS || t == RP_T_GAPNOTE ||
           t == RP_T_GCNOTE || t == RP_T_LOGACK;
}

int rp_auth_ed25519_public(const uint8_t *priv, uint8_t *pub) {
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, RP_AUTH_SIG_KEY);
    size_t n = RP_AUTH_SIG_KEY;
    int ok = k && EVP_PKEY_get_raw_public_key(k, pub, &n) == 1 && n == RP_AUTH_SIG_KEY;
    EVP_PKEY_free(k);
    return ok ? 0 : -1;
}

int rp_auth_set_signing(rp_auth_t *a, const uint8_t *priv, uint32_t n, const uint32_t *ids,
                        const uint8_t *pubs) {
    if (a->md_sign || (!priv && !n))
        return -1;                      /* once per context */
    for (uint32_t k = 1; k < n; k++)
        if (ids[k] <= ids[k - 1])
            return -1;
    a->md_sign = EVP_MD_CTX_new();
    a->md_verify = EVP_MD_CTX_new();
    a->msg_sign = (uint8_t *)malloc(RP_WIRE_MAX_DGRAM + RP_AUTH_TRAILER);
    a->msg_verify = (uint8_t *)malloc(RP_WIRE_MAX_DGRAM + RP_AUTH_TRAILER);
    a->pub_id = (uint32_t *)calloc(n ? n : 1, sizeof(uint32_t));
    a->pub = (EVP_PKEY **)calloc(n ? n : 1, sizeof(EVP_PKEY *));
    if (!a->md_sign || !a->md_verify || !a->msg_sign || !a->msg_verify || !a->pub_id || !a->pub)
        return -1;
    if (priv && !(a->own = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, RP_AUTH_SIG_KEY)))
        return -1;
    for (uint32_t k = 0; k < n; k++) {
        a->pub[k] = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pubs + (size_t)k * RP_AUTH_SIG_KEY,
                                                RP_AUTH_SIG_KEY);
        if (!a->pub[k])
            return -1;
        a->pub_id[k] = ids[k];
        a->npub = k + 1;
    }
    return 0;
}

int rp_auth_verifying(const rp_auth_t *a) { return a->npub > 0; }
uint64_t rp_auth_signatures(const rp_auth_t *a) { return a->signatures; }

/* Whether the messages of buf[RP_DG_HDR, end) include an authority-bearing
 * one (the datagram is our own, well formed: the outbox built it). */
static int carries_authority(const uint8_t *buf, size_t end) {
    size_t o = RP_DG_HDR;
    while (o + RP_MSG_HDR <= end) {
        if (rp_auth_authority(buf[o]))
            return 1;
        o += RP_MSG_HDR + rp_ld16(buf + o + 2);
    }
    return 0;
}

/* The signed bytes of a datagram with a signed trailer: everything before
 * the signature (header, messages, signer id) and the trailer's key id and
 * counter, copied contiguously (Ed25519 signs one buffer).  Returns n. */
static size_t sig_message(uint8_t *out, const uint8_t *buf, size_t len) {
    size_t head = len - RP_AUTH_SIGNED_TRAILER + 4;
    memcpy(out, buf, head);
    memcpy(out + head, buf + len - RP_AUTH_TRAILER, 9);
    return head + 9;
}

int rp_auth_sig_ok(rp_auth_t *a, const uint8_t *buf, size_t len, uint32_t source) {
    if (!(buf[3] & RP_DGF_SIG) || rp_ld16(buf + 18) != RP_AUTH_SIGNED_TRAILER ||
        len < RP_DG_HDR + RP_AUTH_SIGNED_TRAILER)
        return 0;
    const uint8_t *s = buf + len - RP_AUTH_SIGNED_TRAILER;
    if (rp_ld32(s) != source)
        return 0;
    uint32_t lo = 0, hi = a->npub;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a->pub_id[mid] < source)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == a->npub || a->pub_id[lo] != source)
        return 0;
    size_t n = sig_message(a->msg_verify, buf, len);
    /* reset: a context reused with another key kept state from the last
     * one-shot operation (OpenSSL 3.0; seen as valid signatures refused) */
    EVP_MD_CTX_reset(a->md_verify);
    return EVP_DigestVerifyInit(a->md_verify, NULL, NULL, NULL, a->pub[lo]) == 1 &&
           EVP_DigestVerify(a->md_verify, s + 4, 64, a->msg_verify, n) == 1;
}

void rp_auth_set_encrypt(rp_auth_t *a, int on) { a->encrypt = !!on; }
int rp_auth_encrypting(const rp_auth_t *a) { return a->encrypt; }

static void iv_of(uint8_t iv[12], uint32_t source, uint64_t counter) {
    rp_st32(iv, source);
    rp_st64(iv + 4, counter);
}

/* The GMAC tag of aad[0, n) under c with IV (source, counter). */
static int gmac(EVP_CIPHER_CTX *c, const uint8_t *aad, size_t n, uint32_t source,
                uint64_t counter, uint8_t tag[RP_AUTH_TAG_LEN]) {
    uint8_t iv[12];
    int ol;
    iv_of(iv, source, counter);
    if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv) != 1 ||
        EVP_EncryptUpdate(c, NULL, &ol, aad, (int)n) != 1 ||
        EVP_EncryptFinal_ex(c, tag, &ol) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, RP_AUTH_TAG_LEN, tag) != 1)
        return -1;
    return 0;
}

/* AES-GCM of the datagram buf[0, len) with its trailer: the header is the
 * additional data, the body [RP_DG_HDR, len - trailer) is encrypted in
 * place, the tag goes to tag. */
static int gcm_seal(EVP_CIPHER_CTX *c, uint8_t *buf, size_t len, uint64_t counter,
                    uint8_t tag[RP_AUTH_TAG_LEN]) {
    uint8_t iv[12];
    int ol;
    uint8_t *body = buf + RP_DG_HDR;
    size_t nb = len - RP_AUTH_TRAILER - RP_DG_HDR;
    iv_of(iv, rp_ld32(buf + 8), counter);
    if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv) != 1 ||
        EVP_EncryptUpdate(c, NULL, &ol, buf, RP_DG_HDR) != 1 ||
        EVP_EncryptUpdate(c, body, &ol, body, (int)nb) != 1 || (size_t)ol != nb ||
        EVP_EncryptFinal_ex(c, body + nb, &ol) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, RP_AUTH_TAG_LEN, tag) != 1)
        return -1;
    return 0;
}

int rp_auth_seal(rp_auth_t *a, uint8_t *buf, size_t len) {
    if (len < RP_DG_HDR + RP_AUTH_TRAILER)
        return -1;
    uint8_t *t = buf + len - RP_AUTH_TRAILER;
    /* a timestamp (replay.h) that never repeats: the clock with our salt,
     * or one step past the last counter when the clock has not moved on
     * (or was stepped back) */
    uint64_t ctr = (rp_auth_wall_ns(a) & ~RP_AUTH_SALT_MASK) | a->salt;
    if (ctr < a->next)
        ctr = a->next;
    a->next = ctr + RP_AUTH_SALT_MASK + 1;
    t[0] = a->id[0];
    rp_st64(t + 1, ctr);
    if (a->encrypt)
        buf[3] |= RP_DGF_ENC;           /* before: the header is authenticated (and signed) */
    if (a->own && rp_ld16(buf + 18) == RP_AUTH_SIGNED_TRAILER &&
        carries_authority(buf, len - RP_AUTH_SIGNED_TRAILER)) {
        uint8_t *s = buf + len - RP_AUTH_SIGNED_TRAILER;
        size_t sl = 64;
        buf[3] |= RP_DGF_SIG;
        rp_st32(s, rp_ld32(buf + 8));
        size_t n = sig_message(a->msg_sign, buf, len);
        EVP_MD_CTX_reset(a->md_sign);
        if (EVP_DigestSignInit(a->md_sign, NULL, NULL, NULL, a->own) != 1 ||
            EVP_DigestSign(a->md_sign, s + 4, &sl, a->msg_sign, n) != 1 || sl != 64)
            return -1;
        a->signatures++;
    }
    if (a->impl == RP_MAC_IPSECMB) {
        uint8_t iv[12];
        iv_of(iv, rp_ld32(buf + 8), ctr);
        if (a->encrypt)
            rp_gcmlib_encrypt(a->lk[0], iv, buf, RP_DG_HDR, buf + RP_DG_HDR, buf + RP_DG_HDR,
                              len - RP_AUTH_TRAILER - RP_DG_HDR, t + 9);
        else
            rp_gcmlib_gmac(a->lk[0], iv, buf, len - RP_AUTH_TRAILER, t + 9);
    } else if (a->encrypt) {
        if (gcm_seal(a->seal, buf, len, ctr, t + 9))
            return -1;
    } else if (gmac(a->seal, buf, len - RP_AUTH_TRAILER, rp_ld32(buf + 8), ctr, t + 9)) {
        return -1;
    }
    a->sealed++;
    return 0;
}

/* Room for one plaintext of len bytes, or NULL when the chunks are full. */
static uint8_t *arena_take(rp_auth_t *a, size_t len) {
    if (a->arena_off + len > RP_AUTH_ARENA_CHUNK) {
        a->arena_cur++;
        a->arena_off = 0;
    }
    if (a->arena_cur >= RP_AUTH_ARENA_CHUNKS || len > RP_AUTH_ARENA_CHUNK)
        return NULL;
    if (!a->arena[a->arena_cur] && !(a->arena[a->arena_cur] = (uint8_t *)malloc(RP_AUTH_ARENA_CHUNK)))
        return NULL;
    return a->arena[a->arena_cur] + a->arena_off;
}

/* Decrypt buf[0, len) into out under c: 0 if the tag is right. */
static int gcm_open(EVP_CIPHER_CTX *c, const uint8_t *buf, size_t len, uint8_t *out) {
    uint8_t iv[12], tag[RP_AUTH_TAG_LEN];
    int ol;
    const uint8_t *t = buf + len - RP_AUTH_TRAILER;
    size_t nb = len - RP_AUTH_TRAILER - RP_DG_HDR;
    iv_of(iv, rp_ld32(buf + 8), rp_ld64(t + 1));
    memcpy(tag, t + 9, RP_AUTH_TAG_LEN);
    if (EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv) != 1 ||
        EVP_DecryptUpdate(c, NULL, &ol, buf, RP_DG_HDR) != 1 ||
        EVP_DecryptUpdate(c, out + RP_DG_HDR, &ol, buf + RP_DG_HDR, (int)nb) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, RP_AUTH_TAG_LEN, tag) != 1 ||
        EVP_DecryptFinal_ex(c, out + RP_DG_HDR + nb, &ol) != 1)
        return -1;                      /* DecryptFinal checks the tag (constant time) */
    memcpy(out, buf, RP_DG_HDR);
    memcpy(out + len - RP_AUTH_TRAILER, t, RP_AUTH_TRAILER);
    return 0;
}

/* gcm_open by gcmlib.h. */
static int lib_open(const rp_gcmlib_key_t *lk, const uint8_t *buf, size_t len, uint8_t *out) {
    uint8_t iv[12], tag[RP_AUTH_TAG_LEN];
    const uint8_t *t = buf + len - RP_AUTH_TRAILER;
    size_t nb = len - RP_AUTH_TRAILER - RP_DG_HDR;
    iv_of(iv, rp_ld32(buf + 8), rp_ld64(t + 1));
    rp_gcmlib_decrypt(lk, iv, buf, RP_DG_HDR, buf + RP_DG_HDR, out + RP_DG_HDR, nb, tag);
    if (CRYPTO_memcmp(tag, t + 9, RP_AUTH_TAG_LEN) != 0)
        return -1;
    memcpy(out, buf, RP_DG_HDR);
    memcpy(out + len - RP_AUTH_TRAILER, t, RP_AUTH_TRAILER);
    return 0;
}

int rp_auth_open(rp_auth_t *a, const uint8_t *buf, size_t len, int new_batch,
                 const uint8_t **plain) {
    uint16_t ml = len >= RP_DG_HDR ? rp_ld16(buf + 18) : 0;
    if (len < RP_DG_HDR + ml || !(buf[3] & RP_DGF_MAC) ||
        (ml != RP_AUTH_TRAILER && ml != RP_AUTH_SIGNED_TRAILER))
        return -1;
    const uint8_t *t = buf + len - RP_AUTH_TRAILER;
    for (int k = 0; k < a->nkeys; k++) {
        if (a->id[k] != t[0])
            continue;
        if (!(buf[3] & RP_DGF_ENC)) {
            uint8_t tag[RP_AUTH_TAG_LEN];
            if (a->impl == RP_MAC_IPSECMB) {
                uint8_t iv[12];
                iv_of(iv, rp_ld32(buf + 8), rp_ld64(t + 1));
                rp_gcmlib_gmac(a->lk[k], iv, buf, len - RP_AUTH_TRAILER, tag);
            } else if (gmac(a->open[k], buf, len - RP_AUTH_TRAILER, rp_ld32(buf + 8), rp_ld64(t + 1),
                            tag)) {
                return -1;
            }
            if (CRYPTO_memcmp(tag, t + 9, RP_AUTH_TAG_LEN) != 0)
                return -1;
            *plain = buf;
            return 0;
        }
        if (new_batch) {
            a->arena_cur = 0;
            a->arena_off = 0;
        }
        uint8_t *out = arena_take(a, len);
        if (!out) {
            a->arena_full++;
            return -2;
        }
        if (a->impl == RP_MAC_IPSECMB ? lib_open(a->lk[k], buf, len, out) : gcm_open(a->dec[k], buf, len, out))
            return -1;
        a->arena_off += len;
        *plain = out;
        return 0;
    }
    return -1;
}

int rp_auth_verify(rp_auth_t *a, const uint8_t *buf, size_t len) {
    const uint8_t *p;
    return rp_auth_open(a, buf, len, 0, &p) == 0 ? 0 : -1;
}

int rp_auth_fresh(rp_auth_t *a, const uint8_t *buf, size_t len) {
    const uint8_t *t = buf + len - RP_AUTH_TRAILER;
    /* a signed datagram (its signature checked first, node.c) has its own
     * window: unsigned datagrams a key holder forges in the signer's name
     * cannot push the signer's counters below the floor */
    rp_replay_t *r = (buf[3] & RP_DGF_SIG) && a->npub ? &a->replay_signed : &a->replay;
    /* a source's entry created now takes only counters sealed since our
     * clock less the skew: what was captured before we could see it is stale */
    uint64_t now = a->skew ? rp_auth_wall_ns(a) : 0;
    uint64_t floor = now > a->skew ? now - a->skew : 0;
    return rp_replay_check(r, rp_ld32(buf + 8), t[0], rp_ld64(t + 1), floor);
}

uint64_t rp_auth_wall_ns(const rp_auth_t *a) {
    struct timespec ts;
    clock_gettime(RP_AUTH_CLOCK, &ts);
    int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + a->clock_offset;
    return t > 0 ? (uint64_t)t : 0;
}

void rp_auth_set_replay_skew(rp_auth_t *a, uint64_t ns) { a->skew = ns; }
uint64_t rp_auth_replay_skew(const rp_auth_t *a) { return a->skew; }
void rp_auth_set_clock_offset(rp_auth_t *a, int64_t ns) { a->clock_offset = ns; }
uint64_t rp_auth_stale(const rp_auth_t *a) { return a->replay.stale + a->replay_signed.stale; }

uint64_t rp_auth_sealed(const rp_auth_t *a) { return a->sealed; }
const rp_replay_t *rp_auth_replay(const rp_auth_t *a) { return &a->replay; }
uint64_t rp_auth_arena_full(const rp_auth_t *a) { return a->arena_full; }
