#include "wire.h"

#include "digest.h"
#include "seqtrack.h"

const char *const rp_wire_reason_names[RP_WR__COUNT] = {
    "ok", "short", "oversize", "magic", "version", "dflags", "mac", "count",
    "msg_trunc", "body_trunc", "trailing", "type", "flags", "body", "seq",
    "group", "auth", "not_own", "replay", "sig", "stale",
};

const char *const rp_wire_type_names[RP_T__COUNT] = {
    "pad", "data", "repair", "heartbeat", "gossip", "hblist", "rtx", "gcnote",
    "logack", "join", "leave", "members", "stability", "gapnote", "purged",
    "window", "seqblock", "ping", "pong", "atomic", "flowack",
};

const char *const rp_wire_section_names[RP_SEC__COUNT] = {
    [RP_SEC_MISSING] = "missing", [RP_SEC_LASTSEEN] = "lastseen",
    [RP_SEC_STABILITY] = "stability", [RP_SEC_LIVE] = "live",
};

/* Flag bits each type defines; anything else is rejected so that a future
 * meaning cannot be silently misread by this version. */
static const uint8_t known_flags[RP_T__COUNT] = {
    [RP_T_PAD] = 0,
    [RP_T_DATA] = RP_MF_LABEL,
    [RP_T_REPAIR] = RP_MF_LABEL | RP_MF_FROM_LOGGER,
    [RP_T_HEARTBEAT] = RP_MF_IDLE | RP_MF_FIRST,
    [RP_T_GOSSIP] = 0,
    [RP_T_HBLIST] = RP_MF_REPLY | RP_MF_PUSH | RP_MF_VECTOR,
    [RP_T_RTX] = 0,
    [RP_T_GCNOTE] = 0,
    [RP_T_LOGACK] = 0,
    [RP_T_JOIN] = 0,
    [RP_T_LEAVE] = 0,
    [RP_T_MEMBERS] = RP_MF_REPLY | RP_MF_PUSH,
    [RP_T_STABILITY] = 0,
    [RP_T_GAPNOTE] = RP_MF_LOST,
    [RP_T_PURGED] = 0,
    [RP_T_WINDOW] = 0,
    [RP_T_SEQBLOCK] = RP_MF_REPLY,
    [RP_T_PING] = 0,
    [RP_T_PONG] = 0,
    [RP_T_ATOMIC] = RP_MF_VOTERS,
    [RP_T_FLOWACK] = 0,
};

int rp_secit_next(rp_secit_t *it, uint8_t *kind, uint8_t *flags, const uint8_t **data,
                  uint16_t *slen) {
    if (it->p == it->end)
        return 0;
    if (it->end - it->p < RP_SEC_HDR)
        return -1;
    uint16_t l = rp_ld16(it->p + 2);
    if ((size_t)(it->end - it->p - RP_SEC_HDR) < l)
        return -1;
    *kind = it->p[0];
    *flags = it->p[1];
    *data = it->p + RP_SEC_HDR;
    *slen = l;
    it->p += RP_SEC_HDR + l;
    return 1;
}

/* One section of a known kind.  Sections define no flags in v1: a known
 * kind with any flag bit set is rejected, for the same reason as unknown
 * message flags (a later meaning must not be silently misread).  Unknown
 * kinds are skipped by readers, whatever their flags. */
static int check_section(uint8_t kind, uint8_t flags, const uint8_t *d, size_t l) {
    if (kind >= RP_SEC_MISSING && kind <= RP_SEC_LIVE && flags != 0)
        return -1;
    switch (kind) {
    case RP_SEC_MISSING: {
        if (l < 8)
            return -1;
        long r = rp_digest_check(d + 8, l - 8, NULL);
        return (r > 0 && (size_t)r == l - 8) ? 0 : -1;
    }
    case RP_SEC_LASTSEEN:
        return (l % RP_HB_ENTRY == 0) ? 0 : -1;
    case RP_SEC_STABILITY: {
        if (l < 16)
            return -1;
        uint64_t m = rp_ld32(d + 8), n = rp_ld32(d + 12);
        uint64_t need = 16 + m * 16 + m * 8 + ((n + 63) / 64) * 8;
        return need == l ? 0 : -1;
    }
    case RP_SEC_LIVE: {
        if (l < 4)
            return -1;
        return (uint64_t)rp_ld32(d) + 4 == l ? 0 : -1;
    }
    default:
        return 0;       /* unknown sections are skipped by readers */
    }
}

/* A body made only of well-formed sections.  `only_missing` restricts the
 * known kinds to MISSING (RTX, GCNOTE, GAPNOTE carry no LASTSEEN, STABILITY
 * or LIVE); unknown kinds are skipped there as everywhere else. */
/* Member entries in a JOIN/MEMBERS body: how many, or -1 if they do not
 * tile it.  The family byte (offset 20; it was reserved, always 0) says the
 * entry's size: 0, IPv4, 40 bytes; 6, IPv6, 56 (the address after them). */
static long member_entries(const uint8_t *body, size_t len) {
    long n = 0;
    size_t o = 0;
    while (o < len) {
        if (len - o < RP_MEMBER_ENTRY)
            return -1;
        uint8_t fam = body[o + 20];
        if (rp_ld32(body + o + 20) >> 8)
            return -1;          /* the family word's other bytes stay reserved */
        size_t sz = fam == RP_MEMBER_FAMILY_V6 ? RP_MEMBER_ENTRY6 : fam == 0 ? RP_MEMBER_ENTRY : 0;
        if (!sz || len - o < sz)
            return -1;
        o += sz;
        n++;
    }
    return n;
}

static int check_sections(const uint8_t *p, size_t len, int only_missing) {
    rp_secit_t it;
    rp_secit_init(&it, p, len);
    uint8_t kind, fl;
    const uint8_t *d;
    uint16_t l;
    int r;
    while ((r = rp_secit_next(&it, &kind, &fl, &d, &l)) == 1) {
        if (only_missing && kind >= RP_SEC_LASTSEEN && kind <= RP_SEC_LIVE)
            return -1;
        if (check_section(kind, fl, d, l))
            return -1;
    }
    return r == 0 ? 0 : -1;
}

int rp_wire_check_body(uint8_t type, uint8_t flags, const uint8_t *body, size_t len) {
    if (type >= RP_T__COUNT)
        return RP_WR_TYPE;
    if (flags & ~known_flags[type])
        return RP_WR_FLAGS;
    int ok;
    switch (type) {
    case RP_T_PAD:
        ok = 1;
        break;
    case RP_T_DATA:
    case RP_T_REPAIR:
        /* A label of 2^64-1 is reserved: it means "no label" internally. */
        ok = !(flags & RP_MF_LABEL) || (len >= 8 && rp_ld64(body) != UINT64_MAX);
        if (ok && (flags & RP_MF_LABEL) && rp_ld64(body) == RP_LABEL_EXT) {
            rp_msgext_t x;
            ok = len >= 8 + RP_EXT_HDR;
            if (ok) {
                rp_msgext_load(body + 8, &x);
                ok = rp_msgext_check(&x, len - 8 - RP_EXT_HDR) == 0;
            }
        }
        break;
    case RP_T_HEARTBEAT:
        ok = (flags & RP_MF_FIRST) ? len == 8 : len == 0;
        break;
    case RP_T_GOSSIP:
        ok = len >= RP_GOSSIP_FIXED &&
             check_sections(body + RP_GOSSIP_FIXED, len - RP_GOSSIP_FIXED, 0) == 0;
        break;
    case RP_T_HBLIST:
    case RP_T_PURGED:
        ok = len % 16 == 0;
        break;
    case RP_T_RTX:
    case RP_T_GCNOTE:
    case RP_T_GAPNOTE:
        ok = check_sections(body, len, 1) == 0;
        break;
    case RP_T_LOGACK: {
        long r = len ? rp_digest_check(body, len, NULL) : 0;
        ok = len == 0 || (r > 0 && (size_t)r == len);
        break;
    }
    case RP_T_JOIN:
        ok = member_entries(body, len) == 1;
        break;
    case RP_T_MEMBERS:
        ok = member_entries(body, len) >= 0;
        break;
    case RP_T_STABILITY:
        ok = len >= 16 && (uint64_t)rp_ld32(body + 8) * 16 + 16 == len;
        break;
    case RP_T_LEAVE:
    case RP_T_WINDOW:
    case RP_T_SEQBLOCK:
    case RP_T_FLOWACK:
        ok = len == 0;
        break;
    case RP_T_PING:
    case RP_T_PONG:
        ok = len == 8;
        break;
    case RP_T_ATOMIC:
        ok = (flags & RP_MF_VOTERS) ? (len > 0 && len % 4 == 0 && len / 4 <= RP_ATOMIC_MAX_VOTERS)
                                    : len == 0;
        break;
    default:
        return RP_WR_TYPE;
    }
    return ok ? RP_WR_OK : RP_WR_BODY;
}

int rp_wire_parse(const uint8_t *buf, size_t len, size_t max_len, rp_dghdr_t *h,
                  rp_msgview_t *msgs, size_t max_msgs) {
    if (len < RP_DG_HDR)
        return RP_WR_SHORT;
    if (max_len > RP_WIRE_MAX_DGRAM)
        max_len = RP_WIRE_MAX_DGRAM;
    if (len > max_len)
        return RP_WR_OVERSIZE;
    if (rp_ld16(buf) != RP_WIRE_MAGIC)
        return RP_WR_MAGIC;
    h->version = buf[2];
    if (h->version != RP_WIRE_VERSION)
        return RP_WR_VERSION;
    h->dflags = buf[3];
    if ((h->dflags & ~RP_DGF_KNOWN) || ((h->dflags & (RP_DGF_ENC | RP_DGF_SIG)) && !(h->dflags & RP_DGF_MAC)))
        return RP_WR_DFLAGS;
    h->group = rp_ld32(buf + 4);
    h->source = rp_ld32(buf + 8);
    h->source_inc = rp_ld32(buf + 12);
    h->count = rp_ld16(buf + 16);
    h->mac_len = rp_ld16(buf + 18);
    h->dseq = rp_ld32(buf + 20);
    if ((h->dflags & RP_DGF_MAC) ? (h->mac_len == 0 || h->mac_len > RP_WIRE_MAX_MAC)
                                 : h->mac_len != 0)
        return RP_WR_MAC;
    if (h->mac_len > len - RP_DG_HDR)
        return RP_WR_MAC;
    if (h->count == 0 || h->count > max_msgs)
        return RP_WR_COUNT;
    const uint8_t *p = buf + RP_DG_HDR;
    const uint8_t *end = buf + len - h->mac_len;
    for (size_t i = 0; i < h->count; i++) {
        if ((size_t)(end - p) < RP_MSG_HDR)
            return RP_WR_MSG_TRUNC;
        rp_msgview_t *m = &msgs[i];
        m->type = p[0];
        m->flags = p[1];
        m->len = rp_ld16(p + 2);
        m->sender = rp_ld32(p + 4);
        m->inc = rp_ld32(p + 8);
        m->aux = rp_ld32(p + 12);
        m->seq = rp_ld64(p + 16);
        p += RP_MSG_HDR;
        if ((size_t)(end - p) < m->len)
            return RP_WR_BODY_TRUNC;
        m->body = p;
        /* Header checks in the order type, seq, flags: whether seq is
         * range-checked depends on the type, so an unknown type is reported
         * as TYPE whatever its seq. */
        if (m->type >= RP_T__COUNT)
            return RP_WR_TYPE;
        if (m->seq >= RP_SEQ_LIMIT && m->type != RP_T_PING && m->type != RP_T_PONG)
            return RP_WR_SEQ;
        int r = rp_wire_check_body(m->type, m->flags, p, m->len);
        if (r)
            return r;
        p += m->len;
    }
    if (p != end)
        return RP_WR_TRAILING;
    return RP_WR_OK;
}

/* ---- building ---------------------------------------------------------- */

void rp_dgb_begin(rp_dgb_t *b, uint8_t *buf, size_t cap, uint32_t group, uint32_t source,
                  uint32_t source_inc, uint32_t dseq) {
    b->buf = buf;
    b->cap = cap > RP_WIRE_MAX_DGRAM ? RP_WIRE_MAX_DGRAM : cap;
    b->len = RP_DG_HDR;
    b->count = 0;
    b->mac_len = 0;
    rp_st16(buf, RP_WIRE_MAGIC);
    buf[2] = RP_WIRE_VERSION;
    buf[3] = 0;
    rp_st32(buf + 4, group);
    rp_st32(buf + 8, source);
    rp_st32(buf + 12, source_inc);
    rp_st16(buf + 16, 0);
    rp_st16(buf + 18, 0);
    rp_st32(buf + 20, dseq);
}

uint8_t *rp_dgb_add(rp_dgb_t *b, uint8_t type, uint8_t flags, uint32_t sender, uint32_t inc,
                    uint32_t aux, uint64_t seq, size_t body_len) {
    if (body_len > 0xffff || b->count >= RP_WIRE_MAX_MSGS)
        return NULL;
    if (b->len + RP_MSG_HDR + body_len + b->mac_len > b->cap)
        return NULL;
    uint8_t *p = b->buf + b->len;
    p[0] = type;
    p[1] = flags;
    rp_st16(p + 2, (uint16_t)body_len);
    rp_st32(p + 4, sender);
    rp_st32(p + 8, inc);
    rp_st32(p + 12, aux);
    rp_st64(p + 16, seq);
    b->len += RP_MSG_HDR + body_len;
    b->count++;
    return p + RP_MSG_HDR;
}

void rp_dgb_trim_last(rp_dgb_t *b, size_t body_len) {
    /* Walk to the last message header. */
    uint8_t *p = b->buf + RP_DG_HDR, *last = NULL;
    uint8_t *end = b->buf + b->len;
    while (p < end) {
        last = p;
        p += RP_MSG_HDR + rp_ld16(p + 2);
    }
    if (!last)
        return;
    size_t old = rp_ld16(last + 2);
    if (body_len >= old)
        return;
    rp_st16(last + 2, (uint16_t)body_len);
    b->len -= old - body_len;
}

int rp_dgb_pad_to(rp_dgb_t *b, size_t size) {
    size_t cur = b->len + b->mac_len;
    if (cur == size)
        return b->count ? 0 : -1;   /* a datagram needs at least one message */
    if (cur > size || size - cur < RP_MSG_HDR || size > b->cap)
        return -1;
    uint8_t *body = rp_dgb_add(b, RP_T_PAD, 0, 0, 0, 0, 0, size - cur - RP_MSG_HDR);
    if (!body)
        return -1;
    memset(body, 0, size - cur - RP_MSG_HDR);
    return 0;
}

size_t rp_dgb_finish(rp_dgb_t *b) {
    if (b->count == 0)
        return 0;           /* count 0 is invalid on the wire (COUNT) */
    rp_st16(b->buf + 16, b->count);
    if (b->mac_len) {
        b->buf[3] |= RP_DGF_MAC;
        rp_st16(b->buf + 18, b->mac_len);
        memset(b->buf + b->len, 0, b->mac_len);
        b->len += b->mac_len;
        b->mac_len = 0;
    }
    return b->len;
}
