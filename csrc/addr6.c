/* The IPv6 endpoint <-> handle table (addr6.h). */
#define _GNU_SOURCE
#include "addr6.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

typedef struct {
    uint8_t ip[16];
    uint32_t scope;
    uint32_t gen;          /* bumps on eviction: handles of the old endpoint go stale */
    int32_t next;          /* hash chain */
    uint16_t port;
    uint8_t used, pinned, ref;
} ent_t;

static struct {
    pthread_mutex_t mu;
    ent_t *e;
    int32_t *head;         /* hash buckets: first slot, -1 none */
    int32_t *free_;        /* free slots (a stack) */
    uint32_t cap, nbuckets, nfree, hand;
    uint64_t seed;
    rp_addr6_stats_t st;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t hash6(const uint8_t ip[16], uint16_t port, uint32_t scope) {
    /* keyed with a per-process random seed: chains cannot be aimed at */
    uint64_t a = rp_ld64(ip) ^ T.seed, b = rp_ld64(ip + 8) ^ (T.seed >> 7);
    uint64_t h = (a * 0x9E3779B97F4A7C15ULL) ^ (b * 0xC2B2AE3D27D4EB4FULL) ^
                 (((uint64_t)port << 32 | scope) * 0x165667B19E3779F9ULL);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 32);
}

static int setup(uint32_t cap) {
    if (cap < 2 || cap > RP_ADDR6_MAX_CAP)
        return RP_EINVAL;
    uint32_t nb = 1;
    while (nb < cap * 2)
        nb <<= 1;
    ent_t *e = calloc(cap, sizeof(ent_t));
    int32_t *head = malloc(nb * sizeof(int32_t)), *fr = malloc(cap * sizeof(int32_t));
    if (!e || !head || !fr) {
        free(e); free(head); free(fr);
        return RP_ENOMEM;
    }
    /* generations carry on across a reset, so old handles stay stale */
    uint32_t gen0 = T.st.inserted ? (uint32_t)(T.st.inserted + T.st.evicted + 1) : 1;
    free(T.e); free(T.head); free(T.free_);
    T.e = e; T.head = head; T.free_ = fr;
    for (uint32_t i = 0; i < nb; i++)
        head[i] = -1;
    for (uint32_t i = 0; i < cap; i++) {
        e[i].gen = gen0;
        fr[i] = (int32_t)(cap - 1 - i);
    }
    T.cap = cap; T.nbuckets = nb; T.nfree = cap; T.hand = 0;
    if (!T.seed && getrandom(&T.seed, sizeof(T.seed), GRND_NONBLOCK) != sizeof(T.seed))
        T.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL + (uint64_t)(uintptr_t)&T;
    uint64_t ins = T.st.inserted, ev = T.st.evicted, rf = T.st.refused, stl = T.st.stale;
    memset(&T.st, 0, sizeof(T.st));
    T.st.cap = cap;
    T.st.inserted = ins; T.st.evicted = ev; T.st.refused = rf; T.st.stale = stl;
    return RP_OK;
}

static uint64_t handle_of(uint32_t slot) {
    return RP_ADDR6_TAG | ((uint64_t)T.e[slot].gen << RP_ADDR6_SLOT_BITS) | slot;
}

static void unlink_slot(uint32_t slot) {
    ent_t *x = &T.e[slot];
    int32_t *p = &T.head[hash6(x->ip, x->port, x->scope) & (T.nbuckets - 1)];
    while (*p != -1 && *p != (int32_t)slot)
        p = &T.e[*p].next;
    if (*p == (int32_t)slot)
        *p = x->next;
}

/* A slot for a new entry: a free one, else the clock's victim; -1: all pinned. */
static int32_t take_slot(void) {
    if (T.nfree)
        return T.free_[--T.nfree];
    for (uint32_t step = 0; step < 2 * T.cap; step++) {
        uint32_t s = T.hand;
        T.hand = (T.hand + 1) % T.cap;
        ent_t *x = &T.e[s];
        if (x->pinned)
            continue;
        if (x->ref) {
            x->ref = 0;             /* second chance */
            continue;
        }
        unlink_slot(s);
        x->used = 0;
        x->gen = (x->gen + 1) & 0xFFFFFFFFu;
        if (!x->gen)
            x->gen = 1;
        T.st.evicted++;
        T.st.entries--;
        return (int32_t)s;
    }
    return -1;
}

uint64_t rp_addr6_intern_locked(const uint8_t ip[16], uint16_t port, uint32_t scope, int pin) {
    if (!T.e && setup(RP_ADDR6_DEFAULT_CAP) != RP_OK)
        return 0;
    uint32_t b = (uint32_t)(hash6(ip, port, scope) & (T.nbuckets - 1));
    for (int32_t i = T.head[b]; i != -1; i = T.e[i].next) {
        ent_t *x = &T.e[i];
        if (x->port == port && x->scope == scope && memcmp(x->ip, ip, 16) == 0) {
            x->ref = 1;
            if (pin && !x->pinned) {
                x->pinned = 1;
                T.st.pinned++;
            }
            return handle_of((uint32_t)i);
        }
    }
    int32_t s = take_slot();
    if (s < 0) {
        T.st.refused++;
        return 0;
    }
    ent_t *x = &T.e[s];
    memcpy(x->ip, ip, 16);
    x->port = port;
    x->scope = scope;
    x->used = 1;
    x->ref = 0;                 /* new entries start cold: one datagram does not earn a second chance */
    x->pinned = pin ? 1 : 0;
    x->next = T.head[b];
    T.head[b] = s;
    T.st.inserted++;
    T.st.entries++;
    T.st.pinned += x->pinned;
    return handle_of((uint32_t)s);
}

int rp_addr6_lookup_locked(uint64_t h, uint8_t ip[16], uint16_t *port, uint32_t *scope) {
    uint32_t slot = (uint32_t)(h & ((1u << RP_ADDR6_SLOT_BITS) - 1));
    uint64_t gen = (h & ~RP_ADDR6_TAG) >> RP_ADDR6_SLOT_BITS;
    if (!RP_ADDR_IS6(h) || !T.e || slot >= T.cap || !T.e[slot].used || T.e[slot].gen != gen) {
        T.st.stale++;
        return RP_EINVAL;
    }
    ent_t *x = &T.e[slot];
    x->ref = 1;
    memcpy(ip, x->ip, 16);
    *port = x->port;
    *scope = x->scope;
    return RP_OK;
}

void rp_addr6_lock(void) { pthread_mutex_lock(&T.mu); }
void rp_addr6_unlock(void) { pthread_mutex_unlock(&T.mu); }

uint64_t rp_addr6_intern(const uint8_t ip[16], uint16_t port, uint32_t scope, int pin) {
    rp_addr6_lock();
    uint64_t h = rp_addr6_intern_locked(ip, port, scope, pin);
    rp_addr6_unlock();
    return h;
}

int rp_addr6_lookup(uint64_t h, uint8_t ip[16], uint16_t *port, uint32_t *scope) {
    rp_addr6_lock();
    int r = rp_addr6_lookup_locked(h, ip, port, scope);
    rp_addr6_unlock();
    return r;
}

void rp_addr6_stats(rp_addr6_stats_t *st) {
    rp_addr6_lock();
    *st = T.st;
    if (!T.e)
        st->cap = RP_ADDR6_DEFAULT_CAP;
    rp_addr6_unlock();
}

int rp_addr6_reset(uint32_t cap) {
    rp_addr6_lock();
    int r = setup(cap);
    rp_addr6_unlock();
    return r;
}
