/* rpbcast wire format, version 1.  The normative description, with a
 * diagram per message type, is docs/wire-format.md; keep the two in step.
 *
 * A datagram is a 24-byte datagram header, `count` messages, and an optional
 * MAC trailer.  Every message is a 24-byte message header and `len` body
 * bytes.  All integers are little-endian.
 *
 * The decoder (rp_wire_parse) checks every length and count before it reads
 * the bytes they describe, validates each body against its type, and
 * returns a reason code for anything malformed; it never reads outside
 * [buf, buf + len).
 */
#ifndef RP_WIRE_H
#define RP_WIRE_H

#include "rp_common.h"

#define RP_WIRE_MAGIC      0x5052u      /* bytes 'R' 'P' */
#define RP_WIRE_VERSION    1
#define RP_DG_HDR          24
#define RP_MSG_HDR         24
#define RP_WIRE_MAX_DGRAM  65507        /* largest UDP/IPv4 payload */
#define RP_WIRE_MAX_MAC    128
#define RP_WIRE_MAX_MSGS   2730         /* bound for arrays; at most (65507-24)/24 = 2728 fit */

/* Datagram flags. */
#define RP_DGF_MAC         0x01         /* MAC trailer of mac_len bytes */
#define RP_DGF_ENC         0x02         /* body encrypted under the MAC's key (auth.h); with MAC only */
#define RP_DGF_SIG         0x04         /* Ed25519 signature block before the MAC trailer (auth.h); with MAC only */
#define RP_DGF_KNOWN       0x07

/* Message types. */
enum {
    RP_T_PAD       = 0,   /* filler so GSO segments share one size */
    RP_T_DATA      = 1,   /* application data, first transmission */
    RP_T_REPAIR    = 2,   /* retransmitted data (from a peer or a logger) */
    RP_T_HEARTBEAT = 3,   /* seq = last seq sent by (sender, inc) */
    RP_T_GOSSIP    = 4,   /* negative gossip: sections (missing, lastseen, stability, live) */
    RP_T_HBLIST    = 5,   /* heartbeat list: (sender, inc, last seq) entries;
                             aux = 0 idle list, 1 sponsor's t_join vector */
    RP_T_RTX       = 6,   /* retransmission request (logger phase): MISSING sections */
    RP_T_GCNOTE    = 7,   /* "garbage collected here, ask a logger": MISSING sections */
    RP_T_LOGACK    = 8,   /* logger acknowledges (sender, inc): every seq < seq is logged;
                             body empty or a digest of further logged seqs */
    RP_T_JOIN      = 9,   /* join request; seq = freshness; body = member entry */
    RP_T_LEAVE     = 10,  /* leave request; seq = freshness */
    RP_T_MEMBERS   = 11,  /* membership list: member entries */
    RP_T_STABILITY = 12,  /* multicast stability array of a completed round */
    RP_T_GAPNOTE   = 13,  /* ids that will never be delivered: MISSING sections */
    RP_T_PURGED    = 14,  /* FIFO-SRB: (seq, superseded-by) pairs of (sender, inc) */
    RP_T_WINDOW    = 15,  /* FIFO-SRB: sender window empty below seq; aux = w */
    RP_T_SEQBLOCK  = 16,  /* sequence block check-out with a logger */
    RP_T_PING      = 17,  /* RTT probe; seq = nonce (any u64); body = u64 timestamp */
    RP_T_PONG      = 18,  /* RTT probe answer; seq and body echoed */
    RP_T_ATOMIC    = 19,  /* atomic delivery (docs/atomic.md), about the proposal (sender, inc,
                             seq): aux = RP_ATOMIC_* | reason << 8; flag VOTERS: body = u32 ids
                             of YES voters an aggregator collected, else the body is empty */
    RP_T_FLOWACK   = 20,  /* flow acknowledgment, receiver to sender (flowack.h): of stream
                             (sender, inc) every seq < seq is received here; body empty */
    RP_T__COUNT    = 21
};

/* Message flags, by type. */
#define RP_MF_LABEL        0x01   /* DATA/REPAIR: body starts with u64 label */
#define RP_MF_FROM_LOGGER  0x02   /* REPAIR: served from a logger */
#define RP_MF_IDLE         0x01   /* HEARTBEAT: sender is going idle */
#define RP_MF_FIRST        0x02   /* HEARTBEAT: body = u64 first seq of this incarnation */
#define RP_MF_REPLY        0x01   /* HBLIST/MEMBERS/SEQBLOCK: an answer */
#define RP_MF_PUSH         0x02   /* HBLIST/MEMBERS: pushed because the target is behind */
#define RP_MF_VECTOR       0x04   /* HBLIST: a sponsor's vector (every stream's latest seq),
                                     not the idle list the heartbeat signature covers */
#define RP_MF_LOST         0x01   /* GAPNOTE: sent but lost for good (the sender's incarnation
                                     died), rather than never sent or collected from a log */
#define RP_MF_VOTERS       0x01   /* ATOMIC: body = n x u32 voter ids (n >= 1), aux = YES */

/* The extension header of DATA/REPAIR (docs/wire-format.md 4.1.1): a
 * message whose label field holds RP_LABEL_EXT carries, right after it, a
 * 24-byte header -- u64 label (the application's, or 2^64-1 for none),
 * u32 stream, u32 index, u32 count, u32 total -- then its payload.  A
 * message of stream s != 0, or one fragment of a message larger than a
 * datagram, is written this way; everything else is not (no cost to the
 * small stream-0 messages).  It rides in the label so every path that keeps
 * a message -- store, log, repair from either -- keeps it unchanged: a
 * fragment is an ordinary sequence-numbered message.
 *
 * Fragment `index` of `count` is seq first + index of its sender and covers
 * payload bytes [index * chunk, min(total, (index + 1) * chunk)) with chunk
 * = ceil(total / count): its length follows from the header, which the
 * decoder checks. */
#define RP_LABEL_EXT       (UINT64_MAX - 2)   /* 2^64-3: reserved for applications */
#define RP_EXT_HDR         24
#define RP_EXT_MAX_COUNT   (1u << 20)         /* fragments of one message */
#define RP_EXT_MAX_TOTAL   (1u << 30)         /* bytes of one message (1 GiB) */

typedef struct {
    uint64_t label;
    uint32_t stream, index, count, total;
} rp_msgext_t;

RP_INLINE void rp_msgext_load(const uint8_t *p, rp_msgext_t *x) {
    x->label = rp_ld64(p);
    x->stream = rp_ld32(p + 8);
    x->index = rp_ld32(p + 12);
    x->count = rp_ld32(p + 16);
    x->total = rp_ld32(p + 20);
}

RP_INLINE void rp_msgext_store(uint8_t *p, const rp_msgext_t *x) {
    rp_st64(p, x->label);
    rp_st32(p + 8, x->stream);
    rp_st32(p + 12, x->index);
    rp_st32(p + 16, x->count);
    rp_st32(p + 20, x->total);
}

/* Fragment size of a message of total bytes in count fragments, and the
 * length of fragment index. */
RP_INLINE uint32_t rp_msgext_chunk(uint32_t total, uint32_t count) {
    return count ? (uint32_t)(((uint64_t)total + count - 1) / count) : 0;
}
RP_INLINE uint32_t rp_msgext_len(const rp_msgext_t *x) {
    uint64_t c = rp_msgext_chunk(x->total, x->count), a = (uint64_t)x->index * c;
    uint64_t b = a + c < x->total ? a + c : x->total;
    return a < b ? (uint32_t)(b - a) : 0;
}

/* 0 if the extension header and payload length (bytes after the header)
 * agree: count >= 1, index < count, bounds, the fragment's exact length,
 * no nested extension label. */
RP_INLINE int rp_msgext_check(const rp_msgext_t *x, size_t plen) {
    if (x->count == 0 || x->index >= x->count || x->count > RP_EXT_MAX_COUNT ||
        x->total > RP_EXT_MAX_TOTAL || x->label == RP_LABEL_EXT)
        return -1;
    if (x->count > 1 && (uint64_t)x->count > x->total)
        return -1;                       /* every fragment carries a byte */
    return plen == rp_msgext_len(x) ? 0 : -1;
}

/* ATOMIC: what the message says about its proposal (aux & 0xff); the next
 * byte is a reason code for NO and ABORTED, the number of an aggregator's
 * voter list for YES with VOTERS and for HAVE.  The decoder checks only the
 * body's shape: the control plane rejects (and counts) any other aux. */
enum {
    RP_ATOMIC_YES       = 1,   /* the proposal is on the voter's disk: it will deliver on COMMIT */
    RP_ATOMIC_NO        = 2,   /* the voter cannot hold it (reason: why) */
    RP_ATOMIC_ASK       = 3,   /* in doubt: what was decided? */
    RP_ATOMIC_COMMITTED = 4,   /* the answer: committed (from the sender's decision) */
    RP_ATOMIC_ABORTED   = 5,   /* the answer: aborted (reason: why) */
    RP_ATOMIC_HAVE      = 6,   /* tree votes: your YES arrived, I carry it on (reason: the number
                                  of the voter list acknowledged) */
    RP_ATOMIC__COUNT    = 7
};
#define RP_ATOMIC_MAX_VOTERS 4096 /* voter ids one ATOMIC message may carry */

/* GOSSIP / RTX / GCNOTE / GAPNOTE body sections: u8 kind, u8 flags,
 * u16 length, data.  No section defines flags in v1 (a known kind with flags
 * set is malformed); unknown kinds are skipped.  RTX/GCNOTE/GAPNOTE accept
 * MISSING and unknown kinds only. */
#define RP_SEC_HDR         4
enum {
    RP_SEC_MISSING   = 1,  /* u32 sender, u32 inc, digest */
    RP_SEC_LASTSEEN  = 2,  /* n x (u32 sender, u32 inc, u64 next) */
    RP_SEC_STABILITY = 3,  /* u64 round, u32 m, u32 n, m x (u32 sender, u32 inc, u64 M),
                              m x u64 S, ceil(n/64) x u64 W */
    RP_SEC_LIVE      = 4,  /* u32 n, n x u8 live counters (saturating) */
    RP_SEC__COUNT    = 5
};

#define RP_GOSSIP_FIXED    24     /* u64 hb_sig, u64 mem_sig, u64 timestamp */
#define RP_MEMBER_ENTRY    40     /* u32 id, u32 inc, u8 status, u8 role, u16 port,
                                     u32 ipv4, u32 rank, u8 family + 3 bytes 0,
                                     u64 freshness, u64 lastseq */
#define RP_MEMBER_FAMILY_V6 6     /* family byte: 16 bytes of IPv6 address follow */
#define RP_MEMBER_ENTRY6   56     /* an IPv6 entry: the 40 bytes (ipv4 0), then the address */
#define RP_HB_ENTRY        16     /* u32 sender, u32 inc, u64 seq */

/* Decoder reason codes: 0 is success, every other value is counted. */
enum {
    RP_WR_OK = 0,
    RP_WR_SHORT,        /* shorter than a datagram header */
    RP_WR_OVERSIZE,     /* longer than the configured maximum */
    RP_WR_MAGIC,        /* wrong magic */
    RP_WR_VERSION,      /* unsupported version */
    RP_WR_DFLAGS,       /* unknown datagram flag bits */
    RP_WR_MAC,          /* MAC length inconsistent with flags or size */
    RP_WR_COUNT,        /* message count 0, or more than the caller can hold */
    RP_WR_MSG_TRUNC,    /* a message header runs past the end */
    RP_WR_BODY_TRUNC,   /* a message body runs past the end */
    RP_WR_TRAILING,     /* bytes left over after `count` messages */
    RP_WR_TYPE,         /* unknown message type */
    RP_WR_FLAGS,        /* flag bits not defined for the type */
    RP_WR_BODY,         /* body malformed for its type */
    RP_WR_SEQ,          /* sequence number beyond the allowed range */
    RP_WR_GROUP,        /* another group's datagram (counted by the engine) */
    RP_WR_AUTH,         /* MAC check failed (counted by the engine) */
    RP_WR_NOT_OWN,      /* DATA or HEARTBEAT of a stream not the datagram source's own
                           (counted by the engine) */
    RP_WR_REPLAY,       /* a keyed control datagram whose counter was seen (replay.h) */
    RP_WR_SIG,          /* an authority-bearing message without a valid signature of its source */
    RP_WR_STALE,        /* a keyed control datagram sealed before its source's replay entry's
                           clock floor: captured before this node could see it (replay.h) */
    RP_WR__COUNT
};

extern const char *const rp_wire_reason_names[RP_WR__COUNT];
extern const char *const rp_wire_type_names[RP_T__COUNT];
extern const char *const rp_wire_section_names[RP_SEC__COUNT];   /* [0] is NULL: no kind 0 */

typedef struct {
    uint32_t group;
    uint32_t source;        /* node that put the datagram on the wire */
    uint32_t source_inc;
    uint32_t dseq;          /* per-source datagram counter */
    uint16_t count;
    uint16_t mac_len;
    uint8_t version;
    uint8_t dflags;
} rp_dghdr_t;

typedef struct {
    const uint8_t *body;
    uint64_t seq;
    uint32_t sender;
    uint32_t inc;
    uint32_t aux;
    uint16_t len;
    uint8_t type;
    uint8_t flags;
} rp_msgview_t;

/* Parse and validate a datagram.  On RP_WR_OK, *h is filled and msgs[0..count)
 * describe the messages (bodies point into buf).  max_len is the largest
 * datagram accepted (<= RP_WIRE_MAX_DGRAM). */
int rp_wire_parse(const uint8_t *buf, size_t len, size_t max_len, rp_dghdr_t *h,
                  rp_msgview_t *msgs, size_t max_msgs);

/* Validate one message body for its type (also used by parse). */
int rp_wire_check_body(uint8_t type, uint8_t flags, const uint8_t *body, size_t len);

/* Section iteration over a GOSSIP/RTX/GCNOTE/GAPNOTE body (already
 * validated by parse).  Returns 1 with a section, 0 at the end, or -1. */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} rp_secit_t;

RP_INLINE void rp_secit_init(rp_secit_t *it, const uint8_t *p, size_t len) {
    it->p = p;
    it->end = p + len;
}
int rp_secit_next(rp_secit_t *it, uint8_t *kind, uint8_t *flags, const uint8_t **data,
                  uint16_t *slen);

/* ---- building datagrams ------------------------------------------------ */

typedef struct {
    uint8_t *buf;
    size_t cap;            /* bytes available for this datagram (MTU payload) */
    size_t len;
    uint16_t count;
    uint16_t mac_len;      /* reserved at the end by finish() */
} rp_dgb_t;

void rp_dgb_begin(rp_dgb_t *b, uint8_t *buf, size_t cap, uint32_t group, uint32_t source,
                  uint32_t source_inc, uint32_t dseq);

/* Append a message header and reserve body_len bytes; returns a pointer to
 * the body to fill, or NULL if it does not fit. */
uint8_t *rp_dgb_add(rp_dgb_t *b, uint8_t type, uint8_t flags, uint32_t sender, uint32_t inc,
                    uint32_t aux, uint64_t seq, size_t body_len);

/* Bytes a further message body could have (0 if not even a header fits). */
RP_INLINE size_t rp_dgb_room(const rp_dgb_t *b) {
    size_t used = b->len + RP_MSG_HDR + b->mac_len;
    return used <= b->cap ? b->cap - used : 0;
}

/* Shrink the body of the last message added (after filling less than
 * reserved). */
void rp_dgb_trim_last(rp_dgb_t *b, size_t body_len);

/* Pad with a PAD message so the datagram is exactly `size` bytes (for GSO).
 * Returns 0, or -1 if it cannot (already larger, larger than cap, the gap is
 * 1..23 bytes -- smaller than a message header -- or the datagram would be
 * exactly `size` bytes with no message in it). */
int rp_dgb_pad_to(rp_dgb_t *b, size_t size);

/* Write the count (and zeroed MAC room); returns the datagram length, or 0
 * if no message was added (a datagram with count 0 is invalid). */
size_t rp_dgb_finish(rp_dgb_t *b);

#endif
