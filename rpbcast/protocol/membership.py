"""Approximate membership (thesis §5.3).

Each node keeps a member table; entries merge by freshness (the newest
incarnation, then the newest freshness counter, wins).  The table is
summarised by a hashed signature carried in every gossip; when signatures
differ the target answers with its list and the gossiper merges it and
pushes back what the target is missing.

Joining: a node multicasts JOIN until k members (sponsors) answer with a
list that holds it as a member (a logger's answer alone suffices, the
bootstrap shortcut).  The first sponsor's heartbeat vector is the join time
t_join: the joiner is responsible for messages after it.  Leaving mirrors
joining.  Sending never waits for any of this.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from rpbcast.core.signature import Signature

NOT_MEMBER = 0
MEMBER = 1
PENDING_JOIN = 2
PENDING_LEAVE = 3
DISCONNECTED = 4
STATUS_NAMES = {NOT_MEMBER: "not_member", MEMBER: "member", PENDING_JOIN: "pending_join",
                PENDING_LEAVE: "pending_leave", DISCONNECTED: "disconnected"}

ROLE_MEMBER = 0
ROLE_LOGGER = 1

MEMBERSHIP_SEED = 0x6D656D6265727331  # "members1"
MAX_FRESHNESS = 1 << 48               # beyond anything a member counts up to (issue 14)


@dataclass
class Member:
    node_id: int
    inc: int
    status: int
    role: int
    addr: int
    rank: int
    freshness: int
    lastseq: int = 0
    # local knowledge, not gossiped
    last_heard: int = 0
    rtt: Optional[float] = None     # seconds, EWMA

    def key(self):
        return (self.inc, self.freshness)

    @property
    def is_logger(self):
        return self.role == ROLE_LOGGER


# Addresses are the transport's opaque integers: IPv4 ip << 16 | port, or
# an IPv6 endpoint's handle (bit 62; rpbcast.netaddr, csrc/addr6.h).  A
# member entry on the wire carries the address itself (docs/wire-format.md,
# "Member entries"): IPv4 in its ipv4 field, IPv6 as 16 bytes after it.
# The handle table is process state shared with the driver; the engine only
# reaches it for IPv6 addresses (a simulated or in-memory group never has any).
ADDR6_TAG = 1 << 62


def _is_v6(addr: int) -> bool:
    return bool(addr & ADDR6_TAG) and addr != (1 << 64) - 1


def addr_to_entry(addr: int):
    """Opaque address -> (ipv4 u32, port u16, ip6 bytes: 16, or b"" for IPv4)
    of a member entry.  An evicted IPv6 handle names no address (0, 0, b"")."""
    if _is_v6(addr):
        from rpbcast import netaddr
        ep = netaddr.endpoint_of(addr)
        return (0, ep.port, ep.ip) if ep is not None else (0, 0, b"")
    return (addr >> 16) & 0xFFFFFFFF, addr & 0xFFFF, b""


def addr_to_wire(addr: int):
    """Opaque address -> (ip, port): the IP as an integer (32 bits for IPv4,
    128 for IPv6; 0 is unspecified)."""
    ipv4, port, ip6 = addr_to_entry(addr)
    return (int.from_bytes(ip6, "big") if ip6 else ipv4), port


def addr_port(addr: int) -> int:
    return addr_to_entry(addr)[1]


def addr_scope(addr: int) -> int:
    """The scope id (interface index) of an IPv6 address, else 0."""
    if not _is_v6(addr):
        return 0
    from rpbcast import netaddr
    ep = netaddr.endpoint_of(addr)
    return ep.scope if ep is not None else 0


def wire_to_addr(ipv4: int, port: int, ip6: bytes = b"", scope: int = 0) -> int:
    """A member entry's address -> opaque address (0: it names none).  scope:
    the interface index a link-local IPv6 address is on (the wire does not
    carry it: it means something on the receiving host only)."""
    if not ip6:
        return (ipv4 << 16) | port
    if not port and not any(ip6):
        return 0
    from rpbcast import netaddr
    link_local = ip6[0] == 0xFE and (ip6[1] & 0xC0) == 0x80
    # not pinned: a peer's word, so the table may evict it under a flood
    # (0 -- no address -- if the table refuses it)
    try:
        return netaddr.handle_of(netaddr.Endpoint(6, bytes(ip6), port, scope if link_local else 0), pin=False)
    except netaddr.AddressError:
        return 0


def entry_addr(e, scope: int = 0) -> int:
    """The address of a decoded wire member entry (rpbcast.core.wire.Member)."""
    return wire_to_addr(e.ipv4, e.port, e.ip6, scope)


class MemberTable:
    """The members this node knows, with the membership signature."""

    def __init__(self, self_id: int):
        self.self_id = self_id
        self.members: Dict[int, Member] = {}
        self._slots: Dict[int, int] = {}
        self._sig = Signature(MEMBERSHIP_SEED)
        self.version = 0            # bumps on every change (cheap cache key)
        self._live_cache = None
        # on_status(member): a member appeared or changed status (the engine
        # records it as a trace event)
        self.on_status = None
        # node ids whose entry appeared or changed status or incarnation since
        # the engine last told the data plane who is a member (None: not
        # collected; Engine._sync_members)
        self.changed_ids = None

    # -- signature ---------------------------------------------------------
    def _resign(self, m: Member):
        slot = self._slots.setdefault(m.node_id, len(self._slots))
        # What the signature covers: who, which incarnation, in what state.
        # A peer's freshness is any u64: keep the packed word in 64 bits (it
        # is only hashed, and every node folds it the same way).
        self._sig.set(slot, m.node_id, m.inc,
                      ((m.freshness << 8) | (m.status << 4) | m.role) & 0xFFFFFFFFFFFFFFFF)
        self.version += 1

    @property
    def signature(self) -> int:
        return self._sig.value

    # -- queries -----------------------------------------------------------
    def get(self, node_id) -> Optional[Member]:
        return self.members.get(node_id)

    def __contains__(self, node_id):
        return node_id in self.members

    def __len__(self):
        return len(self.members)

    def _live(self):
        """Members other than self that are in the group (cached per version:
        the engine asks many times per round)."""
        if self._live_cache is None or self._live_cache[0] != self.version:
            live = [m for m in self.members.values()
                    if m.node_id != self.self_id and m.status in (MEMBER, PENDING_LEAVE)]
            self._live_cache = (self.version, live, [m for m in live if m.is_logger])
        return self._live_cache

    def active(self, now: int = 0, timeout_ns: int = 0):
        """Members (not self) that can be gossip targets."""
        live = self._live()[1]
        if not timeout_ns:
            return list(live)
        return [m for m in live if not (m.last_heard and now - m.last_heard > timeout_ns)]

    def loggers(self):
        return list(self._live()[2])

    def current(self):
        """Members whose acknowledgment a logger waits for (§5.2)."""
        return [m for m in self.members.values() if m.status in (MEMBER, PENDING_LEAVE, DISCONNECTED)]

    def is_data_plane_member(self, node_id: int) -> bool:
        """Do node_id's streams count as a member's in the data plane (not in
        the strangers' pool, csrc/node.h)?  Every status but NOT_MEMBER (it
        left, or never joined): a joiner on its way, a member leaving, a
        disconnected one (it comes back with the same incarnation) and one
        that failed (its entry stays) all keep theirs."""
        m = self.members.get(node_id)
        return m is not None and m.status != NOT_MEMBER

    def entries(self):
        return list(self.members.values())

    # -- updates -----------------------------------------------------------
    def upsert(self, m: Member) -> bool:
        """Merge one entry by freshness; returns True if it changed the table.
        A freshness of MAX_FRESHNESS or more is refused: a member counts one
        per join, leave or announcement, and the signature holds 56 bits."""
        if not 0 <= m.freshness < MAX_FRESHNESS:
            return False
        cur = self.members.get(m.node_id)
        if cur is not None and cur.key() >= m.key():
            if cur.key() == m.key() and (cur.addr != m.addr and m.addr):
                cur.addr = m.addr
                self.version += 1
            return False
        if cur is not None:
            # keep local observations
            m.last_heard = max(m.last_heard, cur.last_heard)
            m.rtt = cur.rtt if m.rtt is None else m.rtt
            if m.rank < 0:
                m.rank = cur.rank
        self.members[m.node_id] = m
        self._resign(m)
        if cur is None or cur.status != m.status or cur.inc != m.inc:
            if self.changed_ids is not None:
                self.changed_ids.add(m.node_id)
            if self.on_status is not None:
                self.on_status(m)
        return True

    def set_status(self, node_id: int, status: int):
        m = self.members.get(node_id)
        if m is not None and m.status != status:
            m.status = status
            self._resign(m)
            if self.changed_ids is not None:
                self.changed_ids.add(node_id)
            if self.on_status is not None:
                self.on_status(m)

    def heard(self, node_id: int, now: int):
        m = self.members.get(node_id)
        if m is not None:
            m.last_heard = now

    def behind(self, other: Dict[int, tuple]):
        """Entries where a peer's view (node_id -> (inc, freshness)) is older
        than ours: what to push back."""
        return [m for m in self.members.values()
                if m.node_id not in other or other[m.node_id] < m.key()]
