/* Authenticated datagrams: one AES-128-GMAC tag per datagram.
 *
 * Every datagram a keyed node builds gets a 25-byte trailer (wire.h
 * RP_DGF_MAC, docs/wire-format.md section 2.3):
 *
 *     u8 key_id | u64 nonce counter | 16-byte GMAC tag
 *
 * The tag is AES-128-GCM with no plaintext over the bytes [0, len - 25)
 * as additional data -- the datagram header (with dflags and mac_len) and
 * every message -- under the key named by key_id, with the 96-bit IV
 * (u32 source, u64 counter) little-endian.  A GCM IV must never repeat
 * under one key: the counter is per node and strictly increasing; the
 * source id keeps nodes apart.  The counter is also a timestamp, so that
 * a receiver that started (or forgot a source) after a datagram was
 * captured can refuse it (replay.h, "stale"): each datagram's counter is
 * max(previous + 2^RP_AUTH_SALT_BITS, wall clock ns at seal time) with its
 * low RP_AUTH_SALT_BITS bits replaced by a per-run random salt.  The salt
 * keeps two runs of one node apart even if the wall clock was stepped back
 * between them (they share counters only if their salts are equal, 1 in
 * 2^RP_AUTH_SALT_BITS); the coarse clock (CLOCK_REALTIME_COARSE, a few ms
 * of resolution) is read once per datagram, a few ns.  docs/security.md,
 * "Nonces", states the assumptions.
 *
 * Encryption (optional, rp_auth_set_encrypt): the datagram's body -- every
 * byte after the 24-byte header, before the trailer -- is AES-128-GCM
 * ciphertext, the header (with RP_DGF_ENC set) the additional data; the
 * same one seal per datagram, the same IV and trailer, the tag covering
 * both.  A receiver decrypts into its own buffer (the received bytes stay
 * as they are) and parses the plaintext.  An encrypting node still accepts
 * MAC-only datagrams from key holders (a roll-out restarts members one by
 * one); both are authenticated.
 *
 * Replay (replay.h): after the datagram has parsed, the node asks
 * rp_auth_fresh whether a control datagram's counter is new for its
 * (source, key id), and not older than the entry's clock floor (the wall
 * clock less the allowed skew when the entry was created).
 *
 * Two keys are valid at once (a roll-over): the node sends under the
 * first and accepts either.  Verification runs before the datagram is
 * parsed any further; a bad or missing tag is the AUTH reason.
 * Why GMAC: the fastest well-reviewed MAC on this hardware (AES-NI +
 * carry-less multiply), bench/bench_auth.c.
 *
 * Who computes it (docs/security.md, "Who computes it"; cost in
 * docs/performance.md, "MAC"): intel-ipsec-mb (gcmlib.h), Intel's
 * maintained AES-GCM of DPDK and VPP, where the build has it and the CPU
 * runs it in hardware -- one call per datagram on a key expanded once,
 * GHASH on VPCLMULQDQ where there is one -- and OpenSSL's EVP otherwise
 * (one context per key and direction, so the key schedule is computed
 * once).  Both compute the same AES-128-GCM, so nodes on either
 * interoperate; the library is checked against OpenSSL under every key
 * installed.  Checked under ASan/UBSan: sealed datagrams verify; any
 * flipped byte, a truncation or the other key fails.
 */
#ifndef RP_AUTH_H
#define RP_AUTH_H

#include "rp_common.h"
#include "replay.h"

#define RP_AUTH_KEY_LEN   16
#define RP_AUTH_TAG_LEN   16
#define RP_AUTH_TRAILER   25        /* key id, counter, tag */
#define RP_AUTH_MAX_KEYS  2
#define RP_AUTH_SIG_BLOCK 68        /* u32 signer node id, 64-byte Ed25519 signature */
#define RP_AUTH_SIGNED_TRAILER (RP_AUTH_SIG_BLOCK + RP_AUTH_TRAILER)
#define RP_AUTH_SIG_KEY   32        /* Ed25519 private seed and public key */
#define RP_AUTH_SALT_BITS 10        /* low counter bits: a per-run salt */
#define RP_AUTH_REPLAY_SKEW_NS 5000000000ull    /* default clock skew allowed (5 s) */

typedef struct rp_auth rp_auth_t;

/* A context with nkeys (1 or 2) keys; keys[0] is the sending key.  NULL on
 * a bad argument or when the crypto library refuses.  counter0: no counter
 * is below it (the wall clock takes over at once when it is ahead). */
rp_auth_t *rp_auth_new(const uint8_t *ids, const uint8_t *keys, int nkeys, uint64_t counter0);
void rp_auth_free(rp_auth_t *a);

/* Fill the trailer of a finished datagram buf[0, len) whose last
 * RP_AUTH_TRAILER bytes are the reserved room.  The IV's first half is the
 * header's source field, as the receiver reads it.  Returns 0 or -1. */
int rp_auth_seal(rp_auth_t *a, uint8_t *buf, size_t len);

/* Check a received datagram's trailer: 0 if the tag is right under one of
 * the keys, -1 otherwise (no trailer, wrong length, unknown key id, bad
 * tag).  An encrypted datagram is decrypted as by rp_auth_open. */
int rp_auth_verify(rp_auth_t *a, const uint8_t *buf, size_t len);

/* Verify, and decrypt an encrypted datagram: 0 and *plain = the datagram
 * to parse (buf itself when it was not encrypted, else a copy with the
 * body in the clear, in a buffer of the context); -1 on a bad or missing
 * tag, -2 when the plaintext buffers are full.  Plaintexts stay valid
 * until a call with new_batch set: the caller sets it only when nothing
 * points into earlier ones (node.c: no control message queued). */
int rp_auth_open(rp_auth_t *a, const uint8_t *buf, size_t len, int new_batch,
                 const uint8_t **plain);

/* Whether the trailer's counter is new for the datagram's (source, key
 * id): RP_REPLAY_FRESH (and remembered), RP_REPLAY_REPLAY, or
 * RP_REPLAY_STALE (sealed before the source's entry's clock floor).  Only
 * for a datagram rp_auth_open accepted. */
int rp_auth_fresh(rp_auth_t *a, const uint8_t *buf, size_t len);

/* The clock skew allowed between members (ns; 0: no clock floor, counters
 * are then checked against the window only).  Default
 * RP_AUTH_REPLAY_SKEW_NS. */
void rp_auth_set_replay_skew(rp_auth_t *a, uint64_t ns);
uint64_t rp_auth_replay_skew(const rp_auth_t *a);
/* Shift this node's wall clock by ns (tests: a host whose clock is off). */
void rp_auth_set_clock_offset(rp_auth_t *a, int64_t ns);
/* The wall clock in ns as the counters and the clock floor read it. */
uint64_t rp_auth_wall_ns(const rp_auth_t *a);
/* Stale refusals in both windows (unsigned and signed). */
uint64_t rp_auth_stale(const rp_auth_t *a);

/* Seal with the body encrypted (on) or MAC only (off, the default). */
void rp_auth_set_encrypt(rp_auth_t *a, int on);
int rp_auth_encrypting(const rp_auth_t *a);

/* Signatures (docs/security.md, "Identity among key holders"): with a
 * private key, every datagram is sealed with RP_AUTH_SIGNED_TRAILER bytes
 * of room (the caller reserves them) and one that carries an
 * authority-bearing message (rp_auth_authority) also gets RP_DGF_SIG and
 * an Ed25519 signature over the header, the messages, the signer id and
 * the trailer's key id and counter -- then the MAC (or encryption) over
 * all of it.  With public keys (n of them, ids ascending), the node
 * verifies: rp_auth_sig_ok.  priv may be NULL (verify only).  0 or -1. */
int rp_auth_set_signing(rp_auth_t *a, const uint8_t *priv, uint32_t n, const uint32_t *ids,
                        const uint8_t *pubs);
int rp_auth_verifying(const rp_auth_t *a);
/* Whether a message type carries authority (JOIN, LEAVE, MEMBERS,
 * GAPNOTE, GCNOTE, LOGACK). */
int rp_auth_authority(uint8_t type);
/* 1 if buf (opened, parsed) carries a valid signature by `source`. */
int rp_auth_sig_ok(rp_auth_t *a, const uint8_t *buf, size_t len, uint32_t source);
/* The public key of an Ed25519 private seed: 0 or -1. */
int rp_auth_ed25519_public(const uint8_t *priv, uint8_t *pub);
uint64_t rp_auth_signatures(const rp_auth_t *a);

uint64_t rp_auth_sealed(const rp_auth_t *a);
/* Which engine seals and opens (both compute the same AES-128-GCM and
 * GMAC, so they interoperate): */
#define RP_MAC_OPENSSL 0    /* OpenSSL's EVP: everywhere (the fallback) */
#define RP_MAC_IPSECMB 1    /* intel-ipsec-mb (gcmlib.h): the default where usable */
int rp_auth_impl(const rp_auth_t *a);
/* Whether an engine can run under this context's keys: in the build, on
 * this CPU, and agreeing with OpenSSL under every key (rp_auth_new checks). */
int rp_auth_impl_available(const rp_auth_t *a, int impl);
/* Switch engines (tests, benchmarks, Config.mac_impl): 0, or -1 and no
 * change when that engine is not available. */
int rp_auth_set_impl(rp_auth_t *a, int impl);
const char *rp_auth_impl_name(int impl);
/* intel-ipsec-mb's version and code path ("1.3.0 avx512+vaes"), "" if none. */
const char *rp_auth_lib_describe(void);
const rp_replay_t *rp_auth_replay(const rp_auth_t *a);
uint64_t rp_auth_arena_full(const rp_auth_t *a);

#endif
