"""Structure-aware fuzzer for the whole receive path: node.c's data plane and
the Python control plane (engine, group, repair, serving, logger role).

fuzz_wire.py throws bytes at the decoder; almost none of them parse, and in a
keyed group none of them would pass the MAC.  This fuzzer builds *valid*
datagrams of every message type with the library's own encoders, mutates
them structurally (field values at their boundaries, sequence jumps, lengths
and counts, repeated and spliced sections, truncation at section borders,
several messages per datagram, some raw byte flips), seals each with a valid
MAC under the group's test key (csrc/auth.h: AES-128-GMAC) and injects it
into a keyed group running on the in-memory network (rpbcast/drivers/memnet):
three members and a logger with a real log on disk.  Timers advance between
batches.  Member 1 publishes a genuine stream throughout.

Invariants, checked after every batch:
  * no exception escapes receive_datagram or handle_timer (any escape is a
    finding: the batch is written out, the run goes on);
  * memory bounded: streams per node, outbox datagrams, this process's RSS;
  * every delivery of member 1's stream carries the genuine payload and no
    id is delivered twice; after the fuzzing stops and the group settles,
    member 1 can still publish and every receiver has every genuine
    message exactly once.
The fuzzer forges nothing about the genuine stream: no header source, message
sender, section entry, member entry or digest stream names member 1 (that
is the authority work of issue 14: who may speak for a stream).  So the
exactly-once check is "forgeries about *other* streams and members never
cost a genuine message".  `--touch-genuine` lifts that restriction and
checks only the weaker invariant (genuine payloads, at most once).

Deterministic for a seed (printed first); a budget in seconds bounds the
run.  Exit status: 0 no finding, 1 findings (written under --artifacts).

    PYTHONPATH=. python3 fuzz/fuzz_engine.py --seed 1 --seconds 30
    fuzz/run.sh engine 60        # the same under ASan+UBSan (README.md)
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import ctypes.util
import os
import random
import resource
import struct
import sys
import time
import tempfile
import time
import traceback

import numpy as np

from rpbcast.config import Config
from rpbcast.core import digest, wire
from rpbcast.drivers.memnet import NS, MemNet

T = wire.MsgType
S = wire.Section
MS = 1_000_000
KEY_ID = 7
KEY = bytes(range(0x30, 0x40))
MEMBERS = (1, 2, 3)
LOGGER = 4
GENUINE = 1                      # the publisher whose stream must arrive intact
ATTACKER_ADDR = 99               # where most injected datagrams come from (not a member address)
TRAILER = 25                     # csrc/auth.h RP_AUTH_TRAILER


# ----------------------------------------------------------------- sealing

class Sealer:
    """The sender half of csrc/auth.c in Python (ctypes on OpenSSL's
    libcrypto, which the core links already): AES-128-GCM with no
    plaintext over the datagram as additional data, IV (u32 source, u64
    counter) little-endian, trailer key id | counter | tag."""

    def __init__(self, key_id=KEY_ID, key=KEY, counter0=1):
        name = ctypes.util.find_library("crypto")
        if not name:
            raise RuntimeError("libcrypto not found")
        c = self.c = ctypes.CDLL(name)
        c.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
        c.EVP_aes_128_gcm.restype = ctypes.c_void_p
        c.EVP_EncryptInit_ex.argtypes = [ctypes.c_void_p] * 5
        c.EVP_EncryptUpdate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                                        ctypes.c_char_p, ctypes.c_int]
        c.EVP_EncryptFinal_ex.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        c.EVP_CIPHER_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p]
        self.ctx = c.EVP_CIPHER_CTX_new()
        self._key = ctypes.create_string_buffer(key, 16)
        if not self.ctx or c.EVP_EncryptInit_ex(self.ctx, c.EVP_aes_128_gcm(), None, self._key, None) != 1:
            raise RuntimeError("AES-128-GCM unavailable")
        self.key_id = key_id
        self.counter = counter0

    def tag(self, aad: bytes, source: int, counter: int) -> bytes:
        c = self.c
        iv = ctypes.create_string_buffer(struct.pack("<IQ", source, counter), 12)
        n = ctypes.c_int(0)
        out = ctypes.create_string_buffer(32)
        tag = ctypes.create_string_buffer(16)
        ok = (c.EVP_EncryptInit_ex(self.ctx, None, None, None, iv) == 1 and
              c.EVP_EncryptUpdate(self.ctx, None, ctypes.byref(n), aad, len(aad)) == 1 and
              c.EVP_EncryptFinal_ex(self.ctx, out, ctypes.byref(n)) == 1 and
              c.EVP_CIPHER_CTX_ctrl(self.ctx, 0x10, 16, tag) == 1)     # EVP_CTRL_GCM_GET_TAG
        if not ok:
            raise RuntimeError("GMAC failed")
        return tag.raw

    def seal(self, dgram: bytes) -> bytes:
        """Mark an unsealed datagram as MAC-trailed and append a valid trailer."""
        d = bytearray(dgram)
        d[3] |= wire.DGF_MAC
        struct.pack_into("<H", d, 18, TRAILER)
        ctr = self.counter
        self.counter += 1
        source = struct.unpack_from("<I", d, 8)[0]
        t = self.tag(bytes(d), source, ctr)
        return bytes(d) + bytes([self.key_id]) + struct.pack("<Q", ctr) + t


# ----------------------------------------------------------------- values

U32_EDGES = (0, 1, 2, 3, 4, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
SEQ_EDGES = (0, 1, 2, 63, 64, 1023, 1024, 2**16, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**40,
             2**48, 2**62 - 2, 2**62 - 1)


class Values:
    """Field values: mostly plausible (near what the group really uses),
    often at a boundary.  `forbidden` is the genuine stream's sender id,
    which the fuzzer never names unless --touch-genuine."""

    def __init__(self, rng: random.Random, touch_genuine: bool):
        self.rng = rng
        self.touch = touch_genuine
        self.frontier = 0          # the genuine stream's next seq, kept current by the driver

    def node_id(self):
        r = self.rng.random()
        if r < 0.5:
            v = self.rng.choice((2, 3, LOGGER))
        elif r < 0.7:
            v = self.rng.choice((5, 50, 99, 1000))
        elif r < 0.9:
            v = self.rng.choice(U32_EDGES)
        else:
            v = self.rng.getrandbits(32)
        if v == GENUINE and not self.touch:
            v = 2
        return v

    def inc(self):
        return self.rng.choice((1, 1, 1, 0, 2, 0xFFFFFFFF, self.rng.getrandbits(32)))

    def stream(self):
        return self.node_id(), self.inc()

    def u32(self):
        r = self.rng.random()
        return self.rng.choice(U32_EDGES) if r < 0.6 else self.rng.getrandbits(32 if r < 0.8 else 8)

    def seq(self):
        r = self.rng.random()
        if r < 0.35:
            return self.rng.randrange(0, 64)
        if r < 0.55:
            return max(0, self.frontier + self.rng.randrange(-40, 300))
        if r < 0.9:
            return self.rng.choice(SEQ_EDGES)
        return self.rng.getrandbits(62)

    def seq_pair(self):
        a, b = self.seq(), self.seq()
        if self.rng.random() < 0.2:
            a, b = b, a                 # sometimes upside down
        return a, b

    def small(self, hi=8):
        return self.rng.randrange(0, hi + 1)

    def payload(self):
        n = self.rng.choice((0, 1, 8, 17, 64, 300, 1200))
        return self.rng.randbytes(n)


# ----------------------------------------------------------------- builders

def a_digest(v: Values):
    """A valid interval digest: a few intervals inside [frm, upto]."""
    rng = v.rng
    frm, upto = sorted(v.seq_pair())
    if rng.random() < 0.3:
        frm, upto = 0, rng.choice((0, 1, 2**32, 2**40, 2**62 - 1))
    ivs = []
    lo = frm
    for _ in range(rng.randrange(0, 6)):
        if lo > upto:
            break
        span = max(1, (upto - lo) // rng.choice((1, 2, 3, 8, 1000, 2**20)))
        a = lo + rng.randrange(0, min(span, 2**62))
        b = min(upto, a + rng.choice((0, 0, 1, 5, 100, 2**20, 2**40)))
        ivs.append([a, b])
        lo = b + 2
    d = digest.encode(ivs, frm, upto, budget=rng.choice((64, 400, 1400)))[0]
    if not d:
        d = digest.encode([], frm, upto)[0]
    return d


def missing_sec(v):
    s, i = v.stream()
    return wire.missing_section(s, i, a_digest(v))


def lastseen_sec(v):
    return wire.lastseen_section([(*v.stream(), v.seq()) for _ in range(v.small(6))])


def stability_sec(v):
    m = v.small(4)
    n = v.rng.choice((0, 1, 3, 4, 64, 65, 200))
    senders = [v.stream() for _ in range(m)]
    M = [v.seq() for _ in range(m)]
    S_ = [v.seq() for _ in range(m)]
    W = [v.rng.getrandbits(64) for _ in range((n + 63) // 64)]
    return wire.stability_section(v.seq(), senders, M, S_, W, n)


def live_sec(v):
    return wire.live_section([v.rng.randrange(256) for _ in range(v.rng.choice((0, 1, 3, 4, 300)))])


def unknown_sec(v):
    kind = v.rng.choice((0, 5, 16, 0x47, 255))
    return wire.section(kind, v.rng.randbytes(v.rng.choice((0, 4, 24, 100))), v.rng.getrandbits(8))


GOSSIP_SECTIONS = (missing_sec, lastseen_sec, stability_sec, live_sec, unknown_sec)


def sections(v, makers, k=None):
    k = v.rng.choice((0, 1, 1, 2, 3, 6, 20)) if k is None else k
    secs = [v.rng.choice(makers)(v) for _ in range(k)]
    if secs and v.rng.random() < 0.15:
        secs += [secs[0]] * v.rng.choice((1, 10, 100))          # one section repeated
    return secs


def member_entry(v):
    return wire.member_entry(wire.Member(v.node_id(), v.inc(), v.small(4), v.small(3),
                                         v.rng.choice((0, 1, 4791, 65535)), v.u32(), v.u32(),
                                         v.seq(), v.seq()))


def msg(v, type_):
    """One valid message of type_: (type, flags, sender, inc, aux, seq, body)."""
    rng = v.rng
    s, i = v.stream()
    if type_ == T.DATA:
        flags = wire.F_LABEL if rng.random() < 0.3 else 0
        body = (struct.pack("<Q", v.rng.getrandbits(64)) if flags else b"") + v.payload()
        return (T.DATA, flags, s, i, v.small(2), v.seq(), body)
    if type_ == T.REPAIR:
        flags = rng.choice((0, wire.F_FROM_LOGGER, wire.F_LABEL | wire.F_FROM_LOGGER))
        body = (struct.pack("<Q", v.rng.getrandbits(64)) if flags & wire.F_LABEL else b"") + v.payload()
        return (T.REPAIR, flags, s, i, v.small(2), v.seq(), body)
    if type_ == T.HEARTBEAT:
        flags = rng.choice((0, wire.F_IDLE, wire.F_FIRST, wire.F_IDLE | wire.F_FIRST))
        return (T.HEARTBEAT, flags, s, i, 0, v.seq(), struct.pack("<Q", v.rng.getrandbits(63)))
    if type_ == T.GOSSIP:
        secs = sections(v, GOSSIP_SECTIONS)
        return (T.GOSSIP, 0, s, i, v.small(3), v.seq(),
                wire.gossip_body(rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(63), secs))
    if type_ in (T.HBLIST, T.PURGED):
        flags = rng.choice((0, wire.F_REPLY, wire.F_PUSH, wire.F_VECTOR)) if type_ == T.HBLIST else 0
        k = rng.choice((0, 1, 2, 5, 40, 80))
        if type_ == T.PURGED:
            body = wire.purged_pairs([v.seq_pair() for _ in range(k)])
        else:
            body = wire.hb_entries([(*v.stream(), v.seq()) for _ in range(k)])
        return (type_, flags, s, i, v.u32() if rng.random() < 0.3 else 0, v.seq(), body)
    if type_ in (T.RTX, T.GCNOTE, T.GAPNOTE):
        flags = wire.F_LOST if type_ == T.GAPNOTE and rng.random() < 0.5 else 0
        secs = sections(v, (missing_sec, missing_sec, unknown_sec))
        return (type_, flags, s, i, v.small(3), v.seq(), b"".join(secs))
    if type_ == T.LOGACK:
        return (T.LOGACK, 0, s, i, v.small(2), v.seq(), a_digest(v) if rng.random() < 0.6 else b"")
    if type_ == T.JOIN:
        return (T.JOIN, 0, s, i, 0, v.seq(), member_entry(v))
    if type_ == T.LEAVE:
        return (T.LEAVE, 0, s, i, 0, v.seq(), b"")
    if type_ == T.MEMBERS:
        k = rng.choice((0, 1, 2, 3, 10, 30))
        flags = rng.choice((0, wire.F_PUSH, wire.F_REPLY))
        return (T.MEMBERS, flags, s, i, rng.choice((k, v.u32())), v.seq(),
                b"".join(member_entry(v) for _ in range(k)))
    if type_ == T.STABILITY:
        return (T.STABILITY, 0, s, i, 0, 0,
                wire.stability_body(v.seq(), [(*v.stream(), v.seq()) for _ in range(v.small(5))]))
    if type_ in (T.WINDOW, T.SEQBLOCK):
        flags = wire.F_REPLY if type_ == T.SEQBLOCK and rng.random() < 0.5 else 0
        return (type_, flags, s, i, v.u32(), v.seq(), b"")
    if type_ in (T.PING, T.PONG):
        return (type_, 0, s, i, 0, rng.getrandbits(64), struct.pack("<q", rng.getrandbits(63)))
    if type_ == T.ATOMIC:
        what = rng.randrange(wire.ATOMIC_KINDS)
        voters = rng.random() < 0.4
        body = wire.voter_ids([v.node_id() for _ in range(1 + v.small(6))]) if voters else b""
        return (T.ATOMIC, wire.F_VOTERS if voters else 0, s, i,
                wire.atomic_aux(what, rng.randrange(4)), v.seq(), body)
    if type_ == T.FLOWACK:
        return (T.FLOWACK, 0, s, i, 0, v.seq(), b"")
    return (T.PAD, 0, 0, 0, 0, 0, bytes(rng.choice((0, 8))))


TYPES = [t for t in T]


# ----------------------------------------------------------------- mutations

def splice(v, a, b):
    """Swap the section tails of two sectioned messages of the same kind."""
    if a[0] != b[0] or a[0] not in (T.RTX, T.GCNOTE, T.GAPNOTE):
        return a
    sa, sb = wire.sections(a[6]), wire.sections(b[6])
    cut_a, cut_b = v.rng.randrange(len(sa) + 1), v.rng.randrange(len(sb) + 1)
    secs = [wire.section(k, d, f) for k, f, d in sa[:cut_a] + sb[cut_b:]]
    return a[:6] + (b"".join(secs),)


def truncate_sections(v, m):
    """Cut a sectioned body at a section border (still valid)."""
    if m[0] in (T.RTX, T.GCNOTE, T.GAPNOTE):
        secs = wire.sections(m[6])
        keep = secs[:v.rng.randrange(len(secs) + 1)]
        return m[:6] + (b"".join(wire.section(k, d, f) for k, f, d in keep),)
    if m[0] == T.GOSSIP:
        h1, h2, ts, secs = wire.read_gossip(m[6])
        keep = secs[:v.rng.randrange(len(secs) + 1)]
        return m[:6] + (wire.gossip_body(h1, h2, ts, [wire.section(k, d, f) for k, f, d in keep]),)
    if m[0] in (T.HBLIST, T.PURGED, T.MEMBERS):
        unit = wire.MEMBER_ENTRY if m[0] == T.MEMBERS else 16
        n = len(m[6]) // unit
        return m[:6] + (m[6][:unit * v.rng.randrange(n + 1)],)
    return m


def flip_bytes(v, d: bytes) -> bytes:
    """A few raw byte changes inside the messages (before sealing: the MAC
    stays valid, the decoder or a handler must cope)."""
    d = bytearray(d)
    for _ in range(v.rng.choice((1, 1, 2, 4))):
        pos = v.rng.randrange(wire.DG_HDR, len(d)) if len(d) > wire.DG_HDR else v.rng.randrange(len(d))
        d[pos] = v.rng.choice((0, 1, 0x7F, 0x80, 0xFF, v.rng.getrandbits(8)))
    return bytes(d)


def names(d: bytes, node_id: int) -> bool:
    """Whether a datagram that parses speaks for or about node_id: the
    header's source, a message's sender, or a stream in a section, entry
    list or member entry."""
    try:
        h, msgs = wire.parse(d)
    except wire.WireError:
        return False
    if h.source == node_id:
        return True
    for m in msgs:
        if m.sender == node_id:
            return True
        try:
            ids = []
            if m.type == T.GOSSIP:
                secs = wire.read_gossip(m.body)[3]
            elif m.type in (T.RTX, T.GCNOTE, T.GAPNOTE):
                secs = wire.sections(m.body)
            else:
                secs = []
            for kind, _, data in secs:
                if kind == S.MISSING:
                    ids.append(wire.read_missing(data)[0])
                elif kind == S.LASTSEEN:
                    ids += [e[0] for e in wire.read_hb_entries(data)]
                elif kind == S.STABILITY:
                    ids += [x[0] for x in wire.read_stability(data)[1]]
            if m.type == T.HBLIST:
                ids += [e[0] for e in wire.read_hb_entries(m.body)]
            elif m.type in (T.JOIN, T.MEMBERS):
                ids += [e.id for e in wire.read_members(m.body)]
            elif m.type == T.STABILITY:
                ids += [e[0] for e in wire.read_stability_body(m.body)[1]]
        except (ValueError, struct.error, IndexError):
            return True            # cannot tell: treat it as naming it
        if node_id in ids:
            return True
    return False


class Generator:
    def __init__(self, v: Values, group: int):
        self.v = v
        self.group = group
        self.last = []              # messages of earlier datagrams, for splicing and replay

    def source(self):
        return self.v.node_id(), self.v.inc()

    def datagram(self) -> bytes:
        """One valid (or, 10 %, raw-mutated) unsealed datagram."""
        v, rng = self.v, self.v.rng
        k = rng.choice((1, 1, 1, 2, 3, 8))
        msgs = [msg(v, rng.choice(TYPES)) for _ in range(k)]
        r = rng.random()
        if r < 0.1 and self.last:
            msgs[0] = splice(v, msgs[0], rng.choice(self.last))
        elif r < 0.2:
            msgs = [truncate_sections(v, m) for m in msgs]
        elif r < 0.25 and self.last:
            msgs.append(rng.choice(self.last))                     # an old message again
        elif r < 0.3:
            msgs = msgs[:1] * rng.choice((2, 5, 50))               # the same message repeated
        self.last = (self.last + msgs)[-64:]
        src, sinc = self.source()
        group = self.group if rng.random() < 0.97 else v.u32()
        d = None
        while msgs:
            try:
                d = wire.datagram(msgs, group=group, source=src, source_inc=sinc,
                                  dseq=rng.getrandbits(32), mtu=1472 - TRAILER)
                break
            except ValueError:
                msgs = msgs[:-1]                                   # did not fit: fewer messages
        if d is None:
            d = wire.datagram([(T.PAD, 0, 0, 0, 0, 0, b"")], group=group, source=src, source_inc=sinc)
        if rng.random() < 0.1:
            flipped = flip_bytes(v, d)
            # a flip must not forge what the builders never name
            d = flipped if v.touch or not names(flipped, GENUINE) else d
        return d


# ----------------------------------------------------------------- the group

def key_file(directory):
    p = os.path.join(directory, "keys")
    with open(p, "w") as f:
        f.write(f"{KEY_ID} {KEY.hex()}\n")
    return p


class Harness:
    """A keyed group on the in-memory network, a genuine publisher, the
    fuzzer's injections and the invariant checks."""

    # fifo-srb-gap: FIFO-SRB with max_gap 4096, so the FIFO queue's span
    # grows by at most 4096 ids per DATA (fifo-srb with the default 2^32
    # finds the queue's allocation by sequence range at once)
    VARIANTS = ("plain", "atomic", "fifo-srb", "fifo-srb-gap")

    def __init__(self, seed, directory, touch_genuine=False, streams_cap=1 << 15,
                 outbox_cap=1 << 14, rss_cap_mb=1024, batch=16, variant="plain", loss=0.0):
        self.rng = random.Random(seed)
        self.v = Values(random.Random(self.rng.getrandbits(64)), touch_genuine)
        # counters are timestamps (csrc/auth.h): start at the wall clock, or
        # every control datagram would be refused as stale (csrc/replay.h)
        self.sealer = Sealer(counter0=time.time_ns() + self.rng.getrandbits(40))
        self.gen = Generator(self.v, group=1)
        self.batch = batch
        self.caps = dict(streams=streams_cap, outbox=outbox_cap, rss_mb=rss_cap_mb)
        self.touch = touch_genuine
        # loss > 0: the genuine stream needs repairs while the fuzzer injects
        self.net = MemNet(seed=self.rng.getrandbits(32), loss=loss)
        ids = MEMBERS + (LOGGER,)
        specs = MemNet.member_specs(ids, loggers=(LOGGER,))
        kf = key_file(directory)
        # the variant decides which extensions see the ATOMIC, WINDOW and
        # PURGED messages: atomic delivery on the members, or FIFO-SRB
        self.variant = variant
        self.E, self.configs = {}, {}
        for i in ids:
            kw = dict(role="logger", log_dir=os.path.join(directory, "log")) if i == LOGGER else {}
            if variant.startswith("fifo-srb"):
                kw.update(srb_window=4096, delivery="fifo")
            if variant == "fifo-srb-gap":
                kw.update(max_gap=4096)
            self.configs[i] = Config(node_id=i, members=specs, incarnation=1, key_file=kf,
                                     gossip_interval=0.02, store_entries=1 << 14, **kw)
            self.E[i] = self.net.add(self.configs[i])
            if variant == "atomic" and i != LOGGER:
                from rpbcast.protocol.atomic import AtomicDelivery
                self.E[i].add_extension(AtomicDelivery(os.path.join(directory, f"atomic{i}")))
        self.pub = self.E[GENUINE]
        self.published = {}            # seq -> payload
        self.blocked_since = None      # virtual time the publisher's flow control first refused
        self.got = {i: collections.Counter() for i in MEMBERS if i != GENUINE}
        self.findings = []             # (kind, text, batch datagrams)
        self.seen_kinds = set()
        self.peak = dict(streams=0, outbox=0)
        self.injected = 0
        self.batches = 0
        self.rss0 = rss_mb()

    # -- the genuine stream and deliveries --------------------------------
    def publish(self, k):
        e = self.pub
        for _ in range(k):
            seq = e.node.next_seq
            payload = b"genuine %d" % seq
            try:
                e.publish(payload, now=self.net.now)
            except BlockingIOError:
                if self.blocked_since is None:
                    self.blocked_since = self.net.now
                return
            self.blocked_since = None
            self.published[seq] = payload

    def collect(self, batch_dgrams):
        for i, cnt in self.got.items():
            for d in self.guard("recv", batch_dgrams, self.E[i].recv, now=self.net.now) or ():
                if d.sender != GENUINE:
                    continue                # forged streams may deliver: their own business
                want = self.published.get(d.seq)
                if d.inc != 1 or want is None or d.payload != want:
                    if not self.touch or d.inc == 1:
                        self.finding("forged payload", f"node {i} delivered {GENUINE}/{d.inc} seq {d.seq} "
                                     f"payload {d.payload[:32]!r}, expected {want!r}", batch_dgrams)
                    continue        # not the genuine message: it still has to come
                cnt[d.seq] += 1
                if cnt[d.seq] == 2:
                    self.finding("duplicate", f"node {i} delivered {GENUINE}/1 seq {d.seq} twice", batch_dgrams)

    # -- findings -----------------------------------------------------------
    def finding(self, kind, text, dgrams):
        key = (kind, "")
        if kind == "exception":     # one finding per raising line and exception type
            lines = text.splitlines()
            where = [ln for ln in lines if ln.lstrip().startswith("File ")]
            key = (kind, where[-1].strip() if where else "", lines[-1].split(":")[0])
        if key in self.seen_kinds:
            return
        self.seen_kinds.add(key)
        self.findings.append((kind, text, list(dgrams)))
        print(f"FINDING {kind} (batch {self.batches}): {text.splitlines()[0]}", flush=True)

    def guard(self, where, dgrams, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except Exception:           # noqa: BLE001 -- any escape is what we look for
            tb = traceback.format_exc()
            self.finding("exception", f"{where}: " + tb.strip().splitlines()[-1] + "\n" + tb, dgrams)
            return None

    # -- one batch ------------------------------------------------------------
    def step(self, inject=True):
        net = self.net
        self.v.frontier = self.pub.node.next_seq
        dgrams = []
        if inject:
            for _ in range(self.batch):
                d = self.sealer.seal(self.gen.datagram())
                dest = self.v.rng.choice((2, 3, LOGGER, 2, 3, LOGGER, GENUINE))
                # a spoofed member address now and then (replies go to that member)
                src = self.v.rng.choice((ATTACKER_ADDR,) * 6 + (2, 3, LOGGER))
                if not self.touch and dest == GENUINE and self.v.rng.random() < 0.5:
                    dest = 2
                dgrams.append((dest, d, src))
        self.publish(self.v.rng.choice((0, 1, 3, 10)))
        t0 = net.now
        if self.v.rng.random() < 0.5:
            # one datagram at a time: node.rx, then the control plane
            for k, (dest, d, src) in enumerate(dgrams):
                net.at(t0 + (k + 1) * 50_000, lambda n, dest=dest, d=d, src=src: self.guard(
                    "receive_datagram", dgrams, n.engines[dest].receive_datagram, d, src, n.now))
        else:
            # a receive batch per node, as the UDP driver hands them over (rx_batch)
            per = collections.defaultdict(list)
            for dest, d, src in dgrams:
                per[dest].append((d, src))
            for dest, ds in per.items():
                net.at(t0 + 50_000, lambda n, dest=dest, ds=ds: self.guard(
                    "receive_datagrams", dgrams, n.engines[dest].receive_datagrams, *rx_batch(ds), n.now))
        self.injected += len(dgrams)
        self.run_net(t0 + self.v.rng.choice((2, 5, 20, 60)) * MS, dgrams)
        self.collect(dgrams)
        self.check_bounds(dgrams)
        self.batches += 1

    def restart_logger(self):
        """The logger crashes and restarts from its log (what it logged of
        forged streams included): its start must neither raise nor
        allocate by sequence range."""
        net = self.net
        net.crash(LOGGER)
        rss = rss_mb()
        e = self.guard("logger restart", [], net.add, self.configs[LOGGER])
        if e is None:
            return
        self.E[LOGGER] = e
        if rss_mb() - rss > 256:
            self.finding("memory", f"the logger's restart grew RSS by {rss_mb() - rss:.0f} MB", [])

    def run_net(self, until, dgrams):
        """Run the network to `until`; an exception out of a timer or a
        handler is a finding, and the run continues with the next event."""
        net = self.net
        while True:
            try:
                net.run_until(until)
                return
            except Exception:       # noqa: BLE001
                tb = traceback.format_exc()
                self.finding("exception", "timer/network: " + tb.strip().splitlines()[-1] + "\n" + tb, dgrams)
                # the failing event is consumed; re-arm every engine's timer
                for addr in list(net.engines):
                    net._timer_at.pop(addr, None)
                    net._arm(addr)

    def check_bounds(self, dgrams):
        for i, e in self.E.items():
            n = e.node
            self.peak["streams"] = max(self.peak["streams"], n.npeers)
            self.peak["outbox"] = max(self.peak["outbox"], n.out_pending)
            if n.npeers > self.caps["streams"]:
                self.finding("memory", f"node {i} holds {n.npeers} streams > {self.caps['streams']}", dgrams)
            if n.out_pending > self.caps["outbox"]:
                self.finding("memory", f"node {i} outbox {n.out_pending} datagrams > {self.caps['outbox']}",
                             dgrams)
        grown = rss_mb() - self.rss0
        if grown > self.caps["rss_mb"]:
            self.finding("memory", f"RSS grew {grown:.0f} MB > {self.caps['rss_mb']} MB", dgrams)

    def settle(self, seconds=3.0):
        """Stop fuzzing, let repair finish, then check that the publisher is
        not blocked for good and exactly-once."""
        end = self.net.now + int(seconds * NS)
        while self.net.now < end:
            self.publish(1)             # at least one try per step: is flow control still open?
            self.step(inject=False)
            if self.blocked_since is None and all(set(c) >= set(self.published) for c in self.got.values()):
                break
        if self.blocked_since is not None and self.net.now - self.blocked_since > NS:
            self.finding("publish blocked", f"member {GENUINE} cannot publish for "
                         f"{(self.net.now - self.blocked_since) / NS:.1f} s", [])
        if self.touch:
            return
        for i, cnt in self.got.items():
            missing = sorted(set(self.published) - set(cnt))
            if missing:
                self.finding("lost", f"node {i} never delivered {len(missing)} of {len(self.published)} "
                             f"genuine messages (first {missing[:5]})", [])


def rx_batch(ds):
    """(buf, offs, lens, srcs) for Engine.receive_datagrams from
    [(datagram, source address)]: the datagrams back to back in one
    exact-size buffer."""
    lens = np.array([len(d) for d, _ in ds], dtype=np.uint32)
    offs = np.zeros(len(ds), dtype=np.uint32)
    offs[1:] = np.cumsum(lens)[:-1]
    buf = np.frombuffer(b"".join(d for d, _ in ds), dtype=np.uint8).copy()
    return buf, offs, lens, np.array([a for _, a in ds], dtype=np.uint64)


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_artifacts(directory, seed, findings):
    os.makedirs(directory, exist_ok=True)
    for k, (kind, text, dgrams) in enumerate(findings):
        base = os.path.join(directory, f"seed{seed}-{k}-{kind.replace(' ', '_')}")
        with open(base + ".txt", "w") as f:
            f.write(text + "\n")
            for dest, d, src in dgrams:
                f.write(f"{dest} {src} {d.hex()}\n")
        print(f"  written {base}.txt", flush=True)


def episode_seed(seed, k):
    return (seed * 1_000_003 + k) & 0xFFFFFFFFFFFF


def reached(h):
    """{type name: messages the nodes accepted past the MAC and decoder}."""
    got = collections.Counter()
    for e in h.E.values():
        for name, (msgs_in, _, _, _) in e.node.traffic().items():
            got[name.lower()] += msgs_in
    return {k: v for k, v in got.items() if v}


def run_episode(seed, k, batches, settle, touch_genuine, artifacts, out, deadline=None, variants=None,
                loss=0.0):
    """One episode: a fresh group, `batches` batches of injections (fewer
    if the wall-clock deadline comes first), then the group settles and
    exactly-once is checked.  Deterministic for (seed, k, batches run)."""
    with tempfile.TemporaryDirectory(prefix="rpbcast-fuzz-engine-") as tmp:
        es = episode_seed(seed, k)
        variants = variants or Harness.VARIANTS
        h = Harness(es, tmp, touch_genuine=touch_genuine, variant=variants[k % len(variants)], loss=loss)
        h.episode = k
        while h.batches < batches and (deadline is None or time.monotonic() < deadline or h.batches < 4):
            if h.batches == batches // 2:
                h.restart_logger()
            h.step()
        fuzzed = h.batches
        h.settle(settle)
        rx = collections.Counter()
        for e in h.E.values():
            rx.update(e.node.rx_reasons())
        h.reached = reached(h)
        work = collections.Counter()
        for e in h.E.values():
            c = e.node.counters()
            work.update({k: c[k] for k in ("served", "gaps", "forgotten", "logged", "rx_far", "rx_dup")})
        unreached = sorted(t.name for t in T if t.name.lower() not in h.reached)
        print(f"episode {k} (seed {es}, {h.variant}): {fuzzed} batches, {h.injected} datagrams, {len(h.published)} genuine messages, "
              f"peak streams {h.peak['streams']}, peak outbox {h.peak['outbox']}, "
              f"rejected {dict(rx)}, node work {dict(work)}, types never accepted {unreached or 'none'}, "
              f"findings {len(h.findings)}", file=out, flush=True)
        if h.findings and artifacts:
            write_artifacts(artifacts, f"{seed}-ep{k}", h.findings)
        h.E = h.net = h.pub = None            # the log directory goes away next
        return h


def run(seed, seconds, artifacts=None, touch_genuine=False, episodes=None, batches=60, settle=2.0,
        out=None, variants=None, loss=0.0):
    """Episodes of `batches` batches each until `seconds` of wall time have
    passed (or `episodes` ran).  Returns [(kind, text, datagrams)], the
    findings, and the per-episode summaries."""
    out = out or sys.stdout
    t_end = time.monotonic() + seconds
    findings, seen = [], set()
    k = 0
    while (episodes is None and time.monotonic() < t_end) or (episodes is not None and k < episodes):
        h = run_episode(seed, k, batches, settle, touch_genuine, artifacts, out,
                        deadline=None if episodes is not None else t_end, variants=variants, loss=loss)
        for f in h.findings:
            key = (f[0], f[1].splitlines()[0])
            if key not in seen:
                seen.add(key)
                findings.append(f)
        k += 1
    print(f"seed {seed}: {k} episodes, findings: {len(findings)}", file=out, flush=True)
    return findings


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    ap.add_argument("--seconds", type=float, default=30.0, help="fuzzing budget in wall-clock seconds")
    ap.add_argument("--episodes", type=int, default=None, help="run exactly this many episodes")
    ap.add_argument("--batches", type=int, default=60, help="batches per episode")
    ap.add_argument("--episode", type=int, default=None, help="replay only episode K of the seed")
    ap.add_argument("--artifacts", default="fuzz-artifacts", help="where findings are written")
    ap.add_argument("--variants", default=",".join(Harness.VARIANTS),
                    help="group configurations, episode k runs the (k mod n)-th: " + ", ".join(Harness.VARIANTS))
    ap.add_argument("--loss", type=float, default=0.0,
                    help="datagram loss on the in-memory network (repairs of the genuine stream then "
                         "depend on membership, which key holders can still forge: see README)")
    ap.add_argument("--touch-genuine", action="store_true",
                    help="also forge the genuine stream (checks at-most-once and payloads only)")
    a = ap.parse_args(argv)
    variants = tuple(x for x in a.variants.split(",") if x)
    if not variants or set(variants) - set(Harness.VARIANTS):
        ap.error(f"--variants: choose from {', '.join(Harness.VARIANTS)}")
    seed = a.seed if a.seed is not None else int(time.time()) & 0xFFFFFFFF
    from rpbcast.core import node
    print(f"fuzz_engine: seed {seed}, budget {a.seconds:g} s, core {os.path.dirname(node.__file__)}", flush=True)
    if a.episode is not None:
        h = run_episode(seed, a.episode, a.batches, 2.0, a.touch_genuine, a.artifacts, sys.stdout,
                        variants=variants, loss=a.loss)
        return 1 if h.findings else 0
    findings = run(seed, a.seconds, a.artifacts, a.touch_genuine, a.episodes, a.batches, variants=variants,
                   loss=a.loss)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
