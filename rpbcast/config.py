"""Node configuration: one dataclass, validated, loadable from TOML.

Every check raises ``ConfigError`` with a sentence that says what to change.
Durations are in seconds here; the engine converts them to integer
nanoseconds.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Callable, Optional


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says what to fix."""


ROLES = ("member", "logger")
TRANSPORTS = ("multicast", "unicast")
RECEIVE_MODES = ("wait", "spin")


def _is_ipv4_text(text: str) -> bool:
    import ipaddress
    try:
        ipaddress.IPv4Address(text)
        return True
    except ValueError:
        return False
SELECTIONS = ("uniform", "linear", "quadratic")
DELIVERY = ("unordered", "fifo")
FLOW_CONTROL = ("loggers", "receivers")
FSYNC = ("always", "interval", "never")
PROTOCOLS = ("rpbcast", "pbcast", "lbrm", "srm")
MAC_IMPLS = ("auto", "ipsec-mb", "openssl")   # Config.mac_impl


@dataclass
class MemberSpec:
    """A member known from configuration (static membership)."""

    node_id: int
    addr: object              # "a.b.c.d:port", or the transport's integer form
    role: str = "member"
    rank: int = -1            # GSGC member index; -1 = assigned by order


@dataclass
class Config:
    # the protocol the node runs (docs/protocols.md): "rpbcast", or one of
    # the thesis's baselines on the same data plane -- "pbcast" (gossip,
    # probabilistic: ids nobody holds any more are reported lost), "lbrm"
    # (one logger, sender holds until it acknowledges), "srm" (multicast
    # NACKs and repairs, no loggers).  The baselines need static membership
    # (join = False); every member must run the same protocol.
    protocol: str = "rpbcast"
    # the protocol's own parameters (rpbcast.baselines: PbcastParams,
    # LbrmParams, SrmParams); rpbcast takes none
    protocol_params: dict = field(default_factory=dict)

    # identity
    group: int = 1
    node_id: int = 1
    incarnation: Optional[int] = None    # None: derived at start (persisted counter or clock)
    role: str = "member"
    addr: int = 0                         # this node's unicast address (opaque)

    # membership: static list (may be empty when joining dynamically)
    members: list = field(default_factory=list)
    join: bool = False                    # run the join protocol (§5.3) at start
    sponsors: int = 2                     # k sponsors to become a member
    join_interval: float = 0.05
    member_timeout: float = 10.0          # not heard from for this long: not a gossip target
    # A member that starts (or restarts) while streams are running: False --
    # it answers for what follows its start (t_join, §5.3: the stream
    # positions of the first member that answers, a logger first); True --
    # also for everything before, fetched from the loggers.  (Node(resume=)
    # overrides both for the streams it names.)
    catch_up: bool = False

    # data path
    mtu: int = 1472                       # largest datagram we send
    store_bytes: int = 64 << 20           # message store (send + gossip buffers + delivery queue)
    store_entries: int = 1 << 20
    prefault: bool = False                # touch the whole store at start (its memory at once):
                                          # no page fault on the data path in its first lap
    max_gap: int = 1 << 32                # a seq jump beyond this is rejected as bogus
    delivery: str = "unordered"
    deliver_own: bool = False
    # Large messages: a payload larger than a datagram goes out as fragments
    # (each an ordinary message, repaired and logged like any) and is
    # delivered whole (docs/api.md "Large messages").  The message and its
    # fragments must fit the store: at most store_bytes / 2.  0: the smaller
    # of 16 MiB and store_bytes / 2 (Config.message_cap).
    max_message_size: int = 0
    reassembly_bytes: int = 0             # bound on large messages held here outside the store (partial,
                                          # or whole and not yet taken); 0 = max(2 x the cap, store_bytes / 2)

    # gossip repair (thesis Table 7.1)
    gossip_interval: float = 0.25
    gc_limit: int = 10                    # rounds a message stays in the gossip buffer
    gossip_buffer_bytes: int = 32 << 20   # byte bound on the gossip buffer
    selection: str = "linear"             # target selection by RTT: uniform, linear, quadratic
    immediate_nack: bool = True           # pull as soon as a gap is seen (§4.1)
    nack_min_interval: float = 0.001      # at most one immediate pull per interval
    nack_retry: float = 0.003             # least wait before a pull is asked again (also >= 2 x RTT; doubling)
    nack_target: str = "auto"             # immediate pulls go to: "sender" (lowest latency), "random"
                                          # (the thesis's gossip target; no implosion at the sender),
                                          # "auto" = sender up to nack_sender_max members, random above
    nack_sender_max: int = 16
    repair_rate: float = 0.0              # repairs/s this node serves (0 = unlimited; §7.1)
    repair_burst: float = 0.0
    requester_repair_rate: float = 100_000.0  # repairs/s one requester (source address) may take of
                                          # this node's repairs; beyond, its ids are left unserved and
                                          # others still get theirs (csrc/reqlimit.h; 0 = no per-
                                          # requester limit).  A logger's catch-up is paced by
                                          # catchup_rate instead
    requester_repair_burst: float = 0.0   # tokens one requester saves up (0 = 0.1 s worth)
    repair_requesters: int = 1024         # requesters tracked for that (least recently used evicted)
    max_scan: int = 65536                 # ids examined per requested section
    max_streams: int = 4096               # streams (sender incarnations) a node keeps state for; at the
                                          # bound one not heard from its own node, or a dead one, is retired
                                          # (streams_retired), else the new one is refused (streams_refused)
    max_streams_per_node: int = 8         # streams (incarnations) of one node id kept; the same retirement
                                          # (streams_refused_node); docs/security.md, "Bounds"
    max_stranger_streams: int = 64        # streams of node ids that are not members (not yet, or no more)
                                          # kept, apart from max_streams: they compete only among
                                          # themselves, the least recently heard retired
                                          # (streams_retired_stranger); docs/security.md, "Bounds"
    amplify_factor: float = 3.0           # replies to an address that has not proven it receives there
                                          # (not a member, no cookie echoed): at most this many times the
                                          # bytes it sent (docs/security.md, Amplification; 0 = no cap)
    unvalidated_rate: float = 2000.0      # control messages/s taken from addresses not validated, all
                                          # together; beyond, dropped unread (a flood; 0 = no limit)
    reply_outbox_bytes: int = 8 << 20     # replies are dropped (counted) while the outbox holds this
                                          # many bytes; the own stream never is (0 = no cap)
    ping_interval: float = 1.0            # RTT probes for biased selection

    # senders
    idle_after: float = 0.005             # silence before the idle heartbeat (§5.1)
    tail_probe: float = 0.0002            # silence before a heartbeat that shows a lost last message
                                          # at once (a tail-loss probe; wait >= 2 x RTT; 0 = none)
    ack_loggers: int = 1                  # loggers that must hold a message before it leaves the send buffer
    logger_retx_timeout: float = 0.5      # resend unacknowledged messages to a logger after this
    linger: float = 5.0                   # Node.close() waits up to this long for what flow control
                                          # waits for to acknowledge every published message
    # What a sender's send buffer waits for before a message may leave it
    # (and what publish() blocks on when the buffer is full):
    #   "loggers"   -- a logger's acknowledgment (§3.1).  Without loggers
    #                  nothing is waited for: messages live as long as the
    #                  gossip buffer keeps them (gc_limit, gossip_buffer_bytes),
    #                  and a receiver that falls further behind is told they
    #                  are lost.
    #   "receivers" -- also every live receiver's report that it has the
    #                  message: a sender never runs further ahead of its
    #                  slowest receiver than its store holds, so a loggerless
    #                  group at line rate loses nothing.  Receivers report
    #                  every flow_report_interval (a stream still flowing
    #                  once it moved send_window / 64, at most every 16
    #                  intervals and at its pause); a receiver stops holding
    #                  senders back only once declared failed (GSGC's
    #                  failure detector, or silent for flow_timeout of the
    #                  sender's own running time: a stall is not a failure).
    #                  Every member must use the same setting.
    flow_control: str = "loggers"
    # flow_commit (with "receivers"): a receiver reports only what its
    #                  application committed with Node.commit() -- what it has
    #                  made durable itself -- so that, without a logger, a
    #                  receiver that crashes and resumes still gets every
    #                  message it had received but not yet checkpointed.  An
    #                  application that never commits holds its senders back.
    flow_commit: bool = False
    flow_report_interval: float = 0.002
    flow_timeout: float = 10.0
    # Send window: own messages a sender may have in flight beyond what
    # flow control waits for (the loggers' acknowledgment; with "receivers"
    # also every receiver's report).  Beyond it publish back-pressures
    # (BlockingIOError, a short publish_batch, publish(timeout=) waits,
    # apublish/writable await) instead of queueing up to the whole store:
    # at line rate that queue was seconds of latency.  0 = no window (the
    # store is the only bound).  The default is measured (docs/performance.md,
    # "Bounded queueing"): the default stress keeps 0.9-1.0 of the unbounded
    # rate with p99 of tens of ms instead of seconds; smaller windows buy a
    # lower p99 with throughput (8192: p99 ~5 ms at 0.3 of the rate).
    send_window: int = 1 << 17
    # Flow window: own messages a sender may have in flight beyond the
    # least frontier its members acknowledged in the data plane (FLOWACK,
    # csrc/flowack.h: what a receiver's application has taken -- received
    # less its delivery queue -- acked by the take itself and by the loop's
    # receive batch every flow_ack_every messages, or when nothing waits --
    # no Python timer, so the feedback is ~0.1-1 ms, not the 2 ms report
    # interval plus timer lag).
    # It bounds the receivers' queueing (the latency) where send_window
    # bounds what waits for release (loggers, "receivers" reports); a member
    # behind and silent for flow_ack_timeout stops holding the window (a
    # crashed receiver must not stop the sender; reliability is the release
    # strategy's business, not this window's).  0 = off.  Default 4096: with
    # the stores pre-touched (`prefault`, which `rpbcast stress` sets), the
    # default stress kept 0.98-1.07x of the unwindowed rate of the build
    # before it at p99 4-6 ms instead of ~0.1 s; 1 -> 1 0.90-1.05x at ~2 ms
    # with publisher and subscriber pinned apart, 0.77-0.83x unpinned
    # (docs/performance.md, "Pre-touching the store, and a default window").
    flow_window: int = 4096
    # ...and at most this many payload bytes beyond it (0: no byte bound).
    # The window counts seqs -- a fragment of a large message is one --, so
    # 4096 of them are 256 KiB of 64 B messages but 4-6 MiB of 1 KB ones or
    # of fragments: p99 10-16 ms at maximum rate.  2 MiB: 5.6-7.7 ms at
    # 0.85-1.17x of the rate, 64 B messages untouched (1 MiB: 4-5 ms at
    # 0.78-0.85x; docs/performance.md, "Large messages at maximum rate").
    # Off with flow_window = 0.
    flow_window_bytes: int = 2 << 20
    flow_ack_every: int = 0               # 0: flow_window / 8
    flow_ack_timeout: float = 0.1

    # loggers
    log_dir: Optional[str] = None
    fsync: str = "interval"
    fsync_interval: float = 0.005
    logger_ack_interval: float = 0.002
    logger_rtx_interval: float = 0.25     # receivers ask loggers this often (Table 7.1)
    log_retention: float = 3600.0         # timeout failsafe of logger GC (§5.2)
    log_min_keep: float = 30.0            # keep stable messages this long: a receiver that crashed
                                          # after receiving but before checkpointing gets them again
    logger_report_interval: float = 1.0   # members report their frontiers to a logger at least this often
    catchup_rate: float = 1_000_000.0     # msgs/s a logger streams from its log to one member catching
                                          # up (paced per requester; 0 = unpaced)

    # FIFO-SRB (semantic reliability)
    srb_window: int = 0                   # sender window w; 0 = off
    srb_f: int = 1                        # safe = received by more than f members
    srb_report_interval: float = 0.01     # receivers report their frontiers to senders this often
    # conflation for consumers: 1 keeps the latest value per (sender, label)
    # readable with Node.latest()/snapshot() as well as delivering; 2 also
    # stops queueing labelled messages for delivery (read them only there)
    conflate: int = 0

    # atomic (all-or-none) delivery, docs/atomic.md: Node.publish_atomic /
    # receive_atomic.  Every member runs it; loggers serve its records as data.
    atomic: bool = False
    atomic_dir: Optional[str] = None      # its journal (default: <state_dir>/atomic-<node_id>)
    atomic_timeout: float = 5.0           # publish_atomic's default: no decision by then aborts
    atomic_votes: str = "flat"            # "flat": every YES to the sender (paper 004);
                                          # "tree": through aggregators of atomic_fanout members
    atomic_fanout: int = 16
    atomic_vote_retry: float = 0.05       # a YES is repeated after this (>= 2 RTT), doubling
    atomic_boot_after: float = 1.0        # a voter silent this long (>= 8 RTT) is booted
    atomic_aggregate_delay: float = 0.005  # tree: an aggregator batches votes this long
    atomic_fsync: bool = True             # False: flush only (simulations; not crash-safe for power loss)
    atomic_retention: float = 600.0       # decisions are remembered (and journalled) this long
    atomic_ask_max: float = 2.0           # in doubt: ask for the decision at least this often

    # application hook: is a missing (sender, inc, lo, hi) still wanted?
    want: Optional[Callable] = None

    # network (the UDP transport; the engine itself never sees these)
    # IPv6: "[ff02::1234]:7400", "[::1]:0", "[fe80::1%eth0]:0" -- a node is of
    # one family, the group's: bind and members must be of the same
    group_addr: str = "239.255.77.1:7400"  # multicast group and port
    bind: str = "127.0.0.1:0"             # unicast address (port 0: pick one)
    interface: str = "lo"                 # multicast interface: name or IPv4 address; IPv6: name or
                                          # index (an int or digits), always explicit
    transport: str = "multicast"          # or "unicast": fan-out to the member list
    ttl: int = 1                          # multicast TTL: 1 reaches hosts on the interface's link (0: this
                                          # host only; more: across routers that forward the group)
    multicast_loop: bool = True           # receivers on this host see our multicast
    drop_own_copy: bool = True            # ... but our own receiving socket does not: a socket
                                          # filter drops it in the kernel (no wake-up per publish)
    rcvbuf: int = 8 << 20
    sndbuf: int = 8 << 20
    rx_batch: int = 64                    # datagrams per recvmmsg
    gso: bool = True                      # UDP GSO on send when the kernel has it
    gro: bool = True                      # UDP GRO on receive when the kernel has it
    busy_poll: bool = False               # spin instead of epoll (latency, burns a core)
    app_receive: bool = True              # a waiting receive()/poll() reads the sockets itself
                                          # (one thread wake-up per message instead of two)
    receive_spin_us: int = 0              # receive() retries the sockets this long before it
                                          # sleeps (0: no spin; burns the core meanwhile)
    publish_spin_us: int = 0              # a publisher waiting for room in the send/flow window
                                          # polls for the acknowledgments this long before it
                                          # sleeps (0: no spin; burns the core meanwhile)
    receive_mode: str = "wait"            # "spin": a waiting receive()/wait() never sleeps: it
                                          # polls the sockets without blocking for the whole wait (a
                                          # core per receiving thread; no sleep, no eventfd hop) and
                                          # the loop thread stays parked (timers, at most 10 ms)
    busy_poll_us: int = 0                 # SO_BUSY_POLL on the sockets (with SO_PREFER_BUSY_POLL):
                                          # receives poll the device queue this long (0: off)
    loop_cpu: Optional[int] = None        # pin the loop thread to this CPU (None: the scheduler's
                                          # choice; the application pins its own threads)
    timestamps: bool = False              # kernel receive timestamps
    drop_rate: float = 0.0                # in-process receive loss (tests without root)
    state_dir: Optional[str] = None       # where a restarted node finds its last incarnation

    # authenticated datagrams (docs/security.md): a key file makes every
    # datagram carry an AES-128-GMAC and drops every one without a valid MAC.
    # None: unkeyed (any host that can reach the group's ports is trusted).
    key_file: Optional[str] = None
    # encrypt the body of every datagram under the group key (AES-128-GCM,
    # the same one seal per datagram); needs key_file.  Payloads and control
    # contents are then unreadable without the key; headers stay clear.
    encrypt: bool = False
    # sign authority-bearing control messages (JOIN, LEAVE, MEMBERS, GAPNOTE,
    # GCNOTE, LOGACK) with this node's Ed25519 key and take them only with a
    # valid signature of their source: key holders cannot speak in another
    # member's name.  Needs key_file with a `sign` line and `pub` lines.
    signed: bool = False
    # who computes the MAC and the encryption (the same AES-128-GCM/GMAC on
    # every engine; docs/security.md, "Who computes it"): "auto" --
    # intel-ipsec-mb where the build has it and the CPU runs it in hardware,
    # else OpenSSL's EVP; "ipsec-mb" -- that library or the node does not
    # start (ConfigError); "openssl" -- OpenSSL's EVP always (a fifth to a
    # third of the speed per datagram).
    mac_impl: str = "auto"
    # the clock skew allowed between members' wall clocks, in seconds (hosts
    # NTP/PTP-synchronised within it).  MAC counters are timestamps: a
    # control datagram sealed more than this before the receiver first
    # heard its source (since the receiver started, or since it forgot the
    # source at the replay table's bound) is refused as "stale" -- a replay
    # captured before.  A member whose clock is behind by more is not
    # heard on the control plane by a newly started receiver until its
    # clock passes that point (rx_reasons "stale").  0 or None: no clock
    # floor (replays after a receiver restart are then accepted once).
    # docs/security.md, "Replay".
    replay_clock_skew: Optional[float] = 5.0

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------
    @property
    def message_cap(self) -> int:
        """The largest payload publish takes: max_message_size, or by
        default the smaller of 16 MiB and store_bytes / 2."""
        return self.max_message_size or min(16 << 20, self.store_bytes // 2)

    @property
    def reassembly_bound(self) -> int:
        """Bytes of large messages a receiver holds outside the store
        (partials, and whole ones the application has not taken):
        reassembly_bytes, or by default the larger of twice the message cap
        and half the store.  Flow control lets a sender run as far ahead as
        the store holds: while one message waits for a repaired fragment,
        those behind it must fit here, or their fragments are dropped and
        sent again (at 1 % loss on loopback a third of the bytes were)."""
        return self.reassembly_bytes or max(2 * self.message_cap, self.store_bytes // 2)

    def validate(self):
        def need(cond, msg):
            if not cond:
                raise ConfigError(msg)

        # Types first, so a wrong one is a ConfigError naming the key rather
        # than a TypeError from a comparison (or from deep inside the core).
        for name in _INT_FIELDS:
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool),
                 f"{name} must be an integer, got {v!r}")
        for name in _NUMBER_FIELDS:
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and not isinstance(v, bool),
                 f"{name} must be a number, got {v!r}")
        need(isinstance(self.members, (list, tuple)), f"members must be a list, got {self.members!r}")
        for m in self.members:
            need(isinstance(m, MemberSpec), f"members must be MemberSpec entries, got {m!r}")
            need(isinstance(m.node_id, int) and not isinstance(m.node_id, bool) and 0 < m.node_id < 2**32 - 2,
                 f"members: node_id must be an integer in 1..2**32-3, got {m.node_id!r}")
            need(isinstance(m.rank, int) and not isinstance(m.rank, bool) and -1 <= m.rank < 2**32,
                 f"member {m.node_id}: rank must be an integer (-1 = by order), got {m.rank!r}")
            need(isinstance(m.addr, (str, int)) and not isinstance(m.addr, bool),
                 f"member {m.node_id}: addr must be 'a.b.c.d:port', got {m.addr!r}")
        need(isinstance(self.group, int) and 0 <= self.group < 2**32,
             f"group must be an integer in 0..2**32-1, got {self.group!r}")
        need(isinstance(self.node_id, int) and 0 < self.node_id < 2**32 - 2,
             f"node_id must be an integer in 1..2**32-3, got {self.node_id!r}")
        need(self.incarnation is None or (isinstance(self.incarnation, int) and 0 <= self.incarnation < 2**32),
             f"incarnation must be None or an integer in 0..2**32-1, got {self.incarnation!r}")
        need(isinstance(self.protocol, str) and self.protocol in PROTOCOLS,
             f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        need(isinstance(self.protocol_params, dict) and all(isinstance(k, str) for k in self.protocol_params),
             f"protocol_params must be a table of parameter names, got {self.protocol_params!r}")
        need(self.protocol != "rpbcast" or not self.protocol_params,
             f"protocol_params: rpbcast takes none (got {', '.join(sorted(self.protocol_params))}); "
             "its settings are Config keys")
        need(self.role in ROLES, f"role must be one of {ROLES}, got {self.role!r}")
        need(self.selection in SELECTIONS, f"selection must be one of {SELECTIONS}, got {self.selection!r}")
        need(self.delivery in DELIVERY, f"delivery must be one of {DELIVERY}, got {self.delivery!r}")
        need(self.nack_target in ("auto", "sender", "random"),
             f"nack_target must be 'auto', 'sender' or 'random', got {self.nack_target!r}")
        need(self.fsync in FSYNC, f"fsync must be one of {FSYNC}, got {self.fsync!r}")
        need(self.flow_control in FLOW_CONTROL,
             f"flow_control must be one of {FLOW_CONTROL}, got {self.flow_control!r}")
        need(isinstance(self.flow_commit, bool), f"flow_commit must be True or False, got {self.flow_commit!r}")
        need(isinstance(self.prefault, bool), f"prefault must be True or False, got {self.prefault!r}")
        need(not self.flow_commit or self.flow_control == "receivers",
             "flow_commit needs flow_control = 'receivers' (with loggers, the log covers a restarted receiver)")
        need(576 <= self.mtu <= 65507, f"mtu must be between 576 and 65507 bytes, got {self.mtu}")
        need(self.store_bytes >= 1 << 16, f"store_bytes must be at least 64 KiB, got {self.store_bytes}")
        need(0 <= self.max_message_size <= 1 << 30,
             f"max_message_size must be 0 (default) or a size in 1..2**30 bytes, got {self.max_message_size!r}")
        need(self.max_message_size <= self.store_bytes // 2,
             f"max_message_size ({self.max_message_size}) must be at most store_bytes / 2 "
             f"({self.store_bytes // 2}): a message and its fragments are stored at once")
        need(self.reassembly_bytes == 0 or self.reassembly_bytes >= self.message_cap,
             f"reassembly_bytes must be 0 (the default bound) or at least max_message_size "
             f"({self.message_cap}), got {self.reassembly_bytes!r}")
        need(self.store_entries >= 1024, f"store_entries must be at least 1024, got {self.store_entries}")
        for name in ("gossip_interval", "join_interval", "member_timeout", "nack_min_interval",
                     "idle_after", "logger_retx_timeout", "fsync_interval", "logger_ack_interval",
                     "logger_rtx_interval", "log_retention", "logger_report_interval", "ping_interval",
                     "srb_report_interval", "nack_retry", "flow_report_interval", "flow_timeout"):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and v > 0, f"{name} must be a positive number of seconds, got {v!r}")
        need(isinstance(self.gc_limit, int) and self.gc_limit >= 1,
             f"gc_limit must be at least 1 round, got {self.gc_limit!r}")
        need(isinstance(self.tail_probe, (int, float)) and not isinstance(self.tail_probe, bool)
             and 0 <= self.tail_probe < self.idle_after,
             f"tail_probe must be 0 (none) or a number of seconds below idle_after ({self.idle_after!r}), "
             f"got {self.tail_probe!r}")
        need(self.gossip_buffer_bytes >= 0, "gossip_buffer_bytes must be >= 0")
        need(self.repair_rate >= 0, "repair_rate must be >= 0 (0 = unlimited)")
        need(self.requester_repair_rate >= 0,
             f"requester_repair_rate must be >= 0 repairs/s (0 = no limit), got {self.requester_repair_rate!r}")
        need(self.requester_repair_burst >= 0,
             f"requester_repair_burst must be >= 0 (0 = 0.1 s worth), got {self.requester_repair_burst!r}")
        need(1 <= self.repair_requesters <= 1 << 20,
             f"repair_requesters must be in 1..2**20, got {self.repair_requesters!r}")
        need(isinstance(self.amplify_factor, (int, float)) and not isinstance(self.amplify_factor, bool)
             and (self.amplify_factor == 0 or 1 <= self.amplify_factor <= 100),
             f"amplify_factor must be 0 (off) or in 1..100, got {self.amplify_factor!r}")
        need(isinstance(self.unvalidated_rate, (int, float)) and not isinstance(self.unvalidated_rate, bool)
             and self.unvalidated_rate >= 0,
             f"unvalidated_rate must be >= 0 messages/s (0 = no limit), got {self.unvalidated_rate!r}")
        need(isinstance(self.reply_outbox_bytes, int) and not isinstance(self.reply_outbox_bytes, bool)
             and (self.reply_outbox_bytes == 0 or self.reply_outbox_bytes >= 1 << 16),
             f"reply_outbox_bytes must be 0 (no cap) or at least 65536, got {self.reply_outbox_bytes!r}")
        need(isinstance(self.catchup_rate, (int, float)) and self.catchup_rate >= 0,
             f"catchup_rate must be >= 0 msgs/s (0 = unpaced), got {self.catchup_rate!r}")
        need(self.log_min_keep >= 0, "log_min_keep must be >= 0 seconds")
        need(isinstance(self.linger, (int, float)) and self.linger >= 0,
             f"linger must be a number of seconds >= 0, got {self.linger!r}")
        need(self.sponsors >= 1, "sponsors must be at least 1")
        need(self.ack_loggers >= 1, "ack_loggers must be at least 1")
        need(isinstance(self.send_window, int) and not isinstance(self.send_window, bool)
             and 0 <= self.send_window <= 1 << 32,
             f"send_window must be an integer number of messages in 0..2**32 (0 = no window), "
             f"got {self.send_window!r}")
        need(isinstance(self.flow_window, int) and not isinstance(self.flow_window, bool)
             and 0 <= self.flow_window <= 1 << 32,
             f"flow_window must be an integer number of messages in 0..2**32 (0 = off), "
             f"got {self.flow_window!r}")
        need(isinstance(self.flow_window_bytes, int) and not isinstance(self.flow_window_bytes, bool)
             and 0 <= self.flow_window_bytes <= 1 << 40,
             f"flow_window_bytes must be an integer number of bytes in 0..2**40 (0 = no byte bound), "
             f"got {self.flow_window_bytes!r}")
        need(isinstance(self.flow_ack_every, int) and not isinstance(self.flow_ack_every, bool)
             and 0 <= self.flow_ack_every <= 1 << 32,
             f"flow_ack_every must be an integer number of messages in 0..2**32 (0 = flow_window / 8), "
             f"got {self.flow_ack_every!r}")
        need(isinstance(self.flow_ack_timeout, (int, float)) and not isinstance(self.flow_ack_timeout, bool)
             and 0.001 <= self.flow_ack_timeout <= 3600,
             f"flow_ack_timeout must be a number of seconds in 0.001..3600, got {self.flow_ack_timeout!r}")
        need(0 <= self.srb_window <= 1 << 24, f"srb_window must be in 0..2**24, got {self.srb_window}")
        need(self.srb_f >= 0, "srb_f must be >= 0")
        need(self.conflate in (0, 1, 2), f"conflate must be 0 (off), 1 or 2, got {self.conflate!r}")
        need(self.max_gap >= 1, "max_gap must be >= 1")
        need(1 <= self.max_streams <= 1 << 24, f"max_streams must be in 1..2**24, got {self.max_streams}")
        need(2 <= self.max_streams_per_node <= 1 << 24,
             f"max_streams_per_node must be in 2..2**24, got {self.max_streams_per_node}")
        need(1 <= self.max_stranger_streams <= 1 << 24,
             f"max_stranger_streams must be in 1..2**24, got {self.max_stranger_streams}")
        need(self.transport in TRANSPORTS, f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        need(isinstance(self.ttl, int) and 0 <= self.ttl <= 255, f"ttl must be 0..255, got {self.ttl!r}")
        need(1 <= self.rx_batch <= 1024, f"rx_batch must be 1..1024, got {self.rx_batch}")
        need(isinstance(self.app_receive, bool), f"app_receive must be true or false, got {self.app_receive!r}")
        need(self.loop_cpu is None or (isinstance(self.loop_cpu, int) and not isinstance(self.loop_cpu, bool)
                                       and self.loop_cpu in os.sched_getaffinity(0)),
             f"loop_cpu must be None or one of the CPUs this process may run on "
             f"{sorted(os.sched_getaffinity(0))}, got {self.loop_cpu!r}")
        need(isinstance(self.drop_own_copy, bool),
             f"drop_own_copy must be true or false, got {self.drop_own_copy!r}")
        need(isinstance(self.receive_spin_us, int) and not isinstance(self.receive_spin_us, bool)
             and 0 <= self.receive_spin_us <= 1_000_000,
             f"receive_spin_us must be 0..1000000 microseconds, got {self.receive_spin_us!r}")
        need(isinstance(self.publish_spin_us, int) and not isinstance(self.publish_spin_us, bool)
             and 0 <= self.publish_spin_us <= 1_000_000,
             f"publish_spin_us must be 0..1000000 microseconds, got {self.publish_spin_us!r}")
        need(self.receive_mode in RECEIVE_MODES,
             f"receive_mode must be one of {RECEIVE_MODES}, got {self.receive_mode!r}")
        need(self.receive_mode != "spin" or (self.app_receive is True and not self.busy_poll),
             "receive_mode 'spin' needs app_receive = true and busy_poll = false (the application "
             "thread spins on the sockets itself)")
        need(isinstance(self.busy_poll_us, int) and not isinstance(self.busy_poll_us, bool)
             and 0 <= self.busy_poll_us <= 1_000_000,
             f"busy_poll_us must be 0..1000000 microseconds, got {self.busy_poll_us!r}")
        need(0.0 <= self.drop_rate < 1.0, f"drop_rate must be in [0, 1), got {self.drop_rate}")
        from rpbcast import netaddr
        try:
            g = netaddr.parse_endpoint(self.group_addr, "group_addr")
            b = netaddr.parse_endpoint(self.bind, "bind")
            fams = {m.node_id: (netaddr.family_of(m.addr) if isinstance(m.addr, int) else
                                netaddr.parse_endpoint(m.addr, f"member {m.node_id} addr").family)
                    for m in self.members if not (isinstance(m.addr, int) and m.addr == 0)}
        except netaddr.AddressError as e:
            raise ConfigError(str(e)) from None
        if g.family == 4:
            need((g.ip >> 28) == 0xE, f"group_addr must be a multicast address (224.0.0.0/4), got {self.group_addr}")
        else:
            need(g.ip[0] == 0xFF, f"group_addr must be an IPv6 multicast address (ff00::/8), got {self.group_addr}")
        need(g.port != 0, "group_addr needs a port")
        need(b.family == g.family, f"bind {self.bind} is IPv{b.family} but group_addr {self.group_addr} is "
                                   f"IPv{g.family}: a node uses one family (mixed families)")
        for nid, fam in fams.items():
            need(fam == g.family, f"member {nid} addr is IPv{fam} but group_addr is IPv{g.family}: "
                                  f"a group uses one family (mixed families)")
        if g.family == 6 and self.transport == "multicast":
            itf = self.interface
            need(isinstance(itf, int) and not isinstance(itf, bool) and itf > 0
                 or isinstance(itf, str) and itf != "" and not _is_ipv4_text(itf),
                 f"interface: IPv6 multicast needs the interface named explicitly, by name or index, "
                 f"got {itf!r}")
        if self.role == "logger":
            need(self.log_dir is not None, "a logger needs log_dir: the directory of its on-disk log")
        self._validate_atomic(need)
        if self.srb_window and self.delivery != "fifo":
            raise ConfigError("srb_window needs delivery = 'fifo' (FIFO-SRB delivers in sender order)")
        for m in self.members:
            need(isinstance(m, MemberSpec), "members must be MemberSpec entries")
            need(m.role in ROLES, f"member {m.node_id}: role must be one of {ROLES}")
        ids = [m.node_id for m in self.members]
        need(len(ids) == len(set(ids)), "members lists a node_id twice")
        if self.key_file is not None:
            need(isinstance(self.key_file, (str, bytes)) or hasattr(self.key_file, "__fspath__"),
                 f"key_file must be a path, got {self.key_file!r}")
            read_key_file(self.key_file)
        need(isinstance(self.encrypt, bool), f"encrypt must be True or False, got {self.encrypt!r}")
        need(not self.encrypt or self.key_file is not None, "encrypt needs key_file (the group key)")
        need(isinstance(self.signed, bool), f"signed must be True or False, got {self.signed!r}")
        need(self.mac_impl in MAC_IMPLS,
             f"mac_impl must be one of {', '.join(map(repr, MAC_IMPLS))}, got {self.mac_impl!r}")
        v = self.replay_clock_skew
        need(v is None or isinstance(v, (int, float)) and not isinstance(v, bool)
             and 0 <= v <= 3600,
             f"replay_clock_skew must be 0..3600 seconds (or None: off), got {v!r}")
        if self.signed:
            need(self.key_file is not None, "signed needs key_file (with 'sign' and 'pub' lines)")
            priv, pubs = read_signing_keys(self.key_file)
            need(priv is not None, f"signed: key_file {self.key_file} has no 'sign <64 hex digits>' line")
            need(bool(pubs), f"signed: key_file {self.key_file} has no 'pub <node id> <64 hex digits>' line")
        return self

    def _validate_atomic(self, need):
        for name in ("atomic_timeout", "atomic_vote_retry", "atomic_boot_after", "atomic_aggregate_delay",
                     "atomic_retention", "atomic_ask_max"):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                 f"{name} must be a positive number of seconds, got {v!r}")
        need(self.atomic_votes in ("flat", "tree"), f"atomic_votes must be 'flat' or 'tree', got {self.atomic_votes!r}")
        need(isinstance(self.atomic_fanout, int) and 2 <= self.atomic_fanout <= 4096,
             f"atomic_fanout must be an integer in 2..4096, got {self.atomic_fanout!r}")
        if not self.atomic:
            return
        need(self.delivery == "unordered",
             "atomic needs delivery = 'unordered' (an atomic message is delivered when it commits, "
             "not in its stream's order)")
        need(not self.srb_window, "atomic cannot run with srb_window (FIFO-SRB would purge its records)")
        need(self.atomic_dir is not None or self.state_dir is not None or self.role == "logger",
             "atomic needs atomic_dir (or state_dir): the directory of its journal, where a YES is "
             "written before it is sent")

    def replace(self, **kw) -> "Config":
        return dataclasses.replace(self, **kw)

    # ------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        d = dict(d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys: {', '.join(unknown)}")
        if "members" in d:
            d["members"] = [_member_spec(m) for m in d["members"]]
        return cls(**d)

    @classmethod
    def from_toml(cls, path) -> "Config":
        data = read_toml(path)
        return cls.from_dict(data.get("rpbcast", data))


_INT_FIELDS = ("mtu", "store_bytes", "store_entries", "max_gap", "gc_limit", "gossip_buffer_bytes",
               "nack_sender_max", "max_scan", "max_streams", "max_streams_per_node", "max_stranger_streams", "sponsors", "ack_loggers", "srb_window", "srb_f",
               "send_window", "flow_window", "flow_window_bytes", "flow_ack_every", "conflate", "rcvbuf", "sndbuf", "rx_batch", "ttl", "receive_spin_us", "publish_spin_us", "busy_poll_us",
               "max_message_size", "reassembly_bytes", "reply_outbox_bytes", "repair_requesters")
_NUMBER_FIELDS = ("flow_ack_timeout", "repair_rate", "repair_burst", "requester_repair_rate", "requester_repair_burst", "amplify_factor", "unvalidated_rate", "drop_rate", "log_min_keep")


def _member_spec(m) -> MemberSpec:
    """A members entry of a TOML file or dict as a MemberSpec."""
    if isinstance(m, MemberSpec):
        return m
    if not isinstance(m, dict):
        raise ConfigError(f"members: each entry must be a table with node_id and addr, got {m!r}")
    known = {f.name for f in dataclasses.fields(MemberSpec)}
    unknown = sorted(set(m) - known)
    if unknown:
        raise ConfigError(f"members: unknown key(s) {', '.join(unknown)} in {m!r} "
                          f"(known: {', '.join(sorted(known))})")
    missing = [k for k in ("node_id", "addr") if k not in m]
    if missing:
        raise ConfigError(f"members: entry {m!r} lacks {', '.join(missing)}")
    return MemberSpec(**m)


KEY_LEN = 16      # AES-128 (csrc/auth.h)


def read_key_file(path) -> list:
    """The group keys in a key file: [(key_id, 16-byte key)], the sending
    key first.  One key per line, ``<id 0..255> <32 hex digits>``; '#'
    starts a comment.  One key, or two during a roll-over (the node sends
    under the first and accepts both).  Anything else is a ConfigError
    naming key_file."""
    def bad(why):
        return ConfigError(f"key_file {path}: {why}")
    try:
        with open(path, "r", encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f"cannot be read ({e})") from None
    keys = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.split()[0] in ("sign", "pub"):
            continue                    # signature keys: read_signing_keys
        parts = line.split()
        if len(parts) != 2:
            raise bad(f"line {n}: expected '<key id> <32 hex digits>'")
        try:
            kid = int(parts[0], 10)
            key = bytes.fromhex(parts[1])
        except ValueError:
            raise bad(f"line {n}: expected '<key id> <32 hex digits>'") from None
        if not 0 <= kid <= 255:
            raise bad(f"line {n}: key id must be 0..255, got {kid}")
        if len(key) != KEY_LEN:
            raise bad(f"line {n}: key {kid} must be {KEY_LEN} bytes ({2 * KEY_LEN} hex digits), "
                      f"got {len(key)}")
        if any(kid == k for k, _ in keys):
            raise bad(f"line {n}: key id {kid} appears twice")
        keys.append((kid, key))
    if not 1 <= len(keys) <= 2:
        raise bad(f"needs one key, or two during a roll-over; found {len(keys)}")
    return keys


def read_signing_keys(path):
    """The Ed25519 keys in a key file (docs/security.md, "Identity among
    key holders"): (this node's private seed or None, {node id: public
    key}) from the lines ``sign <64 hex digits>`` (at most one) and ``pub
    <node id> <64 hex digits>``.  A bad line is a ConfigError naming
    key_file."""
    def bad(why):
        return ConfigError(f"key_file {path}: {why}")
    try:
        with open(path, "r", encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f"cannot be read ({e})") from None
    priv, pubs = None, {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts or parts[0] not in ("sign", "pub"):
            continue
        try:
            if parts[0] == "sign" and len(parts) == 2:
                if priv is not None:
                    raise bad(f"line {n}: a second 'sign' line")
                priv = bytes.fromhex(parts[1])
                key = priv
            elif parts[0] == "pub" and len(parts) == 3:
                nid = int(parts[1], 10)
                key = bytes.fromhex(parts[2])
                if not 0 < nid < 2**32 - 2:
                    raise bad(f"line {n}: node id must be 1..2^32-3, got {nid}")
                if nid in pubs:
                    raise bad(f"line {n}: node {nid} has two public keys")
                pubs[nid] = key
            else:
                raise ValueError
        except ValueError:
            raise bad(f"line {n}: expected 'sign <64 hex digits>' or 'pub <node id> <64 hex digits>'") from None
        if len(key) != 32:
            raise bad(f"line {n}: an Ed25519 key is 32 bytes (64 hex digits), got {len(key)}")
    return priv, pubs


def read_toml(path) -> dict:
    """A TOML file as a dict (tomllib; its backport tomli on Python 3.10)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
