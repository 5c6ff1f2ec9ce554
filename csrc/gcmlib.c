#include "gcmlib.h"

#include <stdlib.h>
#include <string.h>

#ifdef RP_HAVE_IPSECMB

#include <intel-ipsec-mb.h>
#include <pthread.h>
#include <stdio.h>

struct rp_gcmlib_key {
    struct gcm_key_data kd;     /* 64-byte aligned: the library's requirement */
    /* the manager that expanded it: the core is linked statically into
     * several extension modules, each with its own copy of `mgr` below, and
     * a key made in one is used in another (the driver's loop thread) */
    IMB_MGR *m;
};

static IMB_MGR *mgr;            /* written once (pthread_once), then only read */
static char described[64];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void) {
    IMB_MGR *m = alloc_mb_mgr(0);
    if (!m)
        return;
    IMB_ARCH arch = IMB_ARCH_NONE;
    init_mb_mgr_auto(m, &arch);
    uint64_t f = m->features;
    /* hardware AES and carry-less multiply, never the library's software
     * AES emulation (table lookups: not constant time); a failed
     * power-on self-test means no */
    int ok = imb_get_errno(m) == 0 && arch >= IMB_ARCH_SSE && (f & IMB_FEATURE_AESNI) &&
             (f & IMB_FEATURE_PCLMULQDQ) && !(f & IMB_FEATURE_AESNI_EMU) &&
             (!(f & IMB_FEATURE_SELF_TEST) || (f & IMB_FEATURE_SELF_TEST_PASS));
    if (!ok) {
        free_mb_mgr(m);
        return;
    }
    static const char *names[] = {"none", "noaesni", "sse", "avx", "avx2", "avx512"};
    const char *wide = (arch == IMB_ARCH_AVX512 && (f & IMB_FEATURE_VAES) && (f & IMB_FEATURE_VPCLMULQDQ))
                           ? "+vaes" : "";
    snprintf(described, sizeof(described), "%s %s%s", imb_get_version_str(),
             arch < IMB_ARCH_NUM ? names[arch] : "?", wide);
    mgr = m;
}

int rp_gcmlib_available(void) {
    pthread_once(&once, setup);
    return mgr != NULL;
}

const char *rp_gcmlib_describe(void) { return rp_gcmlib_available() ? described : ""; }

rp_gcmlib_key_t *rp_gcmlib_new(const uint8_t key[16]) {
    void *m = NULL;
    if (!rp_gcmlib_available() || posix_memalign(&m, 64, sizeof(rp_gcmlib_key_t)))
        return NULL;
    rp_gcmlib_key_t *k = (rp_gcmlib_key_t *)m;
    k->m = mgr;
    IMB_AES128_GCM_PRE(mgr, key, &k->kd);
    return k;
}

void rp_gcmlib_free(rp_gcmlib_key_t *k) {
    if (!k)
        return;
    imb_clear_mem(k, sizeof(*k));
    free(k);
}

void rp_gcmlib_gmac(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad, size_t n,
                    uint8_t tag[16]) {
    struct gcm_context_data c;
    /* GCM with an empty plaintext is GMAC (SP 800-38D); one call does it */
    IMB_AES128_GCM_ENC(k->m, &k->kd, &c, NULL, NULL, 0, iv, aad, n, tag, 16);
}

void rp_gcmlib_encrypt(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                       size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    struct gcm_context_data c;
    IMB_AES128_GCM_ENC(k->m, &k->kd, &c, out, in, nb, iv, aad, na, tag, 16);
}

void rp_gcmlib_decrypt(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                       size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    struct gcm_context_data c;
    IMB_AES128_GCM_DEC(k->m, &k->kd, &c, out, in, nb, iv, aad, na, tag, 16);
}

#else   /* built without the library: EVP does everything */

int rp_gcmlib_available(void) { return 0; }
const char *rp_gcmlib_describe(void) { return ""; }
rp_gcmlib_key_t *rp_gcmlib_new(const uint8_t key[16]) { (void)key; return NULL; }
void rp_gcmlib_free(rp_gcmlib_key_t *k) { (void)k; }
void rp_gcmlib_gmac(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad, size_t n,
                    uint8_t tag[16]) {
    (void)k; (void)iv; (void)aad; (void)n; memset(tag, 0, 16);
}
void rp_gcmlib_encrypt(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                       size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    (void)k; (void)iv; (void)aad; (void)na; (void)in; (void)out; (void)nb; memset(tag, 0, 16);
}
void rp_gcmlib_decrypt(const rp_gcmlib_key_t *k, const uint8_t iv[12], const uint8_t *aad,
                       size_t na, const uint8_t *in, uint8_t *out, size_t nb, uint8_t tag[16]) {
    (void)k; (void)iv; (void)aad; (void)na; (void)in; (void)out; (void)nb; memset(tag, 0, 16);
}

#endif
