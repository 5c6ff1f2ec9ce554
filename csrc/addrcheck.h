/* Address validation: no amplification towards an address that has not
 * proven it receives there (in the spirit of QUIC's, RFC 9000 §8.1).
 *
 * A UDP source address is whatever the sender wrote.  A request "from" a
 * victim's address makes every reply to it an attack on the victim, so a
 * reply to an address not known to receive is capped at `factor` (3) times
 * the bytes that arrived from it: every control message received from an
 * address adds factor x its bytes to the address's credit, and every
 * unicast message towards it spends from that credit (rp_ac_charge, called
 * by the outbox); what does not fit is dropped and counted.
 *
 * An address is validated -- replies to it are not capped, only paced
 * as to anyone -- when it is
 *   - a member's address this node was told to trust (rp_ac_set_members:
 *     the configured members; in a keyed group the member table), or
 *   - an address that echoed a cookie.  The cookie is the nonce (seq) of a
 *     PING sent to the address: a keyed hash (SipHash-2-4, a secret per
 *     process) of the address and a 10-second window, so nothing is stored
 *     to check it.  Every member answers a PING with a PONG that echoes seq
 *     and body; only a host that receives at the address can.  A valid echo
 *     (this window or the last) validates the address for RP_AC_VALID_NS.
 *
 * A flood of requests from many spoofed addresses would still cost the
 * control plane its time (each request is looked at).  So control messages
 * from addresses not validated share one token bucket (`admit_rate` a
 * second, all of them together); beyond it they are dropped before the
 * control plane sees them, counted.  Members are validated: a flood
 * does not delay them.  A cookie echo is checked first, and always counts.
 *
 * State is bounded: a set-associative table of RP_AC_SETS x RP_AC_WAYS
 * addresses (unvalidated entries are evicted before validated ones, the
 * longest idle first) and the member list.  An evicted address loses its
 * credit, which only makes the cap stricter.
 */
#ifndef RP_ADDRCHECK_H
#define RP_ADDRCHECK_H

#include "rp_common.h"
#include "tbucket.h"

#define RP_AC_SETS 1024
#define RP_AC_WAYS 4
#define RP_AC_WINDOW_NS (10 * 1000000000LL)     /* cookie time window */
#define RP_AC_VALID_NS (600 * 1000000000LL)     /* a validation lasts this long */
#define RP_AC_COOKIE_GAP_NS (200 * 1000000LL)   /* cookies to one address at most this often */
#define RP_AC_MAX_CREDIT (192u * 1024)          /* credit an address can save up (bytes) */

typedef struct {
    uint64_t addr;
    uint64_t credit;           /* reply bytes still allowed (unvalidated) */
    int64_t seen;              /* last request (ns) */
    int64_t cookie_at;         /* last cookie sent (ns); INT64_MIN: never */
    int64_t valid_at;          /* cookie echoed at (ns); INT64_MIN: not validated */
    uint8_t used;
    uint8_t asked;             /* it sent us something (else: we talked to it first) */
} rp_acent_t;

typedef struct {
    uint64_t requests;         /* control messages from unvalidated addresses */
    uint64_t capped_msgs;      /* replies dropped: beyond the address's credit */
    uint64_t capped_bytes;
    uint64_t cookies_sent;
    uint64_t cookies_echoed;   /* valid echoes (addresses validated) */
    uint64_t cookies_bad;      /* PONGs with a cookie that did not check */
    uint64_t not_admitted;     /* control messages dropped: unvalidated, beyond admit_rate */
} rp_acstats_t;

typedef struct rp_addrcheck {
    double factor;             /* reply bytes per request byte (unvalidated) */
    uint8_t secret[16];
    int64_t now;               /* the clock of the last call that told it */
    uint64_t *members;         /* sorted */
    size_t nmembers;
    rp_acent_t *t;             /* RP_AC_SETS * RP_AC_WAYS */
    rp_tbucket_t admit;        /* control messages from unvalidated addresses */
    rp_acstats_t st;
} rp_addrcheck_t;

/* A table capping replies at factor x request bytes; NULL on ENOMEM. */
rp_addrcheck_t *rp_ac_new(double factor);
void rp_ac_free(rp_addrcheck_t *ac);

/* Replace the trusted member addresses (copied).  RP_OK or RP_ENOMEM. */
int rp_ac_set_members(rp_addrcheck_t *ac, const uint64_t *addrs, size_t n);

/* Is addr validated (a trusted member, or a cookie echoed lately)? */
int rp_ac_validated(rp_addrcheck_t *ac, uint64_t addr);

/* The cookie of addr in window w (exposed for tests). */
uint64_t rp_ac_cookie(const rp_addrcheck_t *ac, uint64_t addr, uint64_t w);

/* Control messages from unvalidated addresses admitted per second, all
 * together (burst: as many at once); rate 0: all. */
void rp_ac_set_admit(rp_addrcheck_t *ac, double rate, double burst);

/* A control message of `bytes` arrived from src.  Returns -1 if it is not
 * admitted (src not validated, the admit bucket empty: drop it); else
 * credits src (if not validated) and returns 1 if a cookie should be sent
 * to src now, 0 if not. */
int rp_ac_request(rp_addrcheck_t *ac, uint64_t src, size_t bytes, int64_t now);

/* A PONG from src echoed (seq, body): 1 if it carried src's cookie (src is
 * validated from now on), 0 if it is not a cookie echo of ours. */
int rp_ac_pong(rp_addrcheck_t *ac, uint64_t src, uint64_t seq, const uint8_t *body, size_t len,
               int64_t now);

/* May `bytes` of unicast go to dest?  Spends dest's credit; 0: drop it
 * (counted).  *want_cookie is 1 when a cookie should go to dest within its
 * credit (it asked, and its credit ran out), 2 when free of credit (a
 * validation half-way to expiry). */
int rp_ac_charge(rp_addrcheck_t *ac, uint64_t dest, size_t bytes, int *want_cookie);

/* The window a cookie sent now carries in its PING body; and charge its
 * bytes to dest's credit (a cookie is a reply like any other; it may take
 * the last credit, never more than there is unless `free_of_credit`). */
uint64_t rp_ac_window(const rp_addrcheck_t *ac);
int rp_ac_cookie_sent(rp_addrcheck_t *ac, uint64_t dest, size_t bytes, int free_of_credit);

#endif
