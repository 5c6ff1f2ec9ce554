"""A stress run, supervised: start the workers and the common send time,
follow their progress, kill (and restart) a receiver if asked, tell the
receivers what to expect once every sender is done, wait for them to have
it (or for --timeout), then stop everyone and collect their final reports."""
from __future__ import annotations

import sys
import time

from rpbcast.tools import netns
from rpbcast.tools.stress import report
from rpbcast.tools.stress.plan import Plan, worker_spec
from rpbcast.tools.stress.processes import Group

START_DELAY_NS = 300_000_000        # from "start" to the senders' first message: all of them get it


def run(args, plan: Plan) -> int:
    """The run, from creating its namespace to removing it; the exit code."""
    ns = netns.create() if plan.use_ns else None
    group = Group(plan.work, ns)
    errors = []
    meta = None                 # run.json, once the run has one
    t_start = time.time()
    try:
        if ns and args.loss:
            netns.set_loss(ns, 0.0)
        for i in plan.loggers:
            group.spawn(i, "logger", worker_spec(args, plan, i, "logger"))
        for i in plan.receivers:
            group.spawn(i, "receiver", worker_spec(args, plan, i, "receiver"))
        for i in plan.senders:
            group.spawn(i, "sender", worker_spec(args, plan, i, "sender"))
        if not group.wait_ready(errors):
            return report.failure(errors, plan.work)
        if ns and args.loss:
            netns.set_loss(ns, args.loss)
        at = time.monotonic_ns() + START_DELAY_NS
        group.send(plan.senders, cmd="start", at=at)
        sup = Supervisor(args, plan, group, at, t_start, errors)
        sup.follow()
        if ns and args.loss:
            dropped = netns.loss_counters(ns)
            netns.set_loss(ns, 0.0)
        else:
            dropped = None
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
    finally:
        group.reap()
        if ns:
            netns.delete(ns)
        report.close_run_dir(args, plan, meta)


class Supervisor:
    """What the run has seen of its workers, and the decisions it takes on
    it until every live receiver has everything (or time is up)."""

    def __init__(self, args, plan: Plan, group: Group, at: int, t_start: float, errors: list):
        self.args = args
        self.plan = plan
        self.group = group
        self.at = at                    # the senders' common start (monotonic ns)
        self.t_start = t_start
        self.errors = errors
        self.progress = {i: 0 for i in plan.senders + plan.receivers}
        self.buffer_peaks, self.buffer_last, self.buffer_series = {}, {}, {}
        self.sent = {}                  # sender -> its "sent" event
        self.complete = set()           # receivers that have everything expected
        self.dead = set()               # receivers killed and left dead
        self.killed = False
        self.kill_t = None
        self.restart_at = None          # when the killed receiver comes back (monotonic ns)
        self.expect = self.latest = None
        self.expect_sent = False
        self.wait_deadline = None       # --timeout after the last sender finished

    def follow(self):
        """Until done: take the workers' events, kill or restart the victim
        when due, send the expectation, redraw the progress line."""
        tty = sys.stderr.isatty() and not self.args.quiet
        last_draw = 0
        while True:
            ev = self.group.next_event(0.1)
            now = time.time()
            if ev is not None:
                self.on_event(ev, now)
            if self.errors:
                break
            self.kill_or_restart()
            self.send_expectations(now)
            if self.expect_sent and self.complete >= set(self.plan.receivers) - self.dead:
                break
            if self.wait_deadline and now > self.wait_deadline:
                break
            if tty and now - last_draw > 0.2:
                draw_progress(self.progress, self.plan.senders, self.plan.receivers, self.sent, now - self.t_start)
                last_draw = now
        if tty:
            sys.stderr.write("\n")

    def on_event(self, ev, now):
        kind = ev["event"]
        if kind == "progress":
            self.progress[ev["id"]] = ev.get("sent", ev.get("delivered", 0))
            b = ev.get("buffers")
            if b:
                peak = self.buffer_peaks.setdefault(ev["id"], {})
                for k, v in b.items():
                    peak[k] = max(peak.get(k, 0), v)
                self.buffer_last[ev["id"]] = b
                # the memory-bounded evidence over time: (s since start, stored messages)
                self.buffer_series.setdefault(ev["id"], []).append(
                    (round(now - self.t_start, 2), b.get("store_entries", 0)))
        elif kind == "sent":
            self.sent[ev["id"]] = ev
        elif kind == "complete":
            self.complete.add(ev["id"])
        elif kind == "error":
            self.errors.append(ev)
        elif kind == "exit" and ev["code"] not in (0, -9) and not ev["_proc"].startswith("receiver"):
            self.errors.append(ev)

    def kill_or_restart(self):
        """--kill-receiver: SIGKILL the first receiver that long after the
        start; restart it --restart-after later unless --no-restart."""
        args, receivers = self.args, self.plan.receivers
        if (args.kill_receiver is not None and not self.killed and receivers
                and time.monotonic_ns() - self.at >= args.kill_receiver * 1e9):
            victim = receivers[0]
            self.group.procs[victim].kill()
            self.killed = True
            self.kill_t = time.time()
            if args.no_restart:
                self.dead.add(victim)
                del self.group.procs[victim]
            else:
                self.restart_at = time.monotonic_ns() + int(args.restart_after * 1e9)
        if self.restart_at is not None and time.monotonic_ns() >= self.restart_at:
            self.restart_at = None
            self.group.spawn(receivers[0], "receiver",
                             worker_spec(args, self.plan, receivers[0], "receiver", {"restarted": True}))

    def send_expectations(self, now):
        """Once every sender is done, tell the receivers what to expect (and
        start the --timeout clock); a restarted receiver is told until it
        has it all."""
        senders, receivers, procs = self.plan.senders, self.plan.receivers, self.group.procs
        if len(self.sent) == len(senders) and not self.expect_sent:
            self.expect = {f"{i}/{self.sent[i]['inc']}": self.sent[i]["count"] for i in senders}
            self.latest = {f"{i}/{self.sent[i]['inc']}": self.sent[i].get("latest") for i in senders}
            self.group.send([i for i in receivers if i in procs], cmd="expect", counts=self.expect,
                            latest=self.latest, **self.atomic_expect())
            self.expect_sent = True
            self.wait_deadline = now + self.args.timeout
        if (self.expect_sent and self.killed and self.restart_at is None and receivers[0] in procs
                and receivers[0] not in self.complete and not self.dead):
            procs[receivers[0]].send(cmd="expect", counts=self.expect, latest=self.latest, **self.atomic_expect())

    def atomic_expect(self) -> dict:
        """--atomic: every sender's outcomes, for the receivers' expectation."""
        if not getattr(self.args, "atomic", False):
            return {}
        return {"atomic": {f"{i}/{ev['inc']}": ev.get("atomic") for i, ev in self.sent.items()}}

    def victims(self):
        """Receivers whose deliveries cannot be verified: killed, restarted or not."""
        return sorted(self.dead | ({self.plan.receivers[0]} if self.killed else set()))


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
