"""The faults of a stress run, as the user names them, checked before
anything starts and applied by the orchestrator at their times (seconds
after the senders' common start):

    --partition NODE:START:SECONDS    nothing reaches or leaves host NODE (--hosts)
    --blackout [START:]SECONDS        every unicast packet is lost, everywhere
    --pause-sender [START:]SECONDS    SIGSTOP the first sender, SIGCONT it later
    --burst-loss P:LEN                Gilbert-like bursts: every packet into a
                                      host lost for LEN s on average, P of the time
    --kill ROLE[:NODE]:AT[:RESTART_AFTER]
                                      SIGKILL a sender, receiver or logger (NODE:
                                      its id, default the role's first); restart
                                      it RESTART_AFTER s later (omitted or "-":
                                      left dead).  With three fields after ROLE
                                      the first is NODE.

``--kill-receiver AT`` (with ``--restart-after``, ``--no-restart``) is
``--kill receiver:AT:RESTART_AFTER``.  Each ``Fault`` records when it was
applied and when it ended (healed, resumed, restarted), for the report.
``Faults`` applies them; packet faults go through a ``netns.Firewall`` per
namespace, bursts through a helper process (``bursts``).
"""
from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

from rpbcast.tools import netns

KINDS = ("partition", "blackout", "pause", "burst", "kill")
ROLES = ("sender", "receiver", "logger")
UNICAST_ONLY = "-p udp ! -d 224.0.0.0/4 -j DROP"
BURST_CHAIN = "RPB_BURST"


class FaultError(ValueError):
    """A fault option that cannot work; the message says what to change."""


@dataclasses.dataclass
class Fault:
    kind: str
    spec: str                         # as the user wrote it
    at: float                         # seconds after the senders' start
    seconds: Optional[float] = None   # how long; kill: restart after (None: left dead)
    node: Optional[int] = None
    role: Optional[str] = None
    p: float = 0.0                    # burst: fraction of the time in a burst
    burst_len: float = 0.0            # burst: mean burst length (s)
    applied: Optional[float] = None   # when it was applied (s after the start)
    ended: Optional[float] = None     # when it was healed / resumed / restarted
    note: str = ""                    # what happened, e.g. the helper's burst count

    def describe(self) -> str:
        if self.kind == "partition":
            what = f"partition of node {self.node} at {self.at:g} s for {self.seconds:g} s"
        elif self.kind == "blackout":
            what = f"unicast blackout at {self.at:g} s for {self.seconds:g} s"
        elif self.kind == "pause":
            what = f"SIGSTOP of sender {self.node} at {self.at:g} s for {self.seconds:g} s"
        elif self.kind == "burst":
            what = f"bursty loss {self.p:.0%} of the time, bursts of {self.burst_len * 1e3:g} ms"
        else:
            what = (f"SIGKILL of {self.role} {self.node} at {self.at:g} s, "
                    + (f"restarted {self.seconds:g} s later" if self.seconds is not None else "left dead"))
        return what

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["what"] = self.describe()
        return d


def _num(text, what, spec) -> float:
    try:
        v = float(text)
    except ValueError:
        raise FaultError(f"{spec}: {what} must be a number of seconds, got {text!r}") from None
    if v < 0:
        raise FaultError(f"{spec}: {what} must be >= 0, got {text}")
    return v


def _node(text, spec) -> int:
    try:
        return int(text)
    except ValueError:
        raise FaultError(f"{spec}: NODE must be a node id, got {text!r}") from None


def _start_seconds(opt, value, default_start) -> (float, float):
    parts = value.split(":")
    spec = f"{opt} {value}"
    if len(parts) == 1:
        return default_start, _num(parts[0], "SECONDS", spec)
    if len(parts) == 2:
        return _num(parts[0], "START", spec), _num(parts[1], "SECONDS", spec)
    raise FaultError(f"{spec}: write [START:]SECONDS")


def roles_of(args) -> Dict[str, List[int]]:
    """Node ids by role, numbered as the plan numbers them."""
    from rpbcast.tools.stress.plan import resolve_loggers
    s, r, lg = args.senders, args.receivers, resolve_loggers(args)
    return {"sender": list(range(1, s + 1)), "receiver": list(range(s + 1, s + r + 1)),
            "logger": list(range(s + r + 1, s + r + lg + 1))}


def parse(args, use_ns: bool) -> List[Fault]:
    """The run's faults from its options; FaultError says what is wrong."""
    roles = roles_of(args)
    hosts = bool(getattr(args, "hosts", False))
    out = []
    for v in getattr(args, "partition", None) or []:
        spec = f"--partition {v}"
        parts = v.split(":")
        if len(parts) != 3:
            raise FaultError(f"{spec}: write NODE:START:SECONDS")
        node = _node(parts[0], spec)
        if node not in sum(roles.values(), []):
            raise FaultError(f"{spec}: there is no node {node} (nodes are 1..{sum(map(len, roles.values()))})")
        out.append(Fault("partition", spec, _num(parts[1], "START", spec), _num(parts[2], "SECONDS", spec),
                         node=node, role=_role_of(roles, node)))
    if getattr(args, "blackout", None):
        at, secs = _start_seconds("--blackout", args.blackout, 0.5)
        out.append(Fault("blackout", f"--blackout {args.blackout}", at, secs))
    if getattr(args, "pause_sender", None):
        at, secs = _start_seconds("--pause-sender", args.pause_sender, 0.5)
        if not roles["sender"]:
            raise FaultError("--pause-sender: the run has no sender")
        out.append(Fault("pause", f"--pause-sender {args.pause_sender}", at, secs, node=roles["sender"][0],
                         role="sender"))
    if getattr(args, "burst_loss", None):
        spec = f"--burst-loss {args.burst_loss}"
        parts = args.burst_loss.split(":")
        if len(parts) != 2:
            raise FaultError(f"{spec}: write P:LEN (fraction of the time in bursts, mean burst length in s)")
        try:
            p = float(parts[0])
        except ValueError:
            raise FaultError(f"{spec}: P must be a fraction, got {parts[0]!r}") from None
        if not 0 < p < 1:
            raise FaultError(f"{spec}: P must be between 0 and 1 (the fraction of the time in bursts)")
        ln = _num(parts[1], "LEN", spec)
        if ln <= 0:
            raise FaultError(f"{spec}: LEN must be > 0 seconds")
        out.append(Fault("burst", spec, 0.0, None, p=p, burst_len=ln))
    for v in getattr(args, "kill", None) or []:
        out.append(_parse_kill(f"--kill {v}", v, roles))
    if getattr(args, "kill_receiver", None) is not None:
        if not roles["receiver"]:
            raise FaultError("--kill-receiver: the run has no receiver")
        out.append(Fault("kill", f"--kill-receiver {args.kill_receiver:g}", args.kill_receiver,
                         None if args.no_restart else args.restart_after, node=roles["receiver"][0],
                         role="receiver"))
    for f in out:
        if f.kind == "partition" and not hosts:
            raise FaultError(f"{f.spec}: partitions need --hosts (on one loopback every node shares the "
                             f"namespace, and a multicast packet cannot be kept from one node alone)")
        if f.kind in ("partition", "blackout", "burst") and not use_ns:
            raise FaultError(f"{f.spec}: packet faults need root (they are iptables rules in the run's "
                             f"network namespaces)")
    kills = [(f.role, f.node) for f in out if f.kind == "kill"]
    if len(kills) != len(set(kills)):
        raise FaultError("--kill: each node can be killed once per run")
    return out


def _role_of(roles, node):
    return next(r for r, ids in roles.items() if node in ids)


def _parse_kill(spec, v, roles) -> Fault:
    parts = v.split(":")
    role = parts[0]
    if role not in ROLES:
        raise FaultError(f"{spec}: ROLE must be one of {', '.join(ROLES)}, got {role!r}")
    rest = parts[1:]
    if not 1 <= len(rest) <= 3:
        raise FaultError(f"{spec}: write ROLE[:NODE]:AT[:RESTART_AFTER]")
    node = None
    if len(rest) == 3:
        node = _node(rest[0], spec)
        rest = rest[1:]
    if not roles[role]:
        raise FaultError(f"{spec}: the run has no {role}")
    if node is None:
        node = roles[role][0]
    elif node not in roles[role]:
        raise FaultError(f"{spec}: node {node} is not a {role} ({role}s: {roles[role]})")
    at = _num(rest[0], "AT", spec)
    restart = None
    if len(rest) == 2 and rest[1] not in ("", "-"):
        restart = _num(rest[1], "RESTART_AFTER", spec)
    return Fault("kill", spec, at, restart, node=node, role=role)


class Faults:
    """Applies a run's faults at their times and heals them.

    `firewalls` maps a host's node id to its namespace's Firewall (hosts
    mode), or None to the run's one namespace; `ip_of(node)` is a host's
    address.  `pause(node, stop)` and `kill(fault)` / `restart(fault)`
    act on the worker processes (the run's Supervisor)."""

    def __init__(self, faults: List[Fault], start_ns: int, namespaces: Dict, ip_of: Callable,
                 pause: Callable, kill: Callable, restart: Callable, seed: int = 0):
        self.faults = faults
        self.start_ns = start_ns
        self.namespaces = namespaces          # node id (or None) -> namespace name
        self.ip_of = ip_of
        self._pause, self._kill, self._restart = pause, kill, restart
        self.seed = seed
        self.firewalls = {}
        self.bursts = None                    # the burst helper process
        self.sending_done = False
        self._pending_end = {}                # id(fault) -> when it ends (ns)

    def _s(self, now_ns) -> float:
        return round((now_ns - self.start_ns) / 1e9, 3)

    def _fw(self, key) -> netns.Firewall:
        fw = self.firewalls.get(key)
        if fw is None:
            fw = self.firewalls[key] = netns.Firewall(self.namespaces[key])
        return fw

    def next_due(self) -> Optional[int]:
        """The next time (monotonic ns) something is due, or None."""
        ts = [self.start_ns + int(f.at * 1e9) for f in self.faults if f.applied is None]
        ts += list(self._pending_end.values())
        return min(ts) if ts else None

    def step(self, now_ns: int):
        """Apply what is due, heal what has had its time."""
        for f in self.faults:
            if f.applied is None and now_ns >= self.start_ns + int(f.at * 1e9):
                f.applied = self._s(now_ns)
                self._apply(f, now_ns)
        for f in self.faults:
            end = self._pending_end.get(id(f))
            if end is not None and now_ns >= end:
                del self._pending_end[id(f)]
                f.ended = self._s(time.monotonic_ns())
                self._end(f)

    def on_sending_done(self, now_ns: int):
        """Every sender has finished: bursts stop (the repair tail runs clean)."""
        if self.sending_done:
            return
        self.sending_done = True
        for f in self.faults:
            if f.kind == "burst" and f.applied is not None and f.ended is None:
                self._end(f)
                f.ended = self._s(now_ns)

    def _apply(self, f: Fault, now_ns: int):
        if f.kind == "partition":
            for key in self.namespaces:
                rule = (f"-i {netns.HostNet.DEV} -p udp -j DROP" if key == f.node
                        else f"-s {self.ip_of(f.node)} -p udp -j DROP")
                self._fw(key).set(f"partition{f.node}", [rule])
        elif f.kind == "blackout":
            for key in self.namespaces:
                self._fw(key).set("blackout", [UNICAST_ONLY])
        elif f.kind == "pause":
            self._pause(f.node, True)
        elif f.kind == "burst":
            self._start_bursts(f)
            return
        elif f.kind == "kill":
            self._kill(f)
            if f.seconds is None:
                return
        self._pending_end[id(f)] = now_ns + int(f.seconds * 1e9)

    def _end(self, f: Fault):
        if f.kind == "partition":
            for key in self.namespaces:
                self._fw(key).clear(f"partition{f.node}")
        elif f.kind == "blackout":
            for key in self.namespaces:
                self._fw(key).clear("blackout")
        elif f.kind == "pause":
            self._pause(f.node, False)
        elif f.kind == "burst":
            self._stop_bursts(f)
        elif f.kind == "kill":
            self._restart(f)

    def _start_bursts(self, f: Fault):
        spec = {"namespaces": sorted(set(self.namespaces.values())), "p": f.p, "len": f.burst_len,
                "seed": self.seed}
        self.bursts = subprocess.Popen([sys.executable, "-m", "rpbcast.tools.stress.bursts", json.dumps(spec)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _stop_bursts(self, f: Optional[Fault]):
        b, self.bursts = self.bursts, None
        if b is None:
            return
        try:
            out, _ = b.communicate(timeout=10)          # (closes its stdin: the helper's stop)
            if f is not None and out.strip():
                r = json.loads(out.strip().splitlines()[-1])
                f.note = (f"{r['bursts']} bursts, {r['bad_s']:.2f} s of {r['seconds']:.2f} s in a burst "
                          f"(mean over namespaces)")
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait()
        except (ValueError, KeyError):
            pass
        # whatever became of the helper, its bursts end here
        for ns in set(self.namespaces.values()):
            netns.flush_chain(ns, BURST_CHAIN)

    def dropped(self) -> int:
        """Packets the fault rules dropped (not the bursts')."""
        return sum(fw.dropped() for fw in self.firewalls.values())

    def close(self):
        """Heal everything still in force: rules cleared, a paused sender
        continued, the burst helper stopped."""
        for f in self.faults:
            if f.kind == "pause" and id(f) in self._pending_end:
                del self._pending_end[id(f)]
                try:
                    self._pause(f.node, False)
                except Exception:
                    pass
        self._stop_bursts(next((f for f in self.faults if f.kind == "burst" and f.ended is None), None))
        for fw in self.firewalls.values():
            try:
                fw.clear()
            except netns.NetnsError:
                pass
            fw.close()
        self.firewalls = {}


def signal_pause(proc, stop: bool):
    """SIGSTOP / SIGCONT a worker process (Popen)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGSTOP if stop else signal.SIGCONT)
