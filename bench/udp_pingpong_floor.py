"""The floor under bench/pingpong.py: the same ping-pong with plain Python
UDP multicast sockets on loopback (blocking recv in the application thread,
one sendto per message, no protocol), so the round trip of the kernel,
loopback and two thread wake-ups is measured on the same machine and run.

    ip netns exec NS python3 bench/udp_pingpong_floor.py pong 30 &
    ip netns exec NS python3 bench/udp_pingpong_floor.py ping 5000 64 [--spin]

--spin: both sides poll a non-blocking socket instead of sleeping in recv
(no wake-up at all: what is left is syscalls and loopback).
--pin: the ping runs on this process's first CPU, the pong on its last (as
`rpbcast stress --pin` places a sender and a receiver), so two spinners do
not share a core.
"""
import argparse
import errno
import os
import socket
import struct
import sys
import time

import numpy as np

GROUPS = {"ping": ("239.192.1.79", 17520), "pong": ("239.192.1.80", 17521)}


def sock(listen):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    g, port = GROUPS[listen]
    s.bind((g, port))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 socket.inet_aton(g) + socket.inet_aton("127.0.0.1"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    return s


def recv(s, spin):
    if not spin:
        return s.recv(65536)
    while True:
        try:
            return s.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue
        except OSError as e:
            if e.errno != errno.EAGAIN:
                raise


def pin(args, last):
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1] if last else cpus[0]})


def pong(args):
    pin(args, last=True)
    s = sock("ping")
    s.settimeout(None)
    print("READY", flush=True)
    end = time.monotonic() + args.max_s
    dst = GROUPS["pong"]
    while time.monotonic() < end:
        s.sendto(recv(s, args.spin), dst)


def ping(args):
    pin(args, last=False)
    s = sock("pong")
    dst = GROUPS["ping"]
    warm = max(1, args.count // 10)
    msg = bytearray(args.size)
    rtt = []
    time.sleep(0.2)
    for idx in range(warm + args.count):
        struct.pack_into("<Q", msg, 0, idx)
        t0 = time.monotonic_ns()
        s.sendto(msg, dst)
        while struct.unpack_from("<Q", recv(s, args.spin))[0] != idx:
            pass
        if idx >= warm:
            rtt.append(time.monotonic_ns() - t0)
    q = np.percentile(np.array(rtt) / 1e3, [0, 50, 99, 100])
    print(f"RESULT role=ping samples={len(rtt)} timeouts=0 rtt_min_us={q[0]:.1f} rtt_p50_us={q[1]:.1f} "
          f"rtt_p99_us={q[2]:.1f} rtt_max_us={q[3]:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="role", required=True)
    a = sub.add_parser("ping")
    a.add_argument("count", type=int)
    a.add_argument("size", type=int)
    b = sub.add_parser("pong")
    b.add_argument("max_s", type=float)
    for p in (a, b):
        p.add_argument("--spin", action="store_true")
        p.add_argument("--pin", action="store_true")
    args = ap.parse_args()
    (ping if args.role == "ping" else pong)(args)


if __name__ == "__main__":
    sys.exit(main())
