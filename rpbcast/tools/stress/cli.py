"""`rpbcast stress`: its options, their checks, and the run they start
(the package docstring says what the job is)."""
from __future__ import annotations

import sys
from typing import Optional

from rpbcast.config import PROTOCOLS
from rpbcast.tools import netns
from rpbcast.tools.stress import faults
from rpbcast.tools.stress.plan import make_plan, resolve_loggers
from rpbcast.tools.stress.run import run


def add_parsers(sub):
    p = sub.add_parser("stress", help="the main job: a group on this host, line rate, loss, faults, exactly-once check")
    p.add_argument("--protocol", choices=PROTOCOLS, default="rpbcast",
                   help="the protocol every node runs (Config.protocol, docs/protocols.md): rpbcast, or a "
                        "baseline on the same data plane -- pbcast (probabilistic: the check reports the "
                        "delivered fraction), lbrm (one logger), srm (no loggers)")
    p.add_argument("--senders", type=int, default=1)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument("--loggers", type=int, default=None,
                   help="loggers (default: what the protocol has -- rpbcast 1, lbrm 1, pbcast 0, srm 0)")
    p.add_argument("--size", type=int, default=64, help="payload bytes (>= 8)")
    p.add_argument("--rate", type=float, default=0, help="messages/s per sender (0 = as fast as possible)")
    p.add_argument("--duration", type=float, default=3.0, help="seconds of sending")
    p.add_argument("--loss", type=float, default=0.0, help="packet loss probability (e.g. 0.01)")
    p.add_argument("--transport", choices=["auto", "multicast", "unicast"], default="auto",
                   help="auto: multicast in a namespace with root, unicast fan-out otherwise")
    p.add_argument("--no-gso", action="store_true", help="send one datagram per syscall entry (no UDP GSO)")
    p.add_argument("--inline", action="store_true",
                   help="receivers drive their node from the application thread (Node.poll): "
                        "one thread wake-up per message instead of two")
    p.add_argument("--busy-poll", action="store_true",
                   help="receivers' loop threads spin instead of sleeping in epoll (latency; burns a core each)")
    p.add_argument("--receive-mode", choices=["wait", "spin"], default="wait",
                   help="receivers' Config.receive_mode: spin = the application thread never sleeps "
                        "while it waits (latency; burns a core each)")
    p.add_argument("--no-prefault", action="store_true",
                   help="do not touch each node's message store at start (Config.prefault): its first "
                        "lap then faults the store in on the data path, inside the measured run")
    p.add_argument("--pin", action="store_true",
                   help="pin each sender process to this process's first CPU and each receiver to its last "
                        "(their threads with them: a receiver's loop thread beside its spinning application "
                        "thread, the layout measured best); with --receive-mode spin, the low-latency setup "
                        "(docs/api.md, \"The low-latency setup\")")
    p.add_argument("--key-file", default=None,
                   help="group key file: every datagram carries a MAC (docs/security.md)")
    p.add_argument("--encrypt", action="store_true",
                   help="with --key-file: encrypt every datagram's body (Config.encrypt)")
    p.add_argument("--mac-impl", choices=["auto", "ipsec-mb", "openssl"], default="auto",
                   help="with --key-file: the engine that computes the MAC (Config.mac_impl)")
    p.add_argument("--batch", type=int, default=None,
                   help="messages per publish_batch call (default: 1024, and at most 1 MiB of payload: a "
                        "call's messages are stamped before it, so a call of a thousand large messages "
                        "counted its own duration into their latency)")
    p.add_argument("--stamp", choices=["due", "publish"], default="due",
                   help="with --rate: what a message's latency counts from -- its due time on the "
                        "sender's schedule (the default: a sender that fell behind shows it) or the "
                        "publish call that sent it")
    p.add_argument("--gossip-interval", type=float, default=0.02)
    p.add_argument("--flow-control", choices=["auto", "loggers", "receivers"], default="auto",
                   help="what a sender's buffer waits for (Config.flow_control); auto: every receiver's "
                        "report and, with loggers, the loggers' acknowledgments too")
    p.add_argument("--flow-timeout", type=float, default=None, metavar="SECONDS",
                   help="with receiver flow control: a receiver silent this long (of the sender's own "
                        "running time) is declared failed and released (Config.flow_timeout)")
    p.add_argument("--send-window", type=int, default=None, metavar="MESSAGES",
                   help="a sender's send window (Config.send_window; 0 = none, the store is the bound; "
                        "default: Config's)")
    p.add_argument("--flow-report-interval", type=float, default=None, metavar="SECONDS",
                   help="how often receivers report to the senders' control plane (Config.flow_report_interval; "
                        "default: Config's)")
    p.add_argument("--flow-window", type=int, default=None, metavar="MESSAGES",
                   help="a sender's flow window over the receivers' data-plane acknowledgments "
                        "(Config.flow_window; 0 = off; default: Config's, 4096)")
    p.add_argument("--flow-window-bytes", type=int, default=None, metavar="BYTES",
                   help="and at most this many payload bytes in flight beyond the receivers' acknowledgments "
                        "(Config.flow_window_bytes; 0 = no byte bound; default: Config's)")
    p.add_argument("--flow-ack-every", type=int, default=None, metavar="MESSAGES",
                   help="receivers acknowledge to the flow window every this many messages taken "
                        "(Config.flow_ack_every; default: Config's, the window / 8)")
    p.add_argument("--publish-spin-us", type=int, default=None, metavar="MICROSECONDS",
                   help="a sender waiting for room in its window polls for the acknowledgments this long "
                        "before it sleeps (Config.publish_spin_us; burns its core meanwhile; default: "
                        "Config's, 0)")
    p.add_argument("--labels", choices=["none", "stock"], default="none",
                   help="stock: label messages with the stock-trading workload (875 items, 50/40/10%%)")
    p.add_argument("--srb-window", type=int, default=0,
                   help="FIFO-SRB window w (0 = reliable delivery); needs labels to purge anything")
    p.add_argument("--slow-receiver", type=float, default=0, metavar="MSGS_PER_S",
                   help="the first receiver's application consumes at most this rate")
    p.add_argument("--gsgc", action="store_true",
                   help="run GSGC stability detection: stability frees the buffers; report time-to-stable")
    p.add_argument("--gsgc-b", type=int, default=1, help="GSGC gossip sub-group size b")
    p.add_argument("--hosts", action="store_true",
                   help="every node a host of its own: a network namespace each, veth pairs to a bridge "
                        "(connected to nothing else), multicast on the hosts' devices with TTL 1, GSO cut "
                        "before the wire, so loss and faults hit single packets as on a LAN (needs root)")
    p.add_argument("--ipv6", action="store_true",
                   help="with --hosts: an IPv6 group (ff02::7262:1 on the hosts' link, the hosts at fd79::<id>); "
                        "loss with ip6tables")
    f = p.add_argument_group("faults", "applied by the orchestrator at their times, in seconds after the "
                                       "senders' start; the summary says when each ran")
    f.add_argument("--partition", action="append", metavar="NODE:START:SECONDS",
                   help="nothing reaches or leaves host NODE for SECONDS from START, then it heals "
                        "(--hosts; repeatable)")
    f.add_argument("--blackout", metavar="[START:]SECONDS",
                   help="every unicast packet is lost for SECONDS from START (default 0.5): reports, "
                        "requests and repairs; multicast data still flows")
    f.add_argument("--pause-sender", metavar="[START:]SECONDS",
                   help="SIGSTOP the first sender at START (default 0.5) and SIGCONT it SECONDS later")
    f.add_argument("--burst-loss", metavar="P:LEN",
                   help="bursty loss while sending: each namespace (host) loses every packet during bursts "
                        "of LEN s on average, a fraction P of the time (Gilbert-like on/off, from a helper "
                        "process)")
    f.add_argument("--kill", action="append", metavar="ROLE[:NODE]:AT[:RESTART_AFTER]",
                   help="SIGKILL a sender, receiver or logger (NODE: its id, default the role's first; "
                        "given only with all three numbers) AT s after the start and restart it "
                        "RESTART_AFTER s later (omitted or '-': left dead); repeatable")
    f.add_argument("--kill-receiver", type=float, default=None, metavar="SECONDS",
                   help="SIGKILL the first receiver this long after the start and restart it")
    f.add_argument("--restart-after", type=float, default=0.2, metavar="SECONDS",
                   help="with --kill-receiver: restart it this long after the kill")
    f.add_argument("--no-restart", action="store_true",
                   help="with --kill-receiver: leave it dead (others must declare it failed)")
    p.add_argument("--atomic", action="store_true",
                   help="senders publish all-or-none (publish_atomic, docs/atomic.md): report commits, aborts, "
                        "commit latency and the all-or-none check")
    p.add_argument("--atomic-votes", choices=["flat", "tree"], default="flat", help="with --atomic: how votes travel")
    p.add_argument("--atomic-timeout", type=float, default=2.0, help="with --atomic: seconds before an abort")
    p.add_argument("--atomic-window", type=int, default=4, help="with --atomic: proposals in flight per sender")
    p.add_argument("--run-dir", default=None, help="where to write run.json, counters and traces")
    p.add_argument("--trace", action="store_true", help="record per-node event traces (needs pyarrow)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for repairs after sending")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=main)


# How many loggers each baseline's paper gives it (docs/protocols.md, "On
# real sockets"; the default is plan.DEFAULT_LOGGERS).
ALLOWED_LOGGERS = {"lbrm": (1,), "pbcast": (0,), "srm": (0,)}


def main(args):
    use_ns = args.transport in ("auto", "multicast") and netns.available()
    problem = check_args(args, use_ns)
    if problem:
        print(f"stress: {problem}", file=sys.stderr)
        return 2
    named = faults.parse(args, use_ns)
    args.faults_named = bool(named)
    return run(args, make_plan(args, use_ns), named)


def check_args(args, use_ns) -> Optional[str]:
    """What is wrong with the options, in a sentence (None if nothing)."""
    resolve_loggers(args)
    if args.size < 8:
        return "--size must be at least 8 (the payload carries its send time)"
    if args.protocol != "rpbcast":
        if args.loggers not in ALLOWED_LOGGERS[args.protocol]:
            return (f"--protocol {args.protocol} runs with {ALLOWED_LOGGERS[args.protocol][0]} logger(s), "
                    f"not {args.loggers}")
        extras = [o for o, on in (("--atomic", getattr(args, "atomic", False)), ("--gsgc", args.gsgc),
                                  ("--srb-window", args.srb_window), ("--labels", args.labels != "none"),
                                  ("--kill/--kill-receiver", args.kill or args.kill_receiver is not None),
                                  ("--flow-control", args.flow_control != "auto")) if on]
        if extras:
            return (f"--protocol {args.protocol} runs without {', '.join(extras)} "
                    "(rpbcast's own layers and restarts; the baselines have static membership)")
    if args.flow_timeout is not None and args.flow_timeout <= 0:
        return "--flow-timeout must be a positive number of seconds"
    if getattr(args, "atomic", False) and (args.srb_window or args.labels != "none" or args.gsgc):
        return "--atomic runs alone: no --srb-window, --labels or --gsgc"
    if getattr(args, "atomic", False) and args.atomic_window < 1:
        return "--atomic-window must be at least 1"
    if args.transport == "multicast" and not use_ns:
        return ("multicast mode needs root (it runs in its own network namespace); "
                "use --transport unicast")
    if getattr(args, "hosts", False):
        if not use_ns:
            return ("--hosts needs root and iproute2 (a network namespace per host)"
                    if args.transport != "unicast" else "--hosts runs multicast between hosts: drop --transport unicast")
        if args.senders + args.receivers + args.loggers > 250:
            return "--hosts takes at most 250 nodes (one /24 subnet)"
    if getattr(args, "ipv6", False):
        if not getattr(args, "hosts", False):
            return "--ipv6 runs between hosts on a veth LAN: add --hosts"
        named = [o for o in ("partition", "blackout", "burst_loss") if getattr(args, o, None)]
        if named:
            return (f"--ipv6 runs without {', '.join('--' + o.replace('_', '-') for o in named)} (those faults "
                    "are IPv4 firewall rules); --loss, --kill and --pause-sender work")
    try:
        faults.parse(args, use_ns)
    except faults.FaultError as e:
        return str(e)
    return None
