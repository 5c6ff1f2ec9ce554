"""One simulated run from a flat dict of parameters: ``run_one(params) -> dict``.

    from rpbcast.sim import run_one
    r = run_one({"protocol": "rpbcast", "loss": 0.01, "total_rate": 360, "seed": 3})
    r["delivered"], r["missing"], r["repairs_peer"], r["lat_all_mean"], r["wall_s"]

Parameters (defaults in DEFAULTS; any ``rpbcast.config.Config`` field such as
``gossip_interval`` or ``repair_rate`` is passed to every engine) and results
are documented in docs/simulator.md.  ``Simulation`` is the same thing as an
object, for experiments that need per-link / per-node tables or to script
events (crashes, joins) with ``sim.net.at``.
"""
from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import random
import resource
import shutil
import tempfile
import time
import uuid
from typing import Dict, List, Optional

import numpy as np

from rpbcast.config import Config, MemberSpec
from rpbcast.sim import protocols, topology
from rpbcast.sim.loss import make as make_loss
from rpbcast.sim.network import HostCost, Network
from rpbcast.sim.topology import NS
from rpbcast.sim.workload import Poisson, Publisher

DEFAULTS = {
    # what runs
    "protocol": "rpbcast",
    "protocol_params": None,         # keyword arguments for the protocol's engine factory
    "seed": 1,
    # topology
    "topology": "transit-stub",      # or "tree"
    "topo_seed": topology.THESIS_SEED,
    "nodes": 200,                    # tree size
    "degree": 4,                     # tree: most neighbours per node
    "members": None,                 # None: the topology's hosts (fringe / every tree node); int: that many, seeded
    "latency": None,                 # seconds: override every link's latency (tree default 0.005)
    "bandwidth": 100e6,              # bits/s per link direction (§7.1: 100 Mb/s)
    "queue_limit": 50,               # packets waiting per link direction (§7.1: 50); None = unlimited
    "queue_limits": None,            # {(a, b): limit or None}: per link direction a -> b, overriding queue_limit
    "proc_delay": 0.0,               # seconds of router processing per hop (GSGC: 0.001)
    "host_cost": False,              # True: GSGC host send/receive costs; or {"send_base", "send_per_byte", "recv_factor"}
    "header_bytes": 28,              # IP + UDP header per packet on a link
    # roles
    "logger": "auto",                # "auto" (the topology's), a node, a list of nodes, or None
    "senders": "all",                # "all" members, an int k (first k of a fixed seeded order, loggers last), or a list
    # workload (§7.1: Poisson 1 KB packets for 10 s)
    "rate": 20.0,                    # messages/s per sender
    "total_rate": None,              # messages/s over all senders (overrides rate)
    "messages": None,                # total messages (then duration only bounds it if given explicitly)
    "duration": 10.0,                # seconds of sending
    "size": 1024,                    # payload bytes
    "burst": 1,                      # messages per Poisson arrival
    "stagger": 1.0,                  # members boot at uniformly random times in the first this-many seconds
    "start_delay": 0.1,              # seconds after the last boot before the first arrival
    "labels": None,                  # "stock": label messages with the stock-trading items (FIFO-SRB §3.2)
    "producer": "retry",             # "backlog": refused arrivals wait in a FIFO backlog at the sender
    # applications (default: every receiver's application takes everything at each drain)
    "consumers": None,               # {node: msgs/s (0 = unlimited)}: these applications read at most that
    "consume_interval": 0.001,       # seconds between a consumer application's reads
    "consumer_queue": None,          # B: a consumer's host stops taking datagrams while B messages wait
    # loss
    "loss": 0.0,
    "loss_model": "uniform",         # or "gilbert"
    "loss_burst": 4.0,               # Gilbert-Elliott mean burst length (packets)
    "loss_where": "receiver",        # or "link"
    "loss_applies": "all",           # "all", "data", "data+repair"
    # ending
    "linger": 10.0,                  # at most this long after the last arrival
    "end": "complete",               # "complete": stop once everything is delivered; "linger": run it out
    "drain_interval": 0.2,           # seconds between delivery drains / completion checks
    # engine (thesis Table 7.1 and §7.1)
    "gossip_interval": 0.25,
    "gc_limit": 10,
    "selection": "linear",
    "logger_rtx_interval": 0.25,
    "repair_rate": 1000.0,
    "repair_burst": 0.0,
    "store_bytes": "auto",
    "store_entries": "auto",
    # driver
    "fast_rx": True,                 # C data-plane receive path where it is exactly equivalent
    "warm_start": True,              # members start knowing each other's table entries (no bootstrap storm)
    "check_payload": True,
    "run_dir": None,
    "trace": False,
    "trace_capacity": 1 << 16,
}

_CONFIG_FIELDS = {f.name for f in dataclasses.fields(Config)}
# Config fields the simulator sets itself (per node), not passed through
_DRIVER_ONLY = {"store_bytes", "store_entries", "members", "node_id", "addr", "role", "log_dir"}


def resolve(params: Optional[dict]) -> dict:
    p = dict(DEFAULTS)
    unknown = sorted(k for k in (params or {})
                     if (k not in DEFAULTS and k not in _CONFIG_FIELDS) or (k in _DRIVER_ONLY and k not in DEFAULTS))
    if unknown:
        raise ValueError(f"unknown simulation parameters: {', '.join(unknown)}")
    p.update(params or {})
    return p


class Simulation:
    def __init__(self, params: Optional[dict] = None):
        t_build = time.perf_counter()
        self._cpu0 = _cpu()
        self._given = set(params or {})
        self.p = p = resolve(params)
        self.proto = protocols.get(p["protocol"])
        self.seed = int(p["seed"])
        self.rng = random.Random(f"sim/{self.seed}")
        self.topo = self._topology()
        self.members = self._members()
        self.loggers = self._loggers()
        self.receivers = [v for v in self.members if v not in self.loggers]
        self.senders = self._senders()
        self.net = self._network()
        self._tmp = None
        self.run_dir = p["run_dir"]
        self.run_id = f"sim-{p['protocol']}-{self.seed}-{uuid.uuid4().hex[:8]}" if self.run_dir else None
        self.engines = self._engines()
        w = self._workload()
        self.workload = w
        self.t_start = self.net.now + int((float(p["stagger"]) + float(p["start_delay"])) * NS)
        self.pub = Publisher(self.net, w, seed=self.seed, t0=self.t_start)
        self.net.start()
        self._init_tracking()
        self._init_consumers()
        self.build_s = time.perf_counter() - t_build

    # ------------------------------------------------------------------ building
    def _topology(self):
        p = self.p
        if p["topology"] in ("transit-stub", "thesis"):
            t = topology.transit_stub(seed=p["topo_seed"], bandwidth=p["bandwidth"])
        elif p["topology"] == "tree":
            t = topology.balanced_tree(int(p["nodes"]), degree=int(p["degree"]),
                                       latency=0.005 if p["latency"] is None else p["latency"],
                                       bandwidth=p["bandwidth"])
        elif isinstance(p["topology"], topology.Topology):
            t = p["topology"]
        else:
            raise ValueError(f"topology must be 'transit-stub' or 'tree', got {p['topology']!r}")
        if p["latency"] is not None and p["topology"] != "tree":
            t = t.with_links(latency=p["latency"])
        return t

    def _members(self):
        m = self.p["members"]
        if m is None:
            return sorted(self.topo.hosts)
        if isinstance(m, int):
            return topology.choose_members(self.topo, m, seed=self.p["topo_seed"])
        return sorted(int(x) for x in m)

    def _loggers(self):
        lg = self.p["logger"]
        if not self.proto.uses_logger or lg is None or lg == "none":
            return []
        if lg == "auto":
            lg = self.topo.logger if self.topo.logger in self.members else self.members[0]
        out = [int(x) for x in (lg if isinstance(lg, (list, tuple)) else [lg])]
        for x in out:
            if x not in self.members:
                raise ValueError(f"logger {x} is not a member")
        return out

    def _senders(self):
        """"all": every member (the thesis's 18 senders include the logger's
        node); an int k: the first k of a fixed seeded order of the non-logger
        members followed by the loggers (so the sets are nested and k below
        the number of non-loggers never includes a logger); or a list."""
        s = self.p["senders"]
        if s == "all":
            return list(self.members)
        if isinstance(s, int):
            order = [v for v in self.members if v not in self.loggers]
            random.Random(f"senders/{self.seed}").shuffle(order)
            order += list(self.loggers)
            if not 0 < s <= len(order):
                raise ValueError(f"senders must be 1..{len(order)} (the members), got {s}")
            return sorted(order[:s])
        out = sorted(int(x) for x in s)
        for x in out:
            if x not in self.members:
                raise ValueError(f"sender {x} is not a member")
        return out

    def _network(self):
        p = self.p
        model = make_loss(p["loss_model"], float(p["loss"]), p["loss_burst"])
        return Network(self.topo, seed=self.seed,
                       queue_limit=None if p["queue_limit"] in (None, 0, "none") else int(p["queue_limit"]),
                       proc_delay=float(p["proc_delay"]),
                       host_cost=self._host_cost(p["host_cost"]),
                       header_bytes=int(p["header_bytes"]),
                       link_loss=model if p["loss_where"] == "link" else None,
                       rx_loss=model if p["loss_where"] == "receiver" else None,
                       loss_applies=p["loss_applies"], fast_rx=bool(p["fast_rx"]),
                       queue_limits=self._queue_limits(p["queue_limits"]))

    @staticmethod
    def _queue_limits(ql):
        """{(a, b): limit}; also accepts "a-b" keys (JSON); 0/"none" = unlimited."""
        if not ql:
            return None
        out = {}
        for k, q in dict(ql).items():
            a, b = (k.split("-") if isinstance(k, str) else k)
            out[(int(a), int(b))] = None if q in (None, 0, "none") else int(q)
        return out

    @staticmethod
    def _host_cost(hc):
        if hc is True:
            return HostCost.gsgc()
        if isinstance(hc, dict):
            return HostCost(**hc)
        return hc or None

    def _rates(self):
        p = self.p
        if p["total_rate"]:
            return float(p["total_rate"]) / len(self.senders)
        return float(p["rate"])

    def _store_size(self):
        """Store for the gossip buffer (GC-limit rounds of the group's
        traffic) plus what waits for the next drain, with a 25 % margin.  The
        arena is touched as it fills, so with 1 KB payloads this is most of a
        large run's memory.  When it is too small the store evicts the oldest
        gossip-buffer entries (peers then cannot serve them; loggers can)."""
        p = self.p
        rate = self._rates() * len(self.senders)
        per = int(p["size"]) + 64
        secs = int(p["gc_limit"]) * float(p["gossip_interval"]) + 2 * float(p["drain_interval"])
        need = int(1.25 * rate * per * secs) + (256 << 10)
        sb = p["store_bytes"]
        se = p["store_entries"]
        store_bytes = min(max(need, 1 << 20), 64 << 20) if sb == "auto" else int(sb)
        need_e = 1 << max(10, int(2 * rate * secs + 64).bit_length())
        store_entries = min(need_e, 1 << 20) if se == "auto" else int(se)
        return store_bytes, store_entries

    def _engines(self):
        p = self.p
        specs = [MemberSpec(v, v, "logger" if v in self.loggers else "member") for v in self.members]
        cfg = {"incarnation": 1}
        cfg.update(self.proto.config)
        cfg.update({k: v for k, v in p.items() if k in _CONFIG_FIELDS and k not in _DRIVER_ONLY})
        sb, se = self._store_size()
        if self.loggers:
            base = self.run_dir if self.run_dir else None
            if base is None:
                self._tmp = tempfile.mkdtemp(prefix="rpbcast-sim-")
                base = self._tmp
        engines = {}
        t0 = self.net.now
        stagger = int(float(p["stagger"]) * NS)
        boot = random.Random(f"boot/{self.seed}")
        for v in self.members:
            now = t0 + (int(boot.random() * stagger) if stagger > 0 else 0)
            kw = dict(cfg)
            if v in self.loggers:
                log_dir = os.path.join(base, "logs", f"node={v}")
                os.makedirs(log_dir, exist_ok=True)
                kw.update(role="logger", log_dir=log_dir)
                kw.setdefault("fsync", "never")
            else:
                kw.update(store_bytes=sb, store_entries=se)
            c = Config(node_id=v, addr=v, members=specs, **kw)
            e = self.proto.factory(c, now, random.Random(self.rng.getrandbits(64)), log=None,
                                   **(p["protocol_params"] or {}))
            if self.p["trace"]:
                e.node.enable_trace(int(self.p["trace_capacity"]))
            self.net.add_host(v, e, up_at=now)
            engines[v] = e
        if p["warm_start"]:
            self._warm_start(engines)
        return engines

    @staticmethod
    def _warm_start(engines):
        """Give every engine every other member's own table entry, as if the
        group had been running: identical membership signatures from the
        start.  Static MemberSpecs enter the tables at incarnation 0 and
        freshness 0 while each node announces (inc, 1) for itself, so a cold
        group first gossips its way to agreement (MEMBERS exchanges that grow
        with n**2; docs/simulator.md)."""
        entries = {v: e.self_entry() for v, e in engines.items()
                   if hasattr(e, "self_entry") and hasattr(e, "members")}
        for v, e in engines.items():
            if v not in entries:
                continue
            upsert = e.members.upsert
            for w, m in entries.items():
                if w != v:
                    c = object.__new__(type(m))          # a copy per table: entries hold local state
                    c.__dict__.update(m.__dict__)
                    upsert(c)

    def _workload(self):
        p = self.p
        rate = self._rates()
        kw = dict(size=int(p["size"]), burst=int(p["burst"]))
        if p["labels"] is not None:
            kw["labels"] = p["labels"]
        if p["producer"] not in ("retry", "backlog"):
            raise ValueError(f"producer must be 'retry' or 'backlog', got {p['producer']!r}")
        if p["producer"] == "backlog":
            kw["backlog"] = True
        if p["messages"]:
            stop = float(p["duration"]) if "duration" in self._given else None
            return Poisson.split(self.senders, int(p["messages"]), rate, stop=stop, **kw)
        return Poisson(self.senders, rate, stop=float(p["duration"]), **kw)

    # ------------------------------------------------------------------ deliveries
    def _init_tracking(self):
        self._rec: Dict[int, List[tuple]] = {v: [] for v in self.receivers}
        self._fast_recv = None
        self._fast_version = None
        self.records = 0
        # delivered[receiver row, message] for the completion check: messages
        # are numbered per sender from the workload's plan
        plan = {s: sum(k for _, k in arr) for s, arr in self.pub.plan.items()}
        n1 = self.topo.n + 1
        self._base = np.full(n1, -1, np.int64)
        self._cnt = np.zeros(n1, np.int64)
        self._inc = np.full(n1, -1, np.int64)
        off = 0
        for s in sorted(plan):
            self._base[s], self._cnt[s], self._inc[s] = off, plan[s], self.pub.inc[s]
            off += plan[s]
        self._M = max(off, 1)
        self._row = np.full(n1, -1, np.int64)
        self._row[self.receivers] = np.arange(len(self.receivers))
        self._got = np.zeros(len(self.receivers) * self._M, bool)
        self._stamp = np.zeros(len(self.receivers) * self._M, np.int32)
        self.distinct = 0
        self.corrupt = 0
        self._buf = bytearray(4 << 20)
        self._bufnp = np.frombuffer(self._buf, np.uint8)
        self._writers = {}
        self._last_drain = self.net.now

    def _drain_node(self, v):
        e = self.engines[v]
        node = getattr(e, "node", None)
        pending = node is not None and hasattr(node, "pending")
        now = self.net.now
        size = int(self.p["size"])
        check = self.p["check_payload"] and size >= 16
        recs = self._rec[v]
        while True:
            if pending:
                pend = node.pending
                if not pend:
                    return
                max_n = int(min(pend, len(self._buf) // max(size, 1), 1 << 16))
            else:
                max_n = 4096
            k, snd, inc, seq, lab, rxt, offs, lens = e.recv_batch(max_n, self._buf, now)
            if not k:
                return
            recs.append((snd, inc, seq, rxt))
            self.records += k
            self._note(np.full(k, v, np.int64), snd, inc, seq)
            if check:
                self._check_payloads(k, snd, inc, seq, offs, lens, size)

    # ------------------------------------------------------------------ consumer applications
    def _init_consumers(self):
        """Applications that read at a limited rate (a slow consumer) or at
        every `consume_interval` (a fast one), instead of at the drains; with
        `consumer_queue` B their hosts stop taking datagrams from the network
        while B messages wait for the application (docs/simulator.md)."""
        p = self.p
        self.consumers = {}
        self._read_t: Dict[int, List[np.ndarray]] = {}
        c = p["consumers"]
        if not c:
            return
        for v, rate in sorted((int(k), float(x)) for k, x in dict(c).items()):
            if v not in self.receivers:
                raise ValueError(f"consumer {v} is not a receiver")
            if rate < 0:
                raise ValueError("consumer rates must be >= 0 (0 = unlimited)")
            self.consumers[v] = rate
            self._read_t[v] = []
        self._tick = int(round(float(p["consume_interval"]) * NS))
        if self._tick <= 0:
            raise ValueError("consume_interval must be > 0")
        B = p["consumer_queue"]
        self._tokens = {v: 0.0 for v in self.consumers}
        for v in self.consumers:
            if B is not None:
                self.net.core.set_rx_limit(v, int(B))
            self.net.at(self.net.now + self._tick, self._consumer(v), node=v)

    def _consumer(self, v):
        rate = self.consumers[v]
        per_tick = rate * self._tick / NS
        cap = max(1.0, per_tick)
        core = self.net.core
        limited = self.p["consumer_queue"] is not None

        def tick():
            now = self.net.now
            if rate > 0:
                # an idle application does not bank capacity beyond one tick
                tok = min(self._tokens[v] + per_tick, cap)
                n = int(tok)
                k = self._read(v, n) if n else 0
                self._tokens[v] = tok - k if k == n else tok - int(tok)
            else:
                while self._read(v, 1 << 16):
                    pass
            if limited:
                core.release(v)
            self.net.at(now + self._tick, tick, node=v)
        return tick

    def _read(self, v, max_n):
        """The application at v reads up to max_n messages now."""
        e = self.engines[v]
        now = self.net.now
        size = int(self.p["size"])
        max_n = int(min(max_n, len(self._buf) // max(size, 1), 1 << 16))
        k, snd, inc, seq, lab, rxt, offs, lens = e.recv_batch(max_n, self._buf, now)
        if not k:
            return 0
        self._rec[v].append((snd, inc, seq, rxt))
        self._read_t[v].append(np.full(k, now, np.int64))
        self.records += k
        self._note(np.full(k, v, np.int64), snd, inc, seq)
        if self.p["check_payload"] and size >= 16:
            self._check_payloads(k, snd, inc, seq, offs, lens, size)
        return k

    def _check_payloads(self, k, snd, inc, seq, offs, lens, size):
        """Count delivered payloads (in self._buf) whose header does not
        name their own id (workload.payload) as corrupt."""
        if int(lens.min()) == size == int(lens.max()) and int(offs[-1]) == (k - 1) * size:
            # payloads back to back: a strided view of their headers
            h = self._bufnp[:k * size].reshape(k, size)[:, :16].copy().view(np.uint32)
        else:
            idx = offs.astype(np.int64)[:, None] + np.arange(16)
            h = self._bufnp[idx].copy().view(np.uint32)
            h = np.where((lens == size)[:, None], h, 0xFFFFFFFF)
        ok = ((h[:, 0] == snd) & (h[:, 1] == inc) & (h[:, 2] == (seq & 0xFFFFFFFF))
              & (h[:, 3] == (seq >> 32)))
        self.corrupt += int(k - np.count_nonzero(ok))

    def deliveries(self, v) -> dict:
        """What receiver v's application got, in order: sender, inc, seq,
        rx (receipt time at the node) and, for consumers, read (when the
        application read it); virtual ns."""
        parts = self._rec[v]
        cat = (lambda i: np.concatenate([x[i] for x in parts]).astype(np.int64)) if parts else \
            (lambda i: np.zeros(0, np.int64))
        out = {"sender": cat(0), "inc": cat(1), "seq": cat(2), "rx": cat(3)}
        if v in self._read_t:
            r = self._read_t[v]
            out["read"] = np.concatenate(r) if r else np.zeros(0, np.int64)
        return out

    def _note(self, node, snd, inc, seq):
        """Count distinct expected deliveries (receiver, message)."""
        snd = snd.astype(np.int64)
        seq = seq.astype(np.int64)
        sc = np.clip(snd, 0, len(self._base) - 1)
        ok = ((self._base[sc] >= 0) & (inc.astype(np.int64) == self._inc[sc]) & (seq < self._cnt[sc])
              & (snd != node) & (self._row[node] >= 0))
        flat = self._row[node[ok]] * self._M + self._base[sc[ok]] + seq[ok]
        new = flat[~self._got[flat]]
        if not len(new):
            return
        # duplicates inside this batch: the last write of a position wins
        pos = np.arange(len(new), dtype=np.int32)
        self._stamp[new] = pos
        if not np.array_equal(self._stamp[new], pos):
            new = np.unique(new)
        self._got[new] = True
        self.distinct += len(new)

    def drain(self):
        core = self.net.core
        if self._fast_recv is None or self._fast_version != self.net.version:
            drained = [v for v in self.receivers if v not in self.consumers]
            self._fast_recv = np.array([v for v in drained if core.is_fast(v)], np.int32)
            self._slow_recv = [v for v in drained if not core.is_fast(v)]
            self._fast_version = self.net.version
        if len(self._fast_recv):
            size = int(self.p["size"])
            counts, snd, inc, seq, rxt, bad = core.drain(self._fast_recv, size,
                                                          bool(self.p["check_payload"]) and size >= 16)
            self.corrupt += int(bad)
            k = int(counts.sum())
            if k:
                self.records += k
                self._note(np.repeat(self._fast_recv.astype(np.int64), counts), snd, inc, seq)
                ends = np.cumsum(counts)
                starts = ends - counts
                for v, a, b in zip(self._fast_recv.tolist(), starts.tolist(), ends.tolist()):
                    if b > a:
                        self._rec[v].append((snd[a:b], inc[a:b], seq[a:b], rxt[a:b]))
        for v in self._slow_recv:
            self._drain_node(v)
        if self._writers:
            self._take_traces()
        self._last_drain = self.net.now

    def expected_total(self) -> int:
        recv = set(self.receivers)
        return sum(n * (len(recv) - (1 if s in recv else 0)) for s, n in self.pub.published.items())

    # ------------------------------------------------------------------ running
    def run(self) -> dict:
        p = self.p
        net = self.net
        t_run = time.perf_counter()
        if self.run_dir and p["trace"]:
            self._open_traces()
        step = int(float(p["drain_interval"]) * NS)
        deadline = self.pub.last_arrival + int(float(p["linger"]) * NS)
        self.completed_at = None
        self.drain_s = 0.0
        # Everything built so far lives to the end: keep the cyclic GC from
        # re-scanning it (a million member-table entries at 1000 members).
        gc.freeze()
        try:
            while True:
                t = min(net.now + step, deadline)
                net.run_until(t)
                t_d = time.perf_counter()
                self.drain()
                self.drain_s += time.perf_counter() - t_d
                if (self.completed_at is None and self.pub.finished
                        and self.distinct >= self.expected_total()):
                    self.completed_at = net.now
                    if p["end"] == "complete":
                        break
                if net.now >= deadline or (not net.core.pending_events):
                    break
            self.run_s = time.perf_counter() - t_run
            res = self.results()
            if self.run_dir:
                self._write_run_dir(res)
        finally:
            gc.unfreeze()
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
        return res

    # ------------------------------------------------------------------ results
    def results(self) -> dict:
        t0 = time.perf_counter()
        p = self.p
        pub = self.pub
        senders = sorted(pub.published)
        base, off = {}, 0
        for s in senders:
            base[s] = off
            off += pub.published[s]
        M = off
        pub_t = np.zeros(max(M, 1), np.int64)
        sender_of = np.zeros(max(M, 1), np.int64)
        for s in senders:
            pub_t[base[s]:base[s] + pub.published[s]] = pub.send_times[s]
            sender_of[base[s]:base[s] + pub.published[s]] = s
        n_max = self.topo.n + 1
        base_arr = np.full(n_max, -1, np.int64)
        cnt_arr = np.zeros(n_max, np.int64)
        inc_arr = np.full(n_max, -1, np.int64)
        for s in senders:
            base_arr[s] = base[s]
            cnt_arr[s] = pub.published[s]
            inc_arr[s] = pub.inc[s]
        delivered = duplicates = extras = missing = 0
        lat_parts = []
        first_all = np.zeros(max(M, 1), np.int64)        # latest first receipt over receivers
        got_by = np.zeros(max(M, 1), np.int64)           # receivers that got it
        per_node = {}
        self._hashes = {}
        for v in self.receivers:
            parts = self._rec[v]
            if parts:
                snd = np.concatenate([x[0] for x in parts]).astype(np.int64)
                inc = np.concatenate([x[1] for x in parts]).astype(np.int64)
                seq = np.concatenate([x[2] for x in parts]).astype(np.int64)
                rxt = np.concatenate([x[3] for x in parts]).astype(np.int64)
            else:
                snd = inc = seq = rxt = np.zeros(0, np.int64)
            # the node's delivery sequence: (sender, inc, seq) records in order
            self._hashes[v] = hashlib.blake2b(np.stack((snd, inc, seq), axis=1).tobytes(),
                                              digest_size=16).digest()
            sc = np.clip(snd, 0, n_max - 1)
            valid = (snd < n_max) & (base_arr[sc] >= 0) & (inc == inc_arr[sc]) & (seq >= 0) & (seq < cnt_arr[sc])
            valid &= snd != v
            ids = base_arr[sc[valid]] + seq[valid]
            t = rxt[valid]
            extras += int((~valid).sum())
            c = np.bincount(ids, minlength=M) if M else np.zeros(0, np.int64)
            dup = int(np.maximum(c - 1, 0).sum())
            duplicates += dup
            want = sender_of[:M] != v
            miss = int(((c == 0) & want).sum())
            missing += miss
            delivered += int((c > 0).sum())
            # first receipt time per id
            if len(ids):
                if dup:
                    order = np.lexsort((t, ids))
                    ids_s, t_s = ids[order], t[order]
                    firsts = np.ones(len(ids_s), bool)
                    firsts[1:] = ids_s[1:] != ids_s[:-1]
                    fid, ft = ids_s[firsts], t_s[firsts]
                else:
                    fid, ft = ids, t
                lat_parts.append(ft - pub_t[fid])
                first_all[fid] = np.maximum(first_all[fid], ft)
                got_by[fid] += 1
            per_node[v] = {"delivered": int((c > 0).sum()), "missing": miss, "duplicates": dup}
        lat = np.concatenate(lat_parts) if lat_parts else np.zeros(0, np.int64)
        recv_set = set(self.receivers)
        need = len(recv_set) - np.isin(sender_of[:M], list(recv_set)).astype(np.int64)
        everywhere = (got_by[:M] == need) & (need > 0)
        lat_all = (first_all[:M] - pub_t[:M])[everywhere]

        def qs(a, xs):
            if not len(a):
                return [None] * len(xs)
            return [float(x) / NS for x in np.percentile(a, xs)]

        lat_q = qs(lat, [50, 90, 99])
        lat_all_q = qs(lat_all, [99])

        # engine counters
        tot = {}
        per_counters = {}
        traffic = {}
        for v, e in sorted(self.engines.items()):
            c = e.counters()
            per_counters[v] = c
            for k, x in c.items():
                if isinstance(x, (int, np.integer)):
                    tot[k] = tot.get(k, 0) + int(x)
            for typ, (mi, bi, mo, bo) in e.traffic().items():
                a = traffic.setdefault(typ, [0, 0])
                a[0] += int(mo)
                a[1] += int(bo)

        def tot_of(key, ids):
            return sum(int(per_counters[v].get(key, 0)) for v in ids)

        served = {v: int(per_counters[v].get("served", 0)) for v in self.members}
        member_served = [served[v] for v in self.receivers] or [0]
        ls = self.net.link_stats()
        ns = self.net.node_stats()
        cc = self.net.counters()
        overhead_types = [t for t in traffic if t not in ("data", "repair", "pad")]
        res = {
            "protocol": p["protocol"], "seed": self.seed, "topology": self.topo.name,
            "nodes": self.topo.n, "members": len(self.members), "receivers": len(self.receivers),
            "senders": len(self.senders), "loggers": ",".join(map(str, self.loggers)),
            "published": int(M), "expected": int(self.expected_total()), "delivered": int(delivered),
            "missing": int(missing), "duplicates": int(duplicates), "extras": int(extras),
            "corrupt": int(self.corrupt), "complete": bool(missing == 0 and self.pub.finished),
            "exactly_once": bool(missing == 0 and duplicates == 0 and extras == 0 and self.corrupt == 0),
            "publish_blocked": int(self.pub.blocked),
            "repairs_peer": tot_of("repairs_peer", self.receivers),
            "repairs_logger": tot_of("repairs_logger", self.receivers),
            "gaps": tot_of("gaps", self.receivers), "gap_ids": tot_of("gap_ids", self.receivers),
            "served_total": sum(served.values()),
            "served_by_loggers": sum(served[v] for v in self.loggers),
            "served_max_member": int(max(member_served)),
            "served_mean_member": float(np.mean(member_served)),
            "serve_limited": int(tot.get("serve_limited", 0)),
            "to_logger_ids": tot_of("to_logger_ids", self.receivers),
            "overhead_bytes": int(sum(traffic[t][1] for t in overhead_types)),
            "overhead_msgs": int(sum(traffic[t][0] for t in overhead_types)),
            "data_bytes": int(traffic.get("data", [0, 0])[1]),
            "repair_bytes": int(traffic.get("repair", [0, 0])[1]),
            "repair_msgs": int(traffic.get("repair", [0, 0])[0]),
            "lat_mean": float(lat.mean()) / NS if len(lat) else None,
            "lat_p50": lat_q[0], "lat_p90": lat_q[1], "lat_p99": lat_q[2],
            "lat_max": float(lat.max()) / NS if len(lat) else None,
            "lat_all_mean": float(lat_all.mean()) / NS if len(lat_all) else None,
            "lat_all_std": float(lat_all.std()) / NS if len(lat_all) else None,
            "lat_all_p99": lat_all_q[0],
            "lat_all_max": float(lat_all.max()) / NS if len(lat_all) else None,
            "msgs_everywhere": int(everywhere.sum()),
            "link_pkts": int(ls["pkts"].sum()), "link_bytes": int(ls["bytes"].sum()),
            "link_bytes_max": int(ls["bytes"].max()) if len(ls["bytes"]) else 0,
            "link_data_pkts": int(ls["data_pkts"].sum()), "link_repair_pkts": int(ls["repair_pkts"].sum()),
            "link_control_pkts": int(ls["control_pkts"].sum()),
            "queue_drops": int(ls["drops"].sum()), "queue_drops_data": int(ls["data_drops"].sum()),
            "queue_drops_repair": int(ls["repair_drops"].sum()),
            "queue_drops_control": int(ls["control_drops"].sum()), "link_lost": int(ls["lost"].sum()),
            "rx_lost": int(ns["rx_lost"].sum()),
            "max_queue": int(ls["max_queue"].max()) if len(ls["max_queue"]) else 0,
            "avg_queue_mean": float(ls["avg_queue"].mean()) if len(ls["avg_queue"]) else 0.0,
            "avg_queue_max": float(ls["avg_queue"].max()) if len(ls["avg_queue"]) else 0.0,
            "util_max": float(ls["utilisation"].max()) if len(ls["utilisation"]) else 0.0,
            "sim_time": (self.net.now - self.net.t0) / NS,
            "completed_at": None if self.completed_at is None else (self.completed_at - self.net.t0) / NS,
            "send_start": (self.t_start - self.net.t0) / NS,
            "send_end": (self.pub.last_arrival - self.net.t0) / NS,
            "events": int(cc["events"]), "fast_rx": int(cc["fast_rx"]), "slow_rx": int(cc["slow_rx"]),
            "control_rx": int(cc["control_rx"]), "timers": int(cc["timers"]),
            "unroutable": int(cc["unroutable"]), "max_heap": int(cc["max_heap"]),
        }
        if self.consumers:
            q = [self.net.core.rx_queue(v) for v in self.consumers]
            res["consumer_waiting"] = int(sum(x[0] for x in q))
            res["consumer_held"] = int(sum(x[1] for x in q))
            res["consumer_held_total"] = int(sum(x[2] for x in q))
            res["consumer_held_max"] = int(max(x[3] for x in q))
        if pub.backlog is not None:
            res["backlog_left"] = int(sum(k for d in pub.backlog.values() for _, k in d))
        for typ, (m, b) in sorted(traffic.items()):
            res[f"msgs_{typ}"] = m
            res[f"bytes_{typ}"] = b
        res["delivery_hash"] = self.delivery_hash()
        res["state_hash"] = self.state_hash(per_counters, ls, ns)
        self.per_node = per_node
        self.per_counters = per_counters
        w = self.net.core.wall()
        for k in ("loop", "engine_timers", "engine_control", "engine_slow_rx", "calls"):
            res[f"t_{k}"] = round(w[k], 4)
        res["t_drain"] = round(getattr(self, "drain_s", 0.0), 4)
        res["build_s"] = round(self.build_s, 4)
        res["run_s"] = round(getattr(self, "run_s", 0.0), 4)
        res["results_s"] = round(time.perf_counter() - t0, 4)
        res["wall_s"] = round(self.build_s + getattr(self, "run_s", 0.0) + res["results_s"], 4)
        res["cpu_s"] = round(_cpu() - self._cpu0, 4)     # this process's CPU time: robust to machine load
        return res

    def delivery_hash(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for v in sorted(self._hashes):
            h.update(v.to_bytes(4, "little"))
            h.update(self._hashes[v])
        return h.hexdigest()

    def state_hash(self, per_counters, ls, ns) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(self.delivery_hash().encode())
        h.update(json.dumps({str(v): {k: int(x) for k, x in sorted(c.items()) if isinstance(x, (int, np.integer))}
                             for v, c in sorted(per_counters.items())}, sort_keys=True).encode())
        for k in sorted(ls):
            h.update(k.encode())
            h.update(np.ascontiguousarray(ls[k]).tobytes())
        for k in sorted(ns):
            h.update(k.encode())
            h.update(np.ascontiguousarray(ns[k]).tobytes())
        h.update(int(self.net.now).to_bytes(8, "little", signed=True))
        return h.hexdigest()

    # ------------------------------------------------------------------ tables
    def link_table(self) -> List[dict]:
        """One row per directed link: a, b and every statistic."""
        s = self.net.link_stats()
        keys = list(s)
        return [{k: (s[k][i].item() if hasattr(s[k][i], "item") else s[k][i]) for k in keys}
                for i in range(len(s["a"]))]

    def node_table(self) -> List[dict]:
        """One row per member: network statistics and engine counters."""
        s = self.net.node_stats()
        rows = []
        for v in self.members:
            r = {"node": v, "role": "logger" if v in self.loggers else "member",
                 "sender": v in self.pub.published}
            r.update({k: int(s[k][v]) for k in s})
            c = self.engines[v].counters()
            r.update({f"engine_{k}": x for k, x in c.items() if isinstance(x, (int, float, np.integer))})
            rows.append(r)
        return rows

    # ------------------------------------------------------------------ run directory
    def _open_traces(self):
        from rpbcast.analysis.tracefile import TraceWriter
        for v in self.members:
            self._writers[v] = TraceWriter(self.run_dir, self.run_id, v)

    def _take_traces(self):
        for v, w in self._writers.items():
            w.add(self.engines[v].node.take_trace())

    def _write_run_dir(self, res):
        from rpbcast.analysis.tracefile import write_counters, write_run_json
        if self._writers:
            self._take_traces()
            for w in self._writers.values():
                w.close()
        params = {k: v for k, v in self.p.items() if k != "run_dir"}
        params["topology"] = self.topo.name
        meta = {"run_id": self.run_id, "kind": "sim", "protocol": self.p["protocol"], "clock": "virtual",
                "nodes": [{"id": v, "role": "logger" if v in self.loggers else "member", "addr": v}
                          for v in self.members],
                "senders": sorted(self.pub.published), "params": params, "summary": res,
                "t0_ns": self.net.t0}
        write_run_json(self.run_dir, meta)
        for v, e in self.engines.items():
            c = dict(e.counters())
            c["traffic"] = {k: list(map(int, x)) for k, x in e.traffic().items()}
            write_counters(self.run_dir, v, c)
        with open(os.path.join(self.run_dir, "links.json"), "w") as f:
            json.dump(self.link_table(), f)
        with open(os.path.join(self.run_dir, "nodes.json"), "w") as f:
            json.dump(self.node_table(), f)
        with open(os.path.join(self.run_dir, "topology.json"), "w") as f:
            json.dump(self.topo.to_dict(), f)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_one(params: Optional[dict] = None) -> dict:
    """Run one configuration; a flat dict of results (docs/simulator.md)."""
    return Simulation(params).run()
