"""`rpbcast stress`: the main job.

Starts a group on this host -- S senders, N receivers and L loggers, each a
separate process -- sends at a target or the maximum rate for T seconds with
injected loss, checks that every receiver delivered every message exactly
once, and prints a summary (msgs/s, MB/s, one-way latency percentiles,
repairs by peers vs loggers, overhead bytes per data byte).

With root it runs inside a network namespace it creates (loopback multicast,
kernel loss from an iptables `statistic` rule); without root it falls back to
unicast fan-out on 127.0.0.1 with in-process loss.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import numpy as np

from rpbcast.tools import netns
from rpbcast.tools.stress_worker import LAT_BINS


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


class Proc:
    def __init__(self, name, argv, events, log_path):
        self.name = name
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                  text=True, bufsize=1)
        self.events = events
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ev["_proc"] = self.name
            self.events.put(ev)
        self.events.put({"event": "exit", "_proc": self.name, "code": self.p.wait()})

    def send(self, **cmd):
        try:
            self.p.stdin.write(json.dumps(cmd) + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()


def percentile(hist, q):
    total = hist.sum()
    if not total:
        return None
    c = np.cumsum(hist)
    i = int(np.searchsorted(c, q * total))
    if i == 0:
        return float(LAT_BINS[0])
    if i >= len(LAT_BINS):
        return float(LAT_BINS[-1])
    return float(np.sqrt(LAT_BINS[i - 1] * LAT_BINS[i]))   # geometric bin centre


def fmt_ns(v):
    if v is None:
        return "-"
    if v < 1e3:
        return f"{v:.0f} ns"
    if v < 1e6:
        return f"{v / 1e3:.1f} us"
    if v < 1e9:
        return f"{v / 1e6:.2f} ms"
    return f"{v / 1e9:.2f} s"


def plan(args, use_ns):
    """Node ids, addresses and roles."""
    senders = list(range(1, args.senders + 1))
    receivers = list(range(args.senders + 1, args.senders + args.receivers + 1))
    loggers = list(range(args.senders + args.receivers + 1, args.senders + args.receivers + args.loggers + 1))
    base = 17000 + (os.getpid() % 1000) * 20 if not use_ns else 17000
    addrs = {i: f"127.0.0.1:{base + i}" for i in senders + receivers + loggers}
    return senders, receivers, loggers, addrs


def main(args):
    if args.size < 8:
        print("stress: --size must be at least 8 (the payload carries its send time)", file=sys.stderr)
        return 2
    use_ns = args.transport in ("auto", "multicast") and netns.available()
    if args.transport == "multicast" and not use_ns:
        print("stress: multicast mode needs root (it runs in its own network namespace); "
              "use --transport unicast", file=sys.stderr)
        return 2
    transport = "multicast" if use_ns else "unicast"
    loss_model = ("kernel (iptables statistic, namespace INPUT)" if use_ns else "in-process (receive side)") \
        if args.loss else "none"
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="rpbcast-stress-")
    os.makedirs(run_dir, exist_ok=True)
    work = os.path.join(run_dir, "work")
    os.makedirs(work, exist_ok=True)
    senders, receivers, loggers, addrs = plan(args, use_ns)
    flow_control = flow_control_of(args, loggers)
    members = [{"node_id": i, "addr": addrs[i], "role": "logger" if i in loggers else "member"}
               for i in senders + receivers + loggers]
    from rpbcast.drivers import netaddr
    addr_to_node = {netaddr.addr_of(a): i for i, a in addrs.items()}
    ns = netns.create() if use_ns else None
    events = queue.Queue()
    procs = {}
    meta = None                 # run.json, once the run has one
    t_start = time.time()
    try:
        if ns and args.loss:
            netns.set_loss(ns, 0.0)

        def spawn(i, role, extra=None):
            cfg = {"node_id": i, "bind": addrs[i], "members": members, "transport": transport,
                   "srb_window": args.srb_window, "delivery": "fifo" if args.srb_window else "unordered",
                   "gossip_interval": args.gossip_interval, "gso": not args.no_gso,
                   "store_bytes": 512 << 20, "store_entries": 1 << 22, "rcvbuf": 32 << 20, "sndbuf": 32 << 20,
                   "idle_after": 0.002, "logger_rtx_interval": 0.05, "gc_limit": 50,
                   "drop_rate": args.loss if (args.loss and not use_ns) else 0.0,
                   "flow_control": flow_control}
            if role == "receiver" and args.busy_poll:
                cfg["busy_poll"] = True
            if role == "logger":
                cfg["log_dir"] = os.path.join(work, f"log{i}")
                cfg["fsync"] = "interval"
            spec = {"role": role, "config": cfg, "size": args.size, "rate": args.rate,
                    "labels": args.labels, "semantic": bool(args.srb_window),
                    "gsgc": args.gsgc, "gsgc_b": args.gsgc_b,
                    "slow": args.slow_receiver if (role == "receiver" and i == receivers[0]) else 0,
                    "duration": args.duration, "batch": args.batch, "run_dir": run_dir,
                    "inline": bool(args.inline) and role == "receiver",
                    "run_id": run_id, "trace": args.trace, "trace_cap": (1 << 22) if args.trace else 0,
                    "addr_to_node": {str(k): v for k, v in addr_to_node.items()}}
            if role == "receiver":
                spec["checkpoint"] = os.path.join(work, f"recv{i}.npz")
            spec.update(extra or {})
            argv = [sys.executable, "-m", "rpbcast.tools.stress_worker", json.dumps(spec)]
            if ns:
                argv = netns.exec_argv(ns, argv)
            procs[i] = Proc(f"{role}{i}", argv, events, os.path.join(work, f"{role}{i}.err"))

        for i in loggers:
            spawn(i, "logger")
        for i in receivers:
            spawn(i, "receiver")
        for i in senders:
            spawn(i, "sender")
        ready, finals, errors = {}, {}, []
        incs = {}
        deadline = time.time() + 30
        while len(ready) < len(procs) and time.time() < deadline:
            try:
                ev = events.get(timeout=0.5)
            except queue.Empty:
                continue
            if ev["event"] == "ready":
                ready[ev["id"]] = ev
                incs[ev["id"]] = ev["inc"]
            elif ev["event"] in ("error", "exit"):
                errors.append(ev)
                break
        if errors or len(ready) < len(procs):
            return report_failure(errors, work)
        if ns and args.loss:
            netns.set_loss(ns, args.loss)
        at = time.monotonic_ns() + 300_000_000
        for i in senders:
            procs[i].send(cmd="start", at=at)
        progress = {i: 0 for i in senders + receivers}
        buffer_peaks, buffer_last, buffer_series = {}, {}, {}
        dead = set()
        sent = {}
        complete = set()
        killed = False
        restart_at = None           # when the killed receiver comes back
        kill_t = None
        expect_sent = False
        tty = sys.stderr.isatty() and not args.quiet
        last_draw = 0
        send_end = None
        wait_deadline = None
        while True:
            try:
                ev = events.get(timeout=0.1)
            except queue.Empty:
                ev = None
            now = time.time()
            if ev is not None:
                kind = ev["event"]
                if kind == "progress":
                    progress[ev["id"]] = ev.get("sent", ev.get("delivered", 0))
                    b = ev.get("buffers")
                    if b:
                        peak = buffer_peaks.setdefault(ev["id"], {})
                        for k, v in b.items():
                            peak[k] = max(peak.get(k, 0), v)
                        buffer_last[ev["id"]] = b
                        # the memory-bounded evidence over time: (s since start, stored messages)
                        buffer_series.setdefault(ev["id"], []).append(
                            (round(now - t_start, 2), b.get("store_entries", 0)))
                elif kind == "sent":
                    sent[ev["id"]] = ev
                elif kind == "complete":
                    complete.add(ev["id"])
                elif kind == "error":
                    errors.append(ev)
                elif kind == "exit" and ev["code"] not in (0, -9) and not ev["_proc"].startswith("receiver"):
                    errors.append(ev)
            if errors:
                break
            if (args.kill_receiver is not None and not killed and receivers
                    and time.monotonic_ns() - at >= args.kill_receiver * 1e9):
                victim = receivers[0]
                procs[victim].kill()
                killed = True
                kill_t = time.time()
                if args.no_restart:
                    dead.add(victim)
                    del procs[victim]
                else:
                    restart_at = time.monotonic_ns() + int(args.restart_after * 1e9)
            if restart_at is not None and time.monotonic_ns() >= restart_at:
                restart_at = None
                spawn(receivers[0], "receiver", {"restarted": True})
            if len(sent) == len(senders) and not expect_sent:
                expect = {f"{i}/{sent[i]['inc']}": sent[i]["count"] for i in senders}
                latest = {f"{i}/{sent[i]['inc']}": sent[i].get("latest") for i in senders}
                for i in receivers:
                    if i in procs:
                        procs[i].send(cmd="expect", counts=expect, latest=latest)
                expect_sent = True
                send_end = now
                wait_deadline = now + args.timeout
            if (expect_sent and killed and restart_at is None and receivers[0] in procs
                    and receivers[0] not in complete and not dead):
                # a restarted receiver needs the expectation too
                procs[receivers[0]].send(cmd="expect", counts=expect, latest=latest)
            if expect_sent and complete >= set(receivers) - dead:
                break
            if wait_deadline and now > wait_deadline:
                break
            if tty and now - last_draw > 0.2:
                draw(progress, senders, receivers, sent, now - t_start)
                last_draw = now
        if tty:
            sys.stderr.write("\n")
        if ns and args.loss:
            dropped = netns.loss_counters(ns)
            netns.set_loss(ns, 0.0)
        else:
            dropped = None
        for p in procs.values():
            p.send(cmd="stop")
        deadline = time.time() + 20
        while len(finals) < len(procs) and time.time() < deadline:
            try:
                ev = events.get(timeout=0.5)
            except queue.Empty:
                continue
            if ev["event"] == "final":
                finals[ev["id"]] = ev
            elif ev["event"] == "error":
                errors.append(ev)
        summary = summarize(args, senders, [r for r in receivers if r not in dead], loggers, sent, finals,
                            transport, loss_model, dropped, complete, send_end, t_start, killed)
        summary["dead_receivers"] = sorted(dead)
        summary["buffer_peaks"] = buffer_peaks
        summary["buffer_end"] = buffer_last
        summary["buffer_series"] = buffer_series
        summary["kill_at_s"] = round(kill_t - t_start, 2) if kill_t else None
        if args.gsgc:
            summary["gsgc"] = {i: gsgc_brief(f.get("gsgc")) for i, f in finals.items() if f.get("gsgc")}
        summary["run_dir"] = run_dir
        # Who must deliver what (the analysis pipeline's exactly-once check):
        # every receiver, every sender's stream; senders do not deliver.  A
        # killed receiver is left out: its first life's trace died with it
        # (and what it delivered after its last checkpoint it delivers again).
        victims = sorted(dead | ({receivers[0]} if killed else set()))
        verified = [r for r in receivers if r not in victims]
        meta = {"run_id": run_id, "kind": "stress", "protocol": "rpbcast", "clock": "monotonic",
                "nodes": [{"id": i, "role": "logger" if i in loggers else "member", "addr": addrs[i]} for i in addrs],
                "senders": senders, "params": vars(args) | {"transport": transport, "loss_model": loss_model},
                "members_at_send": {str(s): verified for s in senders},
                "unverified_receivers": victims,
                "summary": summary}
        meta["params"].pop("func", None)
        from rpbcast.analysis.tracefile import write_run_json
        write_run_json(run_dir, meta)
        if args.json:
            print(json.dumps(summary, indent=1, default=str))
        else:
            print_summary(summary)
        if errors:
            return report_failure(errors, work)
        return 0 if summary["exactly_once"] else 1
    finally:
        # Workers close their trace files and write counters after their
        # final report: let them exit on their own first.
        end = time.time() + 15
        for p in procs.values():
            try:
                p.p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs.values():
            if p.p.poll() is None:
                p.kill()
        if ns:
            netns.delete(ns)
        if args.trace and meta is not None:
            from rpbcast.analysis.tracefile import quarantine_broken, write_run_json
            broken = quarantine_broken(run_dir)
            if broken:
                meta["trace_incomplete"] = broken
                write_run_json(run_dir, meta)
        if not args.run_dir and not args.trace:
            shutil.rmtree(run_dir, ignore_errors=True)
        elif args.trace and not args.quiet:
            print(f"traces in {run_dir}: rpbcast analyze {run_dir}", file=sys.stderr)


def flow_control_of(args, loggers):
    """Config.flow_control for the run: --flow-control, or with auto the
    loggers' acknowledgments when there are loggers, else the receivers'."""
    if args.flow_control != "auto":
        return args.flow_control
    return "loggers" if loggers else "receivers"


def gsgc_brief(st):
    if not st:
        return None
    tts = st.get("tts") or st.get("time_to_stable") or {}
    return {"rounds": st.get("rounds_completed", st.get("rounds")), "time_to_stable": tts,
            "failed": st.get("failed"), "K": st.get("K"), "events": (st.get("events") or [])[-20:]}


def draw(progress, senders, receivers, sent, elapsed):
    s = sum(progress[i] for i in senders)
    r = min((progress[i] for i in receivers), default=0)
    total = sum(v["count"] for v in sent.values()) if len(sent) == len(senders) else None
    width = 30
    if total:
        frac = min(r / total, 1.0) if total else 0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        sys.stderr.write(f"\r  [{bar}] delivered {r:,}/{total:,} (slowest receiver)  {elapsed:5.1f}s ")
    else:
        sys.stderr.write(f"\r  sending: {s:,} published, slowest receiver {r:,}  {elapsed:5.1f}s ")
    sys.stderr.flush()


def summarize(args, senders, receivers, loggers, sent, finals, transport, loss_model, dropped, complete,
              send_end, t_start, killed):
    total_sent = sum(v["count"] for v in sent.values())
    send_secs = max((v["seconds"] for v in sent.values()), default=0)
    recv = [finals[i] for i in receivers if i in finals]
    rates = [f["rate"] for f in recv]
    hist = np.sum([np.array(f["hist"]) for f in recv], axis=0) if recv else np.zeros(1)
    bad = {}
    semantic = bool(args.srb_window)
    for f in recv:
        for k, c in f["check"].items():
            if semantic:
                # FIFO-SRB: obsolete values may be skipped, but nothing twice,
                # nothing out of FIFO order, and the latest value of every label.
                if c["duplicates"] or c["unexpected"] or c.get("fifo_violations") or c.get("stale_labels"):
                    bad[f"receiver {f['id']} sender {k}"] = c
            elif c["missing"] or c["duplicates"] or c["unexpected"]:
                bad[f"receiver {f['id']} sender {k}"] = c
    # Repairs and overhead from the nodes' counters.
    def tot(key, ids):
        return sum(finals[i]["stats"].get(key, 0) for i in ids if i in finals)
    data_bytes = repair_bytes = other_bytes = 0
    for i, f in finals.items():
        for t, (mi, bi, mo, bo) in f["stats"].get("traffic", {}).items():
            if t == "data":
                data_bytes += bo
            elif t == "repair":
                repair_bytes += bo
            elif t != "pad":
                other_bytes += bo
    return {
        "transport": transport, "loss": args.loss, "loss_model": loss_model,
        "flow_control": flow_control_of(args, loggers),
        "kernel_drops": dropped, "senders": len(senders), "receivers": len(receivers), "loggers": len(loggers),
        "size": args.size, "sent": total_sent, "send_rate": total_sent / send_secs if send_secs else 0,
        "recv_rate_min": min(rates) if rates else 0, "recv_rate_max": max(rates) if rates else 0,
        "mb_s_min": (min(rates) * args.size / 1e6) if rates else 0,
        "latency_p50": percentile(hist, 0.50), "latency_p99": percentile(hist, 0.99),
        "latency_p999": percentile(hist, 0.999), "latency_max": percentile(hist, 1.0),
        "repairs_peer": tot("repairs_peer", receivers), "repairs_logger": tot("repairs_logger", receivers),
        "gaps": tot("gaps", receivers), "served_by_loggers": tot("served", loggers),
        "overhead_per_data_byte": other_bytes / data_bytes if data_bytes else None,
        "repair_bytes_per_data_byte": repair_bytes / data_bytes if data_bytes else None,
        "exactly_once": not bad and len(recv) == len(receivers) and all(i in complete for i in receivers),
        "semantics": "fifo-srb (latest value per label, FIFO, no duplicates)" if semantic else "exactly once",
        "purged_at_receivers": tot("purged", receivers),
        "per_receiver_rate": {f["id"]: round(f["rate"]) for f in recv},
        # messages arriving (first receipts) per second of sending: what the
        # network path sustains, whatever the application consumes
        "per_receiver_receive_rate": {f["id"]: round((f["stats"].get("rx_new", 0) + f["stats"].get("rx_fill", 0))
                                                     / send_secs) if send_secs else 0 for f in recv},
        "per_receiver_purged": {f["id"]: f["stats"].get("purged", 0) for f in recv},
        "store_entries_end": {i: finals[i]["stats"].get("store_entries") for i in receivers if i in finals},
        "problems": bad, "receivers_complete": sorted(complete), "receiver_killed": killed,
        "repair_tail_s": None,
        "wall_s": time.time() - t_start,
    }


def print_summary(s):
    ok = "yes" if s["exactly_once"] else "NO"
    lines = [
        f"rpbcast stress: {s['senders']} sender(s) -> {s['receivers']} receiver(s), {s['loggers']} logger(s), "
        f"{s['size']} B messages, {s['transport']}, flow control by {s.get('flow_control', 'loggers')}",
        f"  loss            {s['loss']:.2%} ({s['loss_model']})" + (f", {s['kernel_drops'][0]:,} packets dropped by the kernel" if s.get("kernel_drops") else ""),
        f"  sent            {s['sent']:,} messages at {s['send_rate']:,.0f} msgs/s",
        f"  received        {s['recv_rate_min']:,.0f} msgs/s delivered by the slowest receiver, {s['mb_s_min']:.1f} MB/s",
        f"  latency         p50 {fmt_ns(s['latency_p50'])}, p99 {fmt_ns(s['latency_p99'])}, p99.9 {fmt_ns(s['latency_p999'])}",
        f"  repairs         {s['repairs_peer']:,} by peers, {s['repairs_logger']:,} by loggers ({s['gaps']:,} gaps)",
        (f"  overhead        {s['overhead_per_data_byte']:.4f} control bytes and "
         f"{s['repair_bytes_per_data_byte']:.4f} repair bytes per data byte")
        if s["overhead_per_data_byte"] is not None else "  overhead        -",
        f"  {'delivery check':<15} {s['semantics']}: {ok}" + ("" if s["exactly_once"] else f": {json.dumps(s['problems'])[:400]}"),
    ]
    if s["semantics"] != "exactly once":
        lines.append("  per receiver    " + ", ".join(
            f"{i}: {s['per_receiver_receive_rate'][i]:,}/s in, {s['per_receiver_rate'][i]:,}/s delivered, "
            f"{s['per_receiver_purged'][i]:,} obsolete dropped" for i in s["per_receiver_rate"]))
    if s.get("receiver_killed"):
        lines.append("  a receiver was killed (SIGKILL) " + (f"and left dead: node {s['dead_receivers']}"
                                                           if s.get("dead_receivers") else "and restarted") +
                     " during the run")
    if s.get("buffer_peaks"):
        peak = max((p.get("store_entries", 0) for p in s["buffer_peaks"].values()), default=0)
        end = max((p.get("store_entries", 0) for p in s.get("buffer_end", {}).values()), default=0)
        lines.append(f"  buffers         peak {peak:,} stored messages on a node, {end:,} at the end")
    if s.get("gsgc"):
        for i, g in sorted(s["gsgc"].items()):
            if g:
                tts = g.get("time_to_stable") or {}
                lines.append(f"  gsgc node {i:<5} rounds {g.get('rounds')}, time-to-stable "
                             f"p50 {tts.get('p50')} p99 {tts.get('p99')}, failed {g.get('failed')}")
    print("\n".join(lines))


def report_failure(errors, work):
    for e in errors:
        print(f"stress: {e.get('_proc')}: {e.get('error') or 'exited with ' + str(e.get('code'))}", file=sys.stderr)
        if e.get("tb"):
            print(e["tb"], file=sys.stderr)
        name = e.get("_proc")
        if name:
            try:
                with open(os.path.join(work, f"{name}.err")) as f:
                    tail = f.read()[-2000:]
                if tail.strip():
                    print(tail, file=sys.stderr)
            except OSError:
                pass
    return 1
