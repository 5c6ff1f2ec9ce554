# cython: language_level=3
"""rpbcast wire format v1: parse, validate and build datagrams.

The format is specified in ``docs/wire-format.md`` and implemented in
``csrc/wire.c``.  ``check()`` and ``parse()`` run the C validator; the body
helpers here build and read control messages (low rate: gossip, membership,
heartbeat lists) from Python.
"""
import enum
import struct
from collections import namedtuple

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free

from rpbcast.core.csrc cimport *

cdef extern from "wire.h":
    enum:
        RP_MF_VOTERS
        RP_ATOMIC_YES
        RP_ATOMIC_NO
        RP_ATOMIC_ASK
        RP_ATOMIC_COMMITTED
        RP_ATOMIC_ABORTED
        RP_ATOMIC_HAVE
        RP_ATOMIC__COUNT
        RP_ATOMIC_MAX_VOTERS

DG_HDR = RP_DG_HDR
MSG_HDR = RP_MSG_HDR
MAX_DGRAM = RP_WIRE_MAX_DGRAM
MAX_MSGS = RP_WIRE_MAX_MSGS
MAGIC = RP_WIRE_MAGIC
VERSION = RP_WIRE_VERSION
GOSSIP_FIXED = RP_GOSSIP_FIXED
MEMBER_ENTRY = RP_MEMBER_ENTRY


cdef list _names(const char *const *table, int count):
    """A C name table as [(NAME, code)], skipping unused codes (NULL)."""
    return [(table[i].decode().upper(), i) for i in range(count) if table[i] != NULL]


# The enums are built from csrc/wire.c's name tables: one definition.
MsgType = enum.IntEnum("MsgType", _names(rp_wire_type_names, RP_T__COUNT), module=__name__)
Reason = enum.IntEnum("Reason", _names(rp_wire_reason_names, RP_WR__COUNT), module=__name__)
Section = enum.IntEnum("Section", _names(rp_wire_section_names, RP_SEC__COUNT), module=__name__)

# Message flags (csrc/wire.h), by type.
F_LABEL = RP_MF_LABEL              # DATA/REPAIR
F_FROM_LOGGER = RP_MF_FROM_LOGGER  # REPAIR
F_IDLE = RP_MF_IDLE                # HEARTBEAT
F_FIRST = RP_MF_FIRST              # HEARTBEAT
F_REPLY = RP_MF_REPLY              # HBLIST/MEMBERS/SEQBLOCK
F_PUSH = RP_MF_PUSH                # HBLIST/MEMBERS
F_VECTOR = RP_MF_VECTOR            # HBLIST
F_LOST = RP_MF_LOST                # GAPNOTE
F_VOTERS = RP_MF_VOTERS            # ATOMIC
DGF_MAC = RP_DGF_MAC
DGF_ENC = RP_DGF_ENC
DGF_SIG = RP_DGF_SIG


def reason_names():
    return [rp_wire_reason_names[i].decode() for i in range(RP_WR__COUNT)]


def type_names():
    return [rp_wire_type_names[i].decode() for i in range(RP_T__COUNT)]


class WireError(ValueError):
    """A datagram the decoder rejected; ``reason`` is a Reason."""

    def __init__(self, reason):
        self.reason = Reason(reason)
        super().__init__(f"malformed datagram: {self.reason.name.lower()}")


Header = namedtuple("Header", "version dflags group source source_inc count mac_len dseq")
Message = namedtuple("Message", "type flags sender inc aux seq body")


def check(const uint8_t[::1] data not None, size_t max_len=RP_WIRE_MAX_DGRAM):
    """Validate a datagram; returns the Reason code (0 = OK)."""
    cdef rp_dghdr_t h
    cdef rp_msgview_t *msgs = <rp_msgview_t *>malloc(RP_WIRE_MAX_MSGS * sizeof(rp_msgview_t))
    if msgs == NULL:
        raise MemoryError()
    cdef uint8_t empty = 0
    cdef int r
    try:
        r = rp_wire_parse(&data[0] if data.shape[0] else &empty, data.shape[0], max_len,
                          &h, msgs, RP_WIRE_MAX_MSGS)
    finally:
        free(msgs)
    return r


def parse(data, size_t max_len=RP_WIRE_MAX_DGRAM):
    """Parse a datagram into (Header, [Message, ...]); raises WireError."""
    cdef const uint8_t[::1] d = data
    cdef rp_dghdr_t h
    cdef rp_msgview_t *msgs = <rp_msgview_t *>malloc(RP_WIRE_MAX_MSGS * sizeof(rp_msgview_t))
    if msgs == NULL:
        raise MemoryError()
    cdef uint8_t empty = 0
    cdef int r
    cdef size_t i, off
    cdef const uint8_t *base = &d[0] if d.shape[0] else &empty
    try:
        r = rp_wire_parse(base, d.shape[0], max_len, &h, msgs, RP_WIRE_MAX_MSGS)
        if r != RP_WR_OK:
            raise WireError(r)
        raw = bytes(d)
        out = []
        for i in range(h.count):
            off = msgs[i].body - base
            out.append(Message(msgs[i].type, msgs[i].flags, msgs[i].sender, msgs[i].inc,
                               msgs[i].aux, msgs[i].seq, raw[off:off + msgs[i].len]))
        return Header(h.version, h.dflags, h.group, h.source, h.source_inc, h.count,
                      h.mac_len, h.dseq), out
    finally:
        free(msgs)


cdef class Builder:
    """Packs messages into one datagram of at most ``mtu`` bytes."""
    cdef rp_dgb_t b
    cdef bytearray buf

    def __cinit__(self, uint32_t group, uint32_t source, uint32_t source_inc=0,
                  uint32_t dseq=0, size_t mtu=1472):
        if mtu < RP_DG_HDR + RP_MSG_HDR or mtu > RP_WIRE_MAX_DGRAM:
            raise ValueError(f"mtu must be in {RP_DG_HDR + RP_MSG_HDR}..{RP_WIRE_MAX_DGRAM}")
        self.buf = bytearray(mtu)
        rp_dgb_begin(&self.b, <uint8_t *>(<char *>self.buf), mtu, group, source, source_inc, dseq)

    def add(self, uint8_t type, uint8_t flags=0, uint32_t sender=0, uint32_t inc=0,
            uint32_t aux=0, uint64_t seq=0, const uint8_t[::1] body=b""):
        """Append a message; returns False (and changes nothing) if it does
        not fit."""
        cdef size_t n = body.shape[0]
        cdef uint8_t *p = rp_dgb_add(&self.b, type, flags, sender, inc, aux, seq, n)
        if p == NULL:
            return False
        if n:
            for i in range(n):
                p[i] = body[i]
        return True

    def pad_to(self, size_t size):
        """Add a PAD message so the datagram is exactly ``size`` bytes;
        False if it cannot (see rp_dgb_pad_to)."""
        return rp_dgb_pad_to(&self.b, size) == 0

    @property
    def room(self):
        """Largest body the next message could have."""
        return rp_dgb_room(&self.b)

    @property
    def count(self):
        return self.b.count

    def __len__(self):
        return self.b.len

    def finish(self):
        """The datagram; raises ValueError if no message was added (a
        datagram with count 0 is invalid on the wire)."""
        cdef size_t n = rp_dgb_finish(&self.b)
        if n == 0:
            raise ValueError("a datagram needs at least one message")
        return bytes(self.buf[:n])


def datagram(messages, uint32_t group=1, uint32_t source=1, uint32_t source_inc=0,
             uint32_t dseq=0, size_t mtu=RP_WIRE_MAX_DGRAM):
    """Build one datagram from Message-like tuples
    (type, flags, sender, inc, aux, seq, body); raises ValueError if they do
    not fit in ``mtu``."""
    b = Builder(group, source, source_inc, dseq, mtu)
    for m in messages:
        if not b.add(*m):
            raise ValueError("messages do not fit in one datagram")
    return b.finish()


# ---- bodies ------------------------------------------------------------------

_SEC = struct.Struct("<BBH")
_HB = struct.Struct("<IIQ")
_MEMBER = struct.Struct("<IIBBHIIIQQ")
_GOSSIP = struct.Struct("<QQQ")

# ip6: 16 bytes for an IPv6 member (ipv4 then 0), b"" for IPv4
Member = namedtuple("Member", "id inc status role port ipv4 rank freshness lastseq ip6", defaults=(b"",))
MEMBER_FAMILY_V4 = 0        # the entry's family byte (offset 20, once reserved and always 0)
MEMBER_FAMILY_V6 = 6        # 16 bytes of IPv6 address follow the 40-byte entry
MEMBER_ENTRY6 = RP_MEMBER_ENTRY + 16


def section(int kind, bytes data, int flags=0):
    if len(data) > 0xffff:
        raise ValueError("section longer than 65535 bytes")
    return _SEC.pack(kind, flags, len(data)) + data


def missing_section(uint32_t sender, uint32_t inc, bytes digest):
    return section(Section.MISSING, struct.pack("<II", sender, inc) + digest)


def lastseen_section(entries):
    return section(Section.LASTSEEN, b"".join(_HB.pack(*e) for e in entries))


def read_lastseen(data):
    """A LASTSEEN section's entries: [(sender, inc, frontier)]."""
    return [_HB.unpack_from(data, o) for o in range(0, len(data) - len(data) % 16, 16)]


def first_type(data):
    """Type of the first message of a well-formed datagram, or None."""
    cdef const uint8_t[::1] d = data
    cdef rp_dghdr_t h
    cdef rp_msgview_t m
    cdef int r = rp_wire_parse(&d[0] if d.shape[0] else NULL, d.shape[0], RP_WIRE_MAX_DGRAM, &h, &m, 1)
    if r != 0 or h.count == 0:
        return None
    return m.type


def stability_section(uint64_t round_, senders, M, S, W, uint32_t n):
    """senders: [(sender, inc)], M/S: per sender, W: bitmap words of n bits."""
    m = len(senders)
    if len(M) != m or len(S) != m or len(W) != (n + 63) // 64:
        raise ValueError("stability arrays do not match their dimensions")
    data = struct.pack("<QII", round_, m, n)
    data += b"".join(struct.pack("<IIQ", s, i, v) for (s, i), v in zip(senders, M))
    data += b"".join(struct.pack("<Q", v) for v in S)
    data += b"".join(struct.pack("<Q", w) for w in W)
    return section(Section.STABILITY, data)


def live_section(L):
    return section(Section.LIVE, struct.pack("<I", len(L)) + bytes(min(int(x), 255) for x in L))


def sections(bytes body):
    """[(kind, flags, data)] of a section body (assumes parse() validated it)."""
    out = []
    cdef size_t p = 0
    cdef size_t n = len(body)
    while p < n:
        if n - p < 4:
            raise WireError(Reason.BODY)
        kind, fl, l = _SEC.unpack_from(body, p)
        if n - p - 4 < l:
            raise WireError(Reason.BODY)
        out.append((kind, fl, body[p + 4:p + 4 + l]))
        p += 4 + l
    return out


def gossip_body(uint64_t hb_sig, uint64_t mem_sig, uint64_t ts, secs=()):
    return _GOSSIP.pack(hb_sig, mem_sig, ts) + b"".join(secs)


def read_gossip(bytes body):
    """(hb_sig, mem_sig, ts, sections) of a GOSSIP body."""
    hb, mem, ts = _GOSSIP.unpack_from(body, 0)
    return hb, mem, ts, sections(body[RP_GOSSIP_FIXED:])


def read_missing(bytes data):
    """(sender, inc, digest bytes) of a MISSING section."""
    s, i = struct.unpack_from("<II", data, 0)
    return s, i, data[8:]


def read_stability(bytes data):
    """(round, [(sender, inc)], M, S, W, n) of a STABILITY section."""
    r, m, n = struct.unpack_from("<QII", data, 0)
    off = 16
    senders, M = [], []
    for _ in range(m):
        s, i, v = struct.unpack_from("<IIQ", data, off)
        senders.append((s, i))
        M.append(v)
        off += 16
    S = list(struct.unpack_from(f"<{m}Q", data, off))
    off += 8 * m
    nw = (n + 63) // 64
    W = list(struct.unpack_from(f"<{nw}Q", data, off))
    return r, senders, M, S, W, n


def read_live(bytes data):
    n, = struct.unpack_from("<I", data, 0)
    return list(data[4:4 + n])


def hb_entries(entries):
    return b"".join(_HB.pack(*e) for e in entries)


def read_hb_entries(body):
    return [_HB.unpack_from(body, o) for o in range(0, len(body) - len(body) % 16, 16)]


def member_entry(m):
    """One member entry: 40 bytes (IPv4), or 56 with family byte 6 and the
    IPv6 address after them (docs/wire-format.md, "Member entries")."""
    if m.ip6:
        if len(m.ip6) != 16:
            raise ValueError("a member entry's IPv6 address is 16 bytes")
        return _MEMBER.pack(m.id, m.inc, m.status, m.role, m.port, 0, m.rank, MEMBER_FAMILY_V6,
                            m.freshness, m.lastseq) + bytes(m.ip6)
    return _MEMBER.pack(m.id, m.inc, m.status, m.role, m.port, m.ipv4, m.rank, MEMBER_FAMILY_V4,
                        m.freshness, m.lastseq)


def member_entry_size(int family):
    return MEMBER_ENTRY6 if family == 6 else RP_MEMBER_ENTRY


def read_members(bytes body):
    """The entries of a JOIN/MEMBERS body (the decoder checked their layout;
    an entry that does not fit ends the list)."""
    out = []
    cdef Py_ssize_t o = 0, n = len(body)
    while o + RP_MEMBER_ENTRY <= n:
        f = _MEMBER.unpack_from(body, o)
        fam = f[7] & 0xFF
        if fam == MEMBER_FAMILY_V6:
            if o + MEMBER_ENTRY6 > n:
                break
            out.append(Member(f[0], f[1], f[2], f[3], f[4], 0, f[6], f[8], f[9],
                              body[o + RP_MEMBER_ENTRY:o + MEMBER_ENTRY6]))
            o += MEMBER_ENTRY6
        else:
            out.append(Member(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[8], f[9]))
            o += RP_MEMBER_ENTRY
    return out


def stability_body(uint64_t round_, entries):
    """STABILITY message body: round and [(sender, inc, S)]."""
    return struct.pack("<QII", round_, len(entries), 0) + b"".join(_HB.pack(*e) for e in entries)


def read_stability_body(bytes body):
    r, m, _ = struct.unpack_from("<QII", body, 0)
    return r, [_HB.unpack_from(body, 16 + 16 * k) for k in range(m)]


def purged_pairs(pairs):
    return b"".join(struct.pack("<QQ", s, by) for s, by in pairs)


def read_purged_pairs(body):
    """A PURGED body: [(seq, superseded by)]."""
    return [struct.unpack_from("<QQ", body, o) for o in range(0, len(body) - len(body) % 16, 16)]


# ---- ATOMIC (atomic delivery, docs/atomic.md) --------------------------------
# What an ATOMIC message says about its proposal: aux & 0xff, the next byte a
# reason code (NO, ABORTED) or a voter list's number (YES with VOTERS, HAVE).
ATOMIC_YES = RP_ATOMIC_YES
ATOMIC_NO = RP_ATOMIC_NO
ATOMIC_ASK = RP_ATOMIC_ASK
ATOMIC_COMMITTED = RP_ATOMIC_COMMITTED
ATOMIC_ABORTED = RP_ATOMIC_ABORTED
ATOMIC_HAVE = RP_ATOMIC_HAVE
ATOMIC_KINDS = RP_ATOMIC__COUNT
ATOMIC_MAX_VOTERS = RP_ATOMIC_MAX_VOTERS


def atomic_aux(int what, int reason=0):
    """The aux field of an ATOMIC message."""
    return (what & 0xFF) | ((reason & 0xFF) << 8)


def voter_ids(ids):
    """An ATOMIC body with flag VOTERS: the voter ids, u32 each."""
    ids = list(ids)
    if not 0 < len(ids) <= RP_ATOMIC_MAX_VOTERS:
        raise ValueError(f"an ATOMIC message carries 1..{RP_ATOMIC_MAX_VOTERS} voter ids, got {len(ids)}")
    return struct.pack(f"<{len(ids)}I", *ids)


def read_voter_ids(body):
    """The voter ids of an ATOMIC body with flag VOTERS (already validated)."""
    return list(struct.unpack(f"<{len(body) // 4}I", body))
