"""Host addresses and interfaces: parsing what a configuration names, and the
integer form the engine and the UDP driver use.

The engine sees an address as one integer.  IPv4: address << 16 | port.
IPv6: a handle from the process's endpoint table (csrc/addr6.h, reached
through rpbcast.drivers.udp): bit 62 set, the rest a table slot and its
generation, meaningful in this process only.  This module converts both to
and from text -- "a.b.c.d:port", "[v6]:port", "[fe80::1%lo]:port" -- and
looks interfaces up, with errors that say what to fix.
"""
from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from typing import NamedTuple, Optional

IFF_UP = 0x1
IFF_MULTICAST = 0x1000
SIOCGIFADDR = 0x8915
SIOCGIFFLAGS = 0x8913


ADDR6_TAG = 1 << 62


class AddressError(ValueError):
    pass


class Endpoint(NamedTuple):
    """A parsed address: family 4 (ip an int) or 6 (ip 16 bytes, scope the
    interface index of a link-local address, else 0)."""
    family: int
    ip: object
    port: int
    scope: int = 0


def _port(port: str, what: str) -> int:
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"{what}: port must be 0..65535, got {port!r}")
    return int(port)


def _scope_index(scope: str, what: str) -> int:
    if scope.isdigit():
        return int(scope)
    try:
        return socket.if_nametoindex(scope)
    except OSError:
        raise AddressError(f"{what}: no interface {scope!r} for the scope of {what}; "
                           f"this host has: {', '.join(interfaces())}") from None


def parse_endpoint(text: str, what: str = "address") -> Endpoint:
    """'a.b.c.d:port', '[v6]:port' or '[v6%scope]:port' (scope: an interface
    name or index) -> Endpoint."""
    if not isinstance(text, str):
        raise AddressError(f"{what} must be a string like 'a.b.c.d:port' or '[v6]:port', got {text!r}")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep or "]" in host or "[" in host:
            raise AddressError(f"{what} must look like '[v6 address]:port', got {text!r}")
        addr, _, scope = host.partition("%")
        try:
            ip = ipaddress.IPv6Address(addr)
        except ValueError:
            raise AddressError(f"{what}: {addr!r} is not an IPv6 address") from None
        if ip.ipv4_mapped is not None:
            raise AddressError(f"{what}: {addr} is an IPv4-mapped address; write it as IPv4 ({ip.ipv4_mapped})")
        sc = _scope_index(scope, what) if scope else 0
        if sc and not (ip.is_link_local or (ip.is_multicast and (ip.packed[1] & 0xF) in (1, 2))):
            raise AddressError(f"{what}: a scope (%{scope}) belongs only to a link-local address, not {addr}")
        return Endpoint(6, ip.packed, _port(port, what), sc)
    if text.count(":") > 1:
        raise AddressError(f"{what}: write an IPv6 address in brackets, '[v6 address]:port', got {text!r}")
    ip, port = parse_hostport(text, what)
    return Endpoint(4, ip, port, 0)


def format_endpoint(ep: Endpoint) -> str:
    if ep.family == 4:
        return f"{ipaddress.IPv4Address(ep.ip)}:{ep.port}"
    host = str(ipaddress.IPv6Address(ep.ip))
    if ep.scope:
        try:
            host += "%" + socket.if_indextoname(ep.scope)
        except OSError:
            host += f"%{ep.scope}"
    return f"[{host}]:{ep.port}"


def _udp():
    from rpbcast.drivers import udp     # the table lives in the driver's extension
    return udp


def is_v6(addr: int) -> bool:
    return bool(addr & ADDR6_TAG) and addr != (1 << 64) - 1


def handle_of(ep: Endpoint, pin: bool = True) -> int:
    """The engine's integer for an endpoint (IPv6: pinned in the table by
    default -- configured addresses must never be evicted)."""
    if ep.family == 4:
        return to_addr(ep.ip, ep.port)
    h = _udp().addr6_intern(ep.ip, ep.port, ep.scope, pin)
    if not h:
        raise AddressError(f"the IPv6 address table is full of configured addresses "
                           f"({_udp().addr6_stats()['cap']}): cannot add {format_endpoint(ep)}")
    return h


def endpoint_of(addr: int) -> Optional[Endpoint]:
    """The endpoint of an engine integer (None: an evicted IPv6 handle)."""
    if is_v6(addr):
        r = _udp().addr6_lookup(addr)
        return None if r is None else Endpoint(6, r[0], r[1], r[2])
    ip, port = from_addr(addr)
    return Endpoint(4, ip, port, 0)


def port_of(addr: int) -> int:
    ep = endpoint_of(addr)
    return ep.port if ep is not None else 0


def family_of(text_or_int) -> int:
    if isinstance(text_or_int, int):
        return 6 if is_v6(text_or_int) else 4
    return parse_endpoint(text_or_int).family


def parse_hostport(text: str, what: str = "address"):
    """'a.b.c.d:port' -> (ip as int, port).  (IPv4 only: parse_endpoint
    takes either family.)"""
    if isinstance(text, str) and text.startswith("["):
        raise AddressError(f"{what}: {text!r} is IPv6; this needs an IPv4 address 'a.b.c.d:port'")
    if not isinstance(text, str) or text.count(":") != 1:
        raise AddressError(f"{what} must look like 'a.b.c.d:port', got {text!r}")
    host, port = text.rsplit(":", 1)
    try:
        ip = int(ipaddress.IPv4Address(host))
    except ValueError:
        raise AddressError(f"{what}: {host!r} is not an IPv4 address") from None
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"{what}: port must be 0..65535, got {port!r}")
    return ip, int(port)


def to_addr(ip: int, port: int) -> int:
    return (ip << 16) | port


def from_addr(addr: int):
    return addr >> 16, addr & 0xFFFF


def fmt_addr(addr: int) -> str:
    if is_v6(addr):
        ep = endpoint_of(addr)
        return format_endpoint(ep) if ep is not None else f"[evicted IPv6 handle {addr:#x}]"
    ip, port = from_addr(addr)
    return f"{ipaddress.IPv4Address(ip)}:{port}"


def addr_of(text_or_int) -> int:
    if isinstance(text_or_int, int):
        return text_or_int
    return handle_of(parse_endpoint(text_or_int))


def interfaces():
    return [name for _, name in socket.if_nameindex()]


def _if_flags(name):
    # An ioctl on a socket sees the caller's network namespace (/sys may not).
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        r = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16sH14s", name.encode()[:15], 0, b""))
        return struct.unpack("16sH", r[:18])[1]
    except OSError:
        return None
    finally:
        s.close()


def _if_ipv4(name):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        r = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        return struct.unpack("!I", r[20:24])[0]
    except OSError:
        return None
    finally:
        s.close()


def resolve_interface(spec: str):
    """An interface name or one of its IPv4 addresses -> (name, index, ipv4).
    Raises AddressError naming the interfaces that exist."""
    names = interfaces()
    name = None
    if spec in names:
        name = spec
    else:
        try:
            want = int(ipaddress.IPv4Address(spec))
        except ValueError:
            raise AddressError(f"unknown interface {spec!r}; this host has: {', '.join(names)}") from None
        for n in names:
            if _if_ipv4(n) == want:
                name = n
                break
        if name is None:
            raise AddressError(f"no interface has address {spec}; this host has: {', '.join(names)}")
    idx = socket.if_nametoindex(name)
    flags = _if_flags(name)
    if flags is not None and not flags & IFF_UP:
        raise AddressError(f"interface {name} is down: run `ip link set {name} up`")
    if flags is not None and not flags & IFF_MULTICAST:
        raise AddressError(f"interface {name} has multicast disabled: run `ip link set {name} multicast on` "
                           f"(or use transport = 'unicast')")
    return name, idx, _if_ipv4(name) or 0


def multicast_route(ifname: str, group: int) -> bool:
    """Is there a route that sends this group out of ifname?  (Sending works
    without one when the interface is given explicitly, but a missing route
    is the usual sign of an unprepared host, so the error says how to add
    it.)"""
    try:
        path = "/proc/thread-self/net/route"
        if not os.path.exists(path):
            path = "/proc/net/route"
        with open(path) as f:
            next(f)
            for line in f:
                p = line.split()
                dest, mask = int(p[1], 16), int(p[7], 16)
                # /proc/net/route is little-endian hex
                dest = struct.unpack("<I", struct.pack(">I", dest))[0]
                mask = struct.unpack("<I", struct.pack(">I", mask))[0]
                if p[0] == ifname and (group & mask) == dest and mask:
                    return True
                if p[0] == ifname and dest == 0 and mask == 0:
                    return True
    except OSError:
        return True
    return False


def is_root():
    return os.geteuid() == 0


def resolve_interface6(spec) -> tuple:
    """An interface name or index for IPv6 multicast -> (name, index).
    IPv6 multicast names its interface: there is no default."""
    if spec is None or spec == "":
        raise AddressError("IPv6 multicast needs an interface (a name or an index)")
    names = interfaces()
    if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
        try:
            name = socket.if_indextoname(int(spec))
        except OSError:
            raise AddressError(f"no interface with index {spec}; this host has: {', '.join(names)}") from None
    elif spec in names:
        name = spec
    else:
        raise AddressError(f"unknown interface {spec!r} (IPv6 multicast takes a name or an index); "
                           f"this host has: {', '.join(names)}")
    flags = _if_flags(name)
    if flags is not None and not flags & IFF_UP:
        raise AddressError(f"interface {name} is down: run `ip link set {name} up`")
    if flags is not None and not flags & IFF_MULTICAST:
        raise AddressError(f"interface {name} has multicast disabled: run `ip link set {name} multicast on` "
                           f"(or use transport = 'unicast')")
    return name, socket.if_nametoindex(name)


def multicast_route6(ifname: str, group: bytes) -> bool:
    """Is there an IPv6 route for this group out of ifname?  (Any table:
    /proc/net/ipv6_route lists the local table's ff00::/8 too.)"""
    g = int.from_bytes(group, "big")
    try:
        path = "/proc/thread-self/net/ipv6_route"
        if not os.path.exists(path):
            path = "/proc/net/ipv6_route"
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) < 10 or p[9] != ifname:
                    continue
                dest, plen = int(p[0], 16), int(p[1], 16)
                if plen and (g >> (128 - plen)) == (dest >> (128 - plen)):
                    return True
    except OSError:
        return True
    return False


DEFAULT_MTU = 1472          # Config.mtu's default: a 1500-byte link less IPv4 (20) and UDP (8) headers


def datagram_mtu(cfg) -> int:
    """The largest datagram a node sends: Config.mtu, except that an IPv6
    group with the default takes 20 bytes off for its longer header (1452),
    so a datagram still fits a 1500-byte link unfragmented (an IPv6 router
    never fragments, and UDP GSO refuses segments over the path MTU)."""
    if cfg.mtu == DEFAULT_MTU and parse_endpoint(cfg.group_addr, "group_addr").family == 6:
        return DEFAULT_MTU - 20
    return cfg.mtu


def transport_endpoints(cfg) -> dict:
    """The UDP transport's socket arguments for a validated Config (either
    family), plus the interface name: what api.Node hands the driver."""
    g = parse_endpoint(cfg.group_addr, "group_addr")
    b = parse_endpoint(cfg.bind, "bind")
    out = {"family": g.family, "group_port": g.port, "bind_port": b.port, "ifname": None,
           "ifindex": 0, "if_ip": 0}
    if g.family == 4:
        out.update(group_ip=g.ip, bind_ip=b.ip)
        if cfg.transport == "multicast":
            out["ifname"], out["ifindex"], out["if_ip"] = resolve_interface(cfg.interface)
            if not multicast_route(out["ifname"], g.ip):
                raise AddressError(f"no multicast route for {cfg.group_addr.split(':')[0]} on {out['ifname']}: "
                                   f"run `ip route add 224.0.0.0/4 dev {out['ifname']}` "
                                   f"(or use transport = 'unicast')")
        return out
    out.update(group_ip=0, bind_ip=0, group6=g.ip, bind6=b.ip, bind_scope=b.scope)
    if cfg.transport == "multicast":
        out["ifname"], out["ifindex"] = resolve_interface6(cfg.interface)
        if not multicast_route6(out["ifname"], g.ip):
            raise AddressError(f"no IPv6 multicast route for {format_endpoint(g)} on {out['ifname']}: run "
                               f"`ip -6 route add multicast ff00::/8 dev {out['ifname']} table local` "
                               f"(or use transport = 'unicast')")
    else:
        out["group6"] = None
    return out
