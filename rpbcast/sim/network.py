"""The simulated network: a topology, its queues and routes, and the engines
attached to it, on a virtual clock (the event loop and the network model
are C: ``_core.Core`` and its pieces).

    net = Network(topo, seed=1, queue_limit=50)
    net.add_host(v, engine)             # engine at node v, address v
    net.at(t, fn, node=v)               # call fn() at virtual time t
    net.run_until(t)

Model (docs/simulator.md):

* A datagram an engine emits at node v is handed to v's first link(s) at
  once, or after the host send cost t_s(u) if host costs are on (the host
  CPU is one FIFO server shared by sending and receiving).
* Each link direction is a FIFO queue: a packet starts transmitting when the
  packets ahead of it are done, takes (datagram + header_bytes) * 8 /
  bandwidth to serialise, then `latency` to propagate.  With a queue limit,
  a packet that finds `limit` packets waiting (not counting the one being
  transmitted) is dropped.
* At each node after the first, a packet waits `proc_delay` (router
  processing) before it enters the next queues.  Multicast copies follow the
  source's shortest-path tree to every member; unicast follows the shortest
  path.
* A packet reaching a member host (not its source) is subject to the
  receiver loss model, then (after the receive cost t_r(u), if on) handed to
  the engine.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

from rpbcast.sim import _core
from rpbcast.sim.loss import CLASS_BITS, NoLoss
from rpbcast.sim.topology import NS, Topology

DEST_MCAST = (1 << 64) - 1


@dataclass(frozen=True)
class HostCost:
    """Host send cost t_s(u) = send_base + send_per_byte * u and receive cost
    t_r(u) = recv_factor * t_s(u), u the datagram size in bytes (seconds)."""

    send_base: float = 338e-6
    send_per_byte: float = 47e-6 / 400
    recv_factor: float = 1.1

    @classmethod
    def gsgc(cls) -> "HostCost":
        """GSGC §4: t_s(u) = 338 + 47u/400 microseconds, t_r = 1.1 t_s."""
        return cls()

    def send_ns(self, u: int) -> float:
        return (self.send_base + self.send_per_byte * u) * NS

    def recv_ns(self, u: int) -> float:
        return self.recv_factor * self.send_ns(u)


def engine_fast_path_ok(engine) -> bool:
    """The engine lets a driver receive through its C data plane (the
    driver contract: Engine.driver_needs)."""
    needs = getattr(engine, "driver_needs", None)
    return bool(needs is not None and needs.data_plane_rx)


class Network:
    def __init__(self, topo: Topology, seed: int = 0, queue_limit: Optional[int] = None,
                 proc_delay: float = 0.0, host_cost: Optional[HostCost] = None, header_bytes: int = 28,
                 link_loss=None, rx_loss=None, loss_applies: str = "all", start: int = NS,
                 fast_rx: bool = True, queue_limits: Optional[Dict[tuple, Optional[int]]] = None):
        if not topo.is_connected():
            raise ValueError("the topology is not connected")
        self.topo = topo
        self.seed = seed
        self.rng = random.Random(f"net/{seed}")
        self.n = topo.n
        d = topo.directed()
        self.core = core = _core.Core(self.n, len(d))
        core.set_rand(self.rng.random)
        core.forwarder.set_header_bytes(header_bytes)
        self.header_bytes = header_bytes
        self.queue_limit = queue_limit
        self._install_links(d, queue_limit, queue_limits or {})
        self.proc_delay = proc_delay
        if proc_delay:
            for v in range(1, self.n + 1):
                core.forwarder.set_proc(v, int(round(proc_delay * NS)))
        self.host_cost = host_cost
        self.fast_rx = fast_rx
        self.classes = CLASS_BITS[loss_applies]
        self.link_loss = link_loss or NoLoss()
        self.rx_loss = rx_loss or NoLoss()
        for i in range(len(d)):
            self.link_loss.install(core, "link", i, self.classes, self.rng)
        core.routes.route_cb = self._install_route
        core.advance(start)
        self.t0 = start
        self.engines: Dict[int, object] = {}
        self.members: List[int] = []
        self._member_set = set()
        self.version = 0            # bumps when hosts or their receive paths change

    def _install_links(self, directed, queue_limit, queue_limits):
        """Every link direction, with queue_limit unless queue_limits[(a, b)] says otherwise."""
        per = {self.topo.link_index(int(a), int(b)): q for (a, b), q in queue_limits.items()}
        for i, (a, b, lat, bw) in enumerate(directed):
            q = per.get(i, queue_limit)
            self.core.links.set(i, a, b, int(round(lat * NS)), bw, -1 if q is None else int(q))

    # ------------------------------------------------------------------ hosts
    @property
    def now(self) -> int:
        return self.core.now

    def add_host(self, v: int, engine, member: bool = True, fast: Optional[bool] = None,
                 up_at: Optional[int] = None):
        """Attach engine at node v (its address is v).  member: it receives
        the group's multicast.  fast: drive it through the C data plane
        (default: when that is exactly equivalent, see engine_fast_path_ok).
        up_at: the host boots then (virtual ns; until then it is down: what
        reaches it is lost and its timer does not run)."""
        if v in self.engines:
            raise ValueError(f"node {v} already has an engine")
        if fast is None:
            fast = self.fast_rx and engine_fast_path_ok(engine)
        self.core.set_host(v, engine, member, fast)
        self.engines[v] = engine
        self.version += 1
        if member:
            self.members.append(v)
            self._member_set.add(v)
            self.core.routes.clear()          # trees span the members
        if self.host_cost is not None:
            hc = self.host_cost
            self.core.hosts.set_cost(v, hc.send_base * NS, hc.send_per_byte * NS, hc.recv_factor)
        self.rx_loss.install(self.core, "receiver", v, self.classes, self.rng)
        if up_at is not None and up_at > self.now:
            self.core.set_up(v, False)
            self.at(up_at, self._booter(v))
        return engine

    def _booter(self, v):
        def boot():
            self.core.set_up(v, True)
            self.core.start(v)
        return boot

    def start(self, v: Optional[int] = None):
        """Read the first timer of engine v (all engines if None)."""
        for w in ([v] if v is not None else sorted(self.engines)):
            self.core.start(w)

    def refresh_fast_path(self):
        """Re-decide per engine whether the C data-plane path applies (after
        extensions were added, say)."""
        for v, e in self.engines.items():
            self.core.driver.set_fast(v, self.fast_rx and engine_fast_path_ok(e))
        self.version += 1

    def crash(self, v: int):
        """The host at v stops (the router there keeps forwarding)."""
        self.core.set_up(v, False)

    def set_send_filter(self, fn: Optional[Callable[[int, int, bytes], bool]]):
        """fn(src, dest, data) -> True drops the datagram as it leaves src
        (before any link; counted as 'filtered').  None removes it."""
        self.core.forwarder.send_filter = fn

    def set_link_loss(self, link: int, model):
        model.install(self.core, "link", link, self.classes, self.rng)

    def set_rx_loss(self, v: int, model):
        model.install(self.core, "receiver", v, self.classes, self.rng)

    # ------------------------------------------------------------------ routes
    def _install_route(self, kind, v):
        if kind == "mcast":
            off, links = self.topo.mcast_tree(v, sorted(self._member_set))
            self.core.routes.set_mcast_tree(v, off, links)
        else:
            self.core.routes.set_route(v, self.topo.next_links(v))

    # ------------------------------------------------------------------ time
    def at(self, t: int, fn: Callable[[], None], node: int = 0) -> int:
        """Call fn() at virtual time t; with node, flush that engine after."""
        return self.core.at(int(t), fn, node)

    def flush(self, v: int):
        """After driving engine v directly: send its datagrams, re-read its timer."""
        self.core.flush(v)

    def run_until(self, t: int) -> int:
        return self.core.run(int(t))

    def run(self, seconds: float) -> int:
        return self.run_until(self.now + int(round(seconds * NS)))

    def stop(self):
        self.core.stop()

    # ------------------------------------------------------------------ statistics
    def link_stats(self) -> Dict[str, np.ndarray]:
        """Per directed link (index = link), see docs/simulator.md; adds
        avg_queue (time-averaged waiting packets) and utilisation."""
        s = self.core.link_stats()
        el = max(self.now - self.t0, 1)
        s["avg_queue"] = s.pop("queue_area") / el
        s["utilisation"] = s["busy_ns"] / el
        d = self.topo.directed()
        s["latency_ns"] = np.array([int(round(x[2] * NS)) for x in d], np.int64)
        s["bandwidth"] = np.array([x[3] for x in d], np.float64)
        return s

    def node_stats(self) -> Dict[str, np.ndarray]:
        return self.core.node_stats()

    def counters(self) -> dict:
        return self.core.counters()
