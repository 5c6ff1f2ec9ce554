"""The machine's one-way floor at a fixed rate: plain Python UDP multicast
sockets on loopback, no protocol, so what rpbcast's one-way figures are
compared with is this VM's kernel, loopback and scheduler in the same run.

    bench/oneway_floor.py [--rate 100000] [--seconds 3] [--reps 3] [--no-pin]
                          [--alternate 'SHELL COMMAND'] [--rtt [--count 5000]]
    (root; runs both ends in a network namespace it creates, or in NS=name)

The sender (pinned to the first CPU) publishes one 64-byte datagram each
time one is due on a fixed schedule (busy-wait pacing: a 10 us period is
below what a sleep can hit; when it fell behind it sends every message
already due at once, one call each -- the catch-up), each stamped with its
due time and its send call (CLOCK_MONOTONIC).  The receiver (pinned to the
last CPU) spins on a non-blocking socket and stamps each datagram as it
returns, writing the stamps into one preallocated buffer (no per-message
objects kept).  After a warm-up (--warm s, dropped) it prints percentiles
(p50/p90/p99/p99.9/max, us) of

    from_due   due time -> received (the honest one-way figure: a sender
               that fell behind makes its messages late -- no coordinated
               omission)
    from_send  send call -> received (kernel + loopback + the receiver
               getting to it)
    lag        due -> send call (how late the sender itself was)

and how many messages arrived later than their due time by > 100 us and by
> 1 ms, how many were sent > 100 us late, and how many were lost.

--alternate CMD runs a shell command after each rep (A/B in the same run:
e.g. the `rpbcast stress` run the floor is compared with), its output
passed through.  Every rep prints the load average first.
--rtt measures the round trip instead: bench/udp_pingpong_floor.py, both
ends spinning (--spin) and pinned (--pin), --count round trips per rep.
"""
import argparse
import os
import socket
import struct
import subprocess
import sys
import time

# numpy is imported only where the figures are made, after a run: its
# import starts OpenBLAS threads in the measuring process, which then
# share the pinned CPU with the spinning receiver (seen: 8 ms slices).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
GROUP = ("239.192.1.83", 17540)
HEAD = struct.Struct("<Qqqq")       # seq, due, send call, (receiver:) received
SLOT = 64                           # the datagram's size, and a received stamp's slot
END = 2**64 - 1
PCTS = (50, 90, 99, 99.9, 100)
PCT_NAMES = ("p50", "p90", "p99", "p99.9", "max")


# ------------------------------------------------------------ the figures

def summarize(seq, due, sent, rx, warm_seq=0, expected=None):
    """The run's figures from the received stamps (ns, numpy int arrays in
    arrival order): percentiles in us of from_due / from_send / lag over
    the messages with seq >= warm_seq, late counts, loss, duplicates and
    reordering.  expected: how many messages (seq warm_seq..expected-1)
    were sent, for the loss count."""
    import numpy as np
    seq = np.asarray(seq, dtype=np.uint64)
    keep = seq >= warm_seq
    seq = seq[keep]
    due = np.asarray(due, dtype=np.int64)[keep]
    sent = np.asarray(sent, dtype=np.int64)[keep]
    rx = np.asarray(rx, dtype=np.int64)[keep]
    out = {"received": int(seq.size)}
    uniq = np.unique(seq)
    out["duplicates"] = int(seq.size - uniq.size)
    out["reordered"] = int(np.count_nonzero(np.diff(seq.astype(np.int64)) < 0)) if seq.size > 1 else 0
    if expected is not None:
        out["lost"] = int(max(0, expected - warm_seq) - np.count_nonzero(uniq < expected))
    series = {"from_due": rx - due, "from_send": rx - sent, "lag": sent - due}
    for name, v in series.items():
        if v.size:
            q = np.percentile(v / 1e3, PCTS)
            out[name] = {k: round(float(x), 1) for k, x in zip(PCT_NAMES, q)}
        else:
            out[name] = {k: None for k in PCT_NAMES}
    fd = series["from_due"]
    out["late_100us"] = int(np.count_nonzero(fd > 100_000))
    out["late_1ms"] = int(np.count_nonzero(fd > 1_000_000))
    out["sent_late_100us"] = int(np.count_nonzero(series["lag"] > 100_000))
    return out


def decode(buf, k):
    """The first k received slots of buf: (seq, due, sent, rx) arrays."""
    import numpy as np
    a = np.frombuffer(buf, dtype=np.dtype([("seq", "<u8"), ("due", "<i8"), ("sent", "<i8"), ("rx", "<i8"),
                                           ("pad", "V%d" % (SLOT - HEAD.size))]), count=k)
    return a["seq"], a["due"], a["sent"], a["rx"]


def result_line(role, r, rate):
    parts = [f"RESULT role={role} rate={rate} received={r['received']} lost={r.get('lost', '-')}"
             f" dup={r['duplicates']} reordered={r['reordered']}"]
    for name in ("from_due", "from_send", "lag"):
        parts += [f"{name}_{k}_us={'-' if v is None else f'{v:.1f}'}".replace("p99.9", "p999")
                  for k, v in r[name].items()]
    parts += [f"late_100us={r['late_100us']} late_1ms={r['late_1ms']} sent_late_100us={r['sent_late_100us']}"]
    return " ".join(parts)


# ------------------------------------------------------------ the two ends

def sock(receiver):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if receiver:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind(GROUP)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                     socket.inet_aton(GROUP[0]) + socket.inet_aton("127.0.0.1"))
        s.setblocking(False)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    return s


def pin(cpu):
    if cpu is not None and cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def total(args):
    return int(args.rate * (args.seconds + args.warm))


def send(args):
    pin(args.cpu)
    s = sock(False)
    msg = bytearray(SLOT)
    n = total(args)
    mono = time.monotonic_ns
    t0 = mono() + 20_000_000
    for i in range(n):
        due = t0 + i * 1_000_000_000 // args.rate
        while mono() < due:             # busy-wait pacing; when late, no wait: the catch-up
            pass
        HEAD.pack_into(msg, 0, i, due, mono(), 0)
        s.sendto(msg, GROUP)
    for _ in range(5):                  # the end marker, a few times (loopback drops under a full buffer)
        time.sleep(0.02)
        HEAD.pack_into(msg, 0, END, 0, 0, 0)
        s.sendto(msg, GROUP)
    print(f"SENT {n}", flush=True)


def recv(args):
    pin(args.cpu)
    s = sock(True)
    n = total(args)
    cap = n + 64
    buf = bytearray(cap * SLOT)
    mv = memoryview(buf)
    mono = time.monotonic_ns
    unpack_seq = struct.Struct("<Q").unpack_from
    put_rx = struct.Struct("<q").pack_into
    print("READY", flush=True)
    deadline = mono() + int((args.seconds + args.warm + 30) * 1e9)
    k = 0
    while k < cap:
        off = k * SLOT
        try:
            s.recv_into(mv[off:off + SLOT])
        except BlockingIOError:
            if mono() > deadline:
                break
            continue
        put_rx(buf, off + 24, mono())
        if unpack_seq(buf, off)[0] == END:
            break
        k += 1
    r = summarize(*decode(buf, k), warm_seq=int(args.rate * args.warm), expected=n)
    print(result_line("recv", r, args.rate), flush=True)


# ------------------------------------------------------------ the runs

def namespace(name=None):
    """NS=name, or a fresh namespace with loopback multicast (returned
    with whether it was created here)."""
    if name:
        return name, False
    name = f"rpb-floor-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    for cmd in (["link", "set", "lo", "up"], ["link", "set", "lo", "multicast", "on"],
                ["route", "add", "224.0.0.0/4", "dev", "lo"]):
        subprocess.run(["ip", "-n", name, *cmd], check=True)
    return name, True


def in_ns(ns, argv):
    return ["ip", "netns", "exec", ns, *argv]


def run_pair(ns, first, second, ready_timeout=10.0):
    """Start `first` (it prints READY), then run `second`; both outputs."""
    a = subprocess.Popen(in_ns(ns, first), stdout=subprocess.PIPE, text=True)
    try:
        t_end = time.monotonic() + ready_timeout
        line = a.stdout.readline()
        if line.strip() != "READY" or time.monotonic() > t_end:
            raise RuntimeError(f"{first[1:3]} did not get ready: {line!r}")
        b = subprocess.run(in_ns(ns, second), capture_output=True, text=True, timeout=600)
        out_a, _ = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    return out_a, b.stdout + b.stderr


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def one_way(ns, args, cpus):
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--rate", str(args.rate), "--seconds", str(args.seconds), "--warm", str(args.warm)]
    out_r, out_s = run_pair(ns, me + ["recv", *common, "--cpu", str(cpus[1])],
                            me + ["send", *common, "--cpu", str(cpus[0])])
    return [ln for ln in out_r.splitlines() if ln.startswith("RESULT")] or [f"NO RESULT: {out_r!r} {out_s!r}"]


def round_trip(ns, args):
    floor = [sys.executable, os.path.join(HERE, "udp_pingpong_floor.py")]
    flags = ["--spin"] + ([] if args.no_pin else ["--pin"])
    pong = subprocess.Popen(in_ns(ns, floor + ["pong", "60", *flags]), stdout=subprocess.PIPE, text=True)
    try:
        if pong.stdout.readline().strip() != "READY":
            return ["NO RESULT: the pong did not get ready"]
        out = subprocess.run(in_ns(ns, floor + ["ping", str(args.count), "64", *flags]),
                             capture_output=True, text=True, timeout=600).stdout
    finally:
        pong.kill()
        pong.wait()
    return [ln for ln in out.splitlines() if ln.startswith("RESULT")] or [f"NO RESULT: {out!r}"]


def kv(line):
    return {k: v for k, _, v in (f.partition("=") for f in line.split()[1:])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", nargs="?", choices=["run", "send", "recv"], default="run")
    ap.add_argument("--rate", type=int, default=100_000, help="messages per second")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds (after the warm-up)")
    ap.add_argument("--warm", type=float, default=0.2, help="warm-up seconds, not measured")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--no-pin", action="store_true", help="neither end pinned")
    ap.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--alternate", help="shell command run after each rep (the B of an A/B)")
    ap.add_argument("--rtt", action="store_true", help="round trip (udp_pingpong_floor.py --spin --pin)")
    ap.add_argument("--count", type=int, default=5000, help="round trips per rep (--rtt)")
    a = ap.parse_args(argv)
    if a.role == "send":
        return send(a)
    if a.role == "recv":
        return recv(a)
    cpus = sorted(os.sched_getaffinity(0))
    cpus = (-1, -1) if a.no_pin else (cpus[0], cpus[-1])
    ns, created = namespace(os.environ.get("NS"))
    results = []
    try:
        for rep in range(1, a.reps + 1):
            print(f"LOAD rep={rep} floor {load()}", flush=True)
            lines = round_trip(ns, a) if a.rtt else one_way(ns, a, cpus)
            for ln in lines:
                print(f"rep={rep} floor {ln}", flush=True)
                if ln.startswith("RESULT"):
                    results.append(kv(ln))
            if a.alternate:
                print(f"LOAD rep={rep} alternate {load()}", flush=True)
                r = subprocess.run(a.alternate, shell=True, capture_output=True, text=True)
                for ln in (r.stdout + r.stderr).splitlines():
                    print(f"rep={rep} alternate| {ln}", flush=True)
    finally:
        if created:
            subprocess.run(["ip", "netns", "del", ns])
    if len(results) > 1:
        import numpy as np
        keys = [k for k in results[0] if k.endswith("_us") or "late_" in k or k == "lost"]
        med = {k: float(np.median([float(r[k]) for r in results if r.get(k, "-") != "-"]))
               for k in keys if all(r.get(k, "-") != "-" for r in results)}
        print("MEDIAN floor " + " ".join(f"{k}={v:g}" for k, v in med.items()), flush=True)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
