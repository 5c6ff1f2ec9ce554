"""Network namespaces for tests and the stress job (root only).

Every multicast or loss experiment runs in a namespace it creates itself:
loopback up with multicast on and a 224.0.0.0/4 route, and real kernel loss
from an iptables `statistic` rule (netem is not available everywhere).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import uuid

CLONE_NEWNET = 0x40000000


class NetnsError(RuntimeError):
    pass


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _run(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode:
        raise NetnsError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def create(name: str = None) -> str:
    """A fresh namespace, loopback ready for multicast."""
    if not available():
        raise NetnsError("network namespaces need root and iproute2 (the `ip` command)")
    name = name or f"rpb-{uuid.uuid4().hex[:8]}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "-n", name, "link", "set", "lo", "up")
        _run("ip", "-n", name, "link", "set", "lo", "multicast", "on")
        _run("ip", "-n", name, "route", "add", "224.0.0.0/4", "dev", "lo")
    except NetnsError:
        delete(name)
        raise
    return name


def delete(name: str):
    _run("ip", "netns", "del", name, check=False)


def exec_argv(name: str, argv):
    return ["ip", "netns", "exec", name] + list(argv)


def iptables_bin():
    for b in ("iptables", "iptables-nft", "iptables-legacy"):
        if shutil.which(b):
            return b
    raise NetnsError("iptables is not installed: apt-get install iptables")


def set_loss(name: str, probability: float, chain: str = "INPUT"):
    """Drop UDP packets at random with the given probability inside the
    namespace (real kernel loss).  0 removes the rule."""
    ipt = iptables_bin()
    _run(*exec_argv(name, [ipt, "-F", chain]))
    if probability > 0:
        _run(*exec_argv(name, [ipt, "-A", chain, "-p", "udp", "-m", "statistic", "--mode", "random",
                               "--probability", f"{probability:.6f}", "-j", "DROP"]))


def loss_counters(name: str, chain: str = "INPUT"):
    """(packets, bytes) dropped by the loss rule so far."""
    r = _run(*exec_argv(name, [iptables_bin(), "-L", chain, "-v", "-n", "-x"]))
    for line in r.stdout.splitlines():
        if "DROP" in line and "statistic" in line:
            p = line.split()
            return int(p[0]), int(p[1])
    return 0, 0


_libc = None


def _setns(fd):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise NetnsError(f"setns failed: {os.strerror(e)}")


@contextlib.contextmanager
def entered(name: str):
    """Run the block with this thread in the namespace: sockets created
    inside belong to it (and stay there), threads started inside inherit it."""
    cur = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield name
        finally:
            _setns(cur)
    finally:
        os.close(cur)
        os.close(target)


@contextlib.contextmanager
def namespace(loss: float = 0.0):
    """Create a namespace (optionally lossy), delete it afterwards."""
    name = create()
    try:
        if loss:
            set_loss(name, loss)
        yield name
    finally:
        delete(name)
