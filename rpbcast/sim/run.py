"""One simulated run from a flat dict of parameters: ``run_one(params) -> dict``.

    from rpbcast.sim import run_one
    r = run_one({"protocol": "rpbcast", "loss": 0.01, "total_rate": 360, "seed": 3})
    r["delivered"], r["missing"], r["repairs_peer"], r["lat_all_mean"], r["wall_s"]

Parameters (params.py: defaults in DEFAULTS; any ``rpbcast.config.Config``
field such as ``gossip_interval`` or ``repair_rate`` is passed to every
engine) and results are documented in docs/simulator.md.  ``Simulation`` is
the same thing as an object, for experiments that need per-link / per-node
tables or to script events (crashes, joins) with ``sim.net.at``.

A run is built (build.py), runs in steps of ``drain_interval`` taking the
deliveries (tracking.py; consumer applications read their own,
consumers.py) until complete or the linger ends, and is summed up
(results.py) and, with ``run_dir``, written out (rundir.py).
"""
from __future__ import annotations

import gc
import random
import resource
import shutil
import tempfile
import time
import uuid
from typing import List, Optional

from rpbcast.sim import build, protocols
from rpbcast.sim import results as R
from rpbcast.sim.consumers import Consumers
from rpbcast.sim.params import resolve
from rpbcast.sim.rundir import RunDir
from rpbcast.sim.topology import NS
from rpbcast.sim.tracking import DeliveryTracker
from rpbcast.sim.workload import Publisher


class Simulation:
    def __init__(self, params: Optional[dict] = None):
        t_build = time.perf_counter()
        self._cpu0 = _cpu()
        self.p = p = resolve(params)
        self.proto = protocols.get(p["protocol"])
        self.seed = int(p["seed"])
        self.rng = random.Random(f"sim/{self.seed}")
        self.topo = build.make_topology(p)
        self.members = build.choose_members(p, self.topo)
        self.loggers = build.choose_loggers(p, self.proto.uses_logger, self.topo, self.members)
        self.receivers = [v for v in self.members if v not in self.loggers]
        self.senders = build.choose_senders(p, self.seed, self.members, self.loggers)
        self.net = build.make_network(p, self.topo, self.seed)
        self._tmp = None
        self.run_dir = p["run_dir"]
        self.run_id = f"sim-{p['protocol']}-{self.seed}-{uuid.uuid4().hex[:8]}" if self.run_dir else None
        self.engines = build.make_engines(p, self.proto, self.net, self.members, self.loggers, len(self.senders),
                                          self.seed, self.rng, self._log_base())
        self.workload = build.make_workload(p, self.senders, "duration" in (params or {}))
        self.t_start = self.net.now + int((float(p["stagger"]) + float(p["start_delay"])) * NS)
        self.pub = Publisher(self.net, self.workload, seed=self.seed, t0=self.t_start)
        self.net.start()
        self.tracker = DeliveryTracker(self.net, self.engines, self.receivers, self.pub, int(p["size"]),
                                       bool(p["check_payload"]))
        self.apps = Consumers(p, self.net, self.tracker, self.receivers)
        self.consumers = self.apps.rates
        self._rundir = RunDir(self.run_dir, self.run_id) if self.run_dir else None
        self.completed_at = None
        self.drain_s = self.run_s = 0.0
        self.build_s = time.perf_counter() - t_build

    def _log_base(self) -> Optional[str]:
        """Where loggers write their logs: the run directory, or a temporary one."""
        if not self.loggers:
            return None
        if self.run_dir:
            return self.run_dir
        self._tmp = tempfile.mkdtemp(prefix="rpbcast-sim-")
        return self._tmp

    # ------------------------------------------------------------------ running
    def run(self) -> dict:
        p = self.p
        net = self.net
        t_run = time.perf_counter()
        if self._rundir and p["trace"]:
            self._rundir.open_traces(self.members)
        step = int(float(p["drain_interval"]) * NS)
        deadline = self.pub.last_arrival + int(float(p["linger"]) * NS)
        self.completed_at = None
        self.drain_s = 0.0
        # Everything built so far lives to the end: keep the cyclic GC from
        # re-scanning it (a million member-table entries at 1000 members).
        gc.freeze()
        try:
            while True:
                net.run_until(min(net.now + step, deadline))
                t_d = time.perf_counter()
                self.drain()
                self.drain_s += time.perf_counter() - t_d
                if (self.completed_at is None and self.pub.finished
                        and self.tracker.distinct >= self.expected_total()):
                    self.completed_at = net.now
                    if p["end"] == "complete":
                        break
                if net.now >= deadline or (not net.core.pending_events):
                    break
            self.run_s = time.perf_counter() - t_run
            res = self.results()
            if self._rundir:
                self._rundir.write(self, res)
        finally:
            gc.unfreeze()
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
        return res

    def drain(self):
        """Take every receiver's deliveries (but the consumers', which read their own)."""
        self.tracker.drain(skip=self.consumers)
        if self._rundir and self._rundir.writers:
            self._rundir.take_traces(self.engines)

    def expected_total(self) -> int:
        """Deliveries owed: each published message at every receiver but its sender."""
        recv = set(self.receivers)
        return sum(n * (len(recv) - (1 if s in recv else 0)) for s, n in self.pub.published.items())

    def deliveries(self, v) -> dict:
        """What receiver v's application got, in order: sender, inc, seq,
        rx (receipt time at the node) and, for consumers, read (when the
        application read it); virtual ns."""
        return self.tracker.of(v)

    # ------------------------------------------------------------------ results
    def results(self) -> dict:
        """The flat dict of results (docs/simulator.md, "Results"), in its order."""
        t0 = time.perf_counter()
        pub, net, tracker = self.pub, self.net, self.tracker
        pm = R.published(pub, self.topo.n + 1)
        tally = R.tally(tracker.records_of, self.receivers, pm)
        et = R.engine_totals(self.engines)
        ls, ns, cc = net.link_stats(), net.node_stats(), net.counters()
        missing, duplicates, extras = tally.missing, tally.duplicates, tally.extras
        res = {
            "protocol": self.p["protocol"], "seed": self.seed, "topology": self.topo.name,
            "nodes": self.topo.n, "members": len(self.members), "receivers": len(self.receivers),
            "senders": len(self.senders), "loggers": ",".join(map(str, self.loggers)),
            "published": int(pm.M), "expected": int(self.expected_total()), "delivered": int(tally.delivered),
            "missing": int(missing), "duplicates": int(duplicates), "extras": int(extras),
            "corrupt": int(tracker.corrupt), "complete": bool(missing == 0 and pub.finished),
            "exactly_once": bool(missing == 0 and duplicates == 0 and extras == 0 and tracker.corrupt == 0),
            "publish_blocked": int(pub.blocked),
        }
        res.update(R.repair_results(et, self.members, self.receivers, self.loggers))
        res.update(R.traffic_results(et.traffic))
        res.update(R.latency_results(tally, R.everywhere(tally, self.receivers, pm), pm))
        res.update(R.network_results(ls, ns))
        res.update(self._times())
        res.update(R.loop_results(cc))
        if self.consumers:
            res.update(self.apps.queue_summary())
        if pub.backlog is not None:
            res["backlog_left"] = int(sum(k for d in pub.backlog.values() for _, k in d))
        res.update(R.traffic_by_type(et.traffic))
        res["delivery_hash"] = R.delivery_hash(tally.hashes)
        res["state_hash"] = R.state_hash(res["delivery_hash"], et.per_node, ls, ns, net.now)
        self.per_node = tally.per_node
        self.per_counters = et.per_node
        res.update(self._wall(time.perf_counter() - t0))
        return res

    def _times(self) -> dict:
        """Virtual seconds from the network start."""
        t0 = self.net.t0
        return {"sim_time": (self.net.now - t0) / NS,
                "completed_at": None if self.completed_at is None else (self.completed_at - t0) / NS,
                "send_start": (self.t_start - t0) / NS,
                "send_end": (self.pub.last_arrival - t0) / NS}

    def _wall(self, results_s) -> dict:
        """Where the wall time went: t_* inside run (Core.wall), and the phases."""
        w = self.net.core.wall()
        out = {f"t_{k}": round(w[k], 4) for k in ("loop", "engine_timers", "engine_control", "engine_slow_rx",
                                                  "calls")}
        out["t_drain"] = round(self.drain_s, 4)
        out["build_s"] = round(self.build_s, 4)
        out["run_s"] = round(self.run_s, 4)
        out["results_s"] = round(results_s, 4)
        out["wall_s"] = round(self.build_s + self.run_s + out["results_s"], 4)
        out["cpu_s"] = round(_cpu() - self._cpu0, 4)     # this process's CPU time: robust to machine load
        return out

    # ------------------------------------------------------------------ tables
    def link_table(self) -> List[dict]:
        """One row per directed link: a, b and every statistic."""
        return R.link_table(self.net.link_stats())

    def node_table(self) -> List[dict]:
        """One row per member: network statistics and engine counters."""
        return R.node_table(self.net.node_stats(), self.members, self.loggers, self.pub.published, self.engines)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_one(params: Optional[dict] = None) -> dict:
    """Run one configuration; a flat dict of results (docs/simulator.md)."""
    return Simulation(params).run()
