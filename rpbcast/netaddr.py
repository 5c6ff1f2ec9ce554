"""Host addresses and interfaces: parsing what a configuration names, and the
integer form the engine and the UDP driver use.

The engine sees an address as one integer: IPv4 address << 16 | port.  This
module converts to and from "a.b.c.d:port" and looks interfaces up, with
errors that say what to fix.
"""
from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

IFF_UP = 0x1
IFF_MULTICAST = 0x1000
SIOCGIFADDR = 0x8915
SIOCGIFFLAGS = 0x8913


class AddressError(ValueError):
    pass


def parse_hostport(text: str, what: str = "address"):
    """'a.b.c.d:port' -> (ip as int, port)."""
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
    ip, port = from_addr(addr)
    return f"{ipaddress.IPv4Address(ip)}:{port}"


def addr_of(text_or_int) -> int:
    if isinstance(text_or_int, int):
        return text_or_int
    return to_addr(*parse_hostport(text_or_int))


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
