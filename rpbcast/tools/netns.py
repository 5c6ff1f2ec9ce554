"""Network namespaces for tests and the stress job (root only).

Every multicast or loss experiment runs in a namespace it creates itself:
loopback up with multicast on and a 224.0.0.0/4 route, and real kernel loss
from an iptables `statistic` rule (netem is not available everywhere).

``HostNet`` is a LAN of hosts: a namespace per host, each joined by a veth
pair to a bridge in a namespace of its own that nothing else connects to;
multicast routed on each host's device, UDP GSO segmented before the wire,
so loss (and every fault) hits single packets as on a real LAN; IPv4, or
with ``ipv6=True`` also IPv6 (fd79::<id>, an ff02:: group).
``Firewall`` changes a namespace's fault rules within milliseconds, for
partitions, blackouts and bursts of loss timed by the stress job.
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


LOSS_CHAIN = "RPB_LOSS"


def _own_chain(name: str, own: str, chain: str = "INPUT"):
    """Chain `own` exists in the namespace's filter table and `chain` jumps
    to it (once): our rules live there, beside anyone else's."""
    ipt = iptables_bin()
    if _run(*exec_argv(name, [ipt, "-n", "-L", own]), check=False).returncode:
        _run(*exec_argv(name, [ipt, "-N", own]))
    if _run(*exec_argv(name, [ipt, "-C", chain, "-j", own]), check=False).returncode:
        _run(*exec_argv(name, [ipt, "-I", chain, "1", "-j", own]))


def set_loss(name: str, probability: float, chain: str = "INPUT"):
    """Drop UDP packets at random with the given probability inside the
    namespace (real kernel loss; on `chain`, through a chain of its own).
    0 removes the rule."""
    ipt = iptables_bin()
    _own_chain(name, LOSS_CHAIN, chain)
    _run(*exec_argv(name, [ipt, "-F", LOSS_CHAIN]))
    if probability > 0:
        _run(*exec_argv(name, [ipt, "-A", LOSS_CHAIN, "-p", "udp", "-m", "statistic", "--mode", "random",
                               "--probability", f"{probability:.6f}", "-j", "DROP"]))


def loss_counters(name: str, chain: str = "INPUT"):
    """(packets, bytes) dropped by the loss rule so far."""
    r = _run(*exec_argv(name, [iptables_bin(), "-L", LOSS_CHAIN, "-v", "-n", "-x"]), check=False)
    for line in r.stdout.splitlines():
        if "DROP" in line and "statistic" in line:
            p = line.split()
            return int(p[0]), int(p[1])
    return 0, 0


def flush_chain(name: str, chain: str):
    """Remove every rule of one of our chains (if the namespace has it)."""
    _run(*exec_argv(name, [iptables_bin(), "-F", chain]), check=False)


class Firewall:
    """A namespace's fault rules in a chain of their own (`chain`, jumped to
    first from INPUT), replaced as a whole within a few milliseconds: one
    `iptables-restore --noflush` kept open reads each change and applies it
    atomically.  Rules are named; ``set(name, [rule, ...])`` adds or
    replaces, ``clear(name)`` removes.  A rule is iptables arguments after
    the chain, e.g. "-p udp ! -d 224.0.0.0/4 -j DROP"."""

    def __init__(self, ns: str, chain: str = "RPB_FAULT"):
        self.ns = ns
        self.chain = chain
        self.rules = {}
        _own_chain(ns, chain)
        restore = shutil.which(iptables_bin() + "-restore") or shutil.which("iptables-restore")
        if restore is None:
            raise NetnsError("iptables-restore is not installed: apt-get install iptables")
        self.p = subprocess.Popen(exec_argv(ns, [restore, "--noflush"]), stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def set(self, name: str, rules):
        self.rules[name] = list(rules)
        self._apply()

    def clear(self, name: str = None):
        if name is None:
            self.rules.clear()
        else:
            self.rules.pop(name, None)
        self._apply()

    def _apply(self):
        lines = ["*filter", f"-F {self.chain}"]
        lines += [f"-A {self.chain} {r}" for rules in self.rules.values() for r in rules]
        lines.append("COMMIT")
        try:
            self.p.stdin.write("\n".join(lines) + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError):
            err = self.p.stderr.read() if self.p.stderr else ""
            raise NetnsError(f"iptables-restore in {self.ns} exited: {err.strip()}") from None

    def dropped(self) -> int:
        """Packets the chain's rules have dropped so far."""
        r = _run(*exec_argv(self.ns, [iptables_bin(), "-L", self.chain, "-v", "-n", "-x"]), check=False)
        return sum(int(line.split()[0]) for line in r.stdout.splitlines()[2:] if line.strip())

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


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


# ---- IPv6 ---------------------------------------------------------------
V6_ADDRS = ("fd77::1", "fd77::2", "fd77::3", "fd77::4")   # unique-local, on lo of the namespace only
# IPv6 multicast does not loop back over `lo` (the kernel drops it on output,
# Ip6OutNoRoutes), so IPv6 groups use a veth pair inside the namespace: the
# sender's copy comes back through IPV6_MULTICAST_LOOP, the other end (in
# the same namespace, joined to nothing) drops it.  Nothing leaves.
V6_MCAST_IF = "rpb6m"
V6_MCAST_PEER = "rpb6p"


def enable_ipv6(name: str, addrs=V6_ADDRS):
    """IPv6 in the namespace: on lo ::1 and the unique-local unicast
    addresses `addrs` (several sources on one host); a veth pair
    V6_MCAST_IF/V6_MCAST_PEER, both ends here, with fd78::1/64, carrying the
    ff00::/8 multicast route.  Returns the multicast interface's name."""
    ns_exec = ["ip", "netns", "exec", name, "sysctl", "-q", "-w"]
    _run(*ns_exec, "net.ipv6.conf.all.disable_ipv6=0")
    _run(*ns_exec, "net.ipv6.conf.default.disable_ipv6=0")
    _run(*ns_exec, "net.ipv6.conf.lo.disable_ipv6=0")
    for a in addrs:
        _run("ip", "-n", name, "-6", "addr", "add", f"{a}/128", "dev", "lo", "nodad")
    _run("ip", "-n", name, "link", "add", V6_MCAST_IF, "type", "veth", "peer", "name", V6_MCAST_PEER)
    for dev in (V6_MCAST_IF, V6_MCAST_PEER):
        _run(*ns_exec, f"net.ipv6.conf.{dev}.disable_ipv6=0")
        _run("ip", "-n", name, "link", "set", dev, "multicast", "on", "up")
    _run("ip", "-n", name, "-6", "addr", "add", "fd78::1/64", "dev", V6_MCAST_IF, "nodad")
    r = _run("ip", "-n", name, "-6", "route", "add", "multicast", "ff00::/8", "dev", V6_MCAST_IF, "table", "local",
             check=False)
    if r.returncode and "File exists" not in r.stderr:
        raise NetnsError(f"ip -6 route add multicast ff00::/8 dev {V6_MCAST_IF}: {r.stderr.strip()}")
    return V6_MCAST_IF


def ip6tables_bin():
    for b in ("ip6tables", "ip6tables-nft", "ip6tables-legacy"):
        if shutil.which(b):
            return b
    raise NetnsError("ip6tables is not installed: apt-get install iptables")


def set_loss6(name: str, probability: float, chain: str = "INPUT"):
    """set_loss for IPv6 packets (ip6tables `statistic`); 0 removes the rule."""
    ipt = ip6tables_bin()
    if _run(*exec_argv(name, [ipt, "-n", "-L", LOSS_CHAIN]), check=False).returncode:
        _run(*exec_argv(name, [ipt, "-N", LOSS_CHAIN]))
    if _run(*exec_argv(name, [ipt, "-C", chain, "-j", LOSS_CHAIN]), check=False).returncode:
        _run(*exec_argv(name, [ipt, "-I", chain, "1", "-j", LOSS_CHAIN]))
    _run(*exec_argv(name, [ipt, "-F", LOSS_CHAIN]))
    if probability > 0:
        _run(*exec_argv(name, [ipt, "-A", LOSS_CHAIN, "-p", "udp", "-m", "statistic", "--mode", "random",
                               "--probability", f"{probability:.6f}", "-j", "DROP"]))


def loss_counters6(name: str):
    """(packets, bytes) the IPv6 loss rule dropped so far."""
    r = _run(*exec_argv(name, [ip6tables_bin(), "-L", LOSS_CHAIN, "-v", "-n", "-x"]), check=False)
    for line in r.stdout.splitlines():
        if "DROP" in line and "statistic" in line:
            p = line.split()
            return int(p[0]), int(p[1])
    return 0, 0


def drop6(name: str, rule, on: bool = True, chain: str = "INPUT"):
    """Add (or remove) one ip6tables rule, e.g. ["-p", "udp", "-d", "ff02::/16", "-j", "DROP"]."""
    _run(*exec_argv(name, [ip6tables_bin(), "-I" if on else "-D", chain, *([] if not on else ["1"]), *rule]))


@contextlib.contextmanager
def namespace6(loss: float = 0.0):
    """A namespace with IPv6 on loopback (enable_ipv6), optionally lossy
    for IPv6 UDP; deleted afterwards."""
    name = create()
    try:
        enable_ipv6(name)
        if loss:
            set_loss6(name, loss)
        yield name
    finally:
        delete(name)


class HostNet:
    """Hosts on a LAN, each its own network namespace.

    A bridge lives in a namespace of its own and is connected to nothing
    but the hosts' veth pairs (never to a real interface).  Each host has
    loopback and `eth0` (its end of the pair) with 10.77.0.<id>/24, the
    multicast route 224.0.0.0/4 on eth0, and gso_max_segs 1 on eth0: a UDP
    GSO super-datagram is cut into packets before it leaves the host, so
    kernel loss and faults drop single packets, as on a real LAN (across a
    default veth a GSO datagram travels whole).  ``delete`` removes exactly
    what ``create`` made; a failed ``create`` removes what it had made."""

    SUBNET = "10.77.0."
    SUBNET6 = "fd79::"              # ipv6: unique-local, fd79::<id>/64 on eth0
    GROUP6 = "ff02::7262:1"         # ipv6: a link-scope group (the hosts share one link)
    DEV = "eth0"

    def __init__(self, ids, ipv6: bool = False):
        self.ipv6 = bool(ipv6)
        self.ids = list(ids)
        if not self.ids or max(self.ids) > 250 or min(self.ids) < 1:
            raise NetnsError("host ids must be 1..250")
        self.token = uuid.uuid4().hex[:6]
        self.bridge_ns = f"rpb-{self.token}-br"
        self.ns = {i: f"rpb-{self.token}-h{i}" for i in self.ids}
        self.made = []

    def ip(self, i) -> str:
        return f"{self.SUBNET6}{i:x}" if self.ipv6 else f"{self.SUBNET}{i}"

    def endpoint(self, i, port: int) -> str:
        """Host i's address with a port, as a Config takes it."""
        return f"[{self.ip(i)}]:{port}" if self.ipv6 else f"{self.ip(i)}:{port}"

    def group(self, port: int) -> str:
        """A multicast group on the hosts' link, as Config.group_addr."""
        return f"[{self.GROUP6}]:{port}" if self.ipv6 else f"239.255.77.1:{port}"

    def create(self) -> "HostNet":
        if not available():
            raise NetnsError("network namespaces need root and iproute2 (the `ip` command)")
        try:
            br = self.bridge_ns
            _run("ip", "netns", "add", br)
            self.made.append(br)
            _run("ip", "-n", br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
            _run("ip", "-n", br, "link", "set", "br0", "up")
            for i in self.ids:
                ns = self.ns[i]
                _run("ip", "netns", "add", ns)
                self.made.append(ns)
                host_end, br_end = f"rh{self.token}{i}", f"rb{self.token}{i}"
                _run("ip", "link", "add", host_end, "netns", ns, "type", "veth", "peer", "name", br_end,
                     "netns", br)
                _run("ip", "-n", ns, "link", "set", host_end, "name", self.DEV)
                _run("ip", "-n", br, "link", "set", br_end, "master", "br0", "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "link", "set", self.DEV, "gso_max_segs", "1", "multicast", "on", "up")
                _run("ip", "-n", ns, "addr", "add", f"{self.SUBNET}{i}/24", "dev", self.DEV)
                _run("ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", self.DEV)
                if self.ipv6:
                    self._add_ipv6(ns, i)
        except BaseException:
            self.delete()
            raise
        return self

    def _add_ipv6(self, ns, i):
        """IPv6 on host i: fd79::<id>/64 on eth0 (no duplicate detection:
        usable at once) and the ff00::/8 multicast route out of eth0.
        Neighbour discovery crosses the bridge like any multicast."""
        sysctl = ["ip", "netns", "exec", ns, "sysctl", "-q", "-w"]
        for dev in ("all", "default", "lo", self.DEV):
            _run(*sysctl, f"net.ipv6.conf.{dev}.disable_ipv6=0")
        _run("ip", "-n", ns, "-6", "addr", "add", f"{self.ip(i)}/64", "dev", self.DEV, "nodad")
        r = _run("ip", "-n", ns, "-6", "route", "add", "multicast", "ff00::/8", "dev", self.DEV, "table", "local",
                 check=False)
        if r.returncode and "File exists" not in r.stderr:
            raise NetnsError(f"ip -6 route add multicast ff00::/8 dev {self.DEV}: {r.stderr.strip()}")

    def delete(self):
        """Remove the namespaces this HostNet made (their veths go with them)."""
        for ns in reversed(self.made):
            delete(ns)
        self.made = []

    def set_loss(self, probability: float):
        for ns in self.ns.values():
            (set_loss6 if self.ipv6 else set_loss)(ns, probability)

    def loss_counters(self):
        pk = by = 0
        for ns in self.ns.values():
            p, b = (loss_counters6 if self.ipv6 else loss_counters)(ns)
            pk += p
            by += b
        return pk, by

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc):
        self.delete()
