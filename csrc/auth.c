#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>

#include "wire.h"

struct rp_auth {
    int nkeys;
    uint8_t id[RP_AUTH_MAX_KEYS];
    /* one context per key and direction: the key schedule is computed once */
    EVP_CIPHER_CTX *seal;
    EVP_CIPHER_CTX *open[RP_AUTH_MAX_KEYS];
    uint64_t counter;
    uint64_t sealed;
};

static EVP_CIPHER_CTX *gcm_ctx(const uint8_t *key) {
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c)
        return NULL;
    if (EVP_EncryptInit_ex(c, EVP_aes_128_gcm(), NULL, key, NULL) != 1) {
        EVP_CIPHER_CTX_free(c);
        return NULL;
    }
    return c;
}

rp_auth_t *rp_auth_new(const uint8_t *ids, const uint8_t *keys, int nkeys, uint64_t counter0) {
    if (nkeys < 1 || nkeys > RP_AUTH_MAX_KEYS)
        return NULL;
    if (nkeys == 2 && ids[0] == ids[1])
        return NULL;
    rp_auth_t *a = (rp_auth_t *)calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->nkeys = nkeys;
    a->counter = counter0;
    a->seal = gcm_ctx(keys);
    for (int k = 0; k < nkeys; k++) {
        a->id[k] = ids[k];
        a->open[k] = gcm_ctx(keys + (size_t)k * RP_AUTH_KEY_LEN);
        if (!a->open[k])
            goto fail;
    }
    if (!a->seal)
        goto fail;
    return a;
fail:
    rp_auth_free(a);
    return NULL;
}

void rp_auth_free(rp_auth_t *a) {
    if (!a)
        return;
    EVP_CIPHER_CTX_free(a->seal);
    for (int k = 0; k < RP_AUTH_MAX_KEYS; k++)
        EVP_CIPHER_CTX_free(a->open[k]);
    free(a);
}

/* The GMAC tag of aad[0, n) under c with IV (source, counter). */
static int gmac(EVP_CIPHER_CTX *c, const uint8_t *aad, size_t n, uint32_t source,
                uint64_t counter, uint8_t tag[RP_AUTH_TAG_LEN]) {
    uint8_t iv[12];
    int ol;
    rp_st32(iv, source);
    rp_st64(iv + 4, counter);
    if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv) != 1 ||
        EVP_EncryptUpdate(c, NULL, &ol, aad, (int)n) != 1 ||
        EVP_EncryptFinal_ex(c, tag, &ol) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, RP_AUTH_TAG_LEN, tag) != 1)
        return -1;
    return 0;
}

int rp_auth_seal(rp_auth_t *a, uint8_t *buf, size_t len) {
    if (len < RP_DG_HDR + RP_AUTH_TRAILER)
        return -1;
    uint8_t *t = buf + len - RP_AUTH_TRAILER;
    uint64_t ctr = a->counter++;
    t[0] = a->id[0];
    rp_st64(t + 1, ctr);
    if (gmac(a->seal, buf, len - RP_AUTH_TRAILER, rp_ld32(buf + 8), ctr, t + 9))
        return -1;
    a->sealed++;
    return 0;
}

int rp_auth_verify(rp_auth_t *a, const uint8_t *buf, size_t len) {
    if (len < RP_DG_HDR + RP_AUTH_TRAILER || !(buf[3] & RP_DGF_MAC) ||
        rp_ld16(buf + 18) != RP_AUTH_TRAILER)
        return -1;
    const uint8_t *t = buf + len - RP_AUTH_TRAILER;
    for (int k = 0; k < a->nkeys; k++) {
        if (a->id[k] != t[0])
            continue;
        uint8_t tag[RP_AUTH_TAG_LEN];
        if (gmac(a->open[k], buf, len - RP_AUTH_TRAILER, rp_ld32(buf + 8), rp_ld64(t + 1), tag))
            return -1;
        return CRYPTO_memcmp(tag, t + 9, RP_AUTH_TAG_LEN) == 0 ? 0 : -1;
    }
    return -1;
}

uint64_t rp_auth_sealed(const rp_auth_t *a) { return a->sealed; }
