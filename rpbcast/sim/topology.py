"""Topologies: nodes 1..n joined by bidirectional links (latency, bandwidth).

    topo = transit_stub()                  # the thesis's 30-node set-up (Fig. 7-1)
    topo = balanced_tree(200, degree=4)    # GSGC's dense groups
    parent, dist, hops = topo.spt(root)    # shortest paths by latency

Node numbers are node ids and addresses in a simulation.  Each undirected
link k is two directed links, 2k (a -> b) and 2k + 1 (b -> a); queues,
bandwidth and statistics are per direction.

Routing is by latency with deterministic tie-breaks: cost (latency, hops)
compared lexicographically, and among equal-cost predecessors the lowest
node id.  Unicast follows the shortest path; multicast from a source follows
that source's shortest-path tree pruned to the group members (DVMRP/PIM-SM
source trees; with symmetric links, reverse-path forwarding gives the same
tree).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

NS = 1_000_000_000
MBPS = 1_000_000

# The fixed default seed of the transit-stub generator: with it the thesis
# topology (and statements like "the logger is node N") never change.
THESIS_SEED = 7


@dataclass(frozen=True)
class Link:
    a: int
    b: int
    latency: float          # seconds, one way
    bandwidth: float        # bits/s per direction; 0 = no serialisation delay


@dataclass
class Topology:
    """An undirected graph of nodes 1..n."""

    name: str = "custom"
    kinds: List[str] = field(default_factory=lambda: ["-"])   # kinds[v]; index 0 unused
    links: List[Link] = field(default_factory=list)
    hosts: List[int] = field(default_factory=list)     # nodes that may run a member
    logger: Optional[int] = None                        # suggested logger node
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self._adj: Dict[int, List[Tuple[int, int]]] = {}
        self._dir: Dict[Tuple[int, int], int] = {}
        self._csr = None
        self._spt: Dict[int, tuple] = {}
        for k, l in enumerate(self.links):
            self._index(k, l)

    # ------------------------------------------------------------------ build
    @property
    def n(self) -> int:
        return len(self.kinds) - 1

    def add_node(self, kind: str = "router") -> int:
        self.kinds.append(kind)
        self._changed()
        return self.n

    def add_link(self, a: int, b: int, latency: float, bandwidth: float) -> int:
        if not (1 <= a <= self.n and 1 <= b <= self.n) or a == b:
            raise ValueError(f"link {a}-{b}: nodes must be distinct and in 1..{self.n}")
        if (a, b) in self._dir:
            raise ValueError(f"link {a}-{b} exists")
        if latency < 0 or bandwidth < 0:
            raise ValueError("latency and bandwidth must be >= 0")
        k = len(self.links)
        l = Link(a, b, float(latency), float(bandwidth))
        self.links.append(l)
        self._index(k, l)
        self._changed()
        return k

    def _index(self, k, l):
        self._adj.setdefault(l.a, []).append((l.b, 2 * k))
        self._adj.setdefault(l.b, []).append((l.a, 2 * k + 1))
        self._dir[(l.a, l.b)] = 2 * k
        self._dir[(l.b, l.a)] = 2 * k + 1

    def _changed(self):
        self._csr = None
        self._spt = {}

    @classmethod
    def from_edges(cls, n: int, edges: Iterable, latency: float = 0.001, bandwidth: float = 100 * MBPS,
                   name: str = "custom", hosts: Optional[Sequence[int]] = None) -> "Topology":
        """edges: (a, b) or (a, b, latency) or (a, b, latency, bandwidth)."""
        t = cls(name=name, kinds=["-"] + ["host"] * n)
        for e in edges:
            a, b = e[0], e[1]
            t.add_link(a, b, e[2] if len(e) > 2 else latency, e[3] if len(e) > 3 else bandwidth)
        t.hosts = list(hosts) if hosts is not None else list(range(1, n + 1))
        return t

    def with_links(self, latency: Optional[float] = None, bandwidth: Optional[float] = None) -> "Topology":
        """A copy with every link's latency and/or bandwidth replaced."""
        t = Topology(name=self.name, kinds=list(self.kinds), hosts=list(self.hosts), logger=self.logger,
                     meta=dict(self.meta))
        for l in self.links:
            t.add_link(l.a, l.b, l.latency if latency is None else latency,
                       l.bandwidth if bandwidth is None else bandwidth)
        return t

    # ------------------------------------------------------------------ queries
    def neighbours(self, v: int) -> List[int]:
        return sorted(w for w, _ in self._adj.get(v, []))

    def degree(self, v: int) -> int:
        return len(self._adj.get(v, []))

    def directed(self) -> List[Tuple[int, int, float, float]]:
        """Directed links in index order: (src, dst, latency, bandwidth)."""
        out = []
        for l in self.links:
            out.append((l.a, l.b, l.latency, l.bandwidth))
            out.append((l.b, l.a, l.latency, l.bandwidth))
        return out

    def link_index(self, a: int, b: int) -> int:
        """The directed link a -> b."""
        return self._dir[(a, b)]

    def is_connected(self) -> bool:
        if self.n == 0:
            return True
        seen = {1}
        stack = [1]
        while stack:
            v = stack.pop()
            for w, _ in self._adj.get(v, []):
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return len(seen) == self.n

    def csr(self):
        """(off, nbr, lat_ns, dlink): node v's neighbours are nbr[off[v]:off[v+1]],
        sorted by id, with their latencies and directed link indices."""
        if self._csr is None:
            n = self.n
            off = np.zeros(n + 2, np.int32)
            nbr, lat, dl = [], [], []
            for v in range(1, n + 1):
                off[v] = len(nbr)
                for w, k in sorted(self._adj.get(v, [])):
                    nbr.append(w)
                    lat.append(int(round(self.links[k // 2].latency * NS)))
                    dl.append(k)
            off[n + 1] = len(nbr)
            off[0] = 0
            self._csr = (off, np.array(nbr, np.int32), np.array(lat, np.int64), np.array(dl, np.int32))
        return self._csr

    def spt(self, root: int):
        """(parent, dist_ns, hops) of the shortest-path tree rooted at root
        (arrays indexed by node; parent[root] = 0, unreachable -1)."""
        return self._tree(root)[:3]

    def _tree(self, root: int):
        """spt plus down[v]: the directed link parent[v] -> v (-1 for the
        root and unreachable nodes)."""
        r = self._spt.get(root)
        if r is None:
            from rpbcast.sim.spt import spt
            off, nbr, lat, dl = self.csr()
            parent, dist, hops, via = spt(self.n, off, nbr, lat, root)
            down = np.full(self.n + 1, -1, np.int32)
            ok = via >= 0
            down[ok] = dl[via[ok]]
            r = (parent, dist, hops, down)
            self._spt[root] = r
        return r

    def path(self, src: int, dst: int) -> List[int]:
        """Nodes on the route src -> dst (the reverse of dst's tree path)."""
        parent = self.spt(dst)[0]
        if parent[src] < 0:
            raise ValueError(f"{dst} is unreachable from {src}")
        out = [src]
        v = src
        while v != dst:
            v = int(parent[v])
            out.append(v)
        return out

    def latency_ns(self, src: int, dst: int) -> int:
        return int(self.spt(src)[1][dst])

    def next_links(self, dst: int) -> np.ndarray:
        """For each node v, the directed link v sends on toward dst (-1 at dst
        or when unreachable)."""
        down = self._tree(dst)[3]
        # the link v -> parent[v] is the reverse of parent[v] -> v: index ^ 1
        return np.where(down >= 0, down ^ 1, -1).astype(np.int32)

    def mcast_tree(self, src: int, members: Iterable[int]):
        """src's multicast tree to members: (off, links) CSR of children links
        per node (node v forwards on links[off[v]:off[v+1]])."""
        parent, _, _, down = self._tree(src)
        on = np.zeros(self.n + 1, bool)
        on[src] = True
        for m in members:
            v = int(m)
            if parent[v] < 0:
                raise ValueError(f"member {v} is unreachable from {src}")
            while not on[v]:
                on[v] = True
                v = int(parent[v])
        on[src] = False
        kids = np.flatnonzero(on)                       # every tree node but the source
        par = parent[kids]
        order = np.lexsort((kids, par))                 # grouped by parent, children by id
        kids, par = kids[order], par[order]
        off = np.searchsorted(par, np.arange(self.n + 2)).astype(np.int32)
        return off, down[kids].astype(np.int32)

    def tree_edges(self, src: int, members: Iterable[int]) -> List[Tuple[int, int]]:
        """The directed (parent, child) edges of src's multicast tree."""
        off, links = self.mcast_tree(src, members)
        d = self.directed()
        return [(d[k][0], d[k][1]) for k in links]

    def center(self) -> int:
        """The node with the smallest largest latency to every other (lowest id on ties)."""
        best = None
        for v in range(1, self.n + 1):
            ecc = int(self.spt(v)[1][1:].max())
            if best is None or ecc < best[0]:
                best = (ecc, v)
        return best[1]

    def describe(self) -> str:
        lines = [f"{self.name}: {self.n} nodes, {len(self.links)} links, {len(self.hosts)} hosts"
                 + (f", logger {self.logger}" if self.logger else "")]
        for v in range(1, self.n + 1):
            nb = ", ".join(f"{w}({self.links[k // 2].latency * 1e3:g}ms)"
                           for w, k in sorted(self._adj.get(v, [])))
            lines.append(f"  {v:4d} {self.kinds[v]:8s} -> {nb}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"name": self.name, "n": self.n, "kinds": self.kinds[1:], "hosts": self.hosts,
                "logger": self.logger, "links": [[l.a, l.b, l.latency, l.bandwidth] for l in self.links],
                "meta": self.meta}


# ---------------------------------------------------------------------- generators
def transit_stub(seed: int = THESIS_SEED, transit: int = 4, stubs_per_transit: int = 2, fringe: int = 18,
                 bandwidth: float = 100 * MBPS, transit_latency=(0.010, 0.025), stub_latency=(0.003, 0.010),
                 fringe_latency=(0.001, 0.005), chord_prob: float = 0.5, intra_prob: float = 0.3,
                 multihome_prob: float = 0.25) -> Topology:
    """A GT-ITM-like transit-stub graph.  Defaults: the thesis set-up of
    §7.1 / Fig. 7-1, 30 nodes of which 18 fringe nodes are the group members.

    One transit domain of `transit` routers (a ring plus random chords); each
    transit router has `stubs_per_transit` stub domains; a stub domain is a
    gateway router linked to its transit router (sometimes also to a second
    one: multi-homing) and fringe hosts linked to the gateway, with random
    extra links between fringe hosts of the same domain.  Latencies are whole
    milliseconds drawn uniformly from the ranges; every link has `bandwidth`.

    Node numbering: transit routers 1..T, then each stub domain's gateway
    followed by its fringe hosts.  The suggested logger is the fringe host
    farthest (by latency) from the network centre (thesis: "node 14 on the far
    left side of the network"), lowest id on ties."""
    rng = random.Random(f"transit-stub/{seed}")

    def ms(lo_hi):
        lo, hi = lo_hi
        return rng.randint(int(round(lo * 1000)), int(round(hi * 1000))) / 1000.0

    ndom = transit * stubs_per_transit
    if transit < 1 or stubs_per_transit < 1 or fringe < ndom:
        raise ValueError("need at least one transit router, one stub domain each, one fringe host per domain")
    t = Topology(name=f"transit-stub(seed={seed})")
    _transit_domain(t, rng, ms, transit, transit_latency, bandwidth, chord_prob)
    sizes = [fringe // ndom + (1 if d < fringe % ndom else 0) for d in range(ndom)]
    hosts = []
    for d in range(ndom):
        hosts += _stub_domain(t, rng, ms, d // stubs_per_transit + 1, transit, sizes[d], stub_latency,
                              fringe_latency, bandwidth, multihome_prob, intra_prob)
    t.hosts = hosts
    c = t.center()
    dist = t.spt(c)[1]
    t.logger = max(hosts, key=lambda h: (int(dist[h]), -h))
    t.meta = {"generator": "transit_stub", "seed": seed, "center": c, "transit": transit,
              "stub_domains": ndom, "fringe": fringe}
    return t


def _transit_domain(t: Topology, rng, ms, transit, latency, bandwidth, chord_prob):
    """Transit routers 1..transit: a ring plus random chords."""
    for _ in range(transit):
        t.add_node("transit")
    for i in range(transit):                              # the ring
        j = (i + 1) % transit
        if transit > 1 and not (transit == 2 and i == 1):
            t.add_link(i + 1, j + 1, ms(latency), bandwidth)
    for i in range(transit):                              # chords
        for j in range(i + 2, transit):
            if (i, j) != (0, transit - 1) and rng.random() < chord_prob:
                t.add_link(i + 1, j + 1, ms(latency), bandwidth)


def _stub_domain(t: Topology, rng, ms, tr, transit, size, stub_latency, fringe_latency, bandwidth,
                 multihome_prob, intra_prob) -> List[int]:
    """A gateway linked to transit router tr (sometimes also to another),
    size fringe hosts behind it and random links among them; the hosts."""
    gw = t.add_node("stub")
    t.add_link(tr, gw, ms(stub_latency), bandwidth)
    if transit > 1 and rng.random() < multihome_prob:
        other = rng.choice([x for x in range(1, transit + 1) if x != tr])
        t.add_link(other, gw, ms(stub_latency) + ms(stub_latency), bandwidth)
    dom = []
    for _ in range(size):
        h = t.add_node("fringe")
        t.add_link(gw, h, ms(fringe_latency), bandwidth)
        dom.append(h)
    for a_i in range(len(dom)):
        for b_i in range(a_i + 1, len(dom)):
            if rng.random() < intra_prob:
                t.add_link(dom[a_i], dom[b_i], ms(fringe_latency), bandwidth)
    return dom


def balanced_tree(n: int, degree: int = 4, latency: float = 0.005, bandwidth: float = 100 * MBPS) -> Topology:
    """A balanced bounded-degree tree of n nodes (GSGC §4.2): no node has more
    than `degree` neighbours; filled breadth first, so the root has `degree`
    children, other nodes `degree - 1`, and all leaves are on the last two
    levels.  Node 1 is the root; numbering is breadth first.  Every node is a
    host (the dense set-up); pick members with choose_members for sparse ones."""
    if n < 1 or degree < 2:
        raise ValueError("need n >= 1 and degree >= 2")
    t = Topology(name=f"tree(n={n},degree={degree})", kinds=["-"] + ["host"] * n)
    nxt = 2
    for v in range(1, n + 1):
        k = degree if v == 1 else degree - 1
        for _ in range(k):
            if nxt > n:
                break
            t.add_link(v, nxt, latency, bandwidth)
            nxt += 1
    t.hosts = list(range(1, n + 1))
    t.logger = None
    t.meta = {"generator": "balanced_tree", "n": n, "degree": degree}
    return t


def choose_members(topo: Topology, k: int, seed: int = 0, among: Optional[Sequence[int]] = None) -> List[int]:
    """k members chosen uniformly (seeded) among the topology's hosts; the
    rest stay routers (GSGC's sparse groups: 200 of a 1000-node tree)."""
    pool = sorted(among if among is not None else topo.hosts)
    if k > len(pool):
        raise ValueError(f"{k} members but only {len(pool)} candidate nodes")
    return sorted(random.Random(f"members/{seed}").sample(pool, k))
