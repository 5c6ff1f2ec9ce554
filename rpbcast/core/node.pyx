# cython: language_level=3, boundscheck=False, wraparound=False
"""The Python face of a node's C data plane (``csrc/node.h``).

The engine (``rpbcast/protocol/engine.py``) drives one ``Node``: it hands it whole
datagrams, reads the control messages the data plane queued, and asks it for
the per-message parts of control work (serving repairs, building missing
digests).  Payload handling never creates a Python object per message on the
batch paths (``rx_batch``, ``publish_batch``, ``recv_batch``,
``drain_into``).
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
import enum
from collections import namedtuple

import numpy as np
cimport numpy as cnp

from rpbcast.core.csrc cimport *
from rpbcast.core.logstore cimport LogStore

cnp.import_array()

DEST_MCAST = RP_DEST_MCAST
SELF_SLOT = RP_SELF_SLOT
NO_SLOT = RP_NO_SLOT
NOLABEL = RP_SRB_NOLABEL
SEQ_LIMIT = RP_SEQ_LIMIT      # sequence numbers a tracker holds lie below this

# Repair phases of missing ids (csrc/node.h).
PHASE_GOSSIP = RP_PHASE_GOSSIP
PHASE_LOGGER = RP_PHASE_LOGGER
PHASE_ALL = RP_PHASE_ALL
PHASE_NEW = RP_PHASE_NEW      # gossip phase, not asked for since the last full round
PHASE_LOGGER_NEW = RP_PHASE_LOGGER_NEW   # logger phase, not asked of a logger (or given up waiting)

# How serve_missing answers a section (csrc/serve.h).
SERVE_FROM_LOGGER = RP_SERVE_FROM_LOGGER
SERVE_GCNOTE = RP_SERVE_GCNOTE
SERVE_GCNOTE_AT_ONCE = RP_SERVE_GCNOTE_AT_ONCE

# Trace event codes, named as traces store them (csrc/trace.h, docs/traces.md).
TraceEvent = enum.IntEnum(
    "TraceEvent",
    [(rp_trace_event_names[i].decode().upper(), i) for i in range(RP_EV__COUNT)
     if rp_trace_event_names[i] != NULL],
    module=__name__)


def trace_event_names():
    """{code: name} of every trace event."""
    return {int(e): e.name.lower() for e in TraceEvent}


ServedSection = namedtuple("ServedSection", "sender inc intervals unanswered gcnote_first gcnote_ids served")
ServedSection.__doc__ = """One MISSING section as Node.serve_missing served it: the stream, the ids
asked for and the ids left unanswered ((n, 2) uint64 intervals), the first id
and the number of ids its GcNOTE named (None, 0: no GcNOTE), REPAIRs queued."""


class StreamLimit(Exception):
    """Node.peer: no room for a new stream -- max_streams, or the node id's
    max_per_node, are all live streams heard from their own node (nothing to
    retire); none is created."""


def counter_names():
    return [rp_node_counter_names[i].decode() for i in range(RP_C__COUNT)]


_COUNTER_NAMES = counter_names()
_TYPE_NAMES = [rp_wire_type_names[i].decode() for i in range(RP_T__COUNT)]
_REASON_NAMES = [rp_wire_reason_names[i].decode() for i in range(RP_WR__COUNT)]


cdef class Node:
    """One node's data plane.  Times are int nanoseconds; addresses are
    opaque uint64 values chosen by the driver (DEST_MCAST = the group)."""

    def __cinit__(self, uint32_t group, uint32_t node_id, uint32_t inc=0, uint32_t mtu=1472,
                  uint64_t store_bytes=64 << 20, uint64_t store_entries=1 << 20,
                  uint64_t max_gap=1 << 32, uint64_t srb_w=0, uint32_t max_scan=65536,
                  bint deliver_own=False, bint fifo=False, bint is_logger=False,
                  bint no_deliver=False, uint32_t max_streams=0, uint64_t max_message=64 << 20,
                  uint64_t reassembly_bytes=0, uint32_t max_per_node=0, uint32_t max_strangers=0,
                  bint prefault=False):
        cdef rp_node_cfg_t cfg
        cfg.prefault = prefault
        cfg.max_per_node = max_per_node
        cfg.max_strangers = max_strangers
        cfg.max_message = max_message
        cfg.reassembly_bytes = reassembly_bytes
        cfg.group = group
        cfg.id = node_id
        cfg.inc = inc
        cfg.mtu = mtu
        cfg.store_bytes = store_bytes
        cfg.store_entries = store_entries
        cfg.max_gap = max_gap
        cfg.srb_w = srb_w
        cfg.max_scan = max_scan
        cfg.max_streams = max_streams
        cfg.deliver_own = deliver_own
        cfg.fifo = fifo
        cfg.is_logger = is_logger
        cfg.no_deliver = no_deliver
        cdef int rc = rp_node_init(&self.n, &cfg)
        if rc == RP_EINVAL:
            raise ValueError("invalid node configuration (mtu 48..65507, store >= 1 KiB and >= 16 entries, "
                             "srb window <= 2**24)")
        if rc != RP_OK:
            raise MemoryError()
        self.log = None

    cdef rp_peer_t *peer_at(self, uint32_t slot) except NULL:
        """The peer in slot; IndexError if there is none."""
        cdef rp_peer_t *p = rp_node_peer_at(&self.n, slot)
        if p == NULL:
            raise IndexError(slot)
        return p

    def __dealloc__(self):
        self.n.log = NULL
        self.n.flowack = NULL
        rp_node_free(&self.n)
        if self.flow != NULL:
            rp_flowack_free(self.flow)
            free(self.flow)
            self.flow = NULL

    # ---- the flow window (csrc/flowack.h) -------------------------------

    def flow_configure(self, uint64_t limit, uint32_t every, int64_t stale_ns, int64_t resend_ns,
                       uint64_t limit_bytes=0):
        """Turn on the data-plane flow acknowledgments: as a receiver, ack
        every `every` new messages (or when a batch drains the socket); as a
        sender, publish at most `limit` messages (seqs: a fragment is one)
        and `limit_bytes` payload bytes (0: no byte bound) beyond the least
        frontier the members acknowledged (limit 0: acknowledge, but no
        window)."""
        if self.flow == NULL:
            self.flow = <rp_flowack_t *>malloc(sizeof(rp_flowack_t))
            if self.flow == NULL:
                raise MemoryError()
            rp_flowack_init(self.flow, limit, every, stale_ns, resend_ns)
        else:
            self.flow.limit = limit
            self.flow.every = every if every else 1
            self.flow.stale_ns = stale_ns
            self.flow.resend_ns = resend_ns
        rp_flowack_set_bytes(self.flow, limit_bytes)
        self.n.flowack = self.flow

    def flow_set_members(self, members, int64_t now):
        """members: [(id, inc, addr, counts)] -- where to acknowledge each
        sender's stream, and whose acknowledgments hold our window."""
        if self.flow == NULL:
            return
        cdef Py_ssize_t k = len(members), i
        if k > RP_FLOWACK_MAX_MEMBERS:
            raise ValueError(f"flow window: {k} members, at most {RP_FLOWACK_MAX_MEMBERS}")
        ids = np.empty(max(k, 1), dtype=np.uint32)
        incs = np.empty(max(k, 1), dtype=np.uint32)
        addrs = np.empty(max(k, 1), dtype=np.uint64)
        counts = np.empty(max(k, 1), dtype=np.uint8)
        cdef uint32_t[::1] iv = ids, nv = incs
        cdef uint64_t[::1] av = addrs
        cdef uint8_t[::1] cv = counts
        for i, (mid, minc, maddr, mc) in enumerate(members):
            iv[i] = mid
            nv[i] = minc
            av[i] = maddr
            cv[i] = 1 if mc else 0
        if rp_flowack_set_members(self.flow, &iv[0], &nv[0], &av[0], &cv[0], <uint32_t>k, now) != RP_OK:
            raise MemoryError()
        rp_flowack_arm_bytes(self.flow, &self.n)
        rp_flowack_update(self.flow, &self.n, now)

    @property
    def flow_driven(self):
        """Whether a data-plane loop feeds this node receive batches (the
        flow window's acknowledgments need one: not the simulator's or the
        in-memory network's engines)."""
        return self.flow != NULL and self.flow.n_batches > 0

    def flow_refresh(self, int64_t now):
        """Re-judge the window's frontier now (a silent member goes stale)."""
        if self.flow != NULL:
            rp_flowack_update(self.flow, &self.n, now)

    def flow_after_batch(self, bint drained, int64_t now):
        """What the I/O loop does after each receive batch (drivers without
        the C loop, and tests): queue the due acknowledgments; True if ours moved."""
        return bool(rp_flowack_after_batch(&self.n, drained, now) & RP_FLOWACK_MOVED)

    def flow_after_take(self, int64_t now):
        """What the driver does after the application took deliveries:
        queue the acknowledgments now due; how many were queued."""
        return rp_flowack_after_take(&self.n, now)

    def flow_stats(self):
        """The flow window: limit, frontier, room, counters, and per member
        (id, inc, counts, front acknowledged to us, sent: what we acknowledged)."""
        if self.flow == NULL:
            return None
        cdef uint64_t room = rp_flowack_room(self.flow, &self.n)
        return {"limit": self.flow.limit, "limit_bytes": self.flow.limit_bytes,
                "bytes_out": rp_flowack_bytes_out(self.flow, &self.n) if self.flow.active else 0,
                "every": self.flow.every, "active": bool(self.flow.active),
                "front": self.flow.front, "room": None if room == 0xFFFFFFFFFFFFFFFF else room,
                "acks_sent": self.flow.n_tx, "acks_received": self.flow.n_rx,
                "acks_rejected": self.flow.n_rejected, "stale": self.flow.n_stale,
                "ack_gap_us_log2": [self.flow.gap_hist[i] for i in range(16)],
                "members": [(self.flow.m[i].id, self.flow.m[i].inc, bool(self.flow.m[i].counts),
                             self.flow.m[i].front, self.flow.m[i].sent) for i in range(self.flow.n)]}

    # ---- identity / configuration ---------------------------------------

    @property
    def group(self):
        return self.n.group

    @property
    def node_id(self):
        return self.n.id

    @property
    def inc(self):
        return self.n.inc

    @property
    def mtu(self):
        return self.n.out.mtu

    @property
    def max_body(self):
        """Largest message body one datagram can carry (the MTU less the
        headers and, in a keyed group, the MAC trailer)."""
        return rp_out_max_body(&self.n.out)

    @property
    def keyed(self):
        return self.n.auth != NULL

    def set_auth(self, keys, uint64_t counter0):
        """Key this node: keys is [(key_id, 16-byte key)], the first the
        sending key, at most two (a roll-over); [] unkeys it.  From now on
        every datagram sent carries an AES-128-GMAC trailer and every
        datagram received without a valid one is dropped (reason "auth").
        counter0: no nonce counter is below it (csrc/auth.h: counters are
        the wall clock in ns at seal time, with a per-run salt)."""
        cdef bytes ids = bytes(int(k) for k, _ in keys)
        cdef bytes mat = b"".join(bytes(v) for _, v in keys)
        if len(keys) > 2 or len(mat) != RP_AUTH_KEY_LEN * len(keys):
            raise ValueError("one or two keys of 16 bytes each")
        # a roll-over keeps the MAC engine chosen before (set_auth_impl), where it can run
        cdef int prev = rp_auth_impl(self.n.auth) if self.n.auth != NULL else -1
        if rp_node_set_auth(&self.n, <const uint8_t *>ids if keys else NULL,
                            <const uint8_t *>mat if keys else NULL, len(keys), counter0) != RP_OK:
            raise ValueError("the crypto library refused the keys (or two keys share an id)")
        if prev >= 0 and self.n.auth != NULL:
            rp_auth_set_impl(self.n.auth, prev)

    def set_replay_clock_skew(self, uint64_t ns):
        """The clock skew allowed between members, in ns (csrc/replay.h): a
        source's replay entry, when created, refuses control datagrams
        sealed before this node's wall clock less ns ("stale"); 0 turns
        the clock floor off.  Needs set_auth first (each set_auth starts
        from the default, 5 s)."""
        if self.n.auth == NULL:
            raise ValueError("set_auth first")
        rp_auth_set_replay_skew(self.n.auth, ns)

    def set_wall_clock_offset(self, int64_t ns):
        """Shift the wall clock this node's counters and clock floors read
        by ns (tests: a host whose clock is off, or that started later)."""
        if self.n.auth == NULL:
            raise ValueError("set_auth first")
        rp_auth_set_clock_offset(self.n.auth, ns)

    @property
    def wall_ns(self):
        """The wall clock in ns as the MAC counters read it (None unkeyed)."""
        return rp_auth_wall_ns(self.n.auth) if self.n.auth != NULL else None

    def set_encrypt(self, bint on):
        """Encrypt the body of every datagram sent (AES-128-GCM under the
        sending key, auth.h); needs set_auth first.  Received datagrams are
        decrypted whether or not this is on."""
        if self.n.auth == NULL:
            raise ValueError("encryption needs a key (set_auth first)")
        rp_out_flush(&self.n.out)      # open datagrams were begun unencrypted
        rp_auth_set_encrypt(self.n.auth, on)

    def set_signing(self, priv, pubs):
        """Sign authority-bearing datagrams with the Ed25519 private seed
        ``priv`` (32 bytes, or None: verify only) and verify them against
        ``pubs`` ({node id: 32-byte public key}); needs set_auth first, once.
        Every datagram then reserves the signature block (68 bytes)."""
        cdef bytes mat, pk
        cdef cnp.ndarray[cnp.uint32_t, ndim=1] idv
        if self.n.auth == NULL:
            raise ValueError("signatures need a key (set_auth first)")
        ids = sorted(pubs)
        mat = b"".join(bytes(pubs[i]) for i in ids)
        if any(len(bytes(pubs[i])) != RP_AUTH_SIG_KEY for i in ids) or \
                (priv is not None and len(bytes(priv)) != RP_AUTH_SIG_KEY):
            raise ValueError("Ed25519 keys are 32 bytes")
        idv = np.array(ids or [0], dtype=np.uint32)
        pk = bytes(priv) if priv is not None else b""
        rp_out_flush(&self.n.out)      # open datagrams were sized for the old trailer
        if rp_auth_set_signing(self.n.auth, <const uint8_t *>pk if priv is not None else NULL,
                               len(ids), <const uint32_t *>idv.data, <const uint8_t *>mat) != 0:
            raise ValueError("the crypto library refused the Ed25519 keys (or signing was set before)")
        self.n.out.mac_room = RP_AUTH_SIGNED_TRAILER

    @property
    def signatures(self):
        return rp_auth_signatures(self.n.auth) if self.n.auth != NULL else 0

    @property
    def encrypting(self):
        return self.n.auth != NULL and rp_auth_encrypting(self.n.auth) != 0

    @property
    def auth_impl(self):
        """Which engine computes the MAC (and encryption), both the same
        AES-128-GCM/GMAC (csrc/auth.h): "ipsec-mb" (intel-ipsec-mb, the
        default where the build has it and the CPU runs it in hardware) or
        "openssl" (OpenSSL's EVP, everywhere); None unkeyed."""
        if self.n.auth == NULL:
            return None
        return rp_auth_impl_name(rp_auth_impl(self.n.auth)).decode()

    def auth_impls(self):
        """The engines that can run here under the installed keys (each one
        was checked against OpenSSL when the keys were installed)."""
        if self.n.auth == NULL:
            return []
        return [rp_auth_impl_name(i).decode() for i in (RP_MAC_IPSECMB, RP_MAC_OPENSSL)
                if rp_auth_impl_available(self.n.auth, i)]

    def set_auth_impl(self, str name):
        """Seal and verify with engine ``name`` ("ipsec-mb" or "openssl";
        see auth_impl).  ValueError when that engine cannot run here (not
        built, not on this CPU, or it disagreed with OpenSSL); needs
        set_auth first."""
        if self.n.auth == NULL:
            raise ValueError("set_auth first")
        codes = {"ipsec-mb": RP_MAC_IPSECMB, "openssl": RP_MAC_OPENSSL}
        if name not in codes:
            raise ValueError(f"unknown MAC engine {name!r} (one of {', '.join(codes)})")
        if rp_auth_set_impl(self.n.auth, codes[name]) != 0:
            raise ValueError(f"MAC engine {name!r} is not available here (can run: "
                             f"{', '.join(self.auth_impls())})")

    def auth_stats(self):
        """A keyed node's MAC and replay counters ({} unkeyed): datagrams
        sealed, the replay table's sources (and its bound), control
        datagrams accepted, refused as replays and refused as stale (sealed
        before the source's entry's clock floor), the clock skew allowed,
        sources evicted at the
        bound, datagrams dropped because the plaintext buffers were full,
        and the engine that computes the MAC (auth_impl; mac_lib: for
        intel-ipsec-mb, its version and the code path it chose, e.g.
        "1.3.0 avx512+vaes")."""
        if self.n.auth == NULL:
            return {}
        cdef const rp_replay_t *r = rp_auth_replay(self.n.auth)
        return {"sealed": rp_auth_sealed(self.n.auth), "replay_sources": r.n,
                "replay_sources_max": r.cap, "replay_fresh": r.accepted,
                "replay_refused": r.refused, "replay_evicted": r.evicted,
                "replay_stale": rp_auth_stale(self.n.auth),
                "replay_clock_skew_ns": rp_auth_replay_skew(self.n.auth),
                "decrypt_buffers_full": rp_auth_arena_full(self.n.auth),
                "mac_impl": self.auth_impl,
                # the library's version and the code it picked for this CPU
                "mac_lib": rp_auth_lib_describe().decode() if self.auth_impl == "ipsec-mb" else ""}

    def attach_log(self, LogStore log):
        """Make this node a logger writing to ``log`` (kept alive here)."""
        self.log = log
        self.n.log = &log.l if log is not None else NULL

    def enable_catchup(self, double rate, double burst=0, uint32_t per_call=4096):
        """Serve requests from the log through paced per-requester queues
        (csrc/catchup.h): ``rate`` messages/s per requester (0: unpaced),
        ``burst`` tokens saved up (default: 2 ms worth), at most
        ``per_call`` messages per catchup_drain."""
        if self.n.log == NULL:
            raise ValueError("catch-up serves from a log: attach_log first")
        if burst <= 0:
            burst = max(64.0, rate * 0.002)
        if rp_catchup_enable(&self.n, rate, burst, per_call) != RP_OK:
            raise MemoryError()

    def catchup_drain(self, int64_t now):
        """Stream a little of every requester's queue (within its tokens and
        per_call); returns the REPAIRs queued."""
        return rp_catchup_drain(&self.n, now)

    @property
    def catchup_pending(self):
        """Ids waiting in the catch-up queues."""
        return rp_catchup_pending(&self.n)

    def mark_received_intervals(self, uint32_t slot, intervals):
        """Record the ids of ``intervals`` ((n, 2), ascending) as received
        without a payload (a logger rebuilding its trackers from its log):
        memory by intervals, never by seq span.  Intervals more than
        max_gap ahead of what is known are refused.  Returns ids marked."""
        cdef rp_peer_t *p = self.peer_at(slot)
        a = np.ascontiguousarray(intervals, dtype=np.uint64).reshape(-1, 2)
        cdef const uint64_t[:, ::1] v = a
        cdef size_t i
        cdef uint64_t lo, hi, glo, ghi, marked = 0
        cdef int r
        for i in range(a.shape[0]):
            lo = v[i, 0]
            hi = v[i, 1]
            if hi >= RP_SEQ_LIMIT:
                hi = RP_SEQ_LIMIT - 1
            if lo > hi or hi < p.st.base:
                continue
            if lo < p.st.base:
                lo = p.st.base
            if lo < p.st.next:
                marked += rp_seqtrack_forget(&p.st, lo, hi if hi < p.st.next else p.st.next - 1)
                if hi < p.st.next:
                    continue
                lo = p.st.next
            r = rp_seqtrack_accept(&p.st, lo, &glo, &ghi)
            if r != RP_ACC_NEW and r != RP_ACC_FILL:
                continue
            marked += hi - lo + 1
            p.st.next = hi + 1
        return marked

    @property
    def hold_send(self):
        return bool(self.n.hold_send)

    @hold_send.setter
    def hold_send(self, bint v):
        """Keep own messages until a logger acknowledges them (off when the
        group has no logger: nothing would ever acknowledge)."""
        self.n.hold_send = v
        if not v:
            rp_node_logger_ack(&self.n, self.n.next_seq)

    # ---- bounded replies (outbox.h, addrcheck.h) -------------------------

    def enable_addrcheck(self, double factor=3.0, double admit_rate=0, double admit_burst=0):
        """Cap replies to addresses that have not proven they receive at
        ``factor`` x the bytes received from them (0: off); admit at most
        ``admit_rate`` control messages a second from all of them together
        (0: all)."""
        if rp_out_set_addrcheck(&self.n.out, factor):
            raise MemoryError()
        if self.n.out.ac != NULL:
            rp_ac_set_admit(self.n.out.ac, admit_rate, admit_burst if admit_burst else admit_rate)

    def set_trusted_addrs(self, addrs):
        """Members' addresses: replies to them are never capped."""
        a = np.ascontiguousarray(np.asarray(sorted(set(int(x) for x in addrs)), dtype=np.uint64))
        cdef const uint64_t[::1] v = a
        cdef uint64_t z = 0
        if self.n.out.ac == NULL:
            return
        if rp_ac_set_members(self.n.out.ac, &v[0] if v.shape[0] else &z, v.shape[0]):
            raise MemoryError()

    def addr_validated(self, uint64_t addr):
        """Would replies to addr go uncapped?  (True with validation off.)"""
        return self.n.out.ac == NULL or rp_ac_validated(self.n.out.ac, addr) != 0

    def addr_cookie(self, uint64_t addr, int64_t now):
        """(cookie, window) a PING to addr would carry now (for tests)."""
        if self.n.out.ac == NULL:
            return None
        cdef uint64_t w = <uint64_t>(now // RP_AC_WINDOW_NS) if now > 0 else 0
        return rp_ac_cookie(self.n.out.ac, addr, w), w

    @property
    def reply_cap(self):
        return self.n.out.reply_cap

    @reply_cap.setter
    def reply_cap(self, size_t v):
        """Replies are dropped while the outbox holds this many bytes (0: no cap)."""
        self.n.out.reply_cap = v

    def set_rate_limit(self, double rate, double burst=0):
        rp_node_set_rate_limit(&self.n, rate, burst if burst > 0 else max(1.0, rate / 10))

    def set_requester_limit(self, double rate, double burst=0, uint32_t max_requesters=1024):
        """Repairs/s each requester (source address) may take (csrc/reqlimit.h):
        ``burst`` tokens saved up (default: 0.1 s worth), at most
        ``max_requesters`` tracked (least recently used evicted); rate 0: off."""
        if rate < 0 or max_requesters == 0:
            raise ValueError("requester limit: rate >= 0 and max_requesters >= 1")
        if rp_node_set_requester_limit(&self.n, rate, burst if burst > 0 else max(1.0, rate / 10),
                                       max_requesters) != RP_OK:
            raise MemoryError()

    def enable_trace(self, size_t capacity=1 << 16):
        rp_trace_free(&self.n.trace)
        if rp_trace_init(&self.n.trace, capacity) != RP_OK:
            raise MemoryError()
        self.n.tracing = capacity > 0

    # ---- peers -----------------------------------------------------------

    def peer(self, uint32_t node_id, uint32_t inc, uint64_t base=0):
        """Slot of (node_id, inc), created with ``base`` if new; StreamLimit
        when it is new and max_streams streams are known already."""
        cdef int64_t s = rp_node_peer(&self.n, node_id, inc, base)
        if s < 0:
            if s == RP_EFULL:
                raise StreamLimit(f"no stream to retire: ({node_id}, {inc}) not created")
            raise ValueError("base out of range") if s == RP_EINVAL else MemoryError()
        return s

    def find_peer(self, uint32_t node_id, uint32_t inc):
        cdef uint32_t s = rp_node_find_peer(&self.n, node_id, inc)
        return None if s == RP_NO_SLOT else s

    @property
    def npeers(self):
        """Streams known (live slots)."""
        return self.n.nlive

    @property
    def nslots(self):
        """Slots in use: every slot number is below it (some may be retired
        or free: peer_at raises IndexError for those)."""
        return self.n.npeers

    def take_retired(self):
        """Slots retired since the last call (csrc/node.h, rp_node_peer).
        They are reused from now on: whatever the caller keys by slot must be
        forgotten before it creates a stream (the engine does this first
        thing, Engine._forget_retired)."""
        cdef uint32_t buf[256]
        cdef uint32_t k, i
        out = []
        while True:
            k = rp_node_take_retired(&self.n, buf, 256)
            for i in range(k):
                out.append(buf[i])
            if k < 256:
                return out

    @property
    def nretired(self):
        """Retired slots not taken yet (take_retired)."""
        return self.n.nretired

    def set_members(self, ids, is_member):
        """Tell the data plane which node ids are members (csrc/node.h,
        rp_node_set_members): ids[i] is one when is_member[i].  From the first
        call on, streams of other node ids live in the strangers' pool
        (max_strangers), apart from max_streams.  Returns streams retired
        (take_retired)."""
        cdef Py_ssize_t k = len(ids), i
        if len(is_member) != k:
            raise ValueError("ids and is_member differ in length")
        cdef uint32_t[::1] a = np.ascontiguousarray(ids, dtype=np.uint32) if k else np.zeros(1, np.uint32)
        cdef uint8_t[::1] f = np.ascontiguousarray([1 if x else 0 for x in is_member], dtype=np.uint8) if k \
            else np.zeros(1, np.uint8)
        return rp_node_set_members(&self.n, &a[0], &f[0], k)

    def is_member(self, uint32_t node_id):
        """True if node_id's streams count as a member's (set_members)."""
        return bool(rp_node_is_member(&self.n, node_id))

    @property
    def nstrangers(self):
        """Streams of non-members known (the pool)."""
        return self.n.npool

    def peer_stranger(self, uint32_t slot):
        """True if slot's stream is a non-member's (in the pool)."""
        return bool(self.peer_at(slot).stranger)

    def peer_own_heard(self, uint32_t slot):
        """True once slot's stream was heard in its own node's datagram."""
        return bool(self.peer_at(slot).own_heard)

    def peer_info(self, uint32_t slot):
        cdef rp_peer_t *p = self.peer_at(slot)
        return {
            "slot": slot, "id": p.id, "inc": p.inc, "next": p.st.next, "base": p.st.base,
            "contiguous": rp_seqtrack_contiguous(&p.st), "missing": p.st.missing.count,
            "missing_logger": p.lmissing.count, "inflight": p.inflight.count,
            "logger_inflight": p.lflight.count,
            "idle_seq": None if p.idle_seq == RP_NOT_IDLE else p.idle_seq,
            "last_heard": p.last_heard, "addr": p.addr, "dead": bool(p.dead),
            "rx_new": p.rx_new, "rx_fill": p.rx_fill, "rx_dup": p.rx_dup,
        }

    def peer_ids(self):
        """[(slot, id, inc)] of every known sender incarnation."""
        cdef uint32_t i
        return [(i, self.n.peers[i].id, self.n.peers[i].inc) for i in range(self.n.npeers)
                if self.n.peers[i] != NULL]

    def peer_key(self, uint32_t slot):
        """(id, inc) of a peer slot."""
        cdef rp_peer_t *p = self.peer_at(slot)
        return p.id, p.inc

    def holds(self, uint32_t sender, uint32_t inc, uint64_t seq):
        """True if this node can still serve (sender, inc, seq): in the
        message store, or in the log of a logger."""
        cdef uint32_t slot
        if sender == self.n.id and inc == self.n.inc:
            slot = RP_SELF_SLOT
        else:
            slot = rp_node_find_peer(&self.n, sender, inc)
            if slot == RP_NO_SLOT:
                return False
        if rp_mstore_find(&self.n.store, slot, seq) >= 0:
            return True
        return self.n.log != NULL and rp_log_has(self.n.log, sender, inc, seq) != 0

    def peer_dead(self, uint32_t slot):
        cdef rp_peer_t *p = self.peer_at(slot)
        return bool(p.dead)

    def set_peer_dead(self, uint32_t slot):
        self.peer_at(slot)
        rp_node_peer_dead(&self.n, slot)

    def mark_received(self, uint32_t slot, const uint64_t[::1] seqs not None):
        """Record seqs as received without a payload (a logger rebuilding its
        trackers from its log after a restart)."""
        cdef rp_peer_t *p = self.peer_at(slot)
        out = np.empty(seqs.shape[0], np.uint8)
        cdef uint8_t[::1] o = out
        if seqs.shape[0]:
            rp_seqtrack_accept_batch(&p.st, &seqs[0], seqs.shape[0], &o[0])
        return int((out == 1).sum() + (out == 2).sum())

    def peer_next(self, uint32_t slot):
        cdef rp_peer_t *p = self.peer_at(slot)
        return p.st.next

    def peer_contiguous(self, uint32_t slot):
        cdef rp_peer_t *p = self.peer_at(slot)
        return rp_seqtrack_contiguous(&p.st)

    def peer_received(self, uint32_t slot, uint64_t seq):
        cdef rp_peer_t *p = self.peer_at(slot)
        return bool(rp_seqtrack_received(&p.st, seq))

    def peer_missing_count(self, uint32_t slot, int phase=PHASE_ALL):
        """Ids missing of slot's stream in phase; 0 for a retired slot."""
        cdef rp_peer_t *p = rp_node_peer_at(&self.n, slot)
        if p == NULL:
            return 0
        if phase == PHASE_LOGGER:
            return p.lmissing.count
        if phase == PHASE_GOSSIP:
            return p.st.missing.count - p.lmissing.count
        return p.st.missing.count

    def total_missing(self):
        cdef uint64_t k = 0
        cdef uint32_t i
        for i in range(self.n.npeers):
            if self.n.peers[i] != NULL:
                k += self.n.peers[i].st.missing.count
        return k

    # ---- receive ---------------------------------------------------------

    def rx(self, const uint8_t[::1] data not None, uint64_t src, int64_t now):
        """Process one datagram; returns the decoder reason (0 = accepted)."""
        cdef uint8_t z = 0
        return rp_node_rx(&self.n, &data[0] if data.shape[0] else &z, data.shape[0], src, now)

    def rx_batch(self, const uint8_t[::1] buf not None, const uint32_t[::1] offs not None,
                 const uint32_t[::1] lens not None, const uint64_t[::1] srcs not None, int64_t now):
        """Process datagrams laid out in one buffer; returns how many were
        rejected."""
        cdef size_t i, k = offs.shape[0]
        cdef int bad = 0
        if lens.shape[0] != k or srcs.shape[0] != k:
            raise ValueError("offs, lens and srcs must have the same length")
        for i in range(k):
            if <size_t>offs[i] + lens[i] > <size_t>buf.shape[0]:
                raise ValueError("datagram outside the buffer")
        with nogil:
            for i in range(k):
                if rp_node_rx(&self.n, &buf[offs[i]], lens[i], srcs[i], now) != 0:
                    bad += 1
        return bad

    @property
    def nctl(self):
        return self.n.nctl

    def take_control(self, now=None):
        """The queued control messages as tuples
        (type, flags, sender, inc, aux, seq, body, source, source_inc, src_addr);
        the queue is cleared.  Call before the next rx.  With address
        validation on (enable_addrcheck) and ``now`` given, every message
        first credits its source address, and a PONG may validate it."""
        cdef size_t i
        cdef rp_ctl_t *c
        cdef int64_t t = now if now is not None else 0
        cdef bint check = self.n.out.ac != NULL and now is not None
        out = []
        for i in range(self.n.nctl):
            c = &self.n.ctl[i]
            if check and not rp_out_heard(&self.n.out, c.src_addr, c.type, c.seq, c.body, c.len, t):
                continue            # not admitted (flood from unvalidated addresses)
            out.append((c.type, c.flags, c.sender, c.inc, c.aux, c.seq,
                        c.body[:c.len] if c.len else b"", c.source, c.source_inc, c.src_addr))
        rp_node_ctl_clear(&self.n)
        return out

    def infer_idle(self, int64_t now, int64_t silent_ns):
        """Streams silent here for silent_ns: their latest seq enters the
        heartbeat signature as an idle entry.  Returns how many."""
        return rp_node_infer_idle(&self.n, now, silent_ns)

    def heartbeat(self, uint32_t slot, uint64_t seq, bint idle, int64_t now):
        cdef int64_t r = rp_node_heartbeat(&self.n, slot, seq, idle, now)
        if r < 0:
            raise IndexError(slot)
        return r

    @property
    def nack_pending(self):
        return self.n.nack_pending

    def clear_nack(self):
        self.n.nack_pending = 0

    # ---- send ------------------------------------------------------------

    def publish(self, const uint8_t[::1] payload not None, label=None, int64_t now=0,
                uint32_t stream=0):
        """Publish one message on ``stream``; returns its seq (of its first
        fragment when it is larger than a datagram).  Raises BlockingIOError
        on back-pressure (send buffer or FIFO-SRB window full), ValueError if
        it is larger than max_message or its label is reserved, OSError when
        a logger could not log it."""
        cdef uint64_t lab
        cdef uint8_t z = 0
        publish_label(label, &lab)
        cdef int64_t r = rp_node_publish_ext(&self.n, &payload[0] if payload.shape[0] else &z,
                                             payload.shape[0], lab, stream, now)
        return published(r, payload.shape[0], self.n.out.mtu)

    # ---- streams and large messages (streams.h, frag.h) -------------------

    def subscribe(self, uint32_t stream):
        """Deliver ``stream`` here (after only_streams(True))."""
        if rp_streams_set(&self.n.streams, stream, 1) != RP_OK:
            raise MemoryError("stream table full")

    def unsubscribe(self, uint32_t stream):
        if rp_streams_set(&self.n.streams, stream, 0) != RP_OK:
            raise MemoryError("stream table full")

    def only_streams(self, bint on):
        """on: deliver only the subscribed streams; off: every stream."""
        rp_streams_all(&self.n.streams, not on)

    def wants_stream(self, uint32_t stream):
        return bool(rp_streams_wants(&self.n.streams, stream))

    def stream_stats(self):
        """{stream: {subscribed, received, filtered, delivered, bytes}}; ids
        beyond the table's bound are summed under "other"."""
        cdef uint32_t i
        cdef rp_stream_t *e
        out = {}
        for i in range(self.n.streams.n):
            e = &self.n.streams.v[i]
            out[e.id] = dict(subscribed=bool(self.n.streams.all or e.subscribed),
                             received=e.received, filtered=e.filtered,
                             delivered=e.delivered, bytes=e.bytes)
        e = &self.n.streams.other
        if e.received or e.delivered:
            out["other"] = dict(subscribed=bool(self.n.streams.all), received=e.received,
                           filtered=e.filtered, delivered=e.delivered, bytes=e.bytes)
        return out

    def frag_stats(self):
        """Reassembly of large messages: whole messages, fragments taken,
        partials and their bytes now, the bound, and drops by reason."""
        cdef int i
        out = dict(whole=self.n.frag.whole, fragments=self.n.frag.fragments,
                   partial=self.n.frag.n, partial_bytes=self.n.frag.bytes,
                   bound=self.n.frag.max_bytes,
                   buffers_allocated=self.n.frag.buf_fresh, spare_bytes=self.n.frag.spare_bytes)
        for i in range(RP_FRAG_D__COUNT):
            out["dropped_" + rp_frag_drop_names[i].decode()] = self.n.frag.dropped[i]
        return out

    @property
    def max_message(self):
        return self.n.max_message

    @property
    def recv_need(self):
        """Bytes the next delivery needed when the last recv_batch's buffer
        was too small for it (0: none)."""
        return self.n.recv_need

    def publish_batch(self, const uint8_t[::1] payloads not None, const uint32_t[::1] lens not None,
                      const uint64_t[::1] labels=None, int64_t now=0, uint32_t stream=0):
        """Publish len(lens) messages laid out back to back; returns how many
        went out (fewer on back-pressure, or on a logger whose log refused
        a write: counter log_errors).  A label of 2**64-1 means none."""
        check_batch(payloads, lens, labels)
        cdef size_t k = lens.shape[0], done
        cdef const uint64_t *lp = labels_ptr(labels)
        cdef uint8_t z = 0
        with nogil:
            done = rp_node_publish_batch_ext(&self.n, &payloads[0] if payloads.shape[0] else &z,
                                             &lens[0] if k else NULL, lp, k, stream, now)
        return done

    def send_heartbeat(self, bint idle=True):
        return rp_node_send_heartbeat(&self.n, idle)

    def logger_ack(self, uint64_t upto):
        return rp_node_logger_ack(&self.n, upto)

    @property
    def next_seq(self):
        return self.n.next_seq

    @property
    def acked(self):
        return self.n.acked

    @property
    def last_publish(self):
        return self.n.last_publish

    # ---- repair ----------------------------------------------------------

    def serve(self, uint32_t sender, uint32_t inc, intervals, uint64_t dest, bint from_logger=False,
              int64_t now=0, bint want_gc=True):
        """Serve a request for ``intervals`` ((n,2) uint64) of (sender, inc)
        to dest.  Returns (repairs queued, GcNOTE intervals as a list)."""
        a = np.ascontiguousarray(intervals, dtype=np.uint64).reshape(-1, 2)
        cdef const uint64_t[:, ::1] v = a
        cdef rp_iset_t gc
        cdef size_t served
        cdef uint32_t i
        if rp_iset_init(&gc, 8, 0) != RP_OK:
            raise MemoryError()
        try:
            served = rp_node_serve(&self.n, sender, inc,
                                   <const rp_ival_t *>&v[0, 0] if a.shape[0] else NULL, a.shape[0],
                                   dest, from_logger, &gc if want_gc else NULL, NULL, now)
            return served, [(gc.v[i].lo, gc.v[i].hi) for i in range(gc.n)]
        finally:
            rp_iset_free(&gc)

    def serve_missing(self, const uint8_t[::1] body not None, uint64_t src, unsigned how,
                      int64_t now=0, own_how=None):
        """Serve every MISSING section of ``body`` (the sections of a GOSSIP
        after its fixed part, or an RTX body) to src, in one call: REPAIRs,
        PURGED notices and, with SERVE_GCNOTE, the GcNOTEs for ids received
        here but held no more.  ``how`` (SERVE_* bits) applies to peers'
        streams, ``own_how`` (default: how) to our own.  Sections whose
        digest does not decode are skipped.  Returns a ServedSection per
        section served; raises wire.WireError if the sections' framing is
        malformed (then nothing is served)."""
        cdef unsigned own = how if own_how is None else <unsigned>own_how
        cdef rp_served_t out
        cdef int r
        cdef uint8_t z = 0
        cdef size_t i
        cdef rp_served_sec_t *sec
        rp_served_init(&out)
        try:
            with nogil:
                r = rp_node_serve_missing(&self.n, &body[0] if body.shape[0] else &z, body.shape[0],
                                          src, how, own, now, &out)
            if r == RP_EINVAL:
                from rpbcast.core.wire import Reason, WireError
                raise WireError(Reason.BODY)
            if r < 0:
                raise MemoryError()
            result = []
            for i in range(out.nsec):
                sec = &out.sec[i]
                result.append(ServedSection(
                    sec.sender, sec.inc, _intervals(out.iv + sec.asked, sec.nasked),
                    _intervals(out.iv + sec.left, sec.nleft),
                    out.iv[sec.gc].lo if sec.ngc else None, sec.gc_ids, sec.served))
            return result
        finally:
            rp_served_free(&out)

    def missing(self, uint32_t slot, int phase=PHASE_GOSSIP, uint64_t frm=0,
                uint64_t upto=0xFFFFFFFFFFFFFFFF, size_t max_intervals=1 << 16):
        """Missing ids of a peer in a phase, as an (n,2) uint64 array."""
        out = np.empty((max_intervals, 2), dtype=np.uint64)
        cdef uint64_t[:, ::1] o = out
        cdef size_t k = rp_node_missing(&self.n, slot, phase, frm, upto,
                                        <rp_ival_t *>&o[0, 0] if max_intervals else NULL,
                                        max_intervals)
        return out[:k]

    def missing_digest(self, uint32_t slot, int phase, size_t budget, uint64_t frm=0,
                       uint64_t upto=0xFFFFFFFFFFFFFFFF):
        """Digest of a peer's missing ids in a phase within [frm, upto], at
        most ``budget`` bytes.  Returns (digest bytes, covered_upto, n_ids)
        or (b"", None, 0) when nothing is missing there."""
        cdef rp_peer_t *p = self.peer_at(slot)
        if upto >= p.st.next:
            if p.st.next == 0:
                return b"", None, 0
            upto = p.st.next - 1
        if frm > upto:
            return b"", None, 0
        cdef size_t cap = 4096
        cdef rp_ival_t *iv = <rp_ival_t *>malloc(cap * sizeof(rp_ival_t))
        cdef uint8_t *buf = <uint8_t *>malloc(budget if budget else 1)
        cdef size_t k, w, nout = 0, i
        cdef uint64_t cov = 0, nids = 0
        if iv == NULL or buf == NULL:
            free(iv)
            free(buf)
            raise MemoryError()
        try:
            k = rp_node_missing(&self.n, slot, phase, frm, upto, iv, cap)
            if k == 0:
                return b"", None, 0
            if k == cap:
                upto = iv[k - 1].hi      # window ends where the intervals we hold end
            w = rp_digest_encode(iv, k, frm, upto, buf, budget, &cov, &nout)
            if w == 0:
                return b"", None, 0
            for i in range(nout):
                nids += iv[i].hi - iv[i].lo + 1
            return buf[:w], cov, nids
        finally:
            free(iv)
            free(buf)

    def mark_inflight(self, uint32_t slot, uint64_t lo, uint64_t hi):
        cdef rp_peer_t *p = self.peer_at(slot)
        rp_iset_add(&p.inflight, lo, hi)

    def logger_inflight_mark(self, uint32_t slot, uint64_t lo, uint64_t hi):
        """Ids [lo, hi] of slot were asked of a logger: leave them out of
        PHASE_LOGGER_NEW until they arrive or the wait is given up."""
        self.peer_at(slot)
        rp_node_lflight_mark(&self.n, slot, lo, hi)

    def logger_inflight(self, uint32_t slot):
        """Ids of slot asked of a logger and still missing (what arrived is
        dropped from the set first)."""
        self.peer_at(slot)
        return rp_node_lflight_prune(&self.n, slot)

    def logger_inflight_clear(self, uint32_t slot):
        """Stop waiting: every id asked of a logger may be asked again."""
        self.peer_at(slot)
        rp_node_lflight_clear(&self.n, slot)

    def inflight(self, uint32_t slot):
        """Gossip-phase ids of slot asked of peers and still missing there
        (what arrived or went to the logger phase is dropped first)."""
        self.peer_at(slot)
        return rp_node_inflight_prune(&self.n, slot)

    def inflight_first(self, uint32_t slot):
        """(first, last) of the lowest run of gossip-phase ids of slot
        asked of peers and still missing (call inflight first: it drops
        what arrived), or None."""
        cdef rp_peer_t *p = self.peer_at(slot)
        if not p.inflight.n:
            return None
        return (p.inflight.v[0].lo, p.inflight.v[0].hi)

    def uninflight(self, uint32_t slot, uint64_t lo, uint64_t hi):
        """Stop waiting for ids [lo, hi] of slot asked of peers (their
        repair was lost): the next pull asks them again."""
        cdef rp_peer_t *p = self.peer_at(slot)
        rp_iset_remove(&p.inflight, lo, hi)

    def clear_inflight_of(self, uint32_t slot):
        """Stop waiting for the ids of slot asked of peers: ask again."""
        cdef rp_peer_t *p = self.peer_at(slot)
        rp_iset_clear(&p.inflight)

    def clear_inflight(self):
        cdef uint32_t i
        for i in range(self.n.npeers):
            if self.n.peers[i] != NULL:
                rp_iset_clear(&self.n.peers[i].inflight)

    def to_logger_phase(self, uint32_t slot, uint64_t lo, uint64_t hi):
        return rp_node_to_logger_phase(&self.n, slot, lo, hi)

    def forget(self, uint32_t slot, uint64_t lo, uint64_t hi):
        return rp_node_forget(&self.n, slot, lo, hi)

    def gossip_cursor(self, uint32_t slot):
        cdef rp_peer_t *p = self.peer_at(slot)
        return p.gossip_cursor

    def set_gossip_cursor(self, uint32_t slot, uint64_t v):
        cdef rp_peer_t *p = self.peer_at(slot)
        p.gossip_cursor = v

    def stable(self, uint32_t slot, uint64_t below):
        """Stability: every seq < below of slot (SELF_SLOT: our own stream)
        reached every live member; release them from the gossip and send
        buffers.  Returns entries released."""
        return rp_node_stable(&self.n, slot, below)

    # ---- FIFO-SRB ------------------------------------------------------------

    def srb_safe(self, uint32_t slot, uint64_t upto):
        """Every seq < upto of slot (SELF_SLOT: ours) is safe (held by more
        than f members): purge the obsolete messages it supersedes (TP5).
        Returns messages purged."""
        return rp_node_srb_safe(&self.n, slot, upto)

    def srb_stable(self, uint64_t upto):
        """Every own seq < upto reached every member: it leaves the window."""
        return rp_node_srb_stable(&self.n, upto)

    def srb_purged(self, uint32_t slot, uint64_t seq, uint64_t sup, int64_t now=0):
        return bool(rp_node_srb_purged(&self.n, slot, seq, sup, now))

    def srb_window(self, uint32_t slot, uint64_t low, int64_t now=0):
        return rp_node_srb_window(&self.n, slot, low, now)

    def srb_purged_by(self, uint32_t sender, uint32_t inc, uint64_t seq):
        cdef uint64_t sup = 0
        return sup if rp_node_srb_purged_by(&self.n, sender, inc, seq, &sup) else None

    @property
    def srb_state(self):
        """(low, next, safe, stable) of our FIFO-SRB window, or None."""
        if self.n.srbw == NULL:
            return None
        return (self.n.srbw.low, self.n.srbw.next, self.n.srbw.safe, self.n.srbw.stable)

    def set_conflate(self, int mode):
        """0 off; 1: keep the latest value per (sender, label); 2: also stop
        queueing labelled messages for delivery (read them via latest())."""
        if mode not in (0, 1, 2):
            raise ValueError("conflate mode is 0, 1 or 2")
        if mode and not self.n.conflate:
            if rp_conflate_init(&self.n.latest) != RP_OK:
                raise MemoryError()
        elif not mode and self.n.conflate:
            rp_conflate_free(&self.n.latest)
        self.n.conflate = mode

    def latest(self, uint64_t label, sender=None):
        """(sender, inc, seq, payload bytes, t) of the newest value of label
        (from `sender`, or the newest over all senders), or None."""
        if not self.n.conflate:
            raise ValueError("conflation is off: set_conflate(1) first")
        cdef uint32_t i
        cdef rp_cval_t *v
        best = None
        if sender is not None:
            k = rp_conflate_find(&self.n.latest, sender, label)
            if k < 0:
                return None
            v = &self.n.latest.v[k]
            return (v.sender, v.inc, v.seq, v.buf[:v.len] if v.len else b"", v.t)
        for i in range(self.n.latest.n):
            v = &self.n.latest.v[i]
            if v.label == label and (best is None or v.t > best[4]):
                best = (v.sender, v.inc, v.seq, v.buf[:v.len] if v.len else b"", v.t)
        return best

    def snapshot(self):
        """{(sender, label): (inc, seq, payload)} of every latest value."""
        if not self.n.conflate:
            raise ValueError("conflation is off: set_conflate(1) first")
        cdef uint32_t i
        cdef rp_cval_t *v
        out = {}
        for i in range(self.n.latest.n):
            v = &self.n.latest.v[i]
            out[(v.sender, v.label)] = (v.inc, v.seq, v.buf[:v.len] if v.len else b"")
        return out

    def round(self, uint32_t gclimit, uint64_t max_bytes=0):
        """One gossip round: age the gossip buffer.  Returns entries dropped."""
        return rp_node_round(&self.n, gclimit, max_bytes)

    @property
    def rounds(self):
        return self.n.round

    # ---- heartbeat signature ---------------------------------------------

    @property
    def hb_signature(self):
        return self.n.hbsig.sig

    def idle_entries(self):
        """[(id, inc, seq)] of senders known idle (self included): the
        heartbeat list the signature covers."""
        out = []
        cdef uint32_t i
        cdef rp_peer_t *p
        if self.n.hbsig.cap and self.n.hbsig.present[0] and self.n.next_seq:
            out.append((self.n.id, self.n.inc, self.n.next_seq - 1))
        for i in range(self.n.npeers):
            p = self.n.peers[i]
            if p != NULL and p.idle_seq != RP_NOT_IDLE:
                out.append((p.id, p.inc, p.idle_seq))
        return out

    # ---- delivery --------------------------------------------------------

    @property
    def pending(self):
        return rp_node_pending(&self.n)

    def recv_batch(self, size_t max_n, uint8_t[::1] buf not None, int64_t now=0,
                   uint32_t[::1] streams=None):
        """Deliver up to max_n messages: payloads back to back into ``buf``.
        Returns (count, senders, incs, seqs, labels, rx_times, offs, lens) as
        NumPy arrays of length count; each message's stream id goes into
        ``streams`` when given (at least max_n long)."""
        cdef Deliveries d = Deliveries(max_n)
        cdef size_t k
        with nogil:
            k = d.take(&self.n, buf, now)
        d.copy_streams(streams, k)
        return d.result(k)

    @property
    def store_head(self):
        """Ticket the next stored message gets (take_labelled's cursor)."""
        return self.n.store.head

    def take_labelled(self, uint64_t label, uint64_t cursor, bint hide=True):
        """The messages stored from ticket ``cursor`` on -- received or
        published here -- whose label is ``label``: (next cursor,
        [(sender, inc, seq, stored at, payload bytes)]).  With ``hide`` they
        lose their delivery hold, so the application is never handed them
        (an extension delivers them itself: atomic delivery, at commit).
        The walk is C; Python sees only the matches."""
        cdef rp_mstore_t *st = &self.n.store
        cdef uint64_t c = cursor if cursor > st.tail else st.tail
        cdef rp_msent_t *e
        cdef rp_peer_t *p
        cdef const uint8_t *d
        out = []
        while c < st.head:
            e = rp_mstore_entry(st, c)
            if e.label == label:
                d = rp_mstore_data(st, e)
                if e.sender == RP_SELF_SLOT:
                    out.append((self.n.id, self.n.inc, e.seq, e.t, d[:e.len]))
                else:
                    p = rp_node_peer_at(&self.n, e.sender)
                    if p != NULL:
                        out.append((p.id, p.inc, e.seq, e.t, d[:e.len]))
                if hide:
                    e.holds &= ~(<uint32_t>RP_MS_DELIVER)
            c += 1
        return c, out

    # ---- output ----------------------------------------------------------

    def emit(self, uint64_t dest, uint8_t type, uint8_t flags, uint32_t sender, uint32_t inc,
             uint32_t aux, uint64_t seq, const uint8_t[::1] body not None):
        """Queue one control message (built by the control plane).  Returns
        False if the outbox dropped it (counted: unicast to an address that
        has not proven it receives there, beyond its credit, or the outbox
        at reply_cap); raises ValueError if the body cannot fit the MTU."""
        cdef size_t n = body.shape[0]
        if n > rp_out_max_body(&self.n.out):
            raise ValueError(f"a {n}-byte body does not fit the MTU ({self.n.out.mtu})")
        cdef uint8_t *p = rp_node_out_msg(&self.n, dest, type, flags, sender, inc, aux, seq, n)
        if p == NULL:
            return False
        if n:
            memcpy(p, &body[0], n)
        return True

    def room(self, uint64_t dest):
        return rp_out_room(&self.n.out, dest)

    @property
    def out_pending(self):
        return rp_out_pending(&self.n.out)

    def datagrams(self):
        """Finished datagrams as [(dest, bytes)], clearing the outbox."""
        rp_out_flush(&self.n.out)
        cdef size_t i
        out = [(self.n.out.d[i].dest, self.n.out.buf[self.n.out.d[i].off:self.n.out.d[i].off + self.n.out.d[i].len])
               for i in range(self.n.out.n)]
        rp_out_clear(&self.n.out)
        return out

    # ---- counters --------------------------------------------------------

    def counters(self):
        cdef int i
        d = {_COUNTER_NAMES[i]: self.n.c[i] for i in range(RP_C__COUNT)}
        d["store_bytes"] = rp_mstore_bytes_used(&self.n.store)
        d["streams_stranger"] = self.n.npool       # non-members' streams known now (the pool)
        d["store_entries"] = rp_mstore_count(&self.n.store)
        d["gossip_buffer_bytes"] = self.n.store.gossip_bytes
        d["gossip_buffer_entries"] = self.n.store.gossip_count
        d["store_evicted"] = self.n.store.n_evicted
        d["out_dgrams"] = self.n.out.n_dgrams
        d["out_bytes"] = self.n.out.n_bytes
        # replies dropped rather than sent (outbox.h, addrcheck.h)
        d["reply_dropped_full"] = self.n.out.drop_full_msgs
        d["reply_dropped_full_bytes"] = self.n.out.drop_full_bytes
        if self.n.out.ac != NULL:
            d["reply_capped_unvalidated"] = self.n.out.ac.st.capped_msgs
            d["reply_capped_unvalidated_bytes"] = self.n.out.ac.st.capped_bytes
            d["requests_unvalidated"] = self.n.out.ac.st.requests
            d["cookies_sent"] = self.n.out.ac.st.cookies_sent
            d["cookies_echoed"] = self.n.out.ac.st.cookies_echoed
            d["cookies_bad"] = self.n.out.ac.st.cookies_bad
            d["requests_not_admitted"] = self.n.out.ac.st.not_admitted
        d["trace_dropped"] = self.n.trace.dropped
        if self.n.reqlimit != NULL:
            # repairs one requester's own rate refused, requesters evicted (reqlimit.h)
            d["serve_limited_requester"] = self.n.reqlimit.n_limited
            d["requesters_evicted"] = self.n.reqlimit.n_evicted
            d["requesters"] = self.n.reqlimit.n
        if self.n.log != NULL:
            # what the log's recovery found and what later reads found
            # damaged: lost for good here, never silently (docs/api.md)
            d["log_damaged_records"] = self.n.log.rec_damaged_records + self.n.log.rd_damaged
            d["log_damaged_ids"] = self.n.log.rec_damaged_ids
            d["log_damaged_bytes"] = self.n.log.rec_damaged_bytes
            d["log_repaired_records"] = self.n.log.rec_repaired
            d["log_truncated_bytes"] = self.n.log.rec_truncated_bytes
            d["log_synced"] = self.n.log.synced
            d["catchup_pending"] = rp_catchup_pending(&self.n)
        return d

    @property
    def logged(self):
        """Records this logger appended to its log."""
        return self.n.c[RP_C_LOGGED]

    def rx_reasons(self):
        cdef int i
        return {_REASON_NAMES[i]: self.n.rx_reason[i] for i in range(1, RP_WR__COUNT)
                if self.n.rx_reason[i]}

    def traffic(self):
        """{type name: (msgs in, bytes in, msgs out, bytes out)}."""
        cdef int i
        return {_TYPE_NAMES[i]: (self.n.msgs_in[i], self.n.bytes_in[i], self.n.msgs_out[i],
                                 self.n.bytes_out[i])
                for i in range(RP_T__COUNT)
                if self.n.msgs_in[i] or self.n.msgs_out[i]}

    def trace_event(self, int64_t t, uint8_t ev, uint32_t sender, uint32_t inc, uint64_t seq,
                    uint32_t size, uint64_t peer, uint32_t aux):
        """Record a control-plane event (no-op unless tracing)."""
        if self.n.tracing:
            rp_trace(&self.n.trace, t, ev, sender, inc, seq, size, peer, aux)

    @property
    def tracing(self):
        return bool(self.n.tracing)

    def take_trace(self):
        """Recorded trace events as a dict of NumPy columns; clears them.  A
        row stands for `count` consecutive ids seq .. seq + count - 1
        (docs/traces.md)."""
        cdef size_t k = self.n.trace.n
        cdef rp_trace_t *tr = &self.n.trace
        if k == 0:
            return None
        d = {
            "t_ns": np.array(<int64_t[:k]>tr.t, copy=True),
            "event": np.array(<uint8_t[:k]>tr.ev, copy=True),
            "sender": np.array(<uint32_t[:k]>tr.sender, copy=True),
            "inc": np.array(<uint32_t[:k]>tr.inc, copy=True),
            "seq": np.array(<uint64_t[:k]>tr.seq, copy=True),
            "size": np.array(<uint32_t[:k]>tr.size, copy=True),
            "peer": np.array(<uint64_t[:k]>tr.peer, copy=True),
            "aux": np.array(<uint32_t[:k]>tr.aux, copy=True),
            "count": np.array(<uint32_t[:k]>tr.count, copy=True),
        }
        rp_trace_clear(tr)
        return d


cdef object _intervals(const rp_ival_t *iv, size_t n):
    """n intervals as an (n, 2) uint64 array (a copy)."""
    out = np.empty((n, 2), dtype=np.uint64)
    cdef uint64_t[:, ::1] o = out
    if n:
        memcpy(&o[0, 0], iv, n * sizeof(rp_ival_t))
    return out


# ---- publishing and receiving: shared with the UDP driver (node.pxd) --------

cdef int publish_label(object label, uint64_t *out) except -1:
    """The C label of publish(label=...): NOLABEL for None; 2**64-1 itself
    is reserved (it is how the core spells "no label")."""
    if label is None:
        out[0] = RP_SRB_NOLABEL
        return 0
    out[0] = <uint64_t>label
    if out[0] == RP_SRB_NOLABEL:
        raise ValueError("label 2**64-1 is reserved")
    return 0


cdef int64_t published(int64_t r, size_t nbytes, uint32_t mtu) except -1:
    """rp_node_publish's result: the seq, or the error it stands for raised."""
    if r >= 0:
        return r
    if r == RP_EFULL:
        raise BlockingIOError("back-pressure: the send buffer is full of unacknowledged messages "
                              "(is a logger reachable?) or the FIFO-SRB window is closed")
    if r == RP_EINVAL:
        raise ValueError(f"a {nbytes}-byte message cannot be sent: larger than max_message_size, "
                         "a reserved label (2**64-3), or larger than a datagram "
                         f"({mtu}-byte MTU) under FIFO-SRB (srb_window)")
    if r == RP_EIO:
        raise OSError("this logger could not log its own message (see counter log_errors); "
                      "nothing was sent")
    raise MemoryError()


cdef int check_batch(const uint8_t[::1] payloads, const uint32_t[::1] lens,
                     const uint64_t[::1] labels) except -1:
    """publish_batch's arguments: lens within the payloads, a label each."""
    cdef size_t k = lens.shape[0], i, total = 0
    for i in range(k):
        total += lens[i]
    if total > <size_t>payloads.shape[0]:
        raise ValueError("lens add up to more than the payload buffer")
    if labels is not None and <size_t>labels.shape[0] != k:
        raise ValueError("labels must have one entry per message")
    return 0


cdef const uint64_t *labels_ptr(const uint64_t[::1] labels):
    return &labels[0] if labels is not None and labels.shape[0] else NULL


cdef class Deliveries:
    """The columns one recv_batch fills: NumPy arrays of max_n entries."""

    def __cinit__(self, size_t max_n):
        self.max_n = max_n
        self.senders = np.empty(max_n, np.uint32)
        self.incs = np.empty(max_n, np.uint32)
        self.seqs = np.empty(max_n, np.uint64)
        self.labels = np.empty(max_n, np.uint64)
        self.rx_times = np.empty(max_n, np.int64)
        self.offs = np.empty(max_n, np.uint32)
        self.lens = np.empty(max_n, np.uint32)
        self.s_, self.i_, self.o_, self.l_ = self.senders, self.incs, self.offs, self.lens
        self.q_, self.b_, self.t_ = self.seqs, self.labels, self.rx_times
        self.streams = np.empty(max_n, np.uint32)
        self.st_ = self.streams

    cdef size_t take(self, rp_node_t *n, uint8_t[::1] buf, int64_t now) noexcept nogil:
        """Deliveries of n into the columns, payloads into buf; how many."""
        if not self.max_n:
            return 0
        return rp_node_recv_ex(n, self.max_n, &self.s_[0], &self.i_[0], &self.q_[0], &self.b_[0],
                               &self.t_[0], &self.o_[0], &self.l_[0], &self.st_[0],
                               &buf[0] if buf.shape[0] else NULL, buf.shape[0], now)

    cdef int copy_streams(self, uint32_t[::1] out, size_t k) except -1:
        """The stream ids of the last take into out (when given)."""
        cdef size_t i
        if out is None:
            return 0
        if <size_t>out.shape[0] < k:
            raise ValueError("streams array shorter than the deliveries")
        for i in range(k):
            out[i] = self.st_[i]
        return 0

    cdef tuple result(self, size_t k):
        """(count, senders, incs, seqs, labels, rx_times, offs, lens), k long."""
        return (k, self.senders[:k], self.incs[:k], self.seqs[:k], self.labels[:k],
                self.rx_times[:k], self.offs[:k], self.lens[:k])


def ed25519_public(priv):
    """The Ed25519 public key (32 bytes) of a 32-byte private seed."""
    cdef bytes p = bytes(priv)
    cdef uint8_t out[32]
    if len(p) != 32 or rp_auth_ed25519_public(<const uint8_t *>p, out) != 0:
        raise ValueError("an Ed25519 private seed is 32 bytes")
    return bytes(out[:32])
