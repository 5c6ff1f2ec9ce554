"""Commands for single nodes: node, logger, pub, sub, stat, doctor, selfcheck."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from rpbcast.tools.node_options import add_node_options, open_node
from rpbcast.tools.stats import (STATS_DIR, explain_unreachable, path_group, read_stats, render, running_nodes,
                                 stats_path)


def _selfcheck(args):
    from rpbcast.tools import selfcheck
    return selfcheck.run(verbose=not args.quiet)


def _run_forever(node, label):
    stop = []
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    print(f"{label} {node.node_id} (incarnation {node.incarnation}) on {node.addr}; Ctrl-C to stop", file=sys.stderr)
    while not stop:
        time.sleep(0.2)
        if label != "logger":
            node.recv_batch(65536)      # a plain member discards what it receives
    node.close()


def _node(args):
    _run_forever(open_node(args), "node")


def _logger(args):
    _run_forever(open_node(args, role="logger", log_dir=args.dir, fsync=args.fsync), "logger")


class _Stop(Exception):
    """SIGTERM or SIGINT: leave the command's loop and close the node
    properly (its stats socket removed, its log synced)."""


def _stop_on_signals():
    def stop(*_):
        raise _Stop()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _say(*a):
    print(*a, file=sys.stderr, flush=True)


class _Pacer:
    """--rate: when the next batch is due; says once (and at the end) when
    the rate is not being met, and why."""

    def __init__(self, rate, batch):
        self.rate, self.batch = rate, batch
        self.t0 = time.monotonic()
        self.blocked = 0.0              # seconds spent waiting on back-pressure
        self.warned = False

    def wait(self, n):
        if self.rate:
            delay = self.t0 + n / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def check(self, n, final=False):
        """Warn when behind: after a second of sending, below 90 % of --rate."""
        if not self.rate or self.warned and not final:
            return
        el = time.monotonic() - self.t0
        if el < (0.1 if final else 1.0) or n >= self.rate * el * 0.9:
            return
        why = (f"flow control held the publisher back {self.blocked / el:.0%} of the time"
               if self.blocked > 0.2 * el else
               "one publish call per message: try --batch 64" if self.batch == 1 else
               "this machine cannot publish faster")
        _say(f"rpbcast pub: warning: --rate {self.rate:,.0f} is not met: {n / el:,.0f} msgs/s "
             f"{'in all' if final else 'so far'} ({why})")
        self.warned = True


def _publish_all(node, args, pacer):
    """Publish --count messages (or stdin's lines), --batch per call; returns
    how many went out."""
    n = 0
    b = max(1, args.batch)
    if args.stdin:
        pending = []
        for line in sys.stdin.buffer:
            pending.append(line.rstrip(b"\n"))
            if len(pending) >= b:
                n += _publish_items(node, pending, args.label, pacer, args.stream)
                pending = []
        if pending:
            n += _publish_items(node, pending, args.label, pacer, args.stream)
        return n
    if args.file:
        with open(args.file, "rb") as f:
            body = f.read()              # one message, fragmented when larger than a datagram
    else:
        body = args.text.encode() if args.text else b"x" * args.size
    import numpy as np
    buf = body * b
    lens = np.full(b, len(body), np.uint32)
    labels = None if args.label is None else np.full(b, args.label, np.uint64)
    next_check = time.monotonic() + 1.0
    while args.count == 0 or n < args.count:
        k = b if args.count == 0 else min(b, args.count - n)
        if k == 1:
            while True:
                try:
                    node.publish(body, label=args.label, stream=args.stream)
                    break
                except BlockingIOError:
                    _blocked(pacer)
            n += 1
        else:
            done = 0
            while done < k:
                got = node.publish_batch(memoryview(buf)[done * len(body):k * len(body)], lens[done:k],
                                         None if labels is None else labels[done:k], stream=args.stream)
                done += got
                if done < k:
                    _blocked(pacer)
            n += k
        pacer.wait(n)
        if time.monotonic() >= next_check:
            pacer.check(n)
            next_check = time.monotonic() + 1.0
    return n


def _blocked(pacer):
    t = time.monotonic()
    time.sleep(0.0005)                      # back-pressure: wait for acknowledgments
    pacer.blocked += time.monotonic() - t


def _publish_items(node, items, label, pacer, stream=0):
    import numpy as np
    if label is None:
        labels = None
    else:
        labels = np.full(len(items), label, np.uint64)
    done = 0
    while done < len(items):
        done += node.publish_batch(items[done:], labels=None if labels is None else labels[done:],
                                   stream=stream)
        if done < len(items):
            _blocked(pacer)
    return len(items)


def _pub(args):
    node = open_node(args)
    _stop_on_signals()
    pacer = _Pacer(args.rate, max(1, args.batch))
    n, interrupted = 0, False
    try:
        n = _publish_all(node, args, pacer)
    except _Stop:
        interrupted = True
        n = node.engine.node.next_seq
    el = time.monotonic() - pacer.t0
    _say(f"rpbcast pub: published {n:,} messages in {el:.2f} s ({n / el if el else 0:,.0f} msgs/s)"
         + (" (interrupted)" if interrupted else ""))
    pacer.check(n, final=True)
    cfg = node.config
    linger = cfg.linger if args.linger is None else args.linger
    sb = node.send_buffer()
    if not sb.confirmed:
        # nothing acknowledges: stay up while the gossip buffers may still
        # ask us for repairs, then go
        stay = min(linger, cfg.gc_limit * cfg.gossip_interval)
        _say(f"rpbcast pub: note: {sb}; staying up {stay:.1f} s for repairs")
        try:
            time.sleep(stay)
        except _Stop:
            pass
        node.close(linger=0)
        return 130 if interrupted else 0
    try:
        drain = node.close(linger=linger, report=False)
    except _Stop:
        drain = node.close(linger=0, report=False)
    if drain is not None and not drain.drained:
        _say(f"rpbcast pub: error: {drain}")
        return 1
    if not interrupted:
        _say(f"rpbcast pub: every message acknowledged ({drain.waited:.2f} s to drain)")
    return 130 if interrupted else 0


class _Counter:
    """sub --count-only: distinct and repeated deliveries per (sender,
    incarnation), counted per batch with NumPy (no object per message)."""

    def __init__(self):
        import numpy as np
        self.np = np
        self.seen = {}              # (sender, inc) -> uint8 array of deliveries per seq
        self.total = 0

    def add(self, b):
        np = self.np
        k = b.count
        self.total += k
        keys = (b.senders[:k].astype(np.uint64) << np.uint64(32)) | b.incs[:k].astype(np.uint64)
        for u in np.unique(keys):
            q = b.seqs[:k][keys == u].astype(np.int64)
            key = (int(u >> np.uint64(32)), int(u & np.uint64(0xFFFFFFFF)))
            arr = self.seen.get(key)
            need = int(q.max()) + 1
            if arr is None or len(arr) < need:
                grown = np.zeros(max(need, 2 * (len(arr) if arr is not None else 0), 1024), np.uint8)
                if arr is not None:
                    grown[:len(arr)] = arr
                arr = self.seen[key] = grown
            np.add.at(arr, q, 1)

    def report(self):
        np = self.np
        out = []
        for (s, i), arr in sorted(self.seen.items()):
            got = np.flatnonzero(arr)
            lo, hi = int(got[0]), int(got[-1])
            out.append({"sender": s, "inc": i, "distinct": int(len(got)), "first": lo, "last": hi,
                        "missing_between": int(hi - lo + 1 - len(got)), "duplicates": int((arr > 1).sum())})
        return {"delivered": self.total, "streams": out}


def _on(m):
    """' [stream N]' for a message of a stream other than 0."""
    return f" [stream {m.stream}]" if m.stream else ""


def _sub(args):
    node = open_node(args, streams=args.stream)
    _stop_on_signals()
    n = 0
    counter = _Counter() if args.count_only else None
    idle_end = (time.monotonic() + args.timeout) if args.timeout else None
    timed_out = False
    try:
        if counter is not None:
            buf = bytearray(64 << 20)
            while args.count == 0 or n < args.count:
                b = node.recv_batch(65536 if not args.count else min(65536, args.count - n), buf)
                if b.count:
                    counter.add(b)
                    n += b.count
                    if idle_end is not None:
                        idle_end = time.monotonic() + args.timeout
                    continue
                if idle_end is not None and time.monotonic() >= idle_end:
                    timed_out = True
                    break
                node.transport.wait(0.05)
        else:
            while args.count == 0 or n < args.count:
                m = node.receive(timeout=args.timeout if args.timeout else None)
                if m is None:
                    timed_out = True
                    break
                n += 1
                payload = bytes(m.payload)
                if args.format == "json":
                    print(json.dumps({"sender": m.sender, "inc": m.inc, "seq": m.seq, "label": m.label,
                                      "stream": m.stream, "size": len(payload),
                                      "payload": payload.decode("utf-8", "replace")}))
                elif args.format == "hex":
                    print(f"{m.sender}/{m.inc}/{m.seq}{_on(m)} {payload.hex()}")
                else:
                    print(f"{m.sender}/{m.inc}/{m.seq}{_on(m)}: {payload.decode('utf-8', 'replace')}")
                sys.stdout.flush()
    except _Stop:
        pass
    finally:
        node.close()
    if counter is not None:
        rep = counter.report()
        if args.format == "json":
            print(json.dumps(rep), flush=True)
        else:
            print(f"delivered {rep['delivered']:,} messages", flush=True)
            for r in rep["streams"]:
                print(f"  sender {r['sender']} (incarnation {r['inc']}): {r['distinct']:,} distinct, seqs "
                      f"{r['first']}..{r['last']}, {r['missing_between']:,} missing between, "
                      f"{r['duplicates']:,} delivered more than once", flush=True)
    if timed_out and args.count and n < args.count:
        _say(f"rpbcast sub: received {n:,} of {args.count:,} messages before {args.timeout} s without any")
        return 1
    return 0


def _stat(args):
    if args.socket:
        path = args.socket
    elif args.node_id is not None:
        path = stats_path(args.group, args.node_id)
    else:
        return _stat_list(args)
    prev = None
    try:
        while True:
            try:
                st = read_stats(path)
            except OSError as e:
                _say(f"rpbcast stat: {explain_unreachable(path, e)}")
                return 1
            if args.json:
                print(json.dumps(st), flush=True)
            else:
                render(st, prev)
            if args.once:
                return 0
            prev = st
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _stat_list(args):
    """No node named: the nodes running here, one line each."""
    rows = running_nodes()
    if not rows:
        _say(f"rpbcast stat: no node is running here (no stats socket in {STATS_DIR}); "
             f"name one with --node-id N or --socket PATH")
        return 1
    for path, st, err in rows:
        if st is None:
            print(f"{os.path.basename(path)}: {err}")
        else:
            print(f"group {path_group(path)} node {st['node_id']} ({st['role']}) at {st['addr']}: "
                  f"sent {st.get('sent', 0):,}, delivered {st.get('delivered', 0):,}, "
                  f"unacknowledged {st.get('unacked', 0):,}, lost {st.get('lost', 0):,}")
    return 0


def _doctor(args):
    from rpbcast.tools import doctor
    return doctor.run(args)


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

    p = sub.add_parser("pub", help="publish messages (generated, or lines from stdin)",
                       description="Publish, then wait until every message is acknowledged by what flow control "
                                   "waits for (a logger). Exit status: 0 all acknowledged, 1 some were not "
                                   "(it says which and what they wait for), 2 configuration error, 130 interrupted.")
    add_node_options(p)
    p.add_argument("--count", type=int, default=1, help="messages to send (0 = until interrupted)")
    p.add_argument("--rate", type=float, default=0, help="messages/s (0 = as fast as possible); a warning "
                                                         "says when it is not met")
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="messages per publish call (publish_batch): 64 or more for high rates (default 1)")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--text", help="payload text")
    p.add_argument("--label", type=int, default=None, help="FIFO-SRB obsolescence label")
    p.add_argument("--stream", type=int, default=0, metavar="N",
                   help="stream id to publish on (default 0); subscribers choose streams with sub --stream")
    p.add_argument("--file", metavar="PATH",
                   help="publish the file's contents as each message (any size up to max_message_size: "
                        "larger than a datagram, it is fragmented and delivered whole)")
    p.add_argument("--stdin", action="store_true", help="publish each line of stdin")
    p.add_argument("--linger", type=float, default=None, metavar="SECONDS",
                   help="wait at most this long at the end for every message to be acknowledged (default: "
                        "the config's linger, 5 s); without a logger nothing acknowledges, and pub stays up "
                        "this long (at most gc_limit x gossip_interval) to serve repairs")
    p.set_defaults(func=_pub)

    p = sub.add_parser("sub", help="print received messages (or count them)")
    add_node_options(p)
    p.add_argument("--count", type=int, default=0, help="stop after this many (0 = never)")
    p.add_argument("--timeout", type=float, default=0, help="stop after this many idle seconds (0 = never); "
                                                            "exit 1 if --count was not reached")
    p.add_argument("--format", choices=["text", "hex", "json"], default="text")
    p.add_argument("--stream", type=int, action="append", default=None, metavar="N",
                   help="deliver only this stream (repeat for several; default: every stream); the others "
                        "are still received and repaired here, just not delivered")
    p.add_argument("--count-only", action="store_true",
                   help="print nothing per message: count deliveries per sender (distinct, missing between, "
                        "duplicates) at millions per second and report at the end")
    p.set_defaults(func=_sub)

    p = sub.add_parser("stat", help="live counters of a running node (without --node-id: the nodes running here)")
    p.add_argument("--node-id", type=int)
    p.add_argument("--group", type=int, default=1)
    p.add_argument("--socket", help=f"stats socket path (default {STATS_DIR}/GROUP-NODE.sock)")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--once", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_stat)

    p = sub.add_parser("doctor", help="what a configuration will and will not reach, checked on this host",
                       description="Check a node's configuration against this host: interface, TTL, multicast "
                                   "route, where each member is, loggers, socket buffers. Exit status 1 when "
                                   "something will not be reached or cannot work.")
    add_node_options(p)
    p.set_defaults(func=_doctor, no_stats_socket=True)
