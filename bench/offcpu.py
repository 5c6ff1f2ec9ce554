"""Who takes the CPU from a thread: off-CPU intervals from the scheduler's
own trace (tracefs sched_switch + sched_wakeup), attributed to what ran on
that CPU meanwhile.  Root; stdlib + numpy.

    bench/offcpu.py --match 'oneway_floor.py recv' -- CMD ARGS...   (trace while CMD runs)
    bench/offcpu.py --pid 1234 --seconds 3                          (attach for 3 s)
    bench/offcpu.py --tid 1235 --from-trace saved.txt               (analyse a saved trace)

Threads: --tid T (one thread), --pid P (every thread of P), --match REGEX
(every thread of every process whose command line matches; the command
line is the arguments joined by spaces).  They are resolved from
/proc/PID/task at the start and again every --poll seconds while the trace
runs (a command's workers start after it), and only ever read: nothing is
signalled or killed.

Per thread it prints its off-CPU intervals by the state it left the CPU in
-- `preempted` (R: it could have run; something else did) against
`sleeping` (S, D: it waited for something) -- with their count, total,
p50/p99/max, and for the intervals over --threshold-us (200 by default)
which tasks ran on the CPU it left meanwhile, for how long in total, in how
many of those intervals and at most in one.  Their time beyond the
threshold (`excess`) bounds what a fixed-rate stream pays for them: at
100 k msgs/s each 10 us of it delays at least one message past the
threshold (more with the catch-up after a gap).  For sleeping intervals
the part between the wake-up and getting the CPU back (`wake->run`) is
reported too: that part is the scheduler's, the rest the thread's own
wait.  Also the busiest tasks on each CPU over the whole trace.
--window A:B counts only the intervals beginning A..B s after the trace's
first event (a run's measured part); --json FILE writes the same as JSON.

Switches the trace missed are put back first (repair(): this VM's traces
lack CPU 1's switches out of idle, and some of other tasks'), and the
report says how many were inferred and how many are unknown.

The trace is recorded in a tracefs instance of its own
(instances/offcpu-PID: its own buffer, events, clock and on/off switch),
so a trace someone else set up on the top-level buffer is neither read nor
disturbed; the instance is removed at the end, which turns its events off
and frees its buffer.  Its clock is `mono` (CLOCK_MONOTONIC, the clock the
benches stamp with).  Events lost to a full buffer are counted and printed:
a trace with lost events has holes, and its intervals can be wrong.
"""
import argparse
import bisect
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict

TRACEFS = "/sys/kernel/tracing"
EVENTS = ("sched/sched_switch", "sched/sched_wakeup")

LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+"
                  r"(?:\S+\s+)?(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s+(?P<body>.*)$")
SWITCH = re.compile(r"prev_comm=(?P<pc>.*?) prev_pid=(?P<pp>-?\d+) prev_prio=-?\d+ prev_state=(?P<ps>\S+) "
                    r"==> next_comm=(?P<nc>.*?) next_pid=(?P<np>-?\d+) next_prio=-?\d+\s*$")
WAKEUP = re.compile(r"comm=(?P<c>.*?) pid=(?P<p>-?\d+) prio=-?\d+(?: target_cpu=(?P<t>\d+))?")


# ---------------------------------------------------------------- parsing

def parse(lines):
    """The trace text's scheduler events, in trace order, as tuples:
    ("switch", ts_ns, cpu, prev_pid, prev_comm, prev_state, next_pid, next_comm)
    ("wakeup", ts_ns, cpu, pid, comm, waker_pid)
    (waker_pid: the task running on that CPU when it woke `pid`).  Other events and comment lines are skipped."""
    out = []
    for ln in lines:
        if not ln or ln[0] == "#":
            continue
        m = LINE.match(ln)
        if m is None:
            continue
        ev = m.group("event")
        sec, _, frac = m.group("ts").partition(".")
        ts = int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
        cpu = int(m.group("cpu"))
        body = m.group("body")
        if ev == "sched_switch":
            s = SWITCH.match(body)
            if s:
                out.append(("switch", ts, cpu, int(s.group("pp")), s.group("pc"), s.group("ps"),
                            int(s.group("np")), s.group("nc")))
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            w = WAKEUP.match(body)
            if w:
                out.append(("wakeup", ts, cpu, int(w.group("p")), w.group("c"), int(m.group("pid"))))
    return out


def state_class(prev_state):
    """preempted: left the CPU runnable (R, R+); sleeping: S or D; other."""
    if prev_state.startswith("R"):
        return "preempted"
    if prev_state[:1] in ("S", "D"):
        return "sleeping"
    return "other"


def task_name(pid, comm):
    if pid == 0:
        return "<idle>"
    return comm if pid < 0 else f"{comm}-{pid}"


# ------------------------------------------------------------ attribution

def repair(events):
    """The events with the switches the trace missed put back, and how many.

    The kernel's trace can lack a switch (seen here: an idle CPU's switch
    to the task it woke for, now and then): a task is then seen running
    -- switching out, or waking another task -- on a CPU the trace last
    gave to another.  When that CPU was idle and the task was woken since,
    it got the CPU when it was woken (an idle CPU takes a woken task at
    once): a switch is put in there, marked "inferred".  Otherwise when it
    got the CPU is not known: a switch marked "unknown" is put in at the
    moment it was seen, and the time before is nobody's (run_segments) and
    its off-CPU interval is dropped (off_intervals).  Returns (events,
    {"inferred": n, "unknown": n})."""
    cur = {}                # cpu -> (pid, comm, since)
    last_wake = {}
    out = []
    fixed = {"inferred": 0, "unknown": 0}
    for ev in events:
        ts, cpu = ev[1], ev[2]
        running = ev[3] if ev[0] == "switch" else ev[5]
        if cpu in cur and cur[cpu][0] != running:
            pid, comm, since = cur[cpu]
            w = last_wake.get(running)
            if pid == 0 and w is not None and since <= w <= ts:
                at, kind = max(w, since), "inferred"
            else:
                at, kind = ts, "unknown"
            fixed[kind] += 1
            name = ev[4] if ev[0] == "switch" else "?"
            out.append(("switch", at, cpu, pid, comm, "?", running, name, kind))
            cur[cpu] = (running, name, at)
        if ev[0] == "wakeup":
            last_wake[ev[3]] = ts
        else:
            cur[cpu] = (ev[6], ev[7], ts)
        out.append(ev)
    return out, fixed


class Segments(dict):
    """{cpu: [(start_ns, end_ns, pid, comm)]} sorted by start, with each
    CPU's start times kept for bisection."""

    def __init__(self, segs):
        super().__init__(segs)
        self.starts = {cpu: [s[0] for s in lst] for cpu, lst in segs.items()}


def run_segments(events, t_end=None):
    """Who ran on each CPU when (a Segments), from repaired events.
    Before a CPU's first switch its previous task is taken to have run
    since the trace's first event; the last one on each CPU until t_end
    (default: the last event).  Before a switch marked "unknown" the
    CPU's task is known to have run until it was last seen running (it
    woke another task then); the time after is "<unknown>"."""
    if not events:
        return Segments({})
    t0 = events[0][1]
    t_end = events[-1][1] if t_end is None else t_end
    cur = {}                # cpu -> [since, pid, comm, last seen running]
    segs = defaultdict(list)
    for ev in events:
        ts, cpu = ev[1], ev[2]
        if ev[0] == "wakeup":
            if cpu in cur and cur[cpu][1] == ev[5]:
                cur[cpu][3] = ts
            continue
        pp, pc, np_, nc = ev[3], ev[4], ev[6], ev[7]
        start, seen = (cur[cpu][0], cur[cpu][3]) if cpu in cur else (t0, t0)
        if len(ev) > 8 and ev[8] == "unknown":
            if seen > start:
                segs[cpu].append((start, seen, pp, pc))
            start, pp, pc = max(start, seen), -1, "<unknown>"
        if ts > start:
            segs[cpu].append((start, ts, pp, pc))
        cur[cpu] = [ts, np_, nc, ts]
    for cpu, (ts, pid, comm, _seen) in cur.items():
        if t_end > ts:
            segs[cpu].append((ts, t_end, pid, comm))
    return Segments(dict(segs))


def ran_meanwhile(segs, cpu, start, end):
    """{task name: ns} that ran on `cpu` within [start, end)."""
    out = defaultdict(int)
    lst = segs.get(cpu, [])
    i = max(0, bisect.bisect_right(segs.starts.get(cpu, []), start) - 1)
    while i < len(lst) and lst[i][0] < end:
        s, e, pid, comm = lst[i]
        ov = min(e, end) - max(s, start)
        if ov > 0:
            out[task_name(pid, comm)] += ov
        i += 1
    return dict(out)


def off_intervals(events, tids):
    """Each tracked thread's off-CPU intervals, from repaired events:
    {tid: [dict(start, end, ns, state, cls, cpu_out, cpu_in, woken,
    inferred)]}, `woken` the first wake-up's time within the interval (None
    if none was traced), `inferred` whether its end is an inferred switch.
    An interval must begin and end inside the trace (a thread already off
    at the start, or still off at the end, is not counted), and its end
    must be known (one ended by an "unknown" switch is dropped and
    counted).  Also {tid: on-CPU ns} and {tid: intervals dropped}."""
    tids = set(tids)
    dropped = defaultdict(int)
    open_ = {}
    since_on = {}
    out = defaultdict(list)
    on_ns = defaultdict(int)
    for ev in events:
        if ev[0] == "wakeup":
            o = open_.get(ev[3])
            if o is not None and o["woken"] is None:
                o["woken"] = ev[1]
            continue
        ts, cpu, pp, ps, np_ = ev[1], ev[2], ev[3], ev[5], ev[6]
        kind = ev[8] if len(ev) > 8 else ""
        if pp == np_:
            continue
        if pp in tids and not kind:
            if pp in since_on:
                on_ns[pp] += ts - since_on.pop(pp)
            open_[pp] = {"start": ts, "state": ps, "cls": state_class(ps), "cpu_out": cpu, "woken": None}
        if np_ in tids:
            o = open_.pop(np_, None)
            if o is not None:
                if kind == "unknown":
                    dropped[np_] += 1
                else:
                    o.update(end=ts, ns=ts - o["start"], cpu_in=cpu, inferred=kind == "inferred")
                    out[np_].append(o)
            since_on[np_] = ts
    return dict(out), dict(on_ns), dict(dropped)


def pct(values_ns):
    """count, total ms, p50/p99/max us of a list of ns."""
    if not values_ns:
        return {"n": 0, "total_ms": 0.0, "p50_us": None, "p99_us": None, "max_us": None}
    import numpy as np      # here, not at the top: the tracer starts no OpenBLAS threads while it traces
    a = np.asarray(values_ns, dtype=np.float64) / 1e3
    p50, p99 = np.percentile(a, [50, 99])
    return {"n": int(a.size), "total_ms": round(float(a.sum()) / 1e3, 3), "p50_us": round(float(p50), 1),
            "p99_us": round(float(p99), 1), "max_us": round(float(a.max()), 1)}


def attribute(events, tids, threshold_us=200.0, longest=5, names=None, window=None):
    """The report (a JSON-able dict) for threads `tids` over `events`
    (from parse()).  names: {tid: label} for the output.  window: (a, b)
    seconds from the trace's first event: only the off-CPU intervals that
    begin within it count (a run's set-up and wind-down left out)."""
    names = names or {}
    thr = int(threshold_us * 1000)
    n_events = len(events)
    events, fixed = repair(events)
    segs = run_segments(events)
    offs, on_ns, missed = off_intervals(events, tids)
    span = (events[-1][1] - events[0][1]) if events else 0
    if window is not None and events:
        lo, hi = (events[0][1] + int(x * 1e9) for x in window)
        offs = {tid: [iv for iv in ivs if lo <= iv["start"] < hi] for tid, ivs in offs.items()}
    threads = []
    for tid in sorted(set(tids)):
        ivs = offs.get(tid, [])
        by_cls = defaultdict(list)
        for iv in ivs:
            by_cls[iv["cls"]].append(iv["ns"])
        wake_run = [iv["end"] - iv["woken"] for iv in ivs if iv["cls"] == "sleeping" and iv["woken"] is not None]
        long_ivs = [iv for iv in ivs if iv["ns"] > thr]
        takers = {}
        for iv in long_ivs:
            iv["ran"] = ran_meanwhile(segs, iv["cpu_out"], iv["start"], iv["end"])
            for task, ns in iv["ran"].items():
                t = takers.setdefault(task, {"task": task, "total_ns": 0, "intervals": 0, "max_ns": 0})
                t["total_ns"] += ns
                t["intervals"] += 1
                t["max_ns"] = max(t["max_ns"], ns)
        takers = sorted(takers.values(), key=lambda t: -t["total_ns"])
        for t in takers:
            t["total_us"] = round(t.pop("total_ns") / 1e3, 1)
            t["max_us"] = round(t.pop("max_ns") / 1e3, 1)
        worst = sorted(long_ivs, key=lambda iv: -iv["ns"])[:longest]
        threads.append({
            "tid": tid, "name": names.get(tid, str(tid)),
            "on_cpu_ms": round(on_ns.get(tid, 0) / 1e6, 3),
            "dropped_unknown_end": missed.get(tid, 0),
            "inferred_end": sum(iv["inferred"] for iv in ivs),
            "off": {cls: pct(by_cls.get(cls, [])) for cls in ("preempted", "sleeping", "other")},
            "wake_to_run": pct(wake_run),
            "over_threshold": {"n": len(long_ivs), "total_ms": round(sum(iv["ns"] for iv in long_ivs) / 1e6, 3),
                               "excess_ms": round(sum(iv["ns"] - thr for iv in long_ivs) / 1e6, 3),
                               "preempted": sum(iv["cls"] == "preempted" for iv in long_ivs),
                               "sleeping": sum(iv["cls"] == "sleeping" for iv in long_ivs)},
            "takers": takers,
            "longest": [{"start_s": round(iv["start"] / 1e9, 6), "us": round(iv["ns"] / 1e3, 1),
                         "state": iv["state"], "cpu": iv["cpu_out"],
                         "ran": {k: round(v / 1e3, 1) for k, v in sorted(iv["ran"].items(), key=lambda kv: -kv[1])}}
                        for iv in worst],
        })
    cpus = {}
    for cpu, lst in sorted(segs.items()):
        tot = defaultdict(int)
        for s, e, pid, comm in lst:
            tot[task_name(pid, comm)] += e - s
        cpus[str(cpu)] = [{"task": k, "ms": round(v / 1e6, 3)} for k, v in sorted(tot.items(), key=lambda kv: -kv[1])]
    return {"window_s": round(span / 1e9, 6), "counted_s": list(window) if window else None, "events": n_events, "repaired": fixed,
            "threshold_us": threshold_us,
            "threads": threads, "cpus": cpus}


def _us(v):
    return "-" if v is None else f"{v:,.1f}"


def table(rep, top=8):
    """The report as plain text."""
    out = [f"trace window {rep['window_s']:.3f} s"
           + (f" (off-CPU intervals counted from {rep['counted_s'][0]:g} to {rep['counted_s'][1]:g} s)"
              if rep.get("counted_s") else "")
           + f", {rep['events']:,} events"
           + (f", LOST {rep['lost']:,} events (intervals may be wrong)" if rep.get("lost") else ", none lost")
           + f"; switches missing from the trace: {rep['repaired']['inferred']} inferred (an idle CPU's switch"
           f" to the task it woke), {rep['repaired']['unknown']} unknown (the time before them is <unknown>)"]
    for th in rep["threads"]:
        out.append("")
        out.append(f"thread {th['name']} (tid {th['tid']}): on CPU {th['on_cpu_ms']:,.1f} ms"
                   + (f"; {th['dropped_unknown_end']} off-CPU intervals dropped (their end unknown)"
                      if th["dropped_unknown_end"] else "")
                   + (f"; {th['inferred_end']} ended by an inferred switch" if th["inferred_end"] else ""))
        out.append(f"  {'off-CPU':<12} {'n':>7} {'total ms':>10} {'p50 us':>9} {'p99 us':>9} {'max us':>9}")
        for cls in ("preempted", "sleeping", "other"):
            s = th["off"][cls]
            if cls == "other" and not s["n"]:
                continue
            out.append(f"  {cls:<12} {s['n']:>7,} {s['total_ms']:>10,.2f} {_us(s['p50_us']):>9} {_us(s['p99_us']):>9} "
                       f"{_us(s['max_us']):>9}")
        w = th["wake_to_run"]
        if w["n"]:
            out.append(f"  {'wake->run':<12} {w['n']:>7,} {w['total_ms']:>10,.2f} {_us(w['p50_us']):>9} "
                       f"{_us(w['p99_us']):>9} {_us(w['max_us']):>9}")
        o = th["over_threshold"]
        out.append(f"  over {rep['threshold_us']:g} us: {o['n']} intervals, {o['total_ms']:,.2f} ms "
                   f"({o['excess_ms']:,.2f} ms beyond the {rep['threshold_us']:g} us) "
                   f"({o['preempted']} preempted, {o['sleeping']} sleeping); on that CPU meanwhile:")
        if th["takers"]:
            out.append(f"    {'task':<32} {'total us':>10} {'intervals':>9} {'max us':>9}")
            for t in th["takers"][:top]:
                out.append(f"    {t['task']:<32} {t['total_us']:>10,.1f} {t['intervals']:>9} {t['max_us']:>9,.1f}")
        for iv in th["longest"]:
            ran = ", ".join(f"{k} {v:,.0f}" for k, v in list(iv["ran"].items())[:4])
            out.append(f"    longest: {iv['us']:,.0f} us at {iv['start_s']:.6f} ({iv['state']}, cpu {iv['cpu']}): {ran}")
    out.append("")
    out.append("busiest tasks per CPU over the trace (ms):")
    for cpu, lst in rep["cpus"].items():
        out.append(f"  cpu {cpu}: " + ", ".join(f"{t['task']} {t['ms']:,.1f}" for t in lst[:top]))
    return "\n".join(out)


# --------------------------------------------------------------- recording

class Recorder:
    """A tracefs instance recording the scheduler events; what it changed
    is put back on exit (events off, tracing off, buffer and clock as they
    were), and an instance it created is removed."""

    def __init__(self, buffer_kb=32768, root=TRACEFS):
        self.root = root
        self.buffer_kb = buffer_kb
        self.dir = os.path.join(root, "instances", f"offcpu-{os.getpid()}")
        self.saved = {}

    def _w(self, rel, value):
        with open(os.path.join(self.dir, rel), "w") as f:
            f.write(str(value))

    def _r(self, rel):
        with open(os.path.join(self.dir, rel)) as f:
            return f.read()

    def __enter__(self):
        os.mkdir(self.dir)
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self):
        for rel in ["tracing_on", "buffer_size_kb", *(f"events/{e}/enable" for e in EVENTS)]:
            self.saved[rel] = self._r(rel).strip()
        self.saved["trace_clock"] = re.search(r"\[(\w[\w-]*)\]", self._r("trace_clock")).group(1)
        self._w("buffer_size_kb", self.buffer_kb)
        if "mono" in self._r("trace_clock").replace("[", " ").replace("]", " ").split():
            self._w("trace_clock", "mono")
        for e in EVENTS:
            self._w(f"events/{e}/enable", 1)
        self._w("tracing_on", 1)

    def stop(self):
        self._w("tracing_on", 0)

    def text(self):
        return self._r("trace")

    def lost(self):
        """Events lost to a full buffer (overrun + dropped, every CPU)."""
        n = 0
        for cpu in os.listdir(os.path.join(self.dir, "per_cpu")):
            for ln in self._r(f"per_cpu/{cpu}/stats").splitlines():
                k, _, v = ln.partition(":")
                if k.strip() in ("overrun", "dropped events"):
                    n += int(v)
        return n

    def __exit__(self, *exc):
        try:
            self._w("tracing_on", 0)
            for e in EVENTS:
                self._w(f"events/{e}/enable", 0)
            for rel, v in self.saved.items():
                self._w(rel, v)
        finally:
            os.rmdir(self.dir)


# ----------------------------------------------------------------- threads

def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def cmdline(pid):
    raw = _read(f"/proc/{pid}/cmdline")
    return None if raw is None else raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def threads_of(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


class Targets:
    """The threads to attribute, resolved from /proc (only read)."""

    def __init__(self, tids=(), pids=(), match=None):
        self.tids = {}              # tid -> label
        self.pids = set(pids)
        self.fixed = set(tids)
        self.match = re.compile(match) if match else None
        self.seen = {}              # pid -> first seen (monotonic), not matching
        self.me = {os.getpid(), os.getppid()}

    def poll(self):
        now = time.monotonic()
        for t in self.fixed:
            self._add(t, None)
        if self.match is not None:
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                pid = int(d)
                if pid in self.me or pid in self.pids:
                    continue
                first = self.seen.setdefault(pid, now)
                if now - first > 1.0:       # a process's command line is read until it is 1 s old (fork, then exec)
                    continue
                cl = cmdline(pid)
                if cl and self.match.search(cl):
                    self.pids.add(pid)
        for pid in list(self.pids):
            for t in threads_of(pid):
                self._add(t, pid)

    def _add(self, tid, pid):
        if tid in self.tids:
            return
        comm = (_read(f"/proc/{tid}/comm") or b"?").decode(errors="replace").strip()
        pid = pid if pid is not None else tid
        role = "main" if tid == pid else "thread"
        cl = " ".join(os.path.basename(a) if a.startswith("/") else a for a in (cmdline(pid) or "").split(" "))
        self.tids[tid] = f"{comm} {role} of {pid} [{cl[:70]}]"


# --------------------------------------------------------------------- cli

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tid", type=int, action="append", default=[])
    ap.add_argument("--pid", type=int, action="append", default=[])
    ap.add_argument("--match", help="regex on /proc/PID/cmdline: every thread of the matching processes")
    ap.add_argument("--seconds", type=float, help="attach: trace this long (no command)")
    ap.add_argument("--threshold-us", type=float, default=200.0)
    ap.add_argument("--window", metavar="A:B", help="count only off-CPU intervals beginning A..B s after the "
                    "trace's first event (leave out a run's set-up and wind-down)")
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between /proc scans while tracing")
    ap.add_argument("--buffer-kb", type=int, default=32768, help="per-CPU trace buffer")
    ap.add_argument("--json", help="write the report as JSON to this file")
    ap.add_argument("--save-trace", help="also keep the raw trace text here")
    ap.add_argument("--from-trace", help="analyse this saved trace text instead of recording (needs --tid)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS: trace while it runs")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    targets = Targets(a.tid, a.pid, a.match)
    lost = None
    rc = 0
    if a.from_trace:
        with open(a.from_trace) as f:
            text = f.read()
        targets.tids = {t: str(t) for t in a.tid}
    else:
        if not cmd and not a.seconds:
            ap.error("give -- COMMAND or --seconds N (or --from-trace FILE)")
        if not (a.tid or a.pid or a.match):
            ap.error("give --tid, --pid or --match")
        with Recorder(a.buffer_kb) as rec:
            targets.poll()
            proc = subprocess.Popen(cmd) if cmd else None
            end = None if proc else time.monotonic() + a.seconds
            while (proc.poll() is None) if proc else (time.monotonic() < end):
                time.sleep(a.poll)
                targets.poll()
            rec.stop()
            rc = proc.returncode if proc else 0
            text = rec.text()
            lost = rec.lost()
        if a.save_trace:
            with open(a.save_trace, "w") as f:
                f.write(text)
    events = parse(text.splitlines())
    window = tuple(float(x) for x in a.window.split(":")) if a.window else None
    rep = attribute(events, list(targets.tids), a.threshold_us, names=targets.tids, window=window)
    rep["lost"] = lost
    rep["command"] = cmd
    print(table(rep), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
