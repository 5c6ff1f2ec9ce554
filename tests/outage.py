"""A receiver away for a while and back, on real sockets: the stress run's
worker processes (one sender at a fixed rate, receivers, one logger) in a
network namespace of the run's own.  The first receiver is frozen with
SIGSTOP -- its socket buffer, made small, overflows, so it loses everything
sent meanwhile, as a member cut off would -- and resumed with SIGCONT; then
what its catch-up cost is read from every node's counters.

Used by tests/test_catchup.py (short outages) and bench/bench_logger.py
(--outage: the 10 s figures in docs/performance.md)."""
from __future__ import annotations

import argparse
import os
import signal
import time

from rpbcast.tools import netns
from rpbcast.tools.stress.plan import make_plan, worker_spec
from rpbcast.tools.stress.processes import Group

START_DELAY_NS = 300_000_000


def stress_args(rate, duration, receivers=2, run_dir=None, **over):
    """The options of an `rpbcast stress` run, as its plan reads them.
    Flow control by the logger alone: the group goes on while a receiver is
    away, and the receiver catches up from the log (held to its receivers
    too, the stress default, the sender would wait for it instead)."""
    a = dict(senders=1, receivers=receivers, loggers=1, size=64, rate=rate, duration=duration, loss=0.0,
             transport="auto", no_gso=False, inline=False, busy_poll=False, batch=1024, gossip_interval=0.02,
             flow_control="loggers", labels="none", srb_window=0, slow_receiver=0, gsgc=False, gsgc_b=1,
             run_dir=run_dir, trace=False)
    a.update(over)
    return argparse.Namespace(**a)


def run_outage(rate, outage, before=1.0, after=1.0, timeout=30.0, receivers=2, rcvbuf=256 << 10,
               run_dir=None, logger_config=None):
    """Send at `rate` msgs/s for before + outage + after seconds; freeze the
    first receiver from `before` for `outage` seconds.  Returns what the
    catch-up took (see the keys below)."""
    args = stress_args(rate, before + outage + after, receivers=receivers, run_dir=run_dir)
    plan = make_plan(args, True)
    ns = netns.create()
    group = Group(plan.work, ns)
    victim = plan.receivers[0]
    out = {"rate": rate, "outage_s": outage, "complete": False}
    try:
        for i in plan.loggers:
            spec = worker_spec(args, plan, i, "logger")
            spec["config"].update(logger_config or {})
            group.spawn(i, "logger", spec)
        for i in plan.receivers:
            spec = worker_spec(args, plan, i, "receiver")
            if i == victim:
                spec["config"]["rcvbuf"] = rcvbuf       # frozen, it overflows at once
            group.spawn(i, "receiver", spec)
        for i in plan.senders:
            group.spawn(i, "sender", worker_spec(args, plan, i, "sender"))
        errors = []
        if not group.wait_ready(errors):
            raise RuntimeError(f"workers did not start: {errors}")
        at = time.monotonic_ns() + START_DELAY_NS
        group.send(plan.senders, cmd="start", at=at)
        pid = group.procs[victim].p.pid
        stop_at = at + int(before * 1e9)
        heal_at = stop_at + int(outage * 1e9)
        stopped = healed = False
        sent = {}
        t_heal = t_complete = None
        deadline = None
        complete = set()
        while True:
            now = time.monotonic_ns()
            if not stopped and now >= stop_at:
                os.kill(pid, signal.SIGSTOP)
                stopped = True
            if stopped and not healed and now >= heal_at:
                os.kill(pid, signal.SIGCONT)
                healed = True
                t_heal = time.monotonic_ns()
            ev = group.next_event(0.005)
            if ev is not None:
                if ev["event"] == "sent":
                    sent[ev["id"]] = ev
                elif ev["event"] == "complete":
                    complete.add(ev["id"])
                    if ev["id"] == victim and t_complete is None:
                        t_complete = time.monotonic_ns()
                elif ev["event"] == "error" or (ev["event"] == "exit" and ev["code"] != 0):
                    raise RuntimeError(f"worker failed: {ev}")
            if len(sent) == len(plan.senders) and deadline is None:
                expect = {f"{i}/{sent[i]['inc']}": sent[i]["count"] for i in plan.senders}
                group.send(plan.receivers, cmd="expect", counts=expect, latest=None)
                deadline = time.monotonic_ns() + int(timeout * 1e9)
            if deadline and complete >= set(plan.receivers):
                break
            if deadline and time.monotonic_ns() > deadline:
                break
        finals = group.stop(errors)
        st = {i: f["stats"] for i, f in finals.items()}
        v = st[victim]
        lg = st[plan.loggers[0]]
        served = sum(s.get("served", 0) for s in st.values())
        missing = v["rx_fill"]
        out.update(
            complete=t_complete is not None,
            sent=sum(e["count"] for e in sent.values()),
            heal_to_complete_s=(t_complete - t_heal) / 1e9 if t_complete and t_heal else None,
            exactly_once=victim in finals and all(
                c["missing"] == 0 and c["duplicates"] == 0 and c["unexpected"] == 0
                for c in finals[victim]["check"].values()),
            check=finals.get(victim, {}).get("check"),
            missing=missing,
            duplicates=v["rx_dup"],
            served=served,
            served_by_logger=lg.get("served", 0),
            served_per_missing=served / missing if missing else None,
            logger_gap_ids=lg["gap_ids"],
            logger_logged=lg["logged"],
            logger_catchup_again=lg.get("catchup_again", 0),
            logger_catchup_refused=lg.get("catchup_refused", 0),
            repairs_logger=v["repairs_logger"],
            repairs_peer=v["repairs_peer"],
            sender_unacked=st[plan.senders[0]].get("unacked"),
        )
        return out
    finally:
        for p in group.procs.values():
            try:
                os.kill(p.p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        group.reap(grace=5)
        netns.delete(ns)
