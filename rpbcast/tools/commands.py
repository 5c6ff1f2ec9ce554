"""Commands for single nodes: node, logger, pub, sub, stat, selfcheck."""
from __future__ import annotations

import json
import signal
import sys
import time

from rpbcast.tools.node_options import add_node_options, open_node
from rpbcast.tools.stats import STATS_DIR, read_stats, render, stats_path


def _selfcheck(args):
    from rpbcast.tools import selfcheck
    return selfcheck.run(verbose=not args.quiet)


def _run_forever(node, label):
    stop = []
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    print(f"{label} {node.node_id} (incarnation {node.incarnation}) on {node.addr}; Ctrl-C to stop", file=sys.stderr)
    for w in node.warnings:
        print(f"warning: {w}", file=sys.stderr)
    while not stop:
        time.sleep(0.2)
        if label != "logger":
            node.recv_batch(65536)      # a plain member discards what it receives
    node.close()


def _node(args):
    _run_forever(open_node(args), "node")


def _logger(args):
    _run_forever(open_node(args, role="logger", log_dir=args.dir, fsync=args.fsync), "logger")


def _pub(args):
    node = open_node(args)
    n = 0
    interval = 1.0 / args.rate if args.rate else 0
    t0 = time.monotonic()
    try:
        if args.stdin:
            for line in sys.stdin.buffer:
                node.publish(line.rstrip(b"\n"), label=args.label)
                n += 1
        else:
            body = (args.text.encode() if args.text else b"x" * args.size)
            while args.count == 0 or n < args.count:
                while True:
                    try:
                        node.publish(body, label=args.label)
                        break
                    except BlockingIOError:
                        time.sleep(0.001)
                n += 1
                if interval:
                    delay = t0 + n * interval - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
        time.sleep(args.linger)           # let repairs and logger ACKs finish
    except KeyboardInterrupt:
        pass
    print(f"published {n} messages", file=sys.stderr)
    node.close()


def _sub(args):
    node = open_node(args)
    n = 0
    try:
        while args.count == 0 or n < args.count:
            m = node.receive(timeout=args.timeout if args.timeout else None)
            if m is None:
                break
            n += 1
            payload = bytes(m.payload)
            if args.format == "json":
                print(json.dumps({"sender": m.sender, "inc": m.inc, "seq": m.seq, "label": m.label,
                                  "payload": payload.decode("utf-8", "replace")}))
            elif args.format == "hex":
                print(f"{m.sender}/{m.inc}/{m.seq} {payload.hex()}")
            else:
                print(f"{m.sender}/{m.inc}/{m.seq}: {payload.decode('utf-8', 'replace')}")
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    node.close()


def _stat(args):
    path = args.socket or stats_path(args.group, args.node_id)
    prev = None
    try:
        while True:
            try:
                st = read_stats(path)
            except OSError as e:
                print(f"stat: cannot read {path}: {e.strerror or e} (is the node running with its stats socket?)",
                      file=sys.stderr)
                return 1
            if args.json:
                print(json.dumps(st))
            else:
                render(st, prev)
            if args.once:
                return 0
            prev = st
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def add_parsers(sub):
    s = sub.add_parser("selfcheck", help="exercise the C core and report what this machine supports")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=_selfcheck)

    p = sub.add_parser("node", help="run a member until interrupted")
    add_node_options(p)
    p.set_defaults(func=_node)

    p = sub.add_parser("logger", help="run a logger (log on disk, serves repairs and late joiners)")
    add_node_options(p)
    p.add_argument("--dir", required=True, help="directory of the on-disk log")
    p.add_argument("--fsync", choices=["always", "interval", "never"], default="interval")
    p.set_defaults(func=_logger)

    p = sub.add_parser("pub", help="publish messages (generated, or lines from stdin)")
    add_node_options(p)
    p.add_argument("--count", type=int, default=1, help="messages to send (0 = until interrupted)")
    p.add_argument("--rate", type=float, default=0, help="messages/s (0 = as fast as possible)")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--text", help="payload text")
    p.add_argument("--label", type=int, default=None, help="FIFO-SRB obsolescence label")
    p.add_argument("--stdin", action="store_true", help="publish each line of stdin")
    p.add_argument("--linger", type=float, default=0.5, help="seconds to stay up for repairs after sending")
    p.set_defaults(func=_pub)

    p = sub.add_parser("sub", help="print received messages")
    add_node_options(p)
    p.add_argument("--count", type=int, default=0, help="stop after this many (0 = never)")
    p.add_argument("--timeout", type=float, default=0, help="stop after this many idle seconds (0 = never)")
    p.add_argument("--format", choices=["text", "hex", "json"], default="text")
    p.set_defaults(func=_sub)

    p = sub.add_parser("stat", help="live counters of a running node")
    p.add_argument("--node-id", type=int)
    p.add_argument("--group", type=int, default=1)
    p.add_argument("--socket", help=f"stats socket path (default {STATS_DIR}/GROUP-NODE.sock)")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--once", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_stat)
