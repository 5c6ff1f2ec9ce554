/* The data plane of one rpbcast node: everything that happens per message.
 *
 * It receives whole datagrams and handles DATA, REPAIR, HEARTBEAT and PAD
 * itself: gap detection on a per-sender tracker, storing the payload once in
 * the message store (for the application and for the gossip buffer), FIFO /
 * FIFO-SRB queues, counters and trace events.  Every other message type is
 * queued, undecoded, for the control plane (rpbcast/protocol/engine.py), which runs
 * once per control message rather than once per data message.  The control
 * plane calls back in here for the per-message parts of its work: serving a
 * gossip's missing ids from the store, building missing-set digests, moving
 * ids to the logger phase, releasing the send buffer on logger ACKs.
 *
 * No sockets, no clock, no threads: time is passed in (int64 ns) and output
 * goes to an outbox the driver drains.
 */
#ifndef RP_NODE_H
#define RP_NODE_H

#include "conflate.h"
#include "frag.h"
#include "logstore.h"
#include "msgstore.h"
#include "outbox.h"
#include "seqtrack.h"
#include "signature.h"
#include "srb.h"
#include "streams.h"
#include "tbucket.h"
#include "trace.h"
#include "wire.h"

#define RP_SELF_SLOT 0xFFFFFFFEu
#define RP_NO_SLOT   0xFFFFFFFFu
#define RP_NOT_IDLE  UINT64_MAX    /* rp_peer_t.idle_seq of a stream not known idle */
/* Store "sender" of a reassembled large message (frag.h): its sender's slot
 * with this bit, so the (sender, seq) index keeps it apart from the
 * fragment stored under its first seq; RP_WHOLE_SELF for our own. */
#define RP_WHOLE_BIT  0x80000000u
#define RP_WHOLE_SELF 0xFFFFFFFDu

/* Repair phases of a peer's missing ids (rp_node_missing).  An id starts in
 * the gossip phase (asked of peers); a GcNOTE or a timeout moves it to the
 * logger phase (asked of loggers, or the sender). */
enum {
    RP_PHASE_GOSSIP = 0,   /* missing, minus the logger phase */
    RP_PHASE_LOGGER = 1,   /* the logger phase */
    RP_PHASE_ALL = 2,      /* both */
    RP_PHASE_NEW = 3,      /* gossip phase, not asked for since the last full round */
    RP_PHASE_LOGGER_NEW = 4, /* logger phase, not asked of a logger yet (or given up waiting) */
};

/* Counters (rp_node_t.c[]).  Names in rp_node_counter_names. */
enum {
    RP_C_SENT = 0,         /* DATA published by this node */
    RP_C_RX_DGRAMS,        /* datagrams received (any) */
    RP_C_RX_BAD,           /* datagrams rejected (sum of rx_reason) */
    RP_C_RX_OWN,           /* own multicast looped back */
    RP_C_RX_NEW,           /* data first received in order or ahead */
    RP_C_RX_FILL,          /* data first received filling a gap */
    RP_C_RX_DUP,           /* data received again */
    RP_C_RX_FAR,           /* data or heartbeat too far ahead: rejected */
    RP_C_RX_DROPPED_FULL,  /* data dropped: store full of undelivered data */
    RP_C_GAPS,             /* gaps detected */
    RP_C_GAP_IDS,          /* ids that became missing */
    RP_C_REPAIRS_PEER,     /* gaps filled by a REPAIR from a peer */
    RP_C_REPAIRS_LOGGER,   /* gaps filled by a REPAIR from a logger */
    RP_C_FILLED_OTHER,     /* gaps filled by a late DATA */
    RP_C_DELIVERED,        /* handed to the application */
    RP_C_PURGED,           /* dropped as obsolete (FIFO-SRB) */
    RP_C_FORGOTTEN,        /* missing ids given up (lost / purged / unwanted) */
    RP_C_SERVED,           /* REPAIRs sent by this node */
    RP_C_SERVE_LIMITED,    /* repairs not sent because of the rate limit */
    RP_C_GCNOTE_IDS,       /* ids answered with a GcNOTE */
    RP_C_TO_LOGGER_IDS,    /* ids moved to the logger phase */
    RP_C_CTL_QUEUED,       /* control messages handed to the control plane */
    RP_C_HB_IN,            /* heartbeats received */
    RP_C_LOGGED,           /* logger: records appended to the log */
    RP_C_LOG_ERRORS,       /* logger: appends or reads that failed */
    RP_C_SERVED_FROM_LOG,  /* logger: repairs read back from disk */
    RP_C_PURGED_BUFFER,    /* FIFO-SRB: obsolete messages purged from a retransmission buffer (TP5) */
    RP_C_PURGED_NOTICES,   /* FIFO-SRB: "purged, superseded by" answers sent */
    RP_C_CATCHUP_QUEUED,   /* logger: ids queued to stream from the log (catchup.h) */
    RP_C_CATCHUP_AGAIN,    /* logger: ids asked for while already queued for the requester */
    RP_C_CATCHUP_REFUSED,  /* logger: ids not queued (queue bounds); asked again later */
    RP_C_STREAMS_REFUSED,  /* streams not created: max_streams known already (message dropped) */
    RP_C_RX_STRANGER,      /* REPAIRs of a stream never heard of, from another node: dropped */
    RP_C_STREAMS_RETIRED,  /* streams retired to make room for a new one (rp_node_peer) */
    RP_C_STREAMS_REFUSED_NODE, /* streams not created: the node id's quota is full of live streams */
    RP_C_STREAMS_RETIRED_STRANGER, /* of streams_retired: non-members' streams retired (the pool) */
    RP_C_STREAMS_PROMOTED, /* streams that left the pool: their node id became a member */
    RP_C__COUNT
};

extern const char *const rp_node_counter_names[RP_C__COUNT];

/* An obsolete message still in the gossip buffer: seq, and the seq of the
 * newer message with its label that made it obsolete. */
typedef struct {
    uint64_t seq;
    uint64_t sup;
} rp_obs_t;

#define RP_PURGED_MAX 65536      /* purged records kept per sender */

/* One sender incarnation as seen by this node. */
typedef struct {
    uint32_t id, inc;
    uint32_t slot;
    rp_seqtrack_t st;
    rp_iset_t lmissing;        /* logger-phase subset of st.missing */
    rp_iset_t inflight;        /* gossip-phase ids asked for since the last full round */
    rp_iset_t lflight;         /* logger-phase ids asked of a logger, not yet arrived */
    uint64_t idle_seq;         /* RP_NOT_IDLE unless known idle at idle_seq */
    uint64_t gossip_cursor;    /* where the next digest starts (rotation) */
    int64_t last_heard;        /* ns */
    uint64_t addr;             /* where its DATA comes from (its unicast address) */
    uint64_t stable_below;     /* every seq below it is stable (released) */
    rp_srbq_t *q;              /* FIFO / FIFO-SRB queue, or NULL */
    /* FIFO-SRB retransmission-buffer purging (TP5), when srb_w is set */
    rp_hmap_t *labels;         /* label -> newest stored seq with that label */
    rp_obs_t *obs;             /* obsolete stored messages waiting for their successor to be safe */
    uint32_t nobs, obscap;
    rp_hmap_t *purged;         /* seq -> seq that superseded it (answers to requests) */
    uint64_t *purged_ring;     /* eviction order of purged records */
    uint32_t purged_head, purged_n;
    uint8_t dead;              /* a newer incarnation of this id exists */
    uint8_t own_heard;         /* DATA or HEARTBEAT heard from the node itself */
    uint8_t stranger;          /* its node id is not a member: it lives in the pool */
    uint32_t pool_ix;          /* where it is in n->pool, if a stranger */
    uint32_t older;            /* slot of the previously created stream of this id, or RP_NO_SLOT */
    uint64_t touched;          /* n->touch when created or last heard: retirement's recency */
    uint64_t rx_new, rx_fill, rx_dup;
} rp_peer_t;

/* A control message waiting for the control plane; body points into the
 * received datagram, valid until the next rp_node_rx call. */
typedef struct {
    const uint8_t *body;
    uint64_t seq;
    uint64_t src_addr;
    uint32_t sender, inc, aux;
    uint32_t source, source_inc;   /* node that sent the datagram */
    uint16_t len;
    uint8_t type, flags;
} rp_ctl_t;

typedef struct {
    /* identity */
    uint32_t group, id, inc;
    /* behaviour switches */
    uint8_t deliver_own;       /* deliver own messages to self */
    uint8_t fifo;              /* per-sender FIFO delivery (queues) */
    uint8_t is_logger;
    uint8_t tracing;
    uint8_t no_deliver;        /* a dedicated logger: nothing for an application */
    uint8_t hold_send;         /* keep own messages until a logger acknowledges */
    struct rp_flowack *flowack; /* the send window's data-plane feedback (flowack.h); NULL: off */
    uint64_t srb_w;            /* FIFO-SRB window of senders (0 = off) */
    uint64_t max_gap;
    size_t max_dgram;          /* largest datagram accepted */
    uint32_t max_scan;         /* ids examined per served gossip section */
    uint32_t max_streams;      /* streams (sender incarnations) known at most */
    uint32_t max_per_node;     /* streams of one node id known at most */
    uint32_t max_strangers;    /* streams of non-members known at most (the pool) */
    uint8_t members_known;     /* rp_node_set_members was called: non-members go to the pool */
    /* own stream */
    uint64_t next_seq;
    uint64_t acked;            /* every own seq < acked is logged */
    uint64_t own_stable;       /* every own seq < own_stable is stable */
    int64_t last_publish;
    rp_srbw_t *srbw;
    /* peers: peers[slot] for slot < npeers; NULL for a retired slot */
    rp_peer_t **peers;
    uint32_t npeers, pcap;     /* slots in use (live, retired or free), allocated */
    uint32_t nlive;            /* streams known (non-NULL peers) */
    uint32_t nprotected;       /* of which a member's, own-heard and not dead: never retired */
    uint32_t *pool;            /* slots of strangers' streams (not counted against max_streams) */
    uint32_t npool, poolcap, pool_hand;
    uint32_t *retired;         /* slots retired since the control plane last took them */
    uint32_t nretired;
    uint32_t *freeslots;       /* retired slots the control plane forgot: reused first */
    uint32_t nfree;
    uint32_t hand;             /* where the next search for a stream to retire starts */
    uint64_t touch;            /* recency clock of rp_peer_t.touched */
    uint64_t *tombs[2];        /* (id, inc) of retired streams, oldest first: rings of max_streams,
                                * [0] members', [1] strangers' (a flood of strangers cannot
                                * push out a member's) */
    uint64_t ntombs[2];
    rp_hmap_t pindex;          /* (id, inc) -> slot; id -> newest slot; (id, inc) -> retired frontier */
    uint32_t last_slot;        /* cache for runs of one sender */
    rp_sigvec_t hbsig;         /* idle heartbeat signature; slot 0 = self */
    /* storage and output */
    rp_mstore_t store;
    uint32_t round;            /* gossip round: the store age unit */
    rp_outbox_t out;
    /* control queue */
    rp_ctl_t *ctl;
    size_t nctl, ctlcap;
    /* gap detected since the control plane last looked */
    uint32_t nack_pending;
    /* repair rate limit: a token per REPAIR (serve.h) */
    rp_tbucket_t repair_rate;
    /* counters */
    uint64_t c[RP_C__COUNT];
    uint64_t rx_reason[RP_WR__COUNT];
    uint64_t msgs_in[RP_T__COUNT], bytes_in[RP_T__COUNT];
    uint64_t msgs_out[RP_T__COUNT], bytes_out[RP_T__COUNT];
    /* scratch for parsing */
    rp_msgview_t *mv;
    rp_trace_t trace;
    /* a logger's log (owned by the caller), or NULL */
    rp_log_t *log;
    /* a logger's paced catch-up queues (catchup.h), or NULL */
    struct rp_catchup *cu;
    /* repair rate per requester (reqlimit.h), or NULL: off */
    struct rp_reqlimit *reqlimit;
    /* latest value per (sender, label): 0 off, 1 on, 2 on and labelled
     * messages are not queued for delivery (consumers read only the table) */
    uint8_t conflate;
    rp_conflate_t latest;
    /* keyed group (auth.h): datagrams without a valid MAC are dropped (AUTH)
     * before anything else is parsed; NULL = unkeyed, today's behaviour */
    rp_auth_t *auth;
    /* large messages (frag.h) and streams (streams.h) */
    rp_frag_t frag;
    rp_streams_t streams;
    uint64_t max_message;      /* largest payload publish takes */
    uint8_t *pubbuf;           /* one fragment's stored form, built by publish */
    uint64_t recv_need;        /* bytes the next delivery needed when it did not fit (0: none) */
} rp_node_t;

typedef struct {
    uint32_t group, id, inc;
    uint32_t mtu;              /* outgoing datagram size */
    uint64_t store_bytes;      /* message store arena */
    uint64_t store_entries;
    uint64_t max_gap;
    uint64_t srb_w;
    uint32_t max_scan;
    uint32_t max_streams;      /* 0: RP_MAX_STREAMS_DEFAULT */
    uint32_t max_per_node;     /* 0: RP_MAX_PER_NODE_DEFAULT */
    uint32_t max_strangers;    /* 0: RP_MAX_STRANGERS_DEFAULT */
    uint8_t deliver_own, fifo, is_logger, no_deliver;
    uint8_t prefault;          /* touch the whole store at init (csrc/bigmem.h) */
    uint64_t max_message;      /* largest payload publish takes (0: 64 MiB) */
    uint64_t reassembly_bytes; /* bound on partial large messages (0: 2 x max_message) */
} rp_node_cfg_t;

#define RP_MAX_STREAMS_DEFAULT 4096
#define RP_MAX_PER_NODE_DEFAULT 8
#define RP_MAX_STRANGERS_DEFAULT 64
/* Slots at most: max_streams live ones, max_strangers in the pool, plus
 * retired ones the control plane has not taken yet, at most the larger of
 * max_streams and this. */
#define RP_RETIRED_SLACK 4096
/* rp_msent_t.sender of a retired stream's stored messages (msgstore.h) */
#define RP_GONE_SLOT 0xFFFFFFFCu

int  rp_node_init(rp_node_t *n, const rp_node_cfg_t *cfg);
void rp_node_free(rp_node_t *n);

/* ---- peers ------------------------------------------------------------- */

/* Slot of (id, inc), or RP_NO_SLOT. */
uint32_t rp_node_find_peer(rp_node_t *n, uint32_t id, uint32_t inc);
/* Find or create with the given base (first seq this node wants).
 *
 * Streams are bounded: at most max_per_node of one node id and max_streams
 * in all.  At a bound a stream is RETIRED to make room: of the id's streams
 * (its quota) or of all (max_streams), one never heard in its own node's
 * datagram first, else a dead incarnation; least recently heard first
 * (over all streams: among a sample from a rotating hand).  A live stream
 * heard from its own node is never retired: with none to retire the new
 * stream is refused, RP_EFULL (streams_refused_node / streams_refused).
 * A retired stream's state goes at once (tracker, queues, stored and
 * partial messages, heartbeat entry, index); its slot waits in `retired`
 * until the control plane took it (rp_node_take_retired) and forgot
 * whatever it keys by slot, and only then is reused.  A stream that comes
 * back starts at the frontier it had when retired (remembered for the last
 * max_streams retirements), so nothing below it is delivered twice. */
int64_t  rp_node_peer(rp_node_t *n, uint32_t id, uint32_t inc, uint64_t base);
/* The member table, as far as streams are concerned (additive: a node never
 * told keeps every node id a member, the behaviour before).  ids[i] is a
 * member when is_member[i]; from the first call on, a node id not named a
 * member is a STRANGER: its streams live in a pool of max_strangers, apart
 * from max_streams, retired least recently heard first when a new stranger
 * stream needs room (own-heard or not: a stranger's stream is never
 * protected), and never retire a member's stream.  A node id that becomes
 * a member takes its streams out of the pool (promoted: they count against
 * max_streams from now on; a member stream beyond max_streams that can be
 * retired is); one that stops being a member puts them back (the pool's
 * least recently heard beyond max_strangers retired).  Retired slots wait
 * for rp_node_take_retired as usual.  Returns streams retired. */
uint32_t rp_node_set_members(rp_node_t *n, const uint32_t *ids, const uint8_t *is_member, size_t k);
/* Is id a member (rp_node_set_members; every id before the first call)? */
int rp_node_is_member(rp_node_t *n, uint32_t id);
/* Slots retired since the last call, up to max into out; they become
 * reusable now: the caller forgets them before it creates a stream. */
uint32_t rp_node_take_retired(rp_node_t *n, uint32_t *out, uint32_t max);
/* A newer incarnation of slot's node exists (the control plane knows). */
void rp_node_peer_dead(rp_node_t *n, uint32_t slot);
RP_INLINE rp_peer_t *rp_node_peer_at(rp_node_t *n, uint32_t slot) {
    return slot < n->npeers ? n->peers[slot] : NULL;
}

/* ---- receive ----------------------------------------------------------- */

/* Process one datagram.  Returns the decoder reason (0 = accepted). */
int rp_node_rx(rp_node_t *n, const uint8_t *buf, size_t len, uint64_t src_addr, int64_t now);

/* A heartbeat for peer slot (from a HEARTBEAT or a heartbeat list).  idle:
 * the sender announced it is idle at seq.  Returns ids newly missing. */
int64_t rp_node_heartbeat(rp_node_t *n, uint32_t slot, uint64_t seq, int idle, int64_t now);

/* Streams that have been silent here for at least silent_ns: their latest
 * seq enters the heartbeat signature as if the sender had announced itself
 * idle (§5.1).  A sender that crashed right after its last message never
 * sends that idle heartbeat; without this a member that missed the message
 * would never learn it exists, while one that has it could not tell.
 * Returns the streams newly marked. */
uint32_t rp_node_infer_idle(rp_node_t *n, int64_t now, int64_t silent_ns);

/* Key the node (ids[k], keys[k * 16 ..]; k = 0 is the sending key), or
 * unkey it with nkeys = 0.  counter0: the first GMAC nonce counter (auth.h).
 * Every datagram sent from now on carries a MAC; every datagram received
 * must.  Returns RP_OK or RP_EINVAL. */
int rp_node_set_auth(rp_node_t *n, const uint8_t *ids, const uint8_t *keys, int nkeys,
                     uint64_t counter0);

RP_INLINE void rp_node_ctl_clear(rp_node_t *n) { n->nctl = 0; }

/* ---- output ------------------------------------------------------------ */

/* Reserve a message towards dest in the outbox, counted in msgs_out and
 * bytes_out; returns its body to fill, or NULL if it does not fit. */
RP_INLINE uint8_t *rp_node_out_msg(rp_node_t *n, uint64_t dest, uint8_t type, uint8_t flags,
                                   uint32_t sender, uint32_t inc, uint32_t aux, uint64_t seq,
                                   size_t body_len) {
    uint8_t *p = rp_out_msg(&n->out, dest, type, flags, sender, inc, aux, seq, body_len);
    if (p) {
        n->msgs_out[type]++;
        n->bytes_out[type] += RP_MSG_HDR + body_len;
    }
    return p;
}

/* ---- send -------------------------------------------------------------- */

/* Publish one message: assigns the next seq, stores it (send buffer and
 * gossip buffer), queues a DATA multicast.  Returns the seq, or RP_EFULL
 * when the send buffer is full of unacknowledged data or the FIFO-SRB
 * window is closed (back-pressure), RP_EINVAL if too large. */
int64_t rp_node_publish(rp_node_t *n, const uint8_t *payload, uint32_t len, uint64_t label,
                        int64_t now);

/* Publish one message of any size up to max_message on stream: a message
 * that does not fit one datagram goes out as fragments (frag.h), each an
 * ordinary message with its own seq.  Returns the seq of the first (the
 * message's id), RP_EFULL on back-pressure (nothing sent), RP_EINVAL when
 * too large or fragmented under FIFO-SRB, RP_EIO when a logger could not
 * log it.  rp_node_publish is this with stream 0. */
int64_t rp_node_publish_ext(rp_node_t *n, const uint8_t *payload, uint64_t len, uint64_t label,
                            uint32_t stream, int64_t now);

/* Publish count messages laid out back to back in payloads (lens[i] each,
 * labels may be NULL).  Returns how many were published (stops at the
 * first back-pressure). */
size_t rp_node_publish_batch(rp_node_t *n, const uint8_t *payloads, const uint32_t *lens,
                             const uint64_t *labels, size_t count, int64_t now);
/* The same on one stream. */
size_t rp_node_publish_batch_ext(rp_node_t *n, const uint8_t *payloads, const uint32_t *lens,
                                 const uint64_t *labels, size_t count, uint32_t stream, int64_t now);

/* Queue a multicast HEARTBEAT for the own stream (idle flag as given). */
int rp_node_send_heartbeat(rp_node_t *n, int idle);

/* A logger acknowledged every own seq < upto: release the send buffer. */
uint64_t rp_node_logger_ack(rp_node_t *n, uint64_t upto);

/* ---- repair ------------------------------------------------------------ */

/* Serving requests (REPAIR, PURGED, GcNOTE): serve.h. */

/* Missing ids of a peer in the given phase (RP_PHASE_*) as intervals into
 * out (at most max), clipped to [from, upto].  Returns intervals written. */
size_t rp_node_missing(rp_node_t *n, uint32_t slot, int phase, uint64_t from, uint64_t upto,
                       rp_ival_t *out, size_t max);

/* Move [lo, hi] ∩ missing of a peer to the logger phase (a GcNOTE).
 * Returns ids moved. */
int64_t rp_node_to_logger_phase(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi);

/* Catch-up from a logger (the requester's side): ids of a peer asked of a
 * logger are in flight until they arrive; rp_node_missing's
 * RP_PHASE_LOGGER_NEW leaves them out.  mark adds [lo, hi]; prune drops
 * what arrived (or left the logger phase) and returns how many are still
 * in flight; clear gives up waiting for all of them. */
void rp_node_lflight_mark(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi);
uint64_t rp_node_lflight_prune(rp_node_t *n, uint32_t slot);
void rp_node_lflight_clear(rp_node_t *n, uint32_t slot);
/* The same for the gossip phase: ids asked of peers (p->inflight) that are
 * still missing and still in the gossip phase; returns how many. */
uint64_t rp_node_inflight_prune(rp_node_t *n, uint32_t slot);

/* Give up on [lo, hi] of a peer (lost, purged, or not wanted any more). */
int64_t rp_node_forget(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi);

/* Stability (GSGC): every seq < below of `slot` (RP_SELF_SLOT: our own
 * stream) has reached every live member.  Drops those messages' gossip-
 * buffer hold (for our own stream that is the whole send buffer unless a
 * logger or flow control holds it: those holds wait for their own
 * acknowledgments).  Returns entries released. */
uint64_t rp_node_stable(rp_node_t *n, uint32_t slot, uint64_t below);

/* ---- FIFO-SRB ---------------------------------------------------------- */

/* Every seq < upto of slot is safe (received by more than f members):
 * obsolete messages whose successor is below upto leave this node's
 * retransmission buffer (TP5).  slot RP_SELF_SLOT: our own stream, where
 * purging also frees FIFO-SRB window slots.  Returns messages purged. */
uint64_t rp_node_srb_safe(rp_node_t *n, uint32_t slot, uint64_t upto);

/* Every own seq < upto is stable (received by every member): they leave the
 * FIFO-SRB window.  Returns messages released. */
uint64_t rp_node_srb_stable(rp_node_t *n, uint64_t upto);

/* A peer says seq of slot was purged, superseded by sup: stop waiting for
 * it.  Returns 1 if it was missing here. */
int rp_node_srb_purged(rp_node_t *n, uint32_t slot, uint64_t seq, uint64_t sup, int64_t now);

/* The sender's window is empty below `low` (WINDOW notice): missing ids
 * below it were purged.  Returns ids given up. */
int64_t rp_node_srb_window(rp_node_t *n, uint32_t slot, uint64_t low, int64_t now);

/* Was seq of (sender, inc) purged here?  Stores what superseded it. */
int rp_node_srb_purged_by(rp_node_t *n, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t *sup);

/* Gossip-round tick: age the gossip buffer (drop entries older than
 * gclimit rounds, and beyond max_bytes). */
uint64_t rp_node_round(rp_node_t *n, uint32_t gclimit, uint64_t max_bytes);

/* ---- delivery ---------------------------------------------------------- */

/* Hand up to max messages to the application: ids and payload offsets go to
 * the arrays, payload bytes back to back into buf (cap bytes).  Stops early
 * when buf is full.  Returns the number delivered. */
size_t rp_node_recv(rp_node_t *n, size_t max, uint32_t *senders, uint32_t *incs, uint64_t *seqs,
                    uint64_t *labels, int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                    uint8_t *buf, size_t cap, int64_t now);

/* rp_node_recv, with each message's stream id into streams (may be NULL).
 * When the next message alone is larger than cap nothing is delivered and
 * n->recv_need says how many bytes it needs. */
size_t rp_node_recv_ex(rp_node_t *n, size_t max, uint32_t *senders, uint32_t *incs, uint64_t *seqs,
                       uint64_t *labels, int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                       uint32_t *streams, uint8_t *buf, size_t cap, int64_t now);

/* Number of messages waiting for the application (upper bound). */
uint64_t rp_node_pending(const rp_node_t *n);

#endif
