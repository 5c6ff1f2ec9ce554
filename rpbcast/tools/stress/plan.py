"""The group of a stress run, decided before anything starts: node ids and
roles, addresses, the transport and loss model, the run directory, and the
spec each worker process is started with."""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time
import uuid
from typing import Dict, List, Optional


HOST_PORT = 17000                   # every host's unicast port (--hosts: each host has its own address)
GROUP_PORT = 7400                   # the group's port (--ipv6; IPv4 runs take Config's default group)


@dataclasses.dataclass
class Plan:
    """The group and where the run writes (make_plan)."""
    use_ns: bool                    # the run gets network namespaces of its own
    transport: str                  # "multicast" (in the namespace(s)) or "unicast"
    loss_model: str
    run_id: str
    run_dir: str
    work: str                       # run_dir/work: logs, checkpoints, worker stderr
    senders: List[int]
    receivers: List[int]
    loggers: List[int]
    addrs: Dict[int, str]
    flow_control: str
    hosts: bool = False             # every node a host of its own on a bridge (netns.HostNet)
    ipv6: bool = False              # (hosts) an IPv6 group and addresses

    def role_of(self, i) -> str:
        """The node's role in the member list."""
        return "logger" if i in self.loggers else "member"

    def members(self):
        return [{"node_id": i, "addr": self.addrs[i], "role": self.role_of(i)}
                for i in self.senders + self.receivers + self.loggers]

    def addr_to_node(self):
        """For the trace: the engine's integer of each member's address.
        (IPv6 integers are handles of a process's own table: none.)"""
        from rpbcast import netaddr
        if self.ipv6:
            return {}
        return {netaddr.addr_of(a): i for i, a in self.addrs.items()}

    def hostnet(self):
        """The netns.HostNet the run's hosts live on (not created yet)."""
        from rpbcast.tools.netns import HostNet
        return HostNet(self.addrs, ipv6=self.ipv6)


# Loggers by default: what each protocol's paper gives it (docs/protocols.md).
DEFAULT_LOGGERS = {"rpbcast": 1, "lbrm": 1, "pbcast": 0, "srm": 0}


def resolve_loggers(args):
    """--loggers, or the protocol's default when not given."""
    if getattr(args, "loggers", None) is None:
        args.loggers = DEFAULT_LOGGERS[getattr(args, "protocol", "rpbcast")]
    return args.loggers


def make_plan(args, use_ns) -> Plan:
    """The run's plan; makes its run directory (a temporary one unless
    --run-dir)."""
    resolve_loggers(args)
    hosts = bool(getattr(args, "hosts", False))
    ipv6 = hosts and bool(getattr(args, "ipv6", False))
    transport = "multicast" if use_ns else "unicast"
    if not args.loss:
        loss_model = "none"
    elif hosts:
        loss_model = (f"kernel, per packet ({'ip6tables' if ipv6 else 'iptables'} statistic, INPUT of every "
                      f"host; GSO cut before the wire)")
    elif use_ns:
        loss_model = "kernel (iptables statistic, namespace INPUT; a GSO datagram crosses loopback whole)"
    else:
        loss_model = "in-process (receive side)"
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="rpbcast-stress-")
    os.makedirs(run_dir, exist_ok=True)
    work = os.path.join(run_dir, "work")
    os.makedirs(work, exist_ok=True)
    senders, receivers, loggers, addrs = node_ids(args, use_ns, hosts, ipv6)
    return Plan(use_ns, transport, loss_model, run_id, run_dir, work, senders, receivers, loggers, addrs,
                flow_control_of(args, loggers), hosts, ipv6)


def node_ids(args, use_ns, hosts=False, ipv6=False):
    """Node ids, addresses and roles."""
    senders = list(range(1, args.senders + 1))
    receivers = list(range(args.senders + 1, args.senders + args.receivers + 1))
    loggers = list(range(args.senders + args.receivers + 1, args.senders + args.receivers + args.loggers + 1))
    ids = senders + receivers + loggers
    if hosts:
        from rpbcast.tools.netns import HostNet
        net = HostNet(ids, ipv6=ipv6)
        addrs = {i: net.endpoint(i, HOST_PORT) for i in ids}
    else:
        # in the host's own network, ports apart from other runs' (a namespace is the run's alone)
        base = 17000 + (os.getpid() % 1000) * 20 if not use_ns else 17000
        addrs = {i: f"127.0.0.1:{base + i}" for i in ids}
    return senders, receivers, loggers, addrs


# What holds a baseline sender back (its paper's flow control): the run
# reports it; the baselines' own send buffers ignore Config.flow_control.
BASELINE_FLOW = {"pbcast": "none (pbcast: messages live gc_limit gossip rounds)",
                 "lbrm": "the logger's acknowledgments (lbrm)",
                 "srm": "none (srm: members keep messages buffer_time for repairs)"}


def flow_control_of(args, loggers):
    """Config.flow_control for the run: --flow-control, or with auto the
    receivers' reports -- and with loggers their acknowledgments as well
    (HoldForReceivers waits for both).  Held to the loggers alone, a
    sender is held to its fastest member: a logger that only appends runs
    ahead of the receivers, whose sockets then overflow and whose losses
    the logger serves again (a baseline: what its paper has,
    BASELINE_FLOW)."""
    protocol = getattr(args, "protocol", "rpbcast")
    if protocol != "rpbcast":
        return BASELINE_FLOW[protocol]
    if args.flow_control != "auto":
        return args.flow_control
    return "receivers"


def receivers_commit(args, plan: Plan) -> bool:
    """Whether receivers report only what their checkpoint holds
    (Config.flow_commit): in a loggerless run that kills a receiver, so that
    what it had received but not checkpointed is still at the sender when
    it resumes.  Not otherwise: it holds senders back by a checkpoint
    interval."""
    kills = [str(v) for v in (getattr(args, "kill", None) or [])]
    return plan.flow_control == "receivers" and not plan.loggers and (
        getattr(args, "kill_receiver", None) is not None or any(v.startswith("receiver:") for v in kills))


def flow_window(args, plan: Plan) -> Optional[int]:
    """The flow window of every node of the run (None: Config's default).

    A plain run keeps Config's default (4096), so what `rpbcast stress`
    prints is what the library does out of the box; --flow-window sets
    another (0: off) on every node (docs/performance.md, "Pre-touching the
    store, and a default window")."""
    return getattr(args, "flow_window", None)


BATCH = 1024                    # messages per publish_batch call, by default...
BATCH_BYTES = 1 << 20           # ...and at most this much payload


def publish_batch(args) -> int:
    """Messages per publish_batch call: --batch, else 1024 capped at 1 MiB
    of payload.  The sender stamps a call's messages before the call, so the
    call's own duration is in their latency: 1024 messages of 64 KB (64 MiB,
    a hundred milliseconds to publish) showed p50 ~0.1 s where 16 per call
    show a few ms, at 1.3x the rate (docs/performance.md)."""
    if getattr(args, "batch", None):
        return args.batch
    return max(1, min(BATCH, BATCH_BYTES // max(1, args.size)))


def worker_spec(args, plan: Plan, i: int, role: str, extra: Optional[dict] = None) -> dict:
    """What worker process i is started with: its node's configuration and
    its part in the run (rpbcast.tools.stress.worker)."""
    cfg = {"node_id": i, "bind": plan.addrs[i], "members": plan.members(), "transport": plan.transport,
           "srb_window": args.srb_window, "delivery": "fifo" if args.srb_window else "unordered",
           "gossip_interval": args.gossip_interval, "gso": not args.no_gso,
           "store_bytes": 512 << 20, "store_entries": 1 << 22, "rcvbuf": 32 << 20, "sndbuf": 32 << 20,
           # the store's first lap would fault its 700 MiB in on the data path, inside the run
           "prefault": not getattr(args, "no_prefault", False),
           "idle_after": 0.002, "logger_rtx_interval": 0.05, "gc_limit": 50,
           "drop_rate": args.loss if (args.loss and not plan.use_ns) else 0.0,
           "flow_control": plan.flow_control if plan.flow_control in ("loggers", "receivers") else "loggers",
           "protocol": getattr(args, "protocol", "rpbcast"),
           # a restarted node must come back as a new incarnation, however soon
           "state_dir": os.path.join(plan.work, "state")}
    if getattr(args, "flow_timeout", None):
        cfg["flow_timeout"] = args.flow_timeout
    if cfg["protocol"] in ("pbcast", "srm"):
        # what a pbcast or SRM member keeps is its protocol's rule (gc_limit
        # rounds; buffer_time), not rpbcast's byte bound on the gossip
        # buffer: the whole store may hold it
        cfg["gossip_buffer_bytes"] = cfg["store_bytes"]
    if getattr(args, "flow_report_interval", None):
        cfg["flow_report_interval"] = args.flow_report_interval
    if flow_window(args, plan) is not None:
        cfg["flow_window"] = flow_window(args, plan)
    if getattr(args, "flow_window_bytes", None) is not None:
        cfg["flow_window_bytes"] = args.flow_window_bytes
    if getattr(args, "flow_ack_every", None) is not None:
        cfg["flow_ack_every"] = args.flow_ack_every
    if getattr(args, "send_window", None) is not None:
        cfg["send_window"] = args.send_window
    elif receivers_commit(args, plan):
        # receivers acknowledge a checkpoint interval late: a window of the
        # default size would hold the sender to send_window per 100 ms
        cfg["send_window"] = 0
    if plan.hosts:
        from rpbcast.tools.netns import HostNet
        cfg.update(interface=HostNet.DEV, ttl=1)
        if plan.ipv6:
            cfg["group_addr"] = HostNet(plan.addrs, ipv6=True).group(GROUP_PORT)
    if role == "sender" and getattr(args, "publish_spin_us", None) is not None:
        cfg["publish_spin_us"] = args.publish_spin_us
    if role == "receiver" and args.busy_poll:
        cfg["busy_poll"] = True
    if role == "receiver" and getattr(args, "receive_mode", "wait") != "wait":
        cfg["receive_mode"] = args.receive_mode
    if getattr(args, "key_file", None):
        cfg["key_file"] = os.path.abspath(args.key_file)     # a keyed group (docs/security.md)
        cfg["encrypt"] = bool(getattr(args, "encrypt", False))
        cfg["mac_impl"] = getattr(args, "mac_impl", "auto")
    if role == "logger":
        cfg["log_dir"] = os.path.join(plan.work, f"log{i}")
        cfg["fsync"] = "interval"
    spec = {"role": role, "config": cfg, "size": args.size, "rate": args.rate,
            "labels": args.labels, "semantic": bool(args.srb_window),
            "gsgc": args.gsgc, "gsgc_b": args.gsgc_b,
            "slow": args.slow_receiver if (role == "receiver" and i == plan.receivers[0]) else 0,
            "duration": args.duration, "batch": publish_batch(args), "run_dir": plan.run_dir,
            "stamp": getattr(args, "stamp", "due"),
            "inline": bool(args.inline) and role == "receiver",
            "faults": bool(getattr(args, "faults_named", False)),
            "run_id": plan.run_id, "trace": args.trace, "trace_cap": (1 << 22) if args.trace else 0,
            "addr_to_node": {str(k): v for k, v in plan.addr_to_node().items()}}
    if getattr(args, "pin", False) and role in ("sender", "receiver"):
        cpus = sorted(os.sched_getaffinity(0))
        spec["cpu"] = cpus[0] if role == "sender" else cpus[-1]     # (worker.node.pin)
    if role == "receiver":
        spec["checkpoint"] = os.path.join(plan.work, f"recv{i}.npz")
        if receivers_commit(args, plan):
            cfg["flow_commit"] = True
    if getattr(args, "atomic", False):
        spec["atomic"] = {"state_dir": os.path.join(plan.work, f"state{i}"), "votes": args.atomic_votes,
                          "timeout": args.atomic_timeout, "window": args.atomic_window}
    spec.update(extra or {})
    return spec
