"""Round trip through the public API: rpbcast as the "own" peer of the
ping-pong rows of ../shared/peers/run.sh (the OWN_PING / OWN_PONG hook):

    OWN_PONG='python3 bench/pingpong.py pong {max_s}' \
    OWN_PING='python3 bench/pingpong.py ping {count} {size}' \
    PEERS="zmq-epgm own" SIZES="" ../shared/peers/run.sh      # ping-pong rows only

Written as a user would: one group, two static members, `Node.publish` and
`Node.receive` (a loop thread per node, the default).  The pong echoes
every message of the ping; the ping sends one message, waits for its echo,
`count` times after a 10 % warm-up, and prints the harness's RESULT line.

Each message carries clock stamps (CLOCK_MONOTONIC, one clock for both
processes on this host), so besides the round trip the ping prints where
it went (`STAGES` line, medians in microseconds):

    pub     the ping's publish() call (C data plane + sendmsg)
    fwd     publish start -> the pong's data plane has it (rx_time)
    wake    rx_time -> the pong's application thread holds the Message
    turn    the pong's Python between receive() and its publish()
    back    pong publish start -> the ping's data plane has the echo
    wake2   rx_time -> the ping's application holds the echo

rx_time is the kernel's arrival stamp with --timestamps, else the loop
thread's clock read after recvmmsg returned: running both splits
"fwd"/"back" into loopback and the loop thread's wake-up.

Options (after the harness's arguments): --inline (no loop thread: the
application drives the node with Node.poll), --timestamps, --spin
(receive without sleeping: poll with timeout 0, only with --inline),
--loop-receive (Config.app_receive = false: the loop thread receives and
signals the application, the path before issue 15's step 2), --spin-us N
(Config.receive_spin_us), --no-own-filter (Config.drop_own_copy =
false: loopback hands the ping its own copy, which wakes it), --loop-cpu N
(Config.loop_cpu), --receive-mode spin (Config.receive_mode: receive()
spins for its whole wait), --busy-poll (Config.busy_poll: the loop thread
spins), --busy-poll-us N (Config.busy_poll_us, SO_BUSY_POLL), --pin (the
application threads on CPUs of their own, the ping's first, the pong's
last; the threads a node starts inherit it, Config.loop_cpu moves the
loop thread).  The LOOP
line counts, per round trip, control_us (time the control plane held the
node lock),
app_signals (loop -> application eventfd hops) and app_rx_dgrams
(datagrams the application thread received itself).

--loss P (root; on the ping only): the whole ping-pong runs in a network
namespace of its own whose loopback drops P of the datagrams it delivers
(iptables statistic on INPUT; a lost ping or echo waits for repair), the
pong started by the ping; with --hosts the two are separate hosts on a
veth LAN (per-packet loss).  The EXACT line then says whether every echo
came exactly once.  bench/loss_latency.py runs it beside a lossless
baseline.
"""
import argparse
import contextlib
import os
import struct
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rpbcast import Config, MemberSpec  # noqa: E402
from rpbcast.api import Node  # noqa: E402

GROUP = "239.192.1.78:17510"
PING, PONG = 1, 2
PORTS = {PING: 17711, PONG: 17712}
STAMP = struct.Struct("<Qqqqq")      # idx, t0 (ping), pong rx_time, pong app, pong publish start


def config(node_id, args):
    extra = {}
    # the receive-path options (issue 15 step 2) exist from that step on:
    # left out unless asked, so this file also runs against older trees
    if args.loop_receive:
        extra["app_receive"] = False
    if args.no_own_filter:
        extra["drop_own_copy"] = False
    if args.busy_poll:
        extra["busy_poll"] = True
    for opt, key in (("spin_us", "receive_spin_us"), ("loop_cpu", "loop_cpu"), ("tail_probe", "tail_probe"),
                     ("flow_window", "flow_window"), ("receive_mode", "receive_mode"),
                     ("busy_poll_us", "busy_poll_us")):
        if getattr(args, opt) is not None:
            extra[key] = getattr(args, opt)
    ips = {PING: "127.0.0.1", PONG: "127.0.0.1"}
    hosts = os.environ.get("PINGPONG_HOSTS")         # --loss --hosts: each end its own host (eth0)
    if hosts:
        ips = dict(zip((PING, PONG), hosts.split(",")))
        extra.update(interface="eth0", ttl=1)
    return Config(node_id=node_id, bind=f"{ips[node_id]}:{PORTS[node_id]}", group_addr=GROUP,
                  members=[MemberSpec(i, f"{ips[i]}:{p}") for i, p in PORTS.items()],
                  flow_control="receivers", timestamps=args.timestamps, member_timeout=3600, **extra)


class Receiver:
    """The next message from `peer`: Node.receive (loop thread) or Node.poll (inline)."""

    def __init__(self, node, inline, spin):
        self.node, self.inline, self.spin = node, inline, spin
        self.batch, self.i = None, 0

    def next(self, timeout):
        """(payload bytes, rx_time, t_app) or None on timeout."""
        node = self.node
        if not self.inline:
            m = node.receive(timeout)
            if m is None:
                return None
            return bytes(m.payload), m.rx_time, time.monotonic_ns()
        deadline = time.monotonic() + timeout
        while True:
            b = self.batch
            if b is not None and self.i < b.count:
                i = self.i
                self.i += 1
                return bytes(b.payload(i)), int(b.rx_times[i]), time.monotonic_ns()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.batch, self.i = node.poll(0.0 if self.spin else min(left, 0.01)), 0


def loop_counters(node):
    """The loop's and socket's counters (iterations, epoll wake-ups, control-plane calls, syscalls)."""
    d = node.transport.stats()
    lp, sk = d["loop"], d["sock"]
    c = {"iterations": lp["iterations"], "wakeups": lp["wakeups"], "control_calls": lp["control_calls"],
         "rx_calls": sk["rx_calls"], "tx_calls": sk["tx_calls"]}
    for k in ("app_signals", "app_rx_dgrams", "app_rx_empty", "app_control", "control_us", "tail_probes"):  # trees that count them
        if k in lp:
            c[k] = lp[k]
    return c


def make_node(node_id, args):
    if args.pin:
        # the application thread on a CPU of its own: the ping's on the
        # first, the pong's on the last (the loop threads go where the
        # scheduler puts them)
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[0] if node_id == PING else cpus[-1]})
    return Node(config(node_id, args), start=not args.inline)


def pong(args):
    node = make_node(PONG, args)
    after_start(args)
    rx = Receiver(node, args.inline, args.spin)
    print("READY", flush=True)
    end = time.monotonic() + args.max_s
    echoed = 0
    while time.monotonic() < end:
        got = rx.next(0.1)
        if got is None:
            continue
        p, t_rx, t_app = got
        if len(p) < 16:
            continue
        t_pub = time.monotonic_ns()
        out = bytearray(max(len(p), STAMP.size))
        STAMP.pack_into(out, 0, *struct.unpack_from("<Qq", p), t_rx, t_app, t_pub)
        node.publish(out)
        echoed += 1
    print(f"RESULT role=pong echoed={echoed}", flush=True)
    node.close(linger=0)


def ping(args):
    node = make_node(PING, args)
    after_start(args)
    rx = Receiver(node, args.inline, args.spin)
    warm = max(1, args.count // 10)
    total = warm + args.count
    msg = bytearray(max(args.size, 16))
    rtt, stages, timeouts, strays = [], [], 0, 0
    time.sleep(0.2)                  # the pong's loop is up (it printed READY before we started)
    c0 = None
    for idx in range(total):
        if idx == warm:
            c0 = loop_counters(node)
        t0 = time.monotonic_ns()
        struct.pack_into("<Qq", msg, 0, idx, t0)
        node.publish(msg)
        t1 = time.monotonic_ns()
        while True:
            got = rx.next(args.timeout)
            if got is None:
                if idx >= warm:
                    timeouts += 1
                break
            p, t_rx, t_app = got
            if len(p) < STAMP.size:
                continue
            i, s0, p_rx, p_app, p_pub = STAMP.unpack_from(p)
            if i != idx:             # a late echo of a ping that timed out, or a duplicate
                strays += 1
                continue
            if idx >= warm:
                rtt.append(t_app - t0)
                stages.append((t1 - t0, p_rx - t0, p_app - p_rx, p_pub - p_app, t_rx - p_pub, t_app - t_rx))
            break
    c1 = loop_counters(node)
    if c0 is not None and args.count:
        print("LOOP per round trip (ping node): " + " ".join(
            f"{k}={(c1[k] - c0[k]) / args.count:.2f}" for k in c1), flush=True)
    r = np.array(rtt, np.float64) / 1e3
    if len(r):
        q = np.percentile(r, [0, 50, 99, 100])
        st = np.median(np.array(stages, np.float64), axis=0) / 1e3
        names = ("pub", "fwd", "wake", "turn", "back", "wake2")
        print("STAGES " + " ".join(f"{n}_us={v:.1f}" for n, v in zip(names, st)), flush=True)
        st99 = np.percentile(np.array(stages, np.float64), 99, axis=0) / 1e3
        print("STAGES99 " + " ".join(f"{n}_us={v:.1f}" for n, v in zip(names, st99)), flush=True)
    else:
        q = [float("nan")] * 4
    exact = len(r) == args.count and not timeouts and not strays
    print(f"EXACT {'yes' if exact else 'NO'} echoes={len(r)} of {args.count} timeouts={timeouts} "
          f"strays={strays}", flush=True)
    if len(r):
        print(f"TAIL rtt_p999_us={np.percentile(r, 99.9):.1f}", flush=True)
    print(f"RESULT role=ping samples={len(r)} timeouts={timeouts} rtt_min_us={q[0]:.1f} "
          f"rtt_p50_us={q[1]:.1f} rtt_p99_us={q[2]:.1f} rtt_max_us={q[3]:.1f}", flush=True)
    node.close(linger=0)


def lossy(args, argv):
    """Run the pong and this ping in a fresh namespace (or two hosts) with loss."""
    import subprocess
    from rpbcast.tools import netns
    me = [sys.executable, os.path.abspath(__file__)]
    rest = [a for a in argv if a not in ("--hosts",)]
    i = rest.index("--loss")
    rest = rest[:i] + rest[i + 2:]                      # the inner ping runs without --loss
    flags = shared_flags(args)
    with contextlib.ExitStack() as stack:
        if args.hosts:
            net = stack.enter_context(netns.HostNet([PING, PONG]))
            net.set_loss(args.loss)
            where = {PING: net.ns[PING], PONG: net.ns[PONG]}
            env = dict(os.environ, PINGPONG_HOSTS=f"{net.ip(PING)},{net.ip(PONG)}")
        else:
            ns = stack.enter_context(netns.namespace(loss=args.loss))
            where = {PING: ns, PONG: ns}
            env = dict(os.environ)
        pong_s = max(30.0, args.count * args.timeout * 0.05 + 30)
        po = subprocess.Popen(netns.exec_argv(where[PONG], me + ["pong", str(pong_s), *flags]),
                              stdout=subprocess.PIPE, text=True, env=env)
        try:
            if not po.stdout.readline():                # READY, or the pong is gone
                po.wait(timeout=10)
                print(f"pingpong: the pong exited ({po.returncode}) before it was ready", file=sys.stderr)
                return 2
            pi = subprocess.run(netns.exec_argv(where[PING], me + rest), env=env)
        finally:
            po.terminate()
            po.wait(timeout=10)
        return pi.returncode


def _shared(p):
    """The options both ends take (the lossy ping hands them on to its pong:
    shared_flags)."""
    p.add_argument("--inline", action="store_true", help="no loop thread: Node.poll from this thread")
    p.add_argument("--spin", action="store_true", help="with --inline: never sleep in poll")
    p.add_argument("--timestamps", action="store_true", help="rx_time = kernel arrival")
    p.add_argument("--loop-receive", action="store_true",
                   help="app_receive = false: the loop thread receives, the application waits on its eventfd")
    p.add_argument("--spin-us", type=int, default=None, help="Config.receive_spin_us")
    p.add_argument("--no-own-filter", action="store_true",
                   help="Config.drop_own_copy = false: the own multicast copy reaches the node")
    p.add_argument("--loop-cpu", type=int, default=None, help="Config.loop_cpu: pin the loop thread")
    p.add_argument("--tail-probe", type=float, default=None, help="Config.tail_probe (seconds; 0 = none)")
    p.add_argument("--flow-window", type=int, default=None, help="Config.flow_window (0 = none)")
    p.add_argument("--receive-mode", choices=("wait", "spin"), default=None,
                   help="Config.receive_mode (spin: receive() never sleeps)")
    p.add_argument("--busy-poll", action="store_true",
                   help="Config.busy_poll: the loop thread spins instead of epoll")
    p.add_argument("--busy-poll-us", type=int, default=None, help="Config.busy_poll_us (SO_BUSY_POLL)")
    p.add_argument("--pin", action="store_true",
                   help="pin the application thread: the ping's to the first CPU, the pong's to the last")
    p.add_argument("--gc-freeze", action="store_true",
                   help="gc.freeze() once the node is up, and collect the youngest generation only "
                        "every 50,000 allocations (a low-latency application's usual set-up: "
                        "docs/api.md, \"The low-latency setup\")")


def shared_flags(args):
    """The shared options of a parsed ping as a pong's argv: every option
    with its value (a flag alone when it is a switch)."""
    probe = argparse.ArgumentParser(add_help=False)
    _shared(probe)
    out = []
    for act in probe._actions:
        v = getattr(args, act.dest)
        if v is None or v is False:
            continue
        out.append(act.option_strings[0])
        if v is not True:
            out.append(str(v))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    a = sub.add_parser("ping")
    a.add_argument("count", type=int)
    a.add_argument("size", type=int)
    a.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for one echo")
    a.add_argument("--loss", type=float, default=0.0,
                   help="root: run both ends in a new namespace that drops this fraction of datagrams")
    a.add_argument("--hosts", action="store_true", help="with --loss: two hosts on a veth LAN, not loopback")
    b = sub.add_parser("pong")
    b.add_argument("max_s", type=float)
    for p in (a, b):
        _shared(p)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.spin and not args.inline:
        ap.error("--spin needs --inline")
    if args.role == "ping" and args.loss:
        return lossy(args, argv)
    (ping if args.role == "ping" else pong)(args)


def after_start(args):
    """What the application does once its node is up (--gc-freeze): what
    start-up allocated is moved out of the collector's generations, and a
    collection of the youngest comes every 50,000 allocations instead of
    700 (each one, tens of microseconds in the receiving thread, was in the
    round trip's p99)."""
    if getattr(args, "gc_freeze", False):
        import gc
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 1000)


if __name__ == "__main__":
    sys.exit(main())
