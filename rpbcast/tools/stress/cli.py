"""`rpbcast stress`: its options, their checks, and the run they start
(the package docstring says what the job is)."""
from __future__ import annotations

import sys
from typing import Optional

from rpbcast.tools import netns
from rpbcast.tools.stress.plan import make_plan
from rpbcast.tools.stress.run import run


def add_parsers(sub):
    p = sub.add_parser("stress", help="the main job: a group on this host, line rate, loss, exactly-once check")
    p.add_argument("--senders", type=int, default=1)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument("--loggers", type=int, default=1)
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
    p.add_argument("--key-file", default=None,
                   help="group key file: every datagram carries a MAC (docs/security.md)")
    p.add_argument("--batch", type=int, default=1024, help="messages per publish_batch call")
    p.add_argument("--gossip-interval", type=float, default=0.02)
    p.add_argument("--flow-control", choices=["auto", "loggers", "receivers"], default="auto",
                   help="what a sender's buffer waits for (Config.flow_control); auto: the loggers' "
                        "acknowledgments, or with --loggers 0 every receiver's report")
    p.add_argument("--labels", choices=["none", "stock"], default="none",
                   help="stock: label messages with the stock-trading workload (875 items, 50/40/10%%)")
    p.add_argument("--srb-window", type=int, default=0,
                   help="FIFO-SRB window w (0 = reliable delivery); needs labels to purge anything")
    p.add_argument("--slow-receiver", type=float, default=0, metavar="MSGS_PER_S",
                   help="the first receiver's application consumes at most this rate")
    p.add_argument("--gsgc", action="store_true",
                   help="run GSGC stability detection: stability frees the buffers; report time-to-stable")
    p.add_argument("--gsgc-b", type=int, default=1, help="GSGC gossip sub-group size b")
    p.add_argument("--kill-receiver", type=float, default=None, metavar="SECONDS",
                   help="SIGKILL the first receiver this long after the start and restart it")
    p.add_argument("--restart-after", type=float, default=0.2, metavar="SECONDS",
                   help="with --kill-receiver: restart it this long after the kill")
    p.add_argument("--no-restart", action="store_true",
                   help="with --kill-receiver: leave it dead (others must declare it failed)")
    p.add_argument("--run-dir", default=None, help="where to write run.json, counters and traces")
    p.add_argument("--trace", action="store_true", help="record per-node event traces (needs pyarrow)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for repairs after sending")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=main)


def main(args):
    use_ns = args.transport in ("auto", "multicast") and netns.available()
    problem = check_args(args, use_ns)
    if problem:
        print(f"stress: {problem}", file=sys.stderr)
        return 2
    return run(args, make_plan(args, use_ns))


def check_args(args, use_ns) -> Optional[str]:
    """What is wrong with the options, in a sentence (None if nothing)."""
    if args.size < 8:
        return "--size must be at least 8 (the payload carries its send time)"
    if args.transport == "multicast" and not use_ns:
        return ("multicast mode needs root (it runs in its own network namespace); "
                "use --transport unicast")
    return None
