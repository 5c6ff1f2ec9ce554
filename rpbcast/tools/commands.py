"""Commands for single nodes: node, logger, pub, sub, stat, selfcheck."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

STATS_DIR = os.environ.get("RPBCAST_RUNTIME_DIR", "/tmp/rpbcast")


def stats_path(group: int, node_id: int) -> str:
    return os.path.join(STATS_DIR, f"{group}-{node_id}.sock")


def _selfcheck(args):
    from rpbcast.tools import selfcheck
    return selfcheck.run(verbose=not args.quiet)


def _common(p, role_help="a group member"):
    p.add_argument("-c", "--config", help="TOML file ([rpbcast] table, see docs/api.md)")
    p.add_argument("--node-id", type=int)
    p.add_argument("--bind", help="unicast address a.b.c.d:port")
    p.add_argument("--group", dest="group_addr", help="multicast group a.b.c.d:port")
    p.add_argument("--interface")
    p.add_argument("--transport", choices=["multicast", "unicast"])
    p.add_argument("--member", action="append", default=[], metavar="ID=ADDR[/logger]",
                   help="a member of the group (repeat); e.g. 2=127.0.0.1:7402 or 9=127.0.0.1:7409/logger")
    p.add_argument("--join", action="store_true", help="join dynamically through sponsors instead")
    p.add_argument("--no-stats-socket", action="store_true", help=f"do not serve counters under {STATS_DIR}")


def _config(args, **over):
    from rpbcast.config import Config, ConfigError, MemberSpec
    d = {}
    if args.config:
        from rpbcast.config import read_toml
        raw = read_toml(args.config)
        d = dict(raw.get("rpbcast", raw))
    for key in ("node_id", "bind", "group_addr", "interface", "transport"):
        v = getattr(args, key, None)
        if v is not None:
            d[key] = v
    if getattr(args, "join", False):
        d["join"] = True
    members = list(d.get("members", []))
    for spec in getattr(args, "member", []):
        try:
            ident, rest = spec.split("=", 1)
            role = "member"
            if rest.endswith("/logger"):
                rest, role = rest[: -len("/logger")], "logger"
            members.append({"node_id": int(ident), "addr": rest, "role": role})
        except ValueError:
            raise ConfigError(f"--member must look like ID=ADDR or ID=ADDR/logger, got {spec!r}") from None
    if members:
        d["members"] = members
    d.update(over)
    if "node_id" not in d:
        raise ConfigError("a node id is needed: --node-id N (or node_id in the config file)")
    return Config.from_dict(d)


def _open(args, cls_name="Node", **over):
    from rpbcast import api
    cfg = _config(args, **over)
    sock = None
    if not getattr(args, "no_stats_socket", False):
        os.makedirs(STATS_DIR, exist_ok=True)
        sock = stats_path(cfg.group, cfg.node_id)
    cls = getattr(api, cls_name)
    if cls_name == "Logger":
        return cls(cfg), sock
    return cls(cfg, stats_socket=sock), sock


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
    node, _ = _open(args)
    _run_forever(node, "node")


def _logger(args):
    from rpbcast import api
    cfg = _config(args, role="logger", log_dir=args.dir, fsync=args.fsync)
    sock = None if args.no_stats_socket else stats_path(cfg.group, cfg.node_id)
    if sock:
        os.makedirs(STATS_DIR, exist_ok=True)
    node = api.Node(cfg, stats_socket=sock)
    _run_forever(node, "logger")


def _pub(args):
    node, _ = _open(args)
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
    node, _ = _open(args)
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


def read_stats(path: str) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(path)
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            break
        chunks.append(b)
    s.close()
    return json.loads(b"".join(chunks))


RATE_KEYS = [("sent", "sent/s"), ("delivered", "delivered/s"), ("rx_new", "received/s"), ("gaps", "gaps/s"),
             ("repairs_peer", "repairs peer/s"), ("repairs_logger", "repairs logger/s"), ("served", "served/s"),
             ("rx_dup", "duplicates/s"), ("rx_bad", "malformed/s")]


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


def render(st, prev):
    out = []
    if sys.stdout.isatty():
        out.append("\x1b[H\x1b[2J")
    out.append(f"rpbcast node {st['node_id']} ({st['role']}, incarnation {st['incarnation']}) at {st['addr']}")
    dt = (st["time"] - prev["time"]) if prev else None
    out.append(f"{'counter':<22}{'total':>16}{'rate':>16}")
    for key, label in RATE_KEYS:
        tot = st.get(key, 0)
        rate = f"{(tot - prev.get(key, 0)) / dt:,.0f}" if prev and dt else "-"
        out.append(f"{label.split('/')[0]:<22}{tot:>16,}{rate:>16}")
    out.append(f"store: {st['store_entries']:,} messages, {st['store_bytes'] / 1e6:.1f} MB; gossip buffer "
               f"{st['gossip_buffer_entries']:,} messages; delivery queue {st.get('pending', '-')}")
    sock = st.get("sock", {})
    out.append(f"socket: rx {sock.get('rx_dgrams', 0):,} datagrams in {sock.get('rx_calls', 0):,} calls, "
               f"tx {sock.get('tx_dgrams', 0):,} in {sock.get('tx_calls', 0):,} (GSO {sock.get('gso')}), "
               f"rcvbuf {sock.get('rcvbuf', 0):,}")
    if st.get("rx_reasons"):
        out.append("malformed: " + ", ".join(f"{k} {v}" for k, v in st["rx_reasons"].items()))
    out.append(f"members: {len(st.get('members', []))}: " +
               ", ".join(f"{m[0]}{'(L)' if m[3] == 1 else ''}" for m in st.get("members", [])))
    print("\n".join(out), flush=True)


def add_parsers(sub):
    s = sub.add_parser("selfcheck", help="exercise the C core and report what this machine supports")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=_selfcheck)

    p = sub.add_parser("node", help="run a member until interrupted")
    _common(p)
    p.set_defaults(func=_node)

    p = sub.add_parser("logger", help="run a logger (log on disk, serves repairs and late joiners)")
    _common(p)
    p.add_argument("--dir", required=True, help="directory of the on-disk log")
    p.add_argument("--fsync", choices=["always", "interval", "never"], default="interval")
    p.set_defaults(func=_logger)

    p = sub.add_parser("pub", help="publish messages (generated, or lines from stdin)")
    _common(p)
    p.add_argument("--count", type=int, default=1, help="messages to send (0 = until interrupted)")
    p.add_argument("--rate", type=float, default=0, help="messages/s (0 = as fast as possible)")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--text", help="payload text")
    p.add_argument("--label", type=int, default=None, help="FIFO-SRB obsolescence label")
    p.add_argument("--stdin", action="store_true", help="publish each line of stdin")
    p.add_argument("--linger", type=float, default=0.5, help="seconds to stay up for repairs after sending")
    p.set_defaults(func=_pub)

    p = sub.add_parser("sub", help="print received messages")
    _common(p)
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
