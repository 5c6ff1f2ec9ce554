"""`rpbcast doctor`: what a configuration will and will not reach, before
anything is sent.

Every check asks this host's kernel, nothing on the network: whether an
address is local (a UDP socket may bind it), which interface and gateway
the routing table picks for a member, the interface's flags, the multicast
route, the socket buffer limits.  Multicast reaches another host only when
it leaves through the interface that leads there, with a TTL of at least 1
(more than 1 to cross routers); ``ttl = 0`` or ``interface = "lo"`` keeps
it on this host, and then members elsewhere get every message by unicast
repair only -- it works, slowly, and nothing else says so.  ``Node`` logs
the findings that mean "some member will not hear multicast" when it
starts (``reach_warnings``); the command prints them all.
"""
from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from typing import List, NamedTuple, Optional

from rpbcast import netaddr
from rpbcast.config import Config

OK, NOTE, WARN, ERROR = "ok", "note", "warning", "error"
IFF_LOOPBACK = 0x8


class Finding(NamedTuple):
    level: str          # ok | note | warning | error
    text: str


class Route(NamedTuple):
    ifname: Optional[str]     # interface the kernel sends through (None: no route)
    gateway: int              # 0: directly on that interface's link
    local: bool               # the address is this host's own


def is_local(ip: int) -> bool:
    """Is this IPv4 address one of this host's (in this network namespace)?
    A UDP socket can bind only its own addresses; nothing is sent."""
    if ip >> 24 == 127:
        return True
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((str(ipaddress.IPv4Address(ip)), 0))
        return True
    except OSError as e:
        return e.errno != errno.EADDRNOTAVAIL
    finally:
        s.close()


def is_local6(ip: bytes, scope: int = 0) -> bool:
    """Is this IPv6 address one of this host's (in this network namespace)?"""
    if ip == bytes(15) + b"\x01":
        return True
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    except OSError:
        return False
    try:
        s.bind((str(ipaddress.IPv6Address(ip)), 0, 0, scope))
        return True
    except OSError as e:
        return e.errno != errno.EADDRNOTAVAIL
    finally:
        s.close()


def _routes6():
    """(ifname, dest, prefix length, next hop) of the IPv6 routes, every
    table (the local table's own-address and multicast routes included)."""
    path = "/proc/thread-self/net/ipv6_route"
    if not os.path.exists(path):
        path = "/proc/net/ipv6_route"
    out = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 10:
                    out.append((p[9], int(p[0], 16), int(p[1], 16), int(p[4], 16)))
    except OSError:
        pass
    return out


def route_to6(ip: bytes, scope: int = 0) -> Route:
    """route_to for an IPv6 address (a link-local one: out of its scope's
    interface)."""
    if is_local6(ip, scope):
        return Route("lo", 0, True)
    if scope:
        try:
            return Route(socket.if_indextoname(scope), 0, False)
        except OSError:
            return Route(None, 0, False)
    a = int.from_bytes(ip, "big")
    best = None
    for ifname, dest, plen, gw in _routes6():
        if ifname == "lo" or dest >> 120 == 0xFF:
            continue            # own addresses and multicast: not a way to a member
        if (plen == 0 or a >> (128 - plen) == dest >> (128 - plen)) and (best is None or plen > best[2]):
            best = (ifname, dest, plen, gw)
    if best is None:
        return Route(None, 0, False)
    return Route(best[0], best[3], False)


def route_of(text: str) -> Route:
    """The route to a member's address, either family."""
    ep = netaddr.parse_endpoint(text)
    return route_to(ep.ip) if ep.family == 4 else route_to6(ep.ip, ep.scope)


def _routes():
    path = "/proc/thread-self/net/route"
    if not os.path.exists(path):
        path = "/proc/net/route"
    out = []
    try:
        with open(path) as f:
            next(f)
            for line in f:
                p = line.split()
                swap = lambda h: struct.unpack("<I", struct.pack(">I", int(h, 16)))[0]  # noqa: E731
                out.append((p[0], swap(p[1]), swap(p[2]), swap(p[7])))
    except OSError:
        pass
    return out


def route_to(ip: int) -> Route:
    """The interface and gateway the routing table picks for ip (longest
    prefix of the main table), and whether ip is this host's own."""
    if is_local(ip):
        return Route("lo", 0, True)
    best = None
    for ifname, dest, gw, mask in _routes():
        if ip & mask == dest and (best is None or mask > best[3]):
            best = (ifname, dest, gw, mask)
    if best is None:
        return Route(None, 0, False)
    return Route(best[0], best[2], False)


def _is_loopback(ifname: str) -> bool:
    flags = netaddr._if_flags(ifname)
    return ifname == "lo" if flags is None else bool(flags & IFF_LOOPBACK)


def _sysctl(name: str) -> Optional[int]:
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError):
        return None


def _others(cfg: Config):
    """(member, its endpoint, its route) of every member other than this node."""
    out = []
    for m in cfg.members:
        if m.node_id == cfg.node_id or isinstance(m.addr, int):
            continue
        out.append((m, netaddr.parse_endpoint(m.addr), route_of(m.addr)))
    return out


def _who(rows) -> str:
    return ", ".join(f"{m.node_id} ({m.addr})" for m, _, _ in rows)


def reach_warnings(cfg: Config) -> List[str]:
    """The findings that mean some member will not hear this node's
    multicast (or this node will not hear theirs): what Node logs at start."""
    return [f.text for f in _reach(cfg) if f.level in (WARN, ERROR)]


def _reach(cfg: Config) -> List[Finding]:
    """Multicast reach: interface, TTL and route against where the members are."""
    out = []
    others = _others(cfg)
    remote = [r for r in others if not r[2].local]
    if cfg.transport == "unicast":
        unrouted = [r for r in remote if r[2].ifname is None]
        if unrouted:
            out.append(Finding(ERROR, f"no route to member(s) {_who(unrouted)}: they will not be reached"))
        out.append(Finding(OK, f"unicast fan-out to {len(others)} member(s) "
                               f"({len(others) - len(remote)} on this host, {len(remote)} elsewhere)"))
        return out
    group = cfg.group_addr
    g = netaddr.parse_endpoint(group, "group_addr")
    try:
        if g.family == 4:
            ifname = netaddr.resolve_interface(cfg.interface)[0]
        else:
            ifname = netaddr.resolve_interface6(cfg.interface)[0]
    except netaddr.AddressError as e:
        return [Finding(ERROR, str(e))]
    loop = _is_loopback(ifname)
    if g.family == 4 and not netaddr.multicast_route(ifname, g.ip):
        out.append(Finding(ERROR, f"no multicast route for {group.split(':')[0]} on {ifname}: run "
                                  f"`ip route add 224.0.0.0/4 dev {ifname}`"))
    elif g.family == 6 and not netaddr.multicast_route6(ifname, g.ip):
        out.append(Finding(ERROR, f"no IPv6 multicast route for {group.rsplit(':', 1)[0]} on {ifname}: run "
                                  f"`ip -6 route add multicast ff00::/8 dev {ifname} table local`"))
    if g.family == 6 and remote and (g.ip[1] & 0xF) == 1:
        out.append(Finding(WARN, f"group {group} is interface-local (ff01::/16): it never leaves this host, but "
                                 f"member(s) {_who(remote)} are elsewhere; use a link-scope group (ff02::/16) "
                                 f"or wider"))
    if remote and loop:
        via = sorted({r[2].ifname for r in remote if r[2].ifname})
        out.append(Finding(WARN, f"multicast goes out on {ifname} (loopback), which never leaves this host, "
                                 f"but member(s) {_who(remote)} are elsewhere: they get every message by unicast "
                                 f"repair only.  Set interface = {via[0]!r}" if via else
                                 f"multicast goes out on {ifname} (loopback) but member(s) {_who(remote)} are "
                                 f"elsewhere (and no route leads there)"))
    elif remote and cfg.ttl == 0:
        out.append(Finding(WARN, f"ttl = 0 keeps multicast on this host, but member(s) {_who(remote)} are "
                                 f"elsewhere: they get every message by unicast repair only.  Set ttl = 1 "
                                 f"(same link) or more (routers in between)"))
    elif remote:
        wrong = [r for r in remote if r[2].ifname not in (None, ifname)]
        routed = [r for r in remote if r[2].ifname == ifname and r[2].gateway]
        unrouted = [r for r in remote if r[2].ifname is None]
        if wrong:
            out.append(Finding(WARN, f"member(s) {_who(wrong)} are reached through "
                                     f"{', '.join(sorted({r[2].ifname for r in wrong}))}, not through the "
                                     f"multicast interface {ifname}: they will not hear multicast"))
        if routed and cfg.ttl <= 1:
            out.append(Finding(WARN, f"member(s) {_who(routed)} are behind a router, and ttl = {cfg.ttl} does "
                                     f"not cross one: raise ttl (and the routers must forward the group)"))
        if unrouted:
            out.append(Finding(ERROR, f"no route to member(s) {_who(unrouted)}: repairs and control messages "
                                      f"will not reach them"))
        if not (wrong or routed or unrouted):
            out.append(Finding(OK, f"multicast {group} on {ifname} with ttl {cfg.ttl} reaches the "
                                   f"{len(remote)} member(s) on other hosts"))
    if cfg.ttl == 0 and not remote:
        out.append(Finding(NOTE, "ttl = 0: multicast stays on this host (every member listed is here)"))
    here = [r for r in others if r[2].local]
    if here and not cfg.multicast_loop:
        out.append(Finding(WARN, f"multicast_loop = false, but member(s) {_who(here)} are on this host: "
                                 f"they will not hear this node's multicast"))
    if here and not loop and not remote:
        out.append(Finding(NOTE, f"every member is on this host; multicast on {ifname} (ttl {cfg.ttl}) "
                                 f"reaches them through the loopback of multicast"))
    return out


def diagnose(cfg: Config) -> List[Finding]:
    """Every finding about this configuration on this host."""
    out = []
    b = netaddr.parse_endpoint(cfg.bind, "bind")
    bip, bport = b.ip, b.port
    if not (is_local(bip) if b.family == 4 else is_local6(bip, b.scope)):
        out.append(Finding(ERROR, f"bind {cfg.bind}: that address is not on this host"))
    me = next((m for m in cfg.members if m.node_id == cfg.node_id), None)
    if me is not None and not isinstance(me.addr, int) and me.addr != cfg.bind:
        mep = netaddr.parse_endpoint(me.addr)
        mip, mport = mep.ip, mep.port
        one_address = any(bip) if b.family == 6 else bool(bip)     # not the wildcard
        if (one_address and (mep.family != b.family or mip != bip)) or (bport and mport != bport) or not bport:
            out.append(Finding(WARN, f"the members list has this node ({cfg.node_id}) at {me.addr} but it binds "
                                     f"{cfg.bind}: the others send repairs and control messages to {me.addr}"))
    if not cfg.members and not cfg.join:
        out.append(Finding(WARN, "no members listed and join = false: this node talks to nobody"))
    elif me is None and cfg.members and not cfg.join:
        out.append(Finding(NOTE, f"this node ({cfg.node_id}) is not in its own members list: the others "
                                 f"learn of it only when it sends"))
    out += _reach(cfg)
    loggers = [m for m in cfg.members if m.role == "logger" and m.node_id != cfg.node_id]
    if cfg.role != "logger":
        if not loggers and cfg.flow_control == "loggers":
            out.append(Finding(NOTE, "no logger: nothing acknowledges what this node publishes, so close() "
                                     "cannot confirm delivery and a receiver further behind than the gossip "
                                     "buffers (gc_limit rounds) loses messages; add a logger, or use "
                                     "flow_control = 'receivers' on every member"))
        elif loggers:
            out.append(Finding(OK, f"published messages wait for {cfg.ack_loggers} of the logger(s) "
                                   f"{', '.join(str(m.node_id) for m in loggers)} (flow_control = "
                                   f"{cfg.flow_control!r})"))
    for key, sysctl in (("rcvbuf", "net.core.rmem_max"), ("sndbuf", "net.core.wmem_max")):
        want, cap = getattr(cfg, key), _sysctl(sysctl)
        if want and cap is not None and cap < want and not netaddr.is_root():
            out.append(Finding(WARN, f"{key} = {want} but {sysctl} = {cap}: the socket gets {cap} "
                                     f"(raise {sysctl}, or run as root); bursts will be dropped"))
    return out


def report(cfg: Config, out) -> int:
    """Print the findings; 1 if anything will not be reached or cannot work."""
    findings = diagnose(cfg)
    print(f"rpbcast doctor: node {cfg.node_id} ({cfg.role}), {cfg.transport} "
          f"{cfg.group_addr if cfg.transport == 'multicast' else ''} from {cfg.bind}", file=out)
    for f in findings:
        print(f"  [{f.level}] {f.text}", file=out)
    bad = [f for f in findings if f.level in (WARN, ERROR)]
    print("rpbcast doctor: " + (f"{len(bad)} problem(s)" if bad else "no problems found"), file=out)
    return 1 if bad else 0


def run(args) -> int:
    import sys

    from rpbcast.tools.node_options import config_from_args
    return report(config_from_args(args), sys.stdout)
