#include "node.h"

#include <stdlib.h>

#include "catchup.h"
#include "flowack.h"
#include "reqlimit.h"

const char *const rp_node_counter_names[RP_C__COUNT] = {
    "sent", "rx_dgrams", "rx_bad", "rx_own", "rx_new", "rx_fill", "rx_dup", "rx_far",
    "rx_dropped_full", "gaps", "gap_ids", "repairs_peer", "repairs_logger", "filled_other",
    "delivered", "purged", "forgotten", "served", "serve_limited", "gcnote_ids",
    "to_logger_ids", "ctl_queued", "hb_in", "logged", "log_errors", "served_from_log",
    "purged_buffer", "purged_notices", "catchup_queued", "catchup_again", "catchup_refused",
    "streams_refused", "rx_stranger", "streams_retired", "streams_refused_node",
    "streams_retired_stranger", "streams_promoted",
};

int rp_node_init(rp_node_t *n, const rp_node_cfg_t *cfg) {
    memset(n, 0, sizeof(*n));
    n->group = cfg->group;
    n->id = cfg->id;
    n->inc = cfg->inc;
    n->deliver_own = cfg->deliver_own;
    n->fifo = cfg->fifo || cfg->srb_w;
    n->is_logger = cfg->is_logger;
    n->no_deliver = cfg->no_deliver;
    n->hold_send = 1;
    n->srb_w = cfg->srb_w;
    n->max_gap = cfg->max_gap ? cfg->max_gap : ((uint64_t)1 << 32);
    n->max_dgram = RP_WIRE_MAX_DGRAM;
    n->max_scan = cfg->max_scan ? cfg->max_scan : 65536;
    n->max_streams = cfg->max_streams ? cfg->max_streams : RP_MAX_STREAMS_DEFAULT;
    n->max_per_node = cfg->max_per_node ? cfg->max_per_node : RP_MAX_PER_NODE_DEFAULT;
    n->max_strangers = cfg->max_strangers ? cfg->max_strangers : RP_MAX_STRANGERS_DEFAULT;
    n->last_slot = RP_NO_SLOT;
    rp_tb_init(&n->repair_rate);
    int rc;
    if ((rc = rp_mstore_init(&n->store, cfg->store_bytes, cfg->store_entries, cfg->prefault)))
        goto fail;
    if ((rc = rp_out_init(&n->out, cfg->mtu, cfg->group, cfg->id, cfg->inc, 1 << 20)))
        goto fail;
    if ((rc = rp_hmap_init(&n->pindex, 64, 0)))
        goto fail;
    if ((rc = rp_sigvec_init(&n->hbsig, 64, RP_SIG_SEED)))
        goto fail;
    n->ctlcap = 64;
    n->ctl = (rp_ctl_t *)malloc(n->ctlcap * sizeof(rp_ctl_t));
    n->mv = (rp_msgview_t *)malloc(RP_WIRE_MAX_MSGS * sizeof(rp_msgview_t));
    n->pcap = 16;
    n->peers = (rp_peer_t **)calloc(n->pcap, sizeof(rp_peer_t *));
    if (!n->ctl || !n->mv || !n->peers) {
        rc = RP_ENOMEM;
        goto fail;
    }
    n->max_message = cfg->max_message ? cfg->max_message : (64u << 20);
    rp_frag_init(&n->frag, cfg->reassembly_bytes ? cfg->reassembly_bytes : 2 * n->max_message);
    rp_streams_init(&n->streams);
    n->pubbuf = (uint8_t *)malloc(cfg->mtu);
    if (!n->pubbuf) {
        rc = RP_ENOMEM;
        goto fail;
    }
    if (n->srb_w) {
        n->srbw = (rp_srbw_t *)malloc(sizeof(rp_srbw_t));
        if (!n->srbw || (rc = rp_srbw_init(n->srbw, 0, n->srb_w))) {
            free(n->srbw);
            n->srbw = NULL;
            rc = rc ? rc : RP_ENOMEM;
            goto fail;
        }
    }
    return RP_OK;
fail:
    rp_node_free(n);
    return rc;
}

static void peer_free(rp_peer_t *p) {
    if (p->labels) {
        rp_hmap_free(p->labels);
        free(p->labels);
    }
    if (p->purged) {
        rp_hmap_free(p->purged);
        free(p->purged);
    }
    free(p->obs);
    free(p->purged_ring);
    rp_seqtrack_free(&p->st);
    rp_iset_free(&p->lmissing);
    rp_iset_free(&p->inflight);
    rp_iset_free(&p->lflight);
    if (p->q) {
        rp_srbq_free(p->q);
        free(p->q);
    }
    free(p);
}

void rp_node_free(rp_node_t *n) {
    for (uint32_t i = 0; i < n->npeers; i++)
        if (n->peers[i])
            peer_free(n->peers[i]);
    free(n->peers);
    free(n->retired);
    free(n->freeslots);
    free(n->tombs[0]);
    free(n->tombs[1]);
    free(n->pool);
    if (n->srbw) {
        rp_srbw_free(n->srbw);
        free(n->srbw);
    }
    rp_mstore_free(&n->store);
    rp_out_free(&n->out);
    rp_auth_free(n->auth);
    n->auth = NULL;
    rp_hmap_free(&n->pindex);
    rp_sigvec_free(&n->hbsig);
    rp_trace_free(&n->trace);
    rp_catchup_free(n);
    rp_node_set_requester_limit(n, 0, 0, 0);
    if (n->conflate)
        rp_conflate_free(&n->latest);
    free(n->ctl);
    free(n->mv);
    rp_frag_free(&n->frag);
    rp_streams_free(&n->streams);
    free(n->pubbuf);
    memset(n, 0, sizeof(*n));
}

/* ---- peers ------------------------------------------------------------- */

#define PEER_BY_ID 1     /* pindex tag: node id -> its newest stream's slot */

uint32_t rp_node_find_peer(rp_node_t *n, uint32_t id, uint32_t inc) {
    if (n->last_slot != RP_NO_SLOT) {
        rp_peer_t *p = n->peers[n->last_slot];
        if (p->id == id && p->inc == inc)
            return n->last_slot;
    }
    uint64_t *v = rp_hmap_get(&n->pindex, ((uint64_t)id << 32) | inc, 0);
    if (!v)
        return RP_NO_SLOT;
    n->last_slot = (uint32_t)*v;
    return (uint32_t)*v;
}

static void frag_drop(rp_node_t *n, rp_peer_t *p, int all, uint64_t lo, uint64_t hi, int reason);

#define PEER_TOMB 2      /* pindex tag: (id, inc) of a retired stream -> its frontier then */
#define PEER_COUNT 3     /* pindex tag: node id -> how many streams of it are known */
#define PEER_OWN 4       /* pindex tag: node id -> 1 + the newest incarnation heard from it */
#define PEER_MEMBER 5    /* pindex tag: node id -> 1 while a member (rp_node_set_members) */

static void count_add(rp_node_t *n, uint32_t id, int d) {
    uint64_t *c = rp_hmap_get(&n->pindex, id, PEER_COUNT), old;
    uint64_t v = (c ? *c : 0) + (uint64_t)(int64_t)d;
    if (v) {
        rp_hmap_put(&n->pindex, id, PEER_COUNT, v);
    } else if (c) {
        rp_hmap_del(&n->pindex, id, PEER_COUNT, &old);
        rp_hmap_del(&n->pindex, id, PEER_OWN, &old);
    }
}

static inline uint64_t peer_key(uint32_t id, uint32_t inc) { return ((uint64_t)id << 32) | inc; }

/* A member's stream, heard from its own node and not superseded: a stream
 * that matters.  A stranger's never is (it competes in the pool). */
static inline int peer_protected(const rp_peer_t *p) { return p->own_heard && !p->dead && !p->stranger; }

int rp_node_is_member(rp_node_t *n, uint32_t id) {
    return !n->members_known || rp_hmap_get(&n->pindex, id, PEER_MEMBER) != NULL;
}

static int pool_add(rp_node_t *n, rp_peer_t *p) {
    if (n->npool == n->poolcap) {
        uint32_t nc = n->poolcap ? n->poolcap * 2 : 64;
        uint32_t *np = (uint32_t *)realloc(n->pool, nc * sizeof(uint32_t));
        if (!np)
            return RP_ENOMEM;
        n->pool = np;
        n->poolcap = nc;
    }
    p->stranger = 1;
    p->pool_ix = n->npool;
    n->pool[n->npool++] = p->slot;
    return RP_OK;
}

static void pool_del(rp_node_t *n, rp_peer_t *p) {
    uint32_t last = n->pool[--n->npool];
    if (p->pool_ix < n->npool) {
        n->pool[p->pool_ix] = last;
        n->peers[last]->pool_ix = p->pool_ix;
    }
    p->stranger = 0;
}

static void peer_set_dead(rp_node_t *n, rp_peer_t *p) {
    if (p->dead)
        return;
    if (peer_protected(p))
        n->nprotected--;
    p->dead = 1;
    frag_drop(n, p, 1, 0, 0, RP_FRAG_D_DEAD);   /* its partial messages */
}

void rp_node_peer_dead(rp_node_t *n, uint32_t slot) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (p)
        peer_set_dead(n, p);
}

/* Is a a better stream to retire than b (NULL: none yet)?  Never heard
 * from its own node before dead, then least recently heard. */
static inline int retire_before(const rp_peer_t *a, const rp_peer_t *b) {
    if (!b)
        return 1;
    if (a->own_heard != b->own_heard)
        return !a->own_heard;
    return a->touched < b->touched;
}

/* Remember where a retired stream was, for max_streams retirements of
 * members' streams and as many of strangers' (two rings: a flood of
 * strangers churning through the pool does not push out a member's): if it
 * comes back it starts there (nothing below is delivered twice). */
static void tomb_put(rp_node_t *n, uint64_t key, uint64_t front, int stranger) {
    if (!n->tombs[stranger] &&
        !(n->tombs[stranger] = (uint64_t *)malloc(n->max_streams * sizeof(uint64_t))))
        return;
    uint64_t *t = &n->tombs[stranger][n->ntombs[stranger]++ % n->max_streams];
    if (n->ntombs[stranger] > n->max_streams) {
        uint64_t old;
        rp_hmap_del(&n->pindex, *t, PEER_TOMB, &old);
    }
    *t = key;
    if (rp_hmap_put(&n->pindex, key, PEER_TOMB, front) < 0)
        n->ntombs[stranger]--;
}

/* Retire p: every piece of state keyed by its slot goes now; the slot waits
 * in n->retired for the control plane (rp_node_take_retired). */
static void peer_retire(rp_node_t *n, rp_peer_t *p) {
    uint32_t s = p->slot;
    uint64_t key = peer_key(p->id, p->inc), old;
    tomb_put(n, key, rp_seqtrack_contiguous(&p->st), p->stranger);
    rp_hmap_del(&n->pindex, key, 0, &old);
    /* out of its id's chain */
    uint64_t *head = rp_hmap_get(&n->pindex, p->id, PEER_BY_ID);
    if (head && (uint32_t)*head == s) {
        if (p->older == RP_NO_SLOT)
            rp_hmap_del(&n->pindex, p->id, PEER_BY_ID, &old);
        else
            *head = p->older;
    } else {
        for (uint32_t q = head ? (uint32_t)*head : RP_NO_SLOT; q != RP_NO_SLOT; q = n->peers[q]->older)
            if (n->peers[q]->older == s) {
                n->peers[q]->older = p->older;
                break;
            }
    }
    count_add(n, p->id, -1);
    if (n->last_slot == s)
        n->last_slot = RP_NO_SLOT;
    rp_sigvec_del(&n->hbsig, s + 1);
    rp_frag_forget(&n->frag, s);
    rp_mstore_forget_sender(&n->store, s, RP_GONE_SLOT);
    rp_mstore_forget_sender(&n->store, s | RP_WHOLE_BIT, RP_GONE_SLOT);
    if (peer_protected(p))
        n->nprotected--;                   /* (only a promotion beyond max_streams picks these) */
    if (p->stranger) {
        pool_del(n, p);
        n->c[RP_C_STREAMS_RETIRED_STRANGER]++;
    }
    n->peers[s] = NULL;
    n->nlive--;
    peer_free(p);
    n->retired[n->nretired++] = s;
    n->c[RP_C_STREAMS_RETIRED]++;
}

uint32_t rp_node_take_retired(rp_node_t *n, uint32_t *out, uint32_t max) {
    uint32_t k = n->nretired < max ? n->nretired : max;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t s = n->retired[n->nretired - 1 - i];
        out[i] = s;
        n->freeslots[n->nfree++] = s;
    }
    n->nretired -= k;
    return k;
}

/* A stream to retire among all: the best of up to 16 candidates found
 * from the rotating hand.  NULL when every stream is protected. */
static rp_peer_t *global_victim(rp_node_t *n) {
    if (n->nprotected >= n->nlive - n->npool || !n->npeers)
        return NULL;
    rp_peer_t *best = NULL;
    uint32_t seen = 0, i = n->hand % n->npeers;
    for (uint32_t k = 0; k < n->npeers && seen < 16; k++, i = (i + 1 == n->npeers ? 0 : i + 1)) {
        rp_peer_t *p = n->peers[i];
        if (!p || p->stranger || peer_protected(p))
            continue;
        seen++;
        if (retire_before(p, best))
            best = p;
    }
    n->hand = i;
    return best;
}

/* The pool's stream to retire: the least recently heard of up to 64 from a
 * rotating hand (all of them in a pool of 64 or fewer: exact LRU). */
static rp_peer_t *pool_victim(rp_node_t *n) {
    rp_peer_t *best = NULL;
    if (!n->npool)
        return NULL;
    uint32_t i = n->pool_hand % n->npool;
    for (uint32_t k = 0; k < n->npool && k < 64; k++, i = (i + 1 == n->npool ? 0 : i + 1)) {
        rp_peer_t *p = n->peers[n->pool[i]];
        if (!best || p->touched < best->touched)
            best = p;
    }
    n->pool_hand = i;
    return best;
}

static inline uint32_t slot_bound(const rp_node_t *n) {
    return n->max_streams + n->max_strangers +
           (n->max_streams > RP_RETIRED_SLACK ? n->max_streams : RP_RETIRED_SLACK);
}

static int slots_alloc(rp_node_t *n) {
    if (n->retired)
        return RP_OK;
    n->retired = (uint32_t *)malloc((size_t)slot_bound(n) * sizeof(uint32_t));
    n->freeslots = (uint32_t *)malloc((size_t)slot_bound(n) * sizeof(uint32_t));
    if (!n->retired || !n->freeslots) {
        free(n->retired);
        free(n->freeslots);
        n->retired = n->freeslots = NULL;
        return RP_ENOMEM;
    }
    return RP_OK;
}

/* Room for a new stream of id: retire one of its own at its quota, or, for
 * a member, one of the members' at max_streams, for a stranger the pool's
 * least recently heard at max_strangers.  RP_OK, or RP_EFULL (counted). */
static int make_room(rp_node_t *n, uint32_t id) {
    uint64_t *c = rp_hmap_get(&n->pindex, id, PEER_COUNT);
    rp_peer_t *best = NULL;
    int stranger = !rp_node_is_member(n, id);
    if (c && *c >= n->max_per_node) {
        /* the chain is as long as the quota: O(quota) only at the quota */
        uint64_t *v = rp_hmap_get(&n->pindex, id, PEER_BY_ID);
        for (uint32_t s = v ? (uint32_t)*v : RP_NO_SLOT; s != RP_NO_SLOT; s = n->peers[s]->older)
            if (!peer_protected(n->peers[s]) && retire_before(n->peers[s], best))
                best = n->peers[s];
        if (!best) {
            n->c[RP_C_STREAMS_REFUSED_NODE]++;
            return RP_EFULL;
        }
        peer_retire(n, best);
    } else if (stranger) {
        /* Strangers compete only among themselves: no member's stream is
         * displaced or blocked by any number of node ids (issue 14). */
        if (n->npool >= n->max_strangers && (best = pool_victim(n)))
            peer_retire(n, best);
    } else if (n->nlive - n->npool >= n->max_streams) {
        if (!(best = global_victim(n))) {
            n->c[RP_C_STREAMS_REFUSED]++;
            return RP_EFULL;
        }
        peer_retire(n, best);
    }
    /* Slots of retired streams the control plane has not taken yet are not
     * reused: a burst of new streams between two of its turns (a receive
     * batch) takes up to RP_RETIRED_SLACK more (a pointer each). */
    if (!n->nfree && n->npeers >= slot_bound(n)) {
        n->c[RP_C_STREAMS_REFUSED]++;
        return RP_EFULL;
    }
    return RP_OK;
}

int64_t rp_node_peer(rp_node_t *n, uint32_t id, uint32_t inc, uint64_t base) {
    uint32_t s = rp_node_find_peer(n, id, inc);
    if (s != RP_NO_SLOT)
        return s;
    if (base >= RP_SEQ_LIMIT)
        return RP_EINVAL;
    if (slots_alloc(n))
        return RP_ENOMEM;
    /* Every stream costs state; anyone can name new ones (issue 14). */
    int rc = make_room(n, id);
    if (rc)
        return rc;
    uint64_t *front = rp_hmap_get(&n->pindex, peer_key(id, inc), PEER_TOMB);
    if (front && *front > base && *front < RP_SEQ_LIMIT)
        base = *front;
    if (!n->nfree && n->npeers == n->pcap) {
        uint32_t nc = n->pcap * 2;
        rp_peer_t **np = (rp_peer_t **)realloc(n->peers, nc * sizeof(rp_peer_t *));
        if (!np)
            return RP_ENOMEM;
        n->peers = np;
        n->pcap = nc;
    }
    rp_peer_t *p = (rp_peer_t *)calloc(1, sizeof(rp_peer_t));
    if (!p)
        return RP_ENOMEM;
    p->id = id;
    p->inc = inc;
    p->slot = n->nfree ? n->freeslots[n->nfree - 1] : n->npeers;
    p->idle_seq = RP_NOT_IDLE;
    p->gossip_cursor = base;
    p->last_heard = INT64_MIN;
    p->older = RP_NO_SLOT;
    p->touched = ++n->touch;
    if (rp_seqtrack_init(&p->st, base, n->max_gap, 0) || rp_iset_init(&p->lmissing, 4, 0) ||
        rp_iset_init(&p->inflight, 4, 0) || rp_iset_init(&p->lflight, 4, 0))
        goto fail;
    if (n->fifo && !n->no_deliver) {   /* a logger delivers nothing: no queue to grow */
        p->q = (rp_srbq_t *)malloc(sizeof(rp_srbq_t));
        if (!p->q || rp_srbq_init(p->q, base, n->srb_w, 256, 0)) {
            free(p->q);
            p->q = NULL;
            goto fail;
        }
    }
    if (n->srb_w) {
        p->labels = (rp_hmap_t *)malloc(sizeof(rp_hmap_t));
        p->purged = (rp_hmap_t *)malloc(sizeof(rp_hmap_t));
        if (!p->labels || !p->purged) {
            free(p->labels);
            free(p->purged);
            p->labels = p->purged = NULL;
            goto fail;
        }
        if (rp_hmap_init(p->labels, 64, 0)) {
            free(p->labels);
            free(p->purged);
            p->labels = p->purged = NULL;
            goto fail;
        }
        if (rp_hmap_init(p->purged, 64, 0)) {
            free(p->purged);
            p->purged = NULL;
            goto fail;
        }
    }
    if (rp_hmap_put(&n->pindex, peer_key(id, inc), 0, p->slot) < 0)
        goto fail;
    /* The streams of one node id form a chain, newest first (PEER_BY_ID):
     * an incarnation kills the older ones in O(incarnations), not O(streams). */
    uint64_t *newest = rp_hmap_get(&n->pindex, id, PEER_BY_ID);
    p->older = newest ? (uint32_t)*newest : RP_NO_SLOT;
    if (rp_hmap_put(&n->pindex, id, PEER_BY_ID, p->slot) < 0) {
        uint64_t old;
        rp_hmap_del(&n->pindex, peer_key(id, inc), 0, &old);
        goto fail;
    }
    if (!rp_node_is_member(n, id) && pool_add(n, p)) {
        uint64_t old;
        rp_hmap_del(&n->pindex, peer_key(id, inc), 0, &old);
        if (p->older == RP_NO_SLOT)
            rp_hmap_del(&n->pindex, id, PEER_BY_ID, &old);
        else
            rp_hmap_put(&n->pindex, id, PEER_BY_ID, p->older);
        goto fail;
    }
    if (front) {
        uint64_t old;
        rp_hmap_del(&n->pindex, peer_key(id, inc), PEER_TOMB, &old);
    }
    /* The node itself spoke in a newer incarnation: this one is dead. */
    uint64_t *own = rp_hmap_get(&n->pindex, id, PEER_OWN);
    if (own && *own > (uint64_t)inc + 1)
        p->dead = 1;
    if (n->nfree)
        n->nfree--;
    else
        n->npeers++;
    n->peers[p->slot] = p;
    n->nlive++;
    count_add(n, id, 1);
    return p->slot;
fail:
    peer_free(p);
    return RP_ENOMEM;
}

/* Members and strangers (node.h): a promotion takes the id's streams out of
 * the pool, a demotion puts them in; then the bounds are restored by the
 * usual retirement (members: never a protected stream; the pool: least
 * recently heard).  The id's chain is at most its quota long. */
uint32_t rp_node_set_members(rp_node_t *n, const uint32_t *ids, const uint8_t *is_member, size_t k) {
    uint64_t before = n->c[RP_C_STREAMS_RETIRED], old;
    n->members_known = 1;
    if (slots_alloc(n))
        return 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t id = ids[i];
        if (is_member[i]) {
            if (rp_hmap_put(&n->pindex, id, PEER_MEMBER, 1) < 0)
                continue;                  /* out of memory: it stays a stranger */
        } else {
            rp_hmap_del(&n->pindex, id, PEER_MEMBER, &old);
        }
        uint64_t *v = rp_hmap_get(&n->pindex, id, PEER_BY_ID);
        for (uint32_t s = v ? (uint32_t)*v : RP_NO_SLOT, next; s != RP_NO_SLOT; s = next) {
            rp_peer_t *p = n->peers[s];
            next = p->older;
            if (is_member[i] && p->stranger) {
                pool_del(n, p);
                if (peer_protected(p))
                    n->nprotected++;
                n->c[RP_C_STREAMS_PROMOTED]++;
            } else if (!is_member[i] && !p->stranger) {
                int was = peer_protected(p);
                if (pool_add(n, p))       /* out of memory: retire it rather than leave it uncounted */
                    peer_retire(n, p);
                else if (was)
                    n->nprotected--;
            }
        }
    }
    rp_peer_t *p;
    while (n->npool > n->max_strangers && (p = pool_victim(n)))
        peer_retire(n, p);
    while (n->nlive - n->npool > n->max_streams && (p = global_victim(n)))
        peer_retire(n, p);
    return (uint32_t)(n->c[RP_C_STREAMS_RETIRED] - before);
}

/* The node itself spoke in this incarnation (DATA or HEARTBEAT in its own
 * datagram): its older incarnations are dead from now on -- and this one
 * is, if a newer one spoke already.  Only the node itself can say so -- a
 * stream named by a third party (a REPAIR, a heartbeat list, a sponsor's
 * vector) must not end a live one (issue 14).  So at most one stream per
 * node id is protected from retirement. */
static void own_heard(rp_node_t *n, rp_peer_t *p) {
    p->own_heard = 1;
    if (peer_protected(p))
        n->nprotected++;
    uint64_t *own = rp_hmap_get(&n->pindex, p->id, PEER_OWN);
    if (own && *own > (uint64_t)p->inc + 1)
        peer_set_dead(n, p);               /* it spoke in a newer one already (retired or not) */
    else
        rp_hmap_put(&n->pindex, p->id, PEER_OWN, (uint64_t)p->inc + 1);
    uint64_t *v = rp_hmap_get(&n->pindex, p->id, PEER_BY_ID);
    for (uint32_t s = v ? (uint32_t)*v : RP_NO_SLOT; s != RP_NO_SLOT; s = n->peers[s]->older)
        if (n->peers[s]->inc < p->inc)
            peer_set_dead(n, n->peers[s]);
}

/* ---- helpers ----------------------------------------------------------- */

static void ctl_push(rp_node_t *n, const rp_msgview_t *m, const rp_dghdr_t *h, uint64_t src) {
    if (n->nctl == n->ctlcap) {
        size_t nc = n->ctlcap * 2;
        rp_ctl_t *nb = (rp_ctl_t *)realloc(n->ctl, nc * sizeof(rp_ctl_t));
        if (!nb)
            return;             /* dropped like a lost datagram */
        n->ctl = nb;
        n->ctlcap = nc;
    }
    rp_ctl_t *c = &n->ctl[n->nctl++];
    c->body = m->body;
    c->seq = m->seq;
    c->src_addr = src;
    c->sender = m->sender;
    c->inc = m->inc;
    c->aux = m->aux;
    c->source = h->source;
    c->source_inc = h->source_inc;
    c->len = m->len;
    c->type = m->type;
    c->flags = m->flags;
    n->c[RP_C_CTL_QUEUED]++;
}

static void note_gap(rp_node_t *n, rp_peer_t *p, uint64_t lo, uint64_t hi, int64_t now) {
    n->c[RP_C_GAPS]++;
    n->c[RP_C_GAP_IDS] += hi - lo + 1;
    n->nack_pending++;
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_GAP, p->id, p->inc, lo, (uint32_t)(hi - lo + 1), 0, 0);
}

/* The sender is no longer idle once data above its idle heartbeat exists. */
static inline void not_idle(rp_node_t *n, rp_peer_t *p, uint64_t seq) {
    if (p->idle_seq != RP_NOT_IDLE && seq > p->idle_seq) {
        p->idle_seq = RP_NOT_IDLE;
        rp_sigvec_del(&n->hbsig, p->slot + 1);
    }
}

/* Release the delivery-queue hold of messages the queue purged (TP4): a
 * newer value of their label entered its deliverable prefix. */
static void q_release_purged(rp_node_t *n, rp_peer_t *p, int64_t now) {
    uint64_t h[64], s[64];
    size_t k;
    if (!p->q)
        return;
    do {
        k = rp_srbq_take_purged(p->q, h, s, 64);
        for (size_t i = 0; i < k; i++) {
            rp_mstore_release(&n->store, h[i], RP_MS_QUEUE);
            n->c[RP_C_PURGED]++;
            if (n->tracing)
                rp_trace(&n->trace, now, RP_EV_PURGE, p->id, p->inc, s[i], 0, 0, 0);
        }
    } while (k == 64);
}

/* FIFO-SRB: the sender sent `seq`, so older ids outside its window that we
 * still miss were purged. */
static void srb_infer(rp_node_t *n, rp_peer_t *p, uint64_t seq, int64_t now) {
    uint64_t lo = 0, hi = 0;
    int64_t k = 0;
    if (!n->srb_w)
        return;
    if (p->q) {
        k = rp_srbq_infer(p->q, seq, &lo, &hi);
        q_release_purged(n, p, now);
    } else if (seq >= n->srb_w && p->st.missing.n && p->st.missing.v[0].lo <= seq - n->srb_w) {
        /* No delivery queue (a logger): the same inference on the tracker. */
        lo = p->st.missing.v[0].lo;
        hi = seq - n->srb_w;
        k = 1;
    }
    if (k > 0) {
        int64_t f = rp_seqtrack_forget(&p->st, lo, hi);
        rp_iset_remove(&p->lmissing, lo, hi);
        rp_iset_remove(&p->inflight, lo, hi);
        if (f > 0) {
            n->c[RP_C_FORGOTTEN] += (uint64_t)f;
            if (n->tracing)
                rp_trace(&n->trace, now, RP_EV_LOST, p->id, p->inc, lo, (uint32_t)f, 0, 1);
        }
    }
}

/* ---- FIFO-SRB retransmission-buffer tracking --------------------------- */

static void obs_push(rp_peer_t *p, uint64_t seq, uint64_t sup) {
    if (p->nobs == p->obscap) {
        uint32_t nc = p->obscap ? p->obscap * 2 : 64;
        rp_obs_t *no = (rp_obs_t *)realloc(p->obs, nc * sizeof(rp_obs_t));
        if (!no)
            return;             /* not purged early; it ages out like any other */
        p->obs = no;
        p->obscap = nc;
    }
    /* Keep the list ordered by successor so safe() pops a prefix. */
    uint32_t i = p->nobs++;
    while (i > 0 && p->obs[i - 1].sup > sup) {
        p->obs[i] = p->obs[i - 1];
        i--;
    }
    p->obs[i].seq = seq;
    p->obs[i].sup = sup;
}

/* A labelled message of p was stored: whichever of it and the newest
 * stored message with its label is older is now obsolete. */
static void obs_note(rp_peer_t *p, uint64_t seq, uint64_t label) {
    uint64_t *newest = rp_hmap_get(p->labels, label, 0);
    if (!newest) {
        rp_hmap_put(p->labels, label, 0, seq);
        return;
    }
    if (*newest < seq) {
        obs_push(p, *newest, seq);
        *newest = seq;
    } else if (*newest > seq) {
        obs_push(p, seq, *newest);      /* a repair of an older value */
    }
}

static void purged_record(rp_peer_t *p, uint64_t seq, uint64_t sup) {
    if (!p->purged)
        return;
    if (!p->purged_ring) {
        p->purged_ring = (uint64_t *)malloc(RP_PURGED_MAX * sizeof(uint64_t));
        if (!p->purged_ring)
            return;
    }
    if (p->purged_n == RP_PURGED_MAX) {         /* forget the oldest record */
        uint64_t old = p->purged_ring[p->purged_head];
        rp_hmap_del(p->purged, old, 0, NULL);
        p->purged_ring[p->purged_head] = seq;
        p->purged_head = (p->purged_head + 1) % RP_PURGED_MAX;
    } else {
        p->purged_ring[(p->purged_head + p->purged_n) % RP_PURGED_MAX] = seq;
        p->purged_n++;
    }
    rp_hmap_put(p->purged, seq, 0, sup);
}

/* ---- receive ----------------------------------------------------------- */

/* A DATA or REPAIR body: its label (RP_SRB_NOLABEL if none) and payload. */
typedef struct {
    uint64_t label;
    const uint8_t *data;
    uint32_t len;
} rx_payload_t;

static inline rx_payload_t payload_of(const rp_msgview_t *m) {
    rx_payload_t pl = {RP_SRB_NOLABEL, m->body, m->len};
    if (m->flags & RP_MF_LABEL) {
        pl.label = rp_ld64(m->body);
        pl.data += 8;
        pl.len -= 8;
    }
    return pl;
}

/* The sender of a DATA or REPAIR, known from now on; NULL if out of memory,
 * at max_streams, or when only a third party names the stream: a REPAIR
 * answers a request, and nobody asks for a stream it never heard of -- one
 * named first by another node's REPAIR is a forgery (issue 14). */
static inline rp_peer_t *rx_peer(rp_node_t *n, uint32_t sender, uint32_t inc, uint32_t source) {
    uint32_t slot = rp_node_find_peer(n, sender, inc);
    if (RP_UNLIKELY(slot == RP_NO_SLOT)) {
        if (source != sender) {
            n->c[RP_C_RX_STRANGER]++;
            return NULL;
        }
        int64_t s = rp_node_peer(n, sender, inc, 0);
        if (s < 0)
            return NULL;
        slot = (uint32_t)s;
    }
    return n->peers[slot];
}

/* A seq the tracker did not take (a = RP_ACC_DUP, _FAR or _NOMEM). */
static void rx_rejected(rp_node_t *n, rp_peer_t *p, const rp_msgview_t *m, int a, int is_repair,
                        uint64_t src, int64_t now) {
    if (a == RP_ACC_DUP) {
        n->c[RP_C_RX_DUP]++;
        p->rx_dup++;
        if (n->tracing)
            rp_trace(&n->trace, now, RP_EV_RECV_DUP, p->id, p->inc, m->seq, m->len, src,
                     is_repair ? 2 : 0);
    } else if (a == RP_ACC_FAR) {
        n->c[RP_C_RX_FAR]++;
    } else {
        n->c[RP_C_RX_DROPPED_FULL]++;      /* the gap list is at its bound */
    }
}

/* A logger appends before anything else: the log is its record of truth:
 * a logger that delivers nothing keeps no other copy (rx_store).  When the append
 * fails the id is missing again (asked for again later).  0 or -1. */
static int rx_log(rp_node_t *n, rp_peer_t *p, uint64_t seq, const rx_payload_t *pl, int64_t now) {
    if (rp_log_append(n->log, p->id, p->inc, seq, pl->label, now, pl->data, pl->len) < 0) {
        rp_iset_add(&p->st.missing, seq, seq);
        n->c[RP_C_LOG_ERRORS]++;
        return -1;
    }
    n->c[RP_C_LOGGED]++;
    return 0;
}

/* Who keeps a received message: the gossip buffer, and the delivery queue
 * (FIFO) or the unordered deliveries -- unless nothing is delivered here,
 * or conflation hands labelled messages over through its table only. */
static inline uint32_t rx_holds(const rp_node_t *n, uint64_t label) {
    uint32_t holds = RP_MS_GOSSIP;
    if (!n->no_deliver && !(n->conflate == 2 && label != RP_SRB_NOLABEL))
        holds |= n->fifo ? RP_MS_QUEUE : RP_MS_DELIVER;
    return holds;
}

#define RX_DROPPED (-2)

/* Store a received payload.  Returns its ticket; -1 when a logger keeps
 * it in its log only; RX_DROPPED when there was no room (the application
 * is not consuming): then it counts as lost, the id is missing again and
 * is repaired later.  A logger that delivers nothing keeps no second copy:
 * the copy, the first touch of the store's pages and their collection
 * were about a third of its receive work, and it serves repairs from its
 * log's index (serve.c). */
static inline int64_t rx_store(rp_node_t *n, rp_peer_t *p, uint64_t seq, const rx_payload_t *pl,
                               uint32_t holds, int64_t now) {
    if (n->log && n->no_deliver)
        return -1;
    int64_t t = rp_mstore_put(&n->store, p->slot, seq, pl->label, now, n->round, holds,
                              RP_MS_GOSSIP, pl->data, pl->len);
    if (RP_LIKELY(t >= 0))
        return t;
    if (n->log)
        return -1;
    rp_iset_add(&p->st.missing, seq, seq);
    n->c[RP_C_RX_DROPPED_FULL]++;
    n->nack_pending++;
    return RX_DROPPED;
}

/* Count a first receipt: new data, or a gap filled -- by a late DATA, a
 * peer's REPAIR or a logger's. */
static inline void rx_count_first(rp_node_t *n, rp_peer_t *p, const rp_msgview_t *m, int a,
                                  int is_repair) {
    if (a == RP_ACC_NEW) {
        n->c[RP_C_RX_NEW]++;
        p->rx_new++;
        not_idle(n, p, m->seq);
        return;
    }
    n->c[RP_C_RX_FILL]++;
    p->rx_fill++;
    rp_iset_remove(&p->lmissing, m->seq, m->seq);
    rp_iset_remove(&p->inflight, m->seq, m->seq);
    if (!is_repair)
        n->c[RP_C_FILLED_OTHER]++;
    else if (m->flags & RP_MF_FROM_LOGGER)
        n->c[RP_C_REPAIRS_LOGGER]++;
    else
        n->c[RP_C_REPAIRS_PEER]++;
}

/* FIFO delivery: queue a stored message (t < 0: logged, not cached) in its
 * sender's queue, and let go of what the queue purged. */
static inline void rx_enqueue(rp_node_t *n, rp_peer_t *p, uint64_t seq, uint64_t label, int64_t t,
                              uint32_t holds, int64_t now) {
    if (!(holds & RP_MS_QUEUE) && !n->no_deliver)
        rp_srbq_mark_purged(p->q, seq);      /* read through the table only */
    if (t >= 0 && (holds & RP_MS_QUEUE)) {
        int r = rp_srbq_insert(p->q, seq, label, (uint64_t)t);
        if (r != RP_SQ_R_QUEUED)
            rp_mstore_release(&n->store, (uint64_t)t, RP_MS_QUEUE);
    }
    q_release_purged(n, p, now);
}

/* FIFO delivery moves past a large message that will never be whole: the
 * slot of its first seq (where it would be delivered) is skipped. */
static void frag_skip(rp_node_t *n, rp_peer_t *p, uint64_t first, int64_t now) {
    if (p->q) {
        rp_srbq_mark_purged(p->q, first);
        q_release_purged(n, p, now);
    }
}

/* Drop p's partial large messages (all, or those lacking a seq in [lo, hi]). */
static void frag_drop(rp_node_t *n, rp_peer_t *p, int all, uint64_t lo, uint64_t hi, int reason) {
    uint64_t firsts[64];
    uint32_t k;
    do {
        k = rp_frag_drop(&n->frag, p->slot, all, lo, hi, reason, firsts, 64);
        for (uint32_t i = 0; i < k; i++)
            frag_skip(n, p, firsts[i], 0);
    } while (k == 64);
}

/* One fragment of a large message (stored and counted already): into its
 * message's buffer; the message, once whole, is stored as one entry
 * (sender slot | RP_WHOLE_BIT, seq = its first) and queued for delivery
 * like any message.  With FIFO delivery it takes the queue slot of its
 * first seq; the slots of the other fragments are skipped. */
static void rx_fragment(rp_node_t *n, rp_peer_t *p, uint64_t seq, const rp_msgext_t *x,
                        const uint8_t *data, uint32_t len, int on, int64_t now) {
    uint64_t first = seq - x->index;
    if (n->no_deliver)
        return;                            /* a logger: logged and stored, nothing to deliver */
    if (p->q && x->index != 0)
        rp_srbq_mark_purged(p->q, seq);
    if (!on) {
        if (x->index == 0) {               /* counted once per message */
            rp_streams_count(&n->streams, x->stream, x->total, 0);
            if (p->q)
                rp_srbq_mark_purged(p->q, seq);
        }
        if (p->q)
            q_release_purged(n, p, now);
        return;
    }
    rp_fragpart_t *w = NULL;
    int r = rp_frag_add(&n->frag, p->slot, seq, x, data, len, now, &w);
    if (r == RP_FRAG_FULL) {
        /* Whole messages the application has not taken fill the bound:
         * this fragment is missing again, asked for later (as rx_store). */
        rp_iset_add(&p->st.missing, seq, seq);
        n->c[RP_C_RX_DROPPED_FULL]++;
        n->nack_pending++;
        return;
    }
    if (r == RP_FRAG_DROPPED) {
        frag_skip(n, p, first, now);
    } else if (r == RP_FRAG_WHOLE && !n->fifo) {
        /* Unordered delivery hands it over from here: no second copy. */
        w->t = now;
        w->at = n->store.head;             /* delivered in arrival order among stored messages */
        rp_streams_count(&n->streams, x->stream, x->total, 1);
        rp_frag_ready(&n->frag, w);
    } else if (r == RP_FRAG_WHOLE) {
        uint32_t holds = n->fifo ? RP_MS_QUEUE : RP_MS_DELIVER;
        int64_t t = rp_mstore_put(&n->store, p->slot | RP_WHOLE_BIT, first, RP_LABEL_EXT, now,
                                  n->round, holds, RP_MS_GOSSIP, w->buf, RP_EXT_HDR + x->total);
        if (t < 0) {
            /* No room for it yet (the application is not consuming): this
             * fragment is missing again and repaired later, as rx_store does. */
            rp_frag_undo(&n->frag, w, x->index);
            rp_iset_add(&p->st.missing, seq, seq);
            n->c[RP_C_RX_DROPPED_FULL]++;
            n->nack_pending++;
            return;
        }
        rp_streams_count(&n->streams, x->stream, x->total, 1);
        rp_frag_done(&n->frag, w);
        if (p->q)
            rx_enqueue(n, p, first, x->label, t, holds, now);
    }
    if (p->q)
        q_release_purged(n, p, now);
}

/* A DATA or REPAIR with an extension header (wire.h): a message of a
 * stream other than 0, or a fragment of a large message. */
static void rx_ext(rp_node_t *n, rp_peer_t *p, const rp_msgview_t *m, int a, int is_repair,
                   const rx_payload_t *pl, uint64_t src, int64_t now) {
    rp_msgext_t x;
    rp_msgext_load(pl->data, &x);         /* checked by the decoder */
    const uint8_t *data = pl->data + RP_EXT_HDR;
    uint32_t dlen = pl->len - RP_EXT_HDR;
    int on = rp_streams_wants(&n->streams, x.stream);
    uint32_t holds = RP_MS_GOSSIP;
    if (x.count == 1 && on && !n->no_deliver)
        holds |= n->fifo ? RP_MS_QUEUE : RP_MS_DELIVER;
    int64_t t = rx_store(n, p, m->seq, pl, holds, now);
    if (RP_UNLIKELY(t == RX_DROPPED))
        return;
    rx_count_first(n, p, m, a, is_repair);
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_RECV, p->id, p->inc, m->seq, pl->len, src,
                 (a == RP_ACC_FILL ? 1u : 0u) | (is_repair ? 2u : 0u) |
                 ((m->flags & RP_MF_FROM_LOGGER) && is_repair ? 4u : 0u));
    if (x.count == 1) {
        rp_streams_count(&n->streams, x.stream, dlen, on);
        if (p->q)
            rx_enqueue(n, p, m->seq, x.label, t, holds, now);
    } else {
        rx_fragment(n, p, m->seq, &x, data, dlen, on, now);
    }
    srb_infer(n, p, m->seq, now);
}

/* A DATA (is_repair 0) or REPAIR. */
static void rx_data(rp_node_t *n, const rp_msgview_t *m, int is_repair, uint64_t src,
                    uint32_t source, int64_t now) {
    if (m->sender == n->id && m->inc == n->inc) {
        n->c[RP_C_RX_DUP]++;        /* our own, repaired to us */
        return;
    }
    rp_peer_t *p = rx_peer(n, m->sender, m->inc, source);
    if (RP_UNLIKELY(!p))
        return;
    p->last_heard = now;
    p->touched = ++n->touch;
    if (RP_UNLIKELY(!is_repair && !p->own_heard))
        own_heard(n, p);
    uint64_t lo, hi;
    int a = rp_seqtrack_accept(&p->st, m->seq, &lo, &hi);
    if (a != RP_ACC_NEW && a != RP_ACC_FILL) {
        rx_rejected(n, p, m, a, is_repair, src, now);
        return;
    }
    rx_payload_t pl = payload_of(m);
    if (!is_repair)
        p->addr = src;
    if (a == RP_ACC_NEW && lo <= hi)
        note_gap(n, p, lo, hi, now);       /* whatever happens to this one */
    if (n->log && rx_log(n, p, m->seq, &pl, now) < 0)
        return;
    if (RP_UNLIKELY(pl.label == RP_LABEL_EXT)) {
        rx_ext(n, p, m, a, is_repair, &pl, src, now);
        return;
    }
    if (n->conflate && pl.label != RP_SRB_NOLABEL)
        rp_conflate_put(&n->latest, p->id, p->inc, pl.label, m->seq, now, pl.data, pl.len);
    uint32_t holds = rx_holds(n, pl.label);
    int on = rp_streams_wants(&n->streams, 0);
    if (RP_UNLIKELY(!on))
        holds &= RP_MS_GOSSIP;             /* stream 0 is not delivered here */
    int64_t t = rx_store(n, p, m->seq, &pl, holds, now);
    if (RP_UNLIKELY(t == RX_DROPPED))
        return;
    rp_streams_count(&n->streams, 0, pl.len, on);
    rx_count_first(n, p, m, a, is_repair);
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_RECV, p->id, p->inc, m->seq, pl.len, src,
                 (a == RP_ACC_FILL ? 1u : 0u) | (is_repair ? 2u : 0u) |
                 ((m->flags & RP_MF_FROM_LOGGER) && is_repair ? 4u : 0u));
    if (p->labels && t >= 0 && pl.label != RP_SRB_NOLABEL)
        obs_note(p, m->seq, pl.label);     /* FIFO-SRB: what this makes obsolete */
    if (p->q)
        rx_enqueue(n, p, m->seq, pl.label, t, holds, now);
    srb_infer(n, p, m->seq, now);
}

int64_t rp_node_heartbeat(rp_node_t *n, uint32_t slot, uint64_t seq, int idle, int64_t now) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p)
        return RP_EINVAL;
    uint64_t lo, hi;
    int64_t r = rp_seqtrack_heartbeat(&p->st, seq, &lo, &hi);
    if (r == -RP_ACC_FAR) {
        n->c[RP_C_RX_FAR]++;
        return 0;
    }
    if (r > 0)
        note_gap(n, p, lo, hi, now);
    if (idle && seq + 1 >= p->st.next && (p->idle_seq == RP_NOT_IDLE || seq > p->idle_seq)) {
        p->idle_seq = seq;
        rp_sigvec_set(&n->hbsig, slot + 1, p->id, p->inc, seq);
    }
    srb_infer(n, p, seq, now);
    return r > 0 ? r : 0;
}

uint32_t rp_node_infer_idle(rp_node_t *n, int64_t now, int64_t silent_ns) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n->npeers; i++) {
        rp_peer_t *p = n->peers[i];
        if (!p || p->st.next <= p->st.base || p->last_heard == INT64_MIN)
            continue;                       /* nothing received from it */
        uint64_t top = p->st.next - 1;
        if ((p->idle_seq != RP_NOT_IDLE && p->idle_seq >= top) || now - p->last_heard < silent_ns)
            continue;
        p->idle_seq = top;
        rp_sigvec_set(&n->hbsig, p->slot + 1, p->id, p->inc, top);
        k++;
    }
    return k;
}

static void rx_heartbeat(rp_node_t *n, const rp_msgview_t *m, int64_t now) {
    if (m->sender == n->id && m->inc == n->inc)
        return;
    n->c[RP_C_HB_IN]++;
    uint32_t slot = rp_node_find_peer(n, m->sender, m->inc);
    if (slot == RP_NO_SLOT) {
        uint64_t base = (m->flags & RP_MF_FIRST) ? rp_ld64(m->body) : 0;
        int64_t s = rp_node_peer(n, m->sender, m->inc, base < RP_SEQ_LIMIT ? base : 0);
        if (s < 0)
            return;
        slot = (uint32_t)s;
    }
    n->peers[slot]->last_heard = now;
    n->peers[slot]->touched = ++n->touch;
    if (RP_UNLIKELY(!n->peers[slot]->own_heard))
        own_heard(n, n->peers[slot]);
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_HEARTBEAT, m->sender, m->inc, m->seq, 0, 0, 1);
    rp_node_heartbeat(n, slot, m->seq, m->flags & RP_MF_IDLE, now);
}

/* A keyed node trusts nothing it cannot authenticate: the MAC is checked
 * (and an encrypted body decrypted) before the datagram is parsed any
 * further (auth.h); *buf becomes the plaintext.  Plaintexts are reused
 * once no control message points into them.  An unkeyed node cannot read
 * an encrypted datagram: that is an AUTH drop too, not a parse error. */
static int rx_open(rp_node_t *n, const uint8_t **buf, size_t len) {
    if (!n->auth)
        return len >= RP_DG_HDR && ((*buf)[3] & RP_DGF_ENC) ? -1 : 0;
    if (len > n->max_dgram)
        return -1;
    return rp_auth_open(n->auth, *buf, len, n->nctl == 0, buf) ? -1 : 0;
}

/* A control datagram is refused when its MAC counter was seen from its
 * source (RP_WR_REPLAY), or was sealed before this node's entry for the
 * source began (RP_WR_STALE: captured before we started or forgot the
 * source; replay.h).  DATA, REPAIR and HEARTBEAT-only datagrams are not
 * checked: the sequence trackers drop a replay of them as duplicates
 * (rx_dup) and a heartbeat only moves a frontier forward, so the hot path
 * pays nothing; a datagram with any control message is checked whole.
 * Returns the reason, or 0 (RP_WR_OK) when fresh. */
static int rx_replayed(rp_node_t *n, const rp_dghdr_t *h, const uint8_t *buf, size_t len) {
    for (size_t i = 0; i < h->count; i++) {
        uint8_t t = n->mv[i].type;
        if (t != RP_T_DATA && t != RP_T_REPAIR && t != RP_T_HEARTBEAT && t != RP_T_PAD) {
            int f = rp_auth_fresh(n->auth, buf, len);
            return f == RP_REPLAY_FRESH ? RP_WR_OK : f == RP_REPLAY_STALE ? RP_WR_STALE : RP_WR_REPLAY;
        }
    }
    return RP_WR_OK;
}

/* A node with public keys (auth.h, signatures) takes an authority-bearing
 * message -- and any datagram that claims a signature -- only with a valid
 * Ed25519 signature of the datagram's source.  Checked before the replay
 * window, so a forgery never moves the signer's window. */
static int rx_unsigned(rp_node_t *n, const rp_dghdr_t *h, const uint8_t *buf, size_t len) {
    if (!rp_auth_verifying(n->auth))
        return 0;
    int need = (buf[3] & RP_DGF_SIG) != 0;
    for (size_t i = 0; i < h->count && !need; i++)
        need = rp_auth_authority(n->mv[i].type);
    return need && !rp_auth_sig_ok(n->auth, buf, len, h->source);
}

int rp_node_rx(rp_node_t *n, const uint8_t *buf, size_t len, uint64_t src, int64_t now) {
    rp_dghdr_t h;
    n->c[RP_C_RX_DGRAMS]++;
    /* Our own multicast comes back (loopback must stay on for receivers on
     * this host): recognise it from the header before parsing the rest. */
    if (len >= RP_DG_HDR && rp_ld32(buf + 8) == n->id && rp_ld32(buf + 12) == n->inc &&
        rp_ld16(buf) == RP_WIRE_MAGIC && rp_ld32(buf + 4) == n->group) {
        n->c[RP_C_RX_OWN]++;
        return RP_WR_OK;
    }
    if (RP_UNLIKELY(rx_open(n, &buf, len))) {
        n->rx_reason[RP_WR_AUTH]++;
        n->c[RP_C_RX_BAD]++;
        return RP_WR_AUTH;
    }
    int r = rp_wire_parse(buf, len, n->max_dgram, &h, n->mv, RP_WIRE_MAX_MSGS);
    if (RP_UNLIKELY(r != RP_WR_OK)) {
        n->rx_reason[r]++;
        n->c[RP_C_RX_BAD]++;
        return r;
    }
    if (RP_UNLIKELY(h.group != n->group)) {
        n->rx_reason[RP_WR_GROUP]++;
        n->c[RP_C_RX_BAD]++;
        return RP_WR_GROUP;
    }
    if (h.source == n->id && h.source_inc == n->inc) {
        n->c[RP_C_RX_OWN]++;
        return RP_WR_OK;
    }
    /* A stream's DATA and HEARTBEATs come only from its own node: anyone
     * else's are forgeries (ahead of the stream, a new incarnation ending
     * the live one).  A genuine datagram never mixes them, so the whole
     * datagram goes.  With a key the source is bound by the MAC (auth.c). */
    for (size_t i = 0; i < h.count; i++) {
        const rp_msgview_t *m = &n->mv[i];
        if ((m->type == RP_T_DATA || m->type == RP_T_HEARTBEAT) &&
            RP_UNLIKELY(m->sender != h.source)) {
            n->rx_reason[RP_WR_NOT_OWN]++;
            n->c[RP_C_RX_BAD]++;
            return RP_WR_NOT_OWN;
        }
    }
    if (n->auth && RP_UNLIKELY(rx_unsigned(n, &h, buf, len))) {
        n->rx_reason[RP_WR_SIG]++;
        n->c[RP_C_RX_BAD]++;
        return RP_WR_SIG;
    }
    if (n->auth && RP_UNLIKELY((r = rx_replayed(n, &h, buf, len)) != RP_WR_OK)) {
        n->rx_reason[r]++;
        n->c[RP_C_RX_BAD]++;
        return r;
    }
    for (size_t i = 0; i < h.count; i++) {
        const rp_msgview_t *m = &n->mv[i];
        n->msgs_in[m->type]++;
        n->bytes_in[m->type] += RP_MSG_HDR + m->len;
        switch (m->type) {
        case RP_T_DATA:
            rx_data(n, m, 0, src, h.source, now);
            break;
        case RP_T_REPAIR:
            rx_data(n, m, 1, src, h.source, now);
            break;
        case RP_T_HEARTBEAT:
            rx_heartbeat(n, m, now);
            break;
        case RP_T_PAD:
            break;
        case RP_T_FLOWACK:
            rp_flowack_rx(n, m, &h, src, now);
            break;
        default:
            ctl_push(n, m, &h, src);
        }
    }
    return RP_WR_OK;
}

int rp_node_set_auth(rp_node_t *n, const uint8_t *ids, const uint8_t *keys, int nkeys,
                     uint64_t counter0) {
    rp_auth_t *a = NULL;
    if (nkeys) {
        a = rp_auth_new(ids, keys, nkeys, counter0);
        if (!a)
            return RP_EINVAL;
    }
    /* Datagrams already open were sized for the old trailer: close them. */
    rp_out_flush(&n->out);
    rp_auth_free(n->auth);
    n->auth = a;
    n->out.auth = a;
    n->out.mac_room = a ? RP_AUTH_TRAILER : 0;
    return RP_OK;
}

/* ---- send -------------------------------------------------------------- */

/* Send one message: label is what goes on the wire and into the store and
 * log (RP_LABEL_EXT for a message with an extension header), srb_label the
 * application's label (FIFO-SRB window), self_holds what our own copy keeps
 * beyond gossip, send buffer and window (RP_MS_DELIVER with deliver_own). */
static int64_t publish_msg(rp_node_t *n, const uint8_t *payload, uint32_t len, uint64_t label,
                           uint64_t srb_label, uint32_t self_holds, int64_t now) {
    size_t body = len + (label != RP_SRB_NOLABEL ? 8 : 0);
    if (body > rp_out_max_body(&n->out))
        return RP_EINVAL;
    if (n->srbw && !rp_srbw_can_send(n->srbw))
        return RP_EFULL;
    uint64_t seq = n->next_seq;
    if (n->log) {
        /* A logger that also sends logs its own messages before they go
         * out: nothing else will (the receive path logs what arrives, and
         * no other logger acknowledges them), and a receiver that missed
         * one must find it in the log once the gossip buffers let go. */
        int lr = rp_log_append(n->log, n->id, n->inc, seq, label, now, payload, len);
        if (lr < 0) {
            n->c[RP_C_LOG_ERRORS]++;
            return RP_EIO;
        }
        n->c[RP_C_LOGGED]++;
    }
    uint32_t holds = RP_MS_GOSSIP | (n->hold_send ? RP_MS_SEND : 0) | self_holds |
                     (n->srbw ? RP_MS_SRB : 0);
    int64_t t = rp_mstore_put(&n->store, RP_SELF_SLOT, seq, label, now, n->round, holds,
                              RP_MS_GOSSIP, payload, len);
    if (t < 0)
        return RP_EFULL;
    uint8_t *p = rp_node_out_msg(n, RP_DEST_MCAST, RP_T_DATA,
                                 label != RP_SRB_NOLABEL ? RP_MF_LABEL : 0, n->id, n->inc, 0, seq,
                                 body);
    if (!p) {
        rp_mstore_release(&n->store, (uint64_t)t, 0xFFFFFFFFu);
        return RP_ENOMEM;
    }
    if (label != RP_SRB_NOLABEL) {
        rp_st64(p, label);
        p += 8;
    }
    if (len)
        memcpy(p, payload, len);
    if (n->srbw)
        rp_srbw_sent(n->srbw, srb_label, (uint64_t)t);
    rp_flowack_sent(n->flowack, seq, len);
    n->next_seq++;
    if (!n->hold_send)
        n->acked = n->next_seq;
    n->last_publish = now;
    n->c[RP_C_SENT]++;
    rp_sigvec_del(&n->hbsig, 0);     /* no longer idle */
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_SEND, n->id, n->inc, seq, len, 0, 0);
    return (int64_t)seq;
}

int64_t rp_node_publish(rp_node_t *n, const uint8_t *payload, uint32_t len, uint64_t label,
                        int64_t now) {
    return rp_node_publish_ext(n, payload, len, label, 0, now);
}

/* Could the store take `bytes` more payload in `entries` entries now?
 * Free space plus what gossip-buffer eviction may reclaim: an estimate, so
 * a large message is refused whole (back-pressure) rather than cut short
 * in the common case. */
static int store_room(const rp_mstore_t *st, uint64_t bytes, uint64_t entries) {
    uint64_t free_b = st->acap - rp_mstore_bytes_used(st) + st->gossip_bytes;
    uint64_t free_e = st->emask + 1 - rp_mstore_count(st) + st->gossip_count;
    return free_b >= bytes + bytes / 8 && free_e >= entries;
}

/* A message of stream != 0 or too large for one datagram: count messages
 * with extension headers (wire.h); our own copy of the whole message is
 * stored once more for our own delivery when deliver_own asks for it. */
static int64_t publish_ext(rp_node_t *n, const uint8_t *payload, uint64_t len, uint64_t label,
                           uint32_t stream, int64_t now) {
    size_t room = rp_out_max_body(&n->out);
    if (room < 8 + RP_EXT_HDR + 1)
        return RP_EINVAL;
    uint64_t cmax = room - 8 - RP_EXT_HDR;
    uint32_t count = len <= cmax ? 1 : (uint32_t)((len + cmax - 1) / cmax);
    if (count > 1 && n->srbw)
        return RP_EINVAL;                  /* FIFO-SRB windows count messages: not fragments */
    int self = n->deliver_own && rp_streams_wants(&n->streams, stream);
    if (count > 1 && !store_room(&n->store, (self ? 2 : 1) * (len + (uint64_t)count * 32),
                                 count + 1))
        return RP_EFULL;
    rp_msgext_t x = {.label = label, .stream = stream, .index = 0, .count = count,
                     .total = (uint32_t)len};
    uint32_t chunk = rp_msgext_chunk(x.total, count);
    int64_t first = -1;
    for (x.index = 0; x.index < count; x.index++) {
        uint32_t flen = rp_msgext_len(&x);
        rp_msgext_store(n->pubbuf, &x);
        if (flen)
            memcpy(n->pubbuf + RP_EXT_HDR, payload + (uint64_t)x.index * chunk, flen);
        int64_t r = publish_msg(n, n->pubbuf, RP_EXT_HDR + flen, RP_LABEL_EXT, label,
                                count == 1 && self ? RP_MS_DELIVER : 0, now);
        if (r < 0)
            return x.index == 0 ? r : RP_EFULL;   /* cut short: receivers drop the partial */
        if (x.index == 0)
            first = r;
    }
    if (count > 1 && self) {
        uint8_t *whole = (uint8_t *)malloc(RP_EXT_HDR + len);
        if (whole) {
            rp_msgext_t w = x;
            w.index = 0;
            w.count = 1;
            rp_msgext_store(whole, &w);
            memcpy(whole + RP_EXT_HDR, payload, len);
            rp_mstore_put(&n->store, RP_WHOLE_SELF, (uint64_t)first, RP_LABEL_EXT, now, n->round,
                          RP_MS_DELIVER, RP_MS_GOSSIP, whole, (uint32_t)(RP_EXT_HDR + len));
            free(whole);
        }
    }
    return first;
}

int64_t rp_node_publish_ext(rp_node_t *n, const uint8_t *payload, uint64_t len, uint64_t label,
                            uint32_t stream, int64_t now) {
    if (len > n->max_message || len > RP_EXT_MAX_TOTAL)
        return RP_EINVAL;
    if (label == RP_LABEL_EXT)
        return RP_EINVAL;                  /* reserved: it marks the extension header */
    if (stream == 0 && len + (label != RP_SRB_NOLABEL ? 8 : 0) <= rp_out_max_body(&n->out)) {
        int self = n->deliver_own && rp_streams_wants(&n->streams, 0);
        return publish_msg(n, payload, (uint32_t)len, label, label, self ? RP_MS_DELIVER : 0, now);
    }
    return publish_ext(n, payload, len, label, stream, now);
}

size_t rp_node_publish_batch(rp_node_t *n, const uint8_t *payloads, const uint32_t *lens,
                             const uint64_t *labels, size_t count, int64_t now) {
    return rp_node_publish_batch_ext(n, payloads, lens, labels, count, 0, now);
}

size_t rp_node_publish_batch_ext(rp_node_t *n, const uint8_t *payloads, const uint32_t *lens,
                                 const uint64_t *labels, size_t count, uint32_t stream,
                                 int64_t now) {
    size_t off = 0, k;
    for (k = 0; k < count; k++) {
        int64_t r = rp_node_publish_ext(n, payloads + off, lens[k],
                                        labels ? labels[k] : RP_SRB_NOLABEL, stream, now);
        if (r < 0)
            break;
        off += lens[k];
    }
    return k;
}

int rp_node_send_heartbeat(rp_node_t *n, int idle) {
    if (n->next_seq == 0)
        return 0;                   /* nothing sent yet: nothing to announce */
    uint8_t *p = rp_node_out_msg(n, RP_DEST_MCAST, RP_T_HEARTBEAT, idle ? RP_MF_IDLE : 0, n->id,
                                 n->inc, 0, n->next_seq - 1, 0);
    if (!p)
        return RP_ENOMEM;
    if (idle)
        rp_sigvec_set(&n->hbsig, 0, n->id, n->inc, n->next_seq - 1);
    return 1;
}

uint64_t rp_node_logger_ack(rp_node_t *n, uint64_t upto) {
    if (upto > n->next_seq)
        upto = n->next_seq;
    uint64_t k = 0;
    for (uint64_t s = n->acked; s < upto; s++) {
        int64_t t = rp_mstore_find(&n->store, RP_SELF_SLOT, s);
        if (t >= 0) {
            rp_mstore_release(&n->store, (uint64_t)t, RP_MS_SEND);
            k++;
        }
    }
    if (upto > n->acked)
        n->acked = upto;
    return k;
}

/* ---- missing ids -------------------------------------------------------- */

/* out = (a ∩ [from, upto]) minus b, for sorted disjoint interval lists. */
static size_t diff_clip(const rp_iset_t *a, const rp_iset_t *b, uint64_t from, uint64_t upto,
                        rp_ival_t *out, size_t max) {
    size_t k = 0;
    uint32_t j = 0;
    for (uint32_t i = 0; i < a->n && k < max; i++) {
        uint64_t lo = a->v[i].lo < from ? from : a->v[i].lo;
        uint64_t hi = a->v[i].hi > upto ? upto : a->v[i].hi;
        if (a->v[i].hi < from)
            continue;
        if (a->v[i].lo > upto)
            break;
        while (b && j < b->n && b->v[j].hi < lo)
            j++;
        uint64_t cur = lo;
        uint32_t jj = j;
        while (b && jj < b->n && b->v[jj].lo <= hi && k < max) {
            if (b->v[jj].lo > cur) {
                out[k].lo = cur;
                out[k].hi = b->v[jj].lo - 1;
                k++;
            }
            if (b->v[jj].hi >= hi) {
                cur = hi + 1;
                goto next;
            }
            cur = b->v[jj].hi + 1;
            jj++;
        }
        if (cur <= hi && k < max) {
            out[k].lo = cur;
            out[k].hi = hi;
            k++;
        }
    next:;
    }
    return k;
}

size_t rp_node_missing(rp_node_t *n, uint32_t slot, int phase, uint64_t from, uint64_t upto,
                       rp_ival_t *out, size_t max) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || upto < from)
        return 0;
    switch (phase) {
    case RP_PHASE_GOSSIP:
        return diff_clip(&p->st.missing, &p->lmissing, from, upto, out, max);
    case RP_PHASE_LOGGER:
        return diff_clip(&p->lmissing, NULL, from, upto, out, max);
    case RP_PHASE_LOGGER_NEW:
        return diff_clip(&p->lmissing, &p->lflight, from, upto, out, max);
    case RP_PHASE_ALL:
        return diff_clip(&p->st.missing, NULL, from, upto, out, max);
    default: {          /* RP_PHASE_NEW (and anything else, as before) */
        size_t k = diff_clip(&p->st.missing, &p->lmissing, from, upto, out, max);
        if (!k || !p->inflight.n)
            return k;
        rp_iset_t tmp;
        if (rp_iset_init(&tmp, (uint32_t)k, 0))
            return k;
        for (size_t i = 0; i < k; i++)
            rp_iset_add(&tmp, out[i].lo, out[i].hi);
        k = diff_clip(&tmp, &p->inflight, from, upto, out, max);
        rp_iset_free(&tmp);
        return k;
    }
    }
}

int64_t rp_node_to_logger_phase(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || lo > hi)
        return 0;
    int64_t moved = 0;
    const rp_iset_t *m = &p->st.missing;
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->v[i].hi < lo)
            continue;
        if (m->v[i].lo > hi)
            break;
        uint64_t a = m->v[i].lo < lo ? lo : m->v[i].lo;
        uint64_t b = m->v[i].hi > hi ? hi : m->v[i].hi;
        int64_t r = rp_iset_add(&p->lmissing, a, b);
        if (r > 0)
            moved += r;
    }
    n->c[RP_C_TO_LOGGER_IDS] += (uint64_t)moved;
    return moved;
}

void rp_node_lflight_mark(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (p && lo <= hi)
        rp_iset_add(&p->lflight, lo, hi);
}

/* *f := *f ∩ a, both sorted: one merge walk.  Returns the count kept. */
static uint64_t intersect_into(rp_iset_t *f, const rp_iset_t *a) {
    if (!f->n)
        return 0;
    rp_iset_t keep;
    if (rp_iset_init(&keep, f->n, 0))
        return f->count;
    uint32_t i = 0, j = 0;
    while (i < f->n && j < a->n) {
        uint64_t lo = f->v[i].lo > a->v[j].lo ? f->v[i].lo : a->v[j].lo;
        uint64_t hi = f->v[i].hi < a->v[j].hi ? f->v[i].hi : a->v[j].hi;
        if (lo <= hi && rp_iset_add(&keep, lo, hi) < 0)
            break;
        if (f->v[i].hi < a->v[j].hi)
            i++;
        else
            j++;
    }
    rp_iset_free(f);
    *f = keep;
    return f->count;
}

uint64_t rp_node_lflight_prune(rp_node_t *n, uint32_t slot) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    return p ? intersect_into(&p->lflight, &p->lmissing) : 0;
}

uint64_t rp_node_inflight_prune(rp_node_t *n, uint32_t slot) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p)
        return 0;
    intersect_into(&p->inflight, &p->st.missing);
    for (uint32_t j = 0; j < p->lmissing.n && p->inflight.n; j++)
        rp_iset_remove(&p->inflight, p->lmissing.v[j].lo, p->lmissing.v[j].hi);
    return p->inflight.count;
}

void rp_node_lflight_clear(rp_node_t *n, uint32_t slot) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (p)
        rp_iset_clear(&p->lflight);
}

int64_t rp_node_forget(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || lo > hi)
        return 0;
    int64_t k = rp_seqtrack_forget(&p->st, lo, hi);
    if (n->frag.n)
        frag_drop(n, p, 0, lo, hi, RP_FRAG_D_LOST);   /* a large message that lacks them */
    rp_iset_remove(&p->lmissing, lo, hi);
    rp_iset_remove(&p->inflight, lo, hi);
    if (p->q) {
        /* Let FIFO delivery move past what will never come. */
        uint64_t b = hi < p->st.next ? hi : p->st.next - 1;
        if (p->st.next)
            rp_srbq_mark_purged_range(p->q, lo, b);    /* one interval, any length */
        q_release_purged(n, p, 0);
    }
    if (k > 0) {
        n->c[RP_C_FORGOTTEN] += (uint64_t)k;
    }
    return k;
}

uint64_t rp_node_srb_safe(rp_node_t *n, uint32_t slot, uint64_t upto) {
    uint64_t k = 0;
    if (slot == RP_SELF_SLOT) {
        if (!n->srbw)
            return 0;
        uint64_t seqs[256], sup[256], handles[256];
        size_t got;
        do {
            got = rp_srbw_set_safe(n->srbw, upto, seqs, sup, handles, 256);
            for (size_t i = 0; i < got; i++) {
                /* Gone from the send buffer and the gossip buffer; the
                 * window remembers what superseded it. */
                rp_mstore_release(&n->store, handles[i], RP_MS_SRB | RP_MS_SEND | RP_MS_GOSSIP);
            }
            k += got;
        } while (got == 256);
        n->c[RP_C_PURGED_BUFFER] += k;
        return k;
    }
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || !p->obs)
        return 0;
    uint32_t i = 0;
    for (; i < p->nobs && p->obs[i].sup < upto; i++) {
        int64_t t = rp_mstore_find(&n->store, slot, p->obs[i].seq);
        if (t >= 0)
            rp_mstore_release(&n->store, (uint64_t)t, RP_MS_GOSSIP);
        purged_record(p, p->obs[i].seq, p->obs[i].sup);
        k++;
    }
    if (i) {
        memmove(p->obs, p->obs + i, (p->nobs - i) * sizeof(rp_obs_t));
        p->nobs -= i;
    }
    n->c[RP_C_PURGED_BUFFER] += k;
    return k;
}

uint64_t rp_node_srb_stable(rp_node_t *n, uint64_t upto) {
    if (!n->srbw)
        return 0;
    uint64_t handles[256], k = 0;
    size_t got;
    do {
        got = rp_srbw_set_stable(n->srbw, upto, handles, 256);
        for (size_t i = 0; i < got; i++)
            rp_mstore_release(&n->store, handles[i], RP_MS_SRB);
        k += got;
    } while (got == 256);
    return k;
}

int rp_node_srb_purged(rp_node_t *n, uint32_t slot, uint64_t seq, uint64_t sup, int64_t now) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || sup <= seq)
        return 0;
    int was = rp_iset_contains(&p->st.missing, seq);
    if (was) {
        rp_seqtrack_forget(&p->st, seq, seq);
        rp_iset_remove(&p->lmissing, seq, seq);
        rp_iset_remove(&p->inflight, seq, seq);
        n->c[RP_C_FORGOTTEN]++;
        if (n->tracing)
            rp_trace(&n->trace, now, RP_EV_LOST, p->id, p->inc, seq, 1, 0, 1);
    }
    if (p->q) {
        rp_srbq_mark_purged(p->q, seq);
        q_release_purged(n, p, now);
    }
    purged_record(p, seq, sup);
    return was;
}

int64_t rp_node_srb_window(rp_node_t *n, uint32_t slot, uint64_t low, int64_t now) {
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || !n->srb_w || low == 0)
        return 0;
    uint64_t before = n->c[RP_C_FORGOTTEN];
    /* Everything below low left the window: infer as if seq low-1+w arrived. */
    srb_infer(n, p, low - 1 + n->srb_w, now);
    return (int64_t)(n->c[RP_C_FORGOTTEN] - before);
}

int rp_node_srb_purged_by(rp_node_t *n, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t *sup) {
    if (sender == n->id && inc == n->inc)
        return n->srbw ? rp_srbw_purged_by(n->srbw, seq, sup) : 0;
    uint32_t slot = rp_node_find_peer(n, sender, inc);
    rp_peer_t *p = rp_node_peer_at(n, slot);
    if (!p || !p->purged)
        return 0;
    uint64_t *v = rp_hmap_get(p->purged, seq, 0);
    if (!v)
        return 0;
    *sup = *v;
    return 1;
}

uint64_t rp_node_stable(rp_node_t *n, uint32_t slot, uint64_t below) {
    uint64_t *from;
    if (slot == RP_SELF_SLOT) {
        from = &n->own_stable;
        if (below > n->next_seq)
            below = n->next_seq;
    } else {
        rp_peer_t *p = rp_node_peer_at(n, slot);
        if (!p)
            return 0;
        from = &p->stable_below;
        if (below > p->st.next)
            below = p->st.next;
    }
    uint64_t k = 0;
    /* Only the gossip hold.  A send hold waits for what it was taken for: a
     * logger's acknowledgment (which covers only synced records) or every
     * receiver's report (flow control).  Stability is no substitute: a
     * logger counts in S with what it has received, not what it has
     * synced, and a slow logger falsely declared failed leaves S at once. */
    for (uint64_t s = *from; s < below; s++) {
        int64_t t = rp_mstore_find(&n->store, slot, s);
        if (t >= 0) {
            rp_mstore_release(&n->store, (uint64_t)t, RP_MS_GOSSIP);
            k++;
        }
    }
    if (below > *from)
        *from = below;
    return k;
}

uint64_t rp_node_round(rp_node_t *n, uint32_t gclimit, uint64_t max_bytes) {
    n->round++;
    return rp_mstore_gc(&n->store, n->round - gclimit, max_bytes);
}

/* ---- delivery ---------------------------------------------------------- */

/* One delivery: a message's id, label, stream and payload into the columns.
 * A message with an extension header (a stream's, or a whole large message)
 * is handed over without it. */
static inline void deliver_one(rp_node_t *n, rp_msent_t *e, size_t k, uint32_t *senders,
                               uint32_t *incs, uint64_t *seqs, uint64_t *labels,
                               int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                               uint32_t *streams, uint8_t *buf, size_t used, int64_t now) {
    uint32_t id, inc;
    if (e->sender == RP_SELF_SLOT || e->sender == RP_WHOLE_SELF) {
        id = n->id;
        inc = n->inc;
    } else {
        id = n->peers[e->sender & ~RP_WHOLE_BIT]->id;
        inc = n->peers[e->sender & ~RP_WHOLE_BIT]->inc;
    }
    const uint8_t *d = rp_mstore_data(&n->store, e);
    uint32_t len = e->len, stream = 0;
    uint64_t label = e->label;
    if (RP_UNLIKELY(label == RP_LABEL_EXT && len >= RP_EXT_HDR)) {
        rp_msgext_t x;
        rp_msgext_load(d, &x);
        label = x.label;
        stream = x.stream;
        d += RP_EXT_HDR;
        len -= RP_EXT_HDR;
    }
    senders[k] = id;
    incs[k] = inc;
    seqs[k] = e->seq;
    if (labels)
        labels[k] = label;
    if (rx_times)
        rx_times[k] = e->t;
    if (streams)
        streams[k] = stream;
    offs[k] = (uint32_t)used;
    lens[k] = len;
    if (len)
        memcpy(buf + used, d, len);
    n->c[RP_C_DELIVERED]++;
    rp_streams_delivered(&n->streams, stream);
    if (n->tracing)
        rp_trace(&n->trace, now, RP_EV_DELIVER, id, inc, e->seq, len, 0, 0);
}

/* Whole large messages reassembled for unordered delivery (frag.h) that
 * arrived before store ticket upto.  Returns -1 when buf is full. */
static int deliver_ready(rp_node_t *n, size_t max, size_t *kp, size_t *usedp, uint64_t upto,
                         uint32_t *senders, uint32_t *incs, uint64_t *seqs, uint64_t *labels,
                         int64_t *rx_times, uint32_t *offs, uint32_t *lens, uint32_t *streams,
                         uint8_t *buf, size_t cap, int64_t now) {
    rp_fragpart_t *w;
    size_t k = *kp, used = *usedp;
    int rc = 0;
    for (; k < max && (w = rp_frag_peek(&n->frag)) != NULL && w->at <= upto; k++) {
        if (used + w->x.total > cap) {
            if (!k)
                n->recv_need = w->x.total;
            rc = -1;
            break;
        }
        rp_peer_t *p = n->peers[w->slot];
        senders[k] = p->id;
        incs[k] = p->inc;
        seqs[k] = w->first;
        if (labels)
            labels[k] = w->x.label;
        if (rx_times)
            rx_times[k] = w->t;
        if (streams)
            streams[k] = w->x.stream;
        offs[k] = (uint32_t)used;
        lens[k] = w->x.total;
        memcpy(buf + used, w->buf + RP_EXT_HDR, w->x.total);
        used += w->x.total;
        n->c[RP_C_DELIVERED]++;
        rp_streams_delivered(&n->streams, w->x.stream);
        if (n->tracing)
            rp_trace(&n->trace, now, RP_EV_DELIVER, p->id, p->inc, w->first, w->x.total, 0, 0);
        rp_frag_pop(&n->frag);
    }
    *kp = k;
    *usedp = used;
    return rc;
}

size_t rp_node_recv(rp_node_t *n, size_t max, uint32_t *senders, uint32_t *incs, uint64_t *seqs,
                    uint64_t *labels, int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                    uint8_t *buf, size_t cap, int64_t now) {
    return rp_node_recv_ex(n, max, senders, incs, seqs, labels, rx_times, offs, lens, NULL, buf,
                           cap, now);
}

size_t rp_node_recv_ex(rp_node_t *n, size_t max, uint32_t *senders, uint32_t *incs, uint64_t *seqs,
                       uint64_t *labels, int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                       uint32_t *streams, uint8_t *buf, size_t cap, int64_t now) {
    size_t k = 0, used = 0;
    rp_mstore_t *st = &n->store;
    n->recv_need = 0;

    /* Messages with a DELIVER hold, in arrival order: all of them when
     * delivery is unordered; with FIFO queues only our own (deliver_own),
     * which the store holds in seq order -- peers' go through the queues. */
    if (!n->fifo || n->deliver_own) {
        uint64_t c = st->deliver_cursor > st->tail ? st->deliver_cursor : st->tail;
        int full = 0;
        for (; c < st->head && k < max; c++) {
            if (n->frag.rhead && deliver_ready(n, max, &k, &used, c, senders, incs, seqs, labels,
                                               rx_times, offs, lens, streams, buf, cap, now) < 0) {
                full = 1;
                break;
            }
            if (k >= max)
                break;
            rp_msent_t *e = rp_mstore_entry(st, c);
            if (!(e->holds & RP_MS_DELIVER))
                continue;
            if (used + e->len > cap) {
                if (!k)
                    n->recv_need = e->len;     /* a large message: the caller needs a larger buffer */
                break;
            }
            deliver_one(n, e, k, senders, incs, seqs, labels, rx_times, offs, lens, streams, buf,
                        used, now);
            used += lens[k];
            e->holds &= ~(uint32_t)RP_MS_DELIVER;
            k++;
        }
        st->deliver_cursor = c;
        if (!full && n->frag.rhead && c >= st->head)
            deliver_ready(n, max, &k, &used, UINT64_MAX, senders, incs, seqs, labels, rx_times,
                          offs, lens, streams, buf, cap, now);
        if (!n->fifo || c < st->head) {
            rp_mstore_release(st, st->tail, 0);     /* reclaim what is now idle */
            return k;
        }
    }
    /* FIFO: round robin over senders, each in its own seq order. */
    int progress = 1;
    while (k < max && progress) {
        progress = 0;
        for (uint32_t i = 0; i < n->npeers && k < max; i++) {
            rp_srbq_t *q = n->peers[i] ? n->peers[i]->q : NULL;
            uint64_t h, s;
            if (!q || !rp_srbq_peek(q, &h))
                continue;
            rp_msent_t *e = rp_mstore_entry(st, h);
            if (used + e->len > cap) {
                if (!k)
                    n->recv_need = e->len;
                goto done;
            }
            rp_srbq_pop(q, &h, &s, 1);
            deliver_one(n, e, k, senders, incs, seqs, labels, rx_times, offs, lens, streams, buf,
                        used, now);
            used += lens[k];
            e->holds &= ~(uint32_t)RP_MS_QUEUE;
            k++;
            progress = 1;
        }
    }
done:
    rp_mstore_release(st, st->tail, 0);
    return k;
}

uint64_t rp_node_pending(const rp_node_t *n) {
    if (!n->fifo) {
        const rp_mstore_t *st = &n->store;
        uint64_t c = st->deliver_cursor > st->tail ? st->deliver_cursor : st->tail;
        return st->head - c + n->frag.nready;
    }
    uint64_t k = 0;
    if (n->deliver_own && !n->no_deliver) {     /* own messages (upper bound, as above) */
        const rp_mstore_t *st = &n->store;
        uint64_t c = st->deliver_cursor > st->tail ? st->deliver_cursor : st->tail;
        k += st->head - c;
    }
    for (uint32_t i = 0; i < n->npeers; i++)
        if (n->peers[i] && n->peers[i]->q)
            k += rp_srbq_pending(n->peers[i]->q);
    return k;
}
