/* A token bucket: `rate` tokens a second, at most `burst` saved up.  The
 * node's repair rate limit (§7.1) is one, a token per REPAIR; rate 0 means
 * unlimited, and then taking a token always succeeds. */
#ifndef RP_TBUCKET_H
#define RP_TBUCKET_H

#include "rp_common.h"

typedef struct {
    double rate, burst, tokens;
    int64_t last;          /* ns of the last refill; INT64_MIN: never */
} rp_tbucket_t;

/* Unlimited until rp_tb_set. */
RP_INLINE void rp_tb_init(rp_tbucket_t *b) {
    b->rate = b->burst = b->tokens = 0;
    b->last = INT64_MIN;
}

/* rate <= 0: unlimited; a burst below one token is one token.  Starts full. */
RP_INLINE void rp_tb_set(rp_tbucket_t *b, double rate, double burst) {
    b->rate = rate > 0 ? rate : 0;
    b->burst = burst > 1 ? burst : 1;
    b->tokens = b->burst;
}

/* Add the tokens earned since the last refill. */
RP_INLINE void rp_tb_refill(rp_tbucket_t *b, int64_t now) {
    if (b->rate <= 0)
        return;
    if (b->last != INT64_MIN && now > b->last) {
        b->tokens += (double)(now - b->last) * 1e-9 * b->rate;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
    }
    b->last = now;
}

/* Take one token: 1 if taken (always, when unlimited), 0 if none is left. */
RP_INLINE int rp_tb_take(rp_tbucket_t *b) {
    if (b->rate <= 0)
        return 1;
    if (b->tokens < 1.0)
        return 0;
    b->tokens -= 1.0;
    return 1;
}

#endif
