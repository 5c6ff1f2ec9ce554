"""A stress run, supervised: make its network (one namespace, or a host
each on a bridge), start the workers and the common send time, follow their
progress, apply the faults at their times (rpbcast.tools.stress.faults:
partitions, blackouts, bursts, a paused sender, killing and restarting any
role), tell the receivers what to expect once every sender is done, wait for
them to have it (or for --timeout), then stop everyone, collect their final
reports and remove what the run made -- also when it fails."""
from __future__ import annotations

import signal
import sys
import time

from rpbcast.tools import netns
from rpbcast.tools.stress import report
from rpbcast.tools.stress.faults import Fault, Faults
from rpbcast.tools.stress.plan import Plan, worker_spec
from rpbcast.tools.stress.processes import Group

START_DELAY_NS = 300_000_000        # from "start" to the senders' first message: all of them get it
AGREE_SETTLE_NS = 1_000_000_000     # a killed sender's stream: receivers agree for this long -> settled


def seqs_per_message(sent_event) -> int:
    """How many seqs each message of a finished sender's stream took: one,
    or its fragments' count when the (equal-sized) messages were larger
    than a datagram -- the library delivers such a message with its first
    fragment's seq, so the receivers look for message k at seq k * this."""
    count, seqs = sent_event.get("count", 0), sent_event.get("seqs", 0)
    if count > 0 and seqs >= count and seqs % count == 0:
        return seqs // count
    return 1


class _Terminated(Exception):
    pass


def _on_sigterm(signum, frame):
    raise _Terminated()


class Network:
    """Where the run's workers live: one namespace (loopback multicast),
    a host each (netns.HostNet), or the host's own network (None)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.ns = None
        self.hostnet = None

    def create(self):
        if self.plan.hosts:
            self.hostnet = self.plan.hostnet().create()
        elif self.plan.use_ns:
            self.ns = netns.create()
        return self

    def worker_ns(self):
        """Group's ns argument: one name, {node: name}, or None."""
        return dict(self.hostnet.ns) if self.hostnet else self.ns

    def fault_namespaces(self):
        """{node id: namespace} of the hosts, or {None: the namespace}."""
        if self.hostnet:
            return dict(self.hostnet.ns)
        return {None: self.ns} if self.ns else {}

    def ip_of(self, node):
        return self.hostnet.ip(node) if self.hostnet else "127.0.0.1"

    def set_loss(self, p):
        if self.hostnet:
            self.hostnet.set_loss(p)
        elif self.ns:
            netns.set_loss(self.ns, p)

    def loss_counters(self):
        if self.hostnet:
            return self.hostnet.loss_counters()
        return netns.loss_counters(self.ns) if self.ns else None

    def delete(self):
        if self.hostnet:
            self.hostnet.delete()
        if self.ns:
            netns.delete(self.ns)


def run(args, plan: Plan, faults=()) -> int:
    """The run, from creating its network to removing it; the exit code."""
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    net = Network(plan)
    group = None
    sup = None
    errors = []
    meta = None                 # run.json, once the run has one
    t_start = time.time()
    try:
        net.create()
        group = Group(plan.work, net.worker_ns())
        lossy = plan.use_ns and args.loss
        if lossy:
            net.set_loss(0.0)
        for i in plan.loggers:
            group.spawn(i, "logger", worker_spec(args, plan, i, "logger"))
        for i in plan.receivers:
            group.spawn(i, "receiver", worker_spec(args, plan, i, "receiver"))
        for i in plan.senders:
            group.spawn(i, "sender", worker_spec(args, plan, i, "sender"))
        if not group.wait_ready(errors):
            return report.failure(errors, plan.work)
        if lossy:
            net.set_loss(args.loss)
        at = time.monotonic_ns() + START_DELAY_NS
        group.send(plan.senders, cmd="start", at=at)
        sup = Supervisor(args, plan, group, at, t_start, errors, list(faults), net)
        try:
            sup.follow()
        finally:
            sup.faults.close()
        dropped = net.loss_counters() if lossy else None
        if lossy:
            net.set_loss(0.0)
        finals = group.stop(errors)
        summary = report.summarize(args, plan, sup, finals, dropped, t_start)
        meta = report.run_meta(args, plan, sup, summary)
        from rpbcast.analysis.tracefile import write_run_json
        write_run_json(plan.run_dir, meta)
        if args.json:
            report.print_json(summary)
        else:
            report.print_summary(summary)
        if errors:
            return report.failure(errors, plan.work)
        return 0 if summary["exactly_once"] else 1
    except _Terminated:
        print("stress: terminated (SIGTERM); cleaning up", file=sys.stderr)
        return 143
    except netns.NetnsError as e:
        print(f"stress: {e}", file=sys.stderr)
        return 1
    finally:
        if group is not None:
            group.reap()
        net.delete()
        report.close_run_dir(args, plan, meta)
        signal.signal(signal.SIGTERM, old_term)


class Supervisor:
    """What the run has seen of its workers, and the decisions it takes on
    it until every live receiver has everything (or time is up)."""

    def __init__(self, args, plan: Plan, group: Group, at: int, t_start: float, errors: list,
                 faults=(), net: Network = None):
        self.args = args
        self.plan = plan
        self.group = group
        self.at = at                    # the senders' common start (monotonic ns)
        self.t_start = t_start
        self.errors = errors
        self.progress = {i: 0 for i in plan.senders + plan.receivers}
        self.buffer_peaks, self.buffer_last, self.buffer_series = {}, {}, {}
        self.sent = {}                  # sender -> its "sent" event (current incarnation)
        self.streams = {}               # "s/inc" -> the "sent" event of every incarnation that finished
        self.incs = {i: ev.get("inc") for i, ev in group.ready.items()}
        self.complete = set()           # receivers that have everything expected
        self.dead = set()               # receivers killed and left dead
        self.dead_nodes = set()         # any role, killed and left dead
        self.killed = False             # a receiver was killed (restarted or not)
        self.kill_t = None
        self.killed_nodes = []          # (role, node) of every kill
        self.dead_streams = {}          # "s/inc" of a killed sender's incarnation -> its last reported sent
        self.agree = {}                 # receiver -> its last {"s/inc": [n, top, crc]} for dead streams
        self.agree_since = None         # when the receivers last started agreeing (monotonic ns)
        self.expect = self.latest = None
        self.strides = {}               # "s/inc" -> seqs per message (seqs_per_message)
        self.expect_sent = False
        self.expect_key = None          # what the receivers were last told
        self.wait_deadline = None       # --timeout after the last sender finished
        self.sent_series = {}           # "s/inc" -> [(t ns, sent)]
        self.have_series = {}           # receiver -> [(t ns, distinct delivered)]
        self.prefix_series = {}         # receiver -> [(t ns, {"s/inc": all seqs below it delivered} or None: all)]
        self.protocol_events = []       # notable protocol events, as they came: {"node", "t_s", "event"}
        self.restarting = {}            # node -> the kill Fault, until it is ready again
        net = net or Network(plan)
        self.faults = Faults(list(faults), at, net.fault_namespaces(), net.ip_of, self._pause, self._kill,
                             self._restart, seed=at & 0xFFFF)

    # ------------------------------------------------------------------ following the run
    def follow(self):
        """Until done: take the workers' events, apply and heal faults when
        due, send the expectation, redraw the progress line."""
        tty = sys.stderr.isatty() and not self.args.quiet
        last_draw = 0
        while True:
            wait = 0.1
            due = self.faults.next_due()
            if due is not None:
                wait = max(0.0, min(wait, (due - time.monotonic_ns()) / 1e9))
            ev = self.group.next_event(wait)
            now = time.time()
            if ev is not None:
                self.on_event(ev, now)
            if self.errors:
                break
            self.faults.step(time.monotonic_ns())
            self.send_expectations(now)
            if self.done():
                break
            if self.wait_deadline and now > self.wait_deadline:
                break
            if tty and now - last_draw > 0.2:
                draw_progress(self.progress, self.plan.senders, self.plan.receivers, self.sent, now - self.t_start)
                last_draw = now
        if tty:
            sys.stderr.write("\n")

    def live_receivers(self):
        return [i for i in self.plan.receivers if i not in self.dead]

    def live_senders(self):
        return [i for i in self.plan.senders if i not in self.dead_nodes]

    def done(self) -> bool:
        if not self.expect_sent or self.restarting or self.faults.next_due() is not None:
            return False
        if not self.complete >= set(self.live_receivers()):
            return False
        return not self.dead_streams or self.agreed(time.monotonic_ns())

    def agreed(self, now_ns) -> bool:
        """Every live receiver reports the same delivered set of each dead
        stream, and has for AGREE_SETTLE_NS."""
        views = [self.agree.get(i) for i in self.live_receivers()]
        same = all(v is not None for v in views) and all(v == views[0] for v in views) and \
            all(k in views[0] for k in self.dead_streams) if views else True
        if not same:
            self.agree_since = None
            return False
        if self.agree_since is None:
            self.agree_since = now_ns
        return now_ns - self.agree_since >= AGREE_SETTLE_NS

    def on_event(self, ev, now):
        kind = ev["event"]
        if kind == "progress":
            i = ev["id"]
            self.progress[i] = ev.get("sent", ev.get("delivered", 0))
            t = ev.get("t")
            if t is not None and "sent" in ev:
                self.sent_series.setdefault(f"{i}/{ev.get('inc')}", []).append((t, ev["sent"]))
            if t is not None and "have" in ev:
                self.have_series.setdefault(i, []).append((t, ev["have"]))
                if "prefix" in ev:
                    self.prefix_series.setdefault(i, []).append((t, ev["prefix"]))
                if ev.get("agree") is not None and self.dead_streams:
                    if self.agree.get(i) != ev["agree"]:
                        self.agree_since = None
                    self.agree[i] = ev["agree"]
            b = ev.get("buffers")
            if b:
                peak = self.buffer_peaks.setdefault(i, {})
                for k, v in b.items():
                    peak[k] = max(peak.get(k, 0), v)
                self.buffer_last[i] = b
                # the memory-bounded evidence over time: (s since start, stored messages)
                self.buffer_series.setdefault(i, []).append(
                    (round(now - self.t_start, 2), b.get("store_entries", 0)))
        elif kind == "ready":
            self.incs[ev["id"]] = ev.get("inc")
            f = self.restarting.pop(ev["id"], None)
            if f is not None and f.role == "sender":
                self._restart_sending(ev["id"])
        elif kind == "sent":
            self.sent[ev["id"]] = ev
            self.streams[f"{ev['id']}/{ev['inc']}"] = ev
        elif kind == "complete":
            self.complete.add(ev["id"])
            if ev.get("t") is not None:
                self.have_series.setdefault(ev["id"], []).append((ev["t"], float("inf")))
                self.prefix_series.setdefault(ev["id"], []).append((ev["t"], None))
        elif kind == "protocol":
            self.protocol_events.append({"node": ev["id"], "t_s": round((ev["t"] - self.at) / 1e9, 3),
                                         "event": ev["what"]})
        elif kind == "error":
            self.errors.append(ev)
        elif kind == "exit" and ev["code"] not in (0, -9) and not ev["_proc"].startswith("receiver"):
            self.errors.append(ev)

    # ------------------------------------------------------------------ faults on processes
    def _pause(self, node, stop):
        p = self.group.procs.get(node)
        if p is not None:
            p.pause(stop)

    def _kill(self, f: Fault):
        """SIGKILL node f.node; without a restart it stays dead."""
        i = f.node
        proc = self.group.procs.get(i)
        if proc is None:
            return
        proc.kill()
        self.killed_nodes.append((f.role, i))
        if f.role == "receiver":
            self.killed = True
            self.kill_t = self.kill_t or time.time()
            self.complete.discard(i)
        if f.role == "sender":
            inc = self.incs.get(i)
            if f"{i}/{inc}" not in self.streams:
                # killed while sending: nobody knows how many it sent
                self.dead_streams[f"{i}/{inc}"] = self.progress.get(i, 0)
            self.sent.pop(i, None)
            self.expect_key = None          # the receivers must hear about the change
        if f.seconds is None:
            self.dead_nodes.add(i)
            if f.role == "receiver":
                self.dead.add(i)
            del self.group.procs[i]

    def _restart(self, f: Fault):
        i = f.node
        extra = {"restarted": True}
        if f.role == "sender":
            elapsed = (time.monotonic_ns() - self.at) / 1e9
            extra["duration"] = max(self.args.duration - elapsed, 0.0)
            self.expect_sent = False        # a new incarnation will say what it sent
        role = {"sender": "sender", "receiver": "receiver", "logger": "logger"}[f.role]
        self.group.spawn(i, role, worker_spec(self.args, self.plan, i, role, extra))
        self.restarting[i] = f

    def _restart_sending(self, i):
        self.group.send([i], cmd="start", at=time.monotonic_ns())

    # ------------------------------------------------------------------ expectations
    def send_expectations(self, now):
        """Once every live sender is done, tell the receivers what to expect
        (and start the --timeout clock); tell them again when that changes
        (a sender killed after) and keep telling a restarted receiver until
        it has it all."""
        senders, procs = self.live_senders(), self.group.procs
        if not self.restarting and all(i in self.sent for i in senders):
            if not self.faults.sending_done:
                self.faults.on_sending_done(time.monotonic_ns())
            expect = {k: ev["count"] for k, ev in self.streams.items()}
            latest = {k: ev.get("latest") for k, ev in self.streams.items()}
            key = (tuple(sorted(expect.items())), tuple(sorted(self.dead_streams)))
            if key != self.expect_key:
                self.expect, self.latest = expect, latest
                self.strides = {k: seqs_per_message(ev) for k, ev in self.streams.items()}
                self.expect_key = key
                self.complete = set()
                self.group.send([i for i in self.live_receivers() if i in procs], cmd="expect",
                                counts=self.expect, latest=self.latest, agree=sorted(self.dead_streams),
                                strides=self.strides, **self.atomic_expect())
                if not self.expect_sent:
                    self.wait_deadline = now + self.args.timeout
                self.expect_sent = True
        if self.expect_sent:
            # a restarted receiver (its orders died with its first life)
            for i in self.restarted_receivers():
                if i in procs and i not in self.complete:
                    procs[i].send(cmd="expect", counts=self.expect, latest=self.latest,
                                  agree=sorted(self.dead_streams), strides=self.strides, **self.atomic_expect())

    def restarted_receivers(self):
        return [f.node for f in self.faults.faults
                if f.kind == "kill" and f.role == "receiver" and f.ended is not None
                and f.node not in self.restarting and f.node not in self.dead]

    def atomic_expect(self) -> dict:
        """--atomic: every sender's outcomes, for the receivers' expectation."""
        if not getattr(self.args, "atomic", False):
            return {}
        return {"atomic": {f"{i}/{ev['inc']}": ev.get("atomic") for i, ev in self.sent.items()}}

    def victims(self):
        """Receivers whose deliveries cannot be verified from their traces:
        killed, restarted or not."""
        return sorted({i for role, i in self.killed_nodes if role == "receiver"})


def draw_progress(progress, senders, receivers, sent, elapsed):
    """The live progress line on stderr."""
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
