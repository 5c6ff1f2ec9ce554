/* Hashed heartbeat and membership signatures (thesis §5.1, §5.3).
 *
 * A signature summarises a vector of entries, e.g. (sender, incarnation,
 * latest seqno) for heartbeats or (member, status, freshness) for
 * membership.  Each entry is 16 little-endian bytes (u32 key, u32 a, u64 b)
 * hashed with XXH64; the signature is the sum of the entry hashes mod 2^64.
 * A sum (not a hash over the concatenation) makes the signature independent
 * of entry order and lets one entry change in O(1): subtract its old hash,
 * add the new one.  A sum rather than XOR so that two equal entries do not
 * cancel.
 *
 * The value equals, byte for byte, what Python computes with the xxhash
 * package:  sum(xxh64_intdigest(pack('<IIQ', k, a, b), seed)) % 2**64.
 */
#ifndef RP_SIGNATURE_H
#define RP_SIGNATURE_H

#include "rp_common.h"

/* The seed of every rpbcast signature: the bytes "rpbcast1". */
#define RP_SIG_SEED 0x7270626361737431ULL

uint64_t rp_xxh64(const void *data, size_t len, uint64_t seed);

RP_INLINE uint64_t rp_sig_entry(uint32_t key, uint32_t a, uint64_t b, uint64_t seed) {
    uint8_t buf[16];
    rp_st32(buf, key);
    rp_st32(buf + 4, a);
    rp_st64(buf + 8, b);
    return rp_xxh64(buf, 16, seed);
}

/* A vector of entries addressed by local slot, with the running signature. */
typedef struct {
    uint64_t seed;
    uint64_t sig;       /* sum of hashes of present entries */
    uint32_t cap;
    uint32_t count;     /* present entries */
    uint64_t *hash;     /* per slot */
    uint8_t *present;   /* per slot */
} rp_sigvec_t;

int  rp_sigvec_init(rp_sigvec_t *v, uint32_t cap, uint64_t seed);
void rp_sigvec_free(rp_sigvec_t *v);
/* Set slot's entry (insert or replace).  O(1).  Grows on demand. */
int  rp_sigvec_set(rp_sigvec_t *v, uint32_t slot, uint32_t key, uint32_t a, uint64_t b);
/* Remove slot's entry if present.  O(1). */
void rp_sigvec_del(rp_sigvec_t *v, uint32_t slot);

#endif
