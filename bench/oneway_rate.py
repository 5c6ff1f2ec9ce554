"""One-way latency at a fixed rate through the public API, broken down.

    ip netns exec NS python3 bench/oneway_rate.py recv SECONDS [--busy-take]
    ip netns exec NS python3 bench/oneway_rate.py send RATE SECONDS [--batch N] [--sleep]

(bench/oneway_modes.sh runs both in a namespace of its own, modes
interleaved.)  The sender publishes at RATE msgs/s as the stress sender
does (what is due, at most --batch per publish_batch call; --sleep sleeps
between messages instead of spinning), each message stamped with the
time of its publish call and the time it was due (CLOCK_MONOTONIC, one
clock for both processes).  The receiver waits in Node.wait and takes with
recv_batch, as the stress receiver does, and prints medians and p99 of:

    lag     due -> publish call (the sender's pacing)
    wire    publish call -> the receiver's data plane has it (rx_time: the
            clock after recvmmsg, in whichever thread read it)
    app     rx_time -> recv_batch returned it to the application
    total   publish call -> application (what `rpbcast stress` reports)
    per_take  messages per recv_batch call that took any
"""
import argparse
import os
import struct
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rpbcast import Config, MemberSpec  # noqa: E402
from rpbcast.api import Node  # noqa: E402

GROUP = "239.192.1.79:17520"
PORTS = {1: 17721, 2: 17722}
STAMP = struct.Struct("<qq")      # publish call, due


def config(node_id, extra):
    return Config(node_id=node_id, bind=f"127.0.0.1:{PORTS[node_id]}", group_addr=GROUP,
                  members=[MemberSpec(i, f"127.0.0.1:{p}") for i, p in PORTS.items()],
                  flow_control="receivers", member_timeout=3600, **extra)


def extra_config(args):
    e = {}
    if args.no_own_filter:
        e["drop_own_copy"] = False
    if getattr(args, "receive_mode", None):
        e["receive_mode"] = args.receive_mode
    return e


def send(args):
    node = Node(config(1, extra_config(args)))
    time.sleep(0.5)
    size, rate, batch = 64, args.rate, args.batch
    buf = np.zeros(batch * size, np.uint8)
    stamps = buf.reshape(batch, size)[:, :16].view(np.int64)
    lens = np.full(batch, size, np.uint32)
    t0 = time.monotonic_ns()
    end = t0 + int(args.seconds * 1e9)
    sent = 0
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        due = int((now - t0) * rate / 1e9) - sent
        if due <= 0:
            if args.sleep:
                wait = (sent + 1) * 1e9 / rate + t0 - now
                time.sleep(max(wait, 0) / 1e9)
            continue
        k = min(due, batch)
        stamps[:k, 0] = time.monotonic_ns()
        stamps[:k, 1] = t0 + (np.arange(sent, sent + k) * 1e9 / rate).astype(np.int64)
        n = node.publish_batch(buf[:k * size], lens[:k])
        sent += n
        if n < k:
            node.wait_writable(0.005)
    print(f"SENT {sent} in {args.seconds} s", flush=True)
    time.sleep(1.0)
    node.close(linger=0)


def recv(args):
    node = Node(config(2, extra_config(args)))
    print("READY", flush=True)
    buf = bytearray(64 << 20)
    rows, takes = [], []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        b = node.recv_batch(65536, buf)
        t_app = time.monotonic_ns()
        if not b.count:
            if not args.busy_take:
                node.wait(0.01)
            continue
        mv = np.frombuffer(buf, np.uint8)
        idx = b.offs[:, None].astype(np.int64) + np.arange(16)
        st = mv[idx].view(np.int64).reshape(b.count, 2)
        rows.append(np.column_stack([st[:, 0] - st[:, 1], b.rx_times - st[:, 0],
                                     t_app - b.rx_times, t_app - st[:, 0]]))
        takes.append(b.count)
    node.close(linger=0)
    if not rows:
        print("RESULT no messages", flush=True)
        return
    r = np.concatenate(rows).astype(np.float64) / 1e3
    r = r[len(r) // 10:]                     # without the first 10 %
    names = ("lag", "wire", "app", "total")
    p50 = np.median(r, axis=0)
    p99 = np.percentile(r, 99, axis=0)
    print("RESULT n=%d per_take=%.1f " % (len(r), np.mean(takes)) + " ".join(
        f"{n}_p50_us={a:.1f} {n}_p99_us={b:.1f}" for n, a, b in zip(names, p50, p99)), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    a = sub.add_parser("send")
    a.add_argument("rate", type=float)
    a.add_argument("seconds", type=float)
    a.add_argument("--batch", type=int, default=1024)
    a.add_argument("--sleep", action="store_true", help="sleep until the next message is due (no spin)")
    b = sub.add_parser("recv")
    b.add_argument("seconds", type=float)
    b.add_argument("--busy-take", action="store_true", help="never wait: recv_batch in a loop")
    b.add_argument("--receive-mode", choices=("wait", "spin"), default=None,
                   help="Config.receive_mode (spin: Node.wait never sleeps)")
    for p in (a, b):
        p.add_argument("--no-own-filter", action="store_true", help="Config.drop_own_copy = false")
    args = ap.parse_args(argv)
    (send if args.role == "send" else recv)(args)


if __name__ == "__main__":
    sys.exit(main())
