"""Measurements inside the engines of a simulation, for the side
experiments that find out why a result differs from a paper's
(docs/reproduction/thesis.md).  A probe wraps a method of each engine's
parts, counts, and calls the original: the run itself is unchanged (same
state hash with and without).

    sim = Simulation(params)
    pulls = PullOutcomes(sim)
    frontiers = FrontierReports(sim)
    sim.run()
    pulls.result(), frontiers.result()
"""
from __future__ import annotations

import collections

from rpbcast.core import wire
from rpbcast.core.digest import decode as digest_decode


class PullOutcomes:
    """Immediate pulls (and their retries, rpbcast.protocol.pulls) and
    whether the member asked held, at that moment, every id it was asked
    for.  A pull to a member that lacks an id cannot repair it: the puller
    waits for a retry (thesis §7.3: "randomly selecting retransmission
    sources, some of which do not succeed")."""

    def __init__(self, sim):
        self.sim = sim
        self.stats = collections.Counter()
        for v, e in sim.engines.items():
            repair = getattr(e, "repair", None)
            pulls = getattr(repair, "pulls", None)
            if pulls is None:
                continue
            pulls.pull = self._wrap(repair, pulls.pull)

    def _wrap(self, repair, orig):
        # A pull after a stall goes to any peer (anyone=True): that is the
        # retry; the others are pulls of new gaps and window refills.
        def call(now, anyone=False):
            kind = "retry" if anyone else "pull"
            sent = []
            send = repair.send_gossip
            repair.send_gossip = lambda target, secs, now_, nids=0: (sent.append((target, secs)),
                                                                      send(target, secs, now_, nids))
            try:
                orig(now, anyone)
            finally:
                del repair.send_gossip          # the class's method again
            for target, secs in sent:
                self._judge(kind, target.node_id, secs)
        return call

    def _judge(self, kind, target, secs):
        te = self.sim.engines.get(target)
        if te is None:
            return
        node = te.node
        asked = lacked = 0
        for sec in secs:
            for k, _, data in wire.sections(bytes(sec)):
                if k != wire.Section.MISSING:
                    continue
                sender, inc, digest = wire.read_missing(data)
                ivs = digest_decode(digest)[0]
                for lo, hi in ivs:
                    for q in range(int(lo), int(hi) + 1):
                        asked += 1
                        if not self._holds(te, node, sender, inc, q):
                            lacked += 1
        self.stats[kind + "s"] += 1
        self.stats[kind + "_ids"] += asked
        self.stats[kind + "_ids_lacked"] += lacked
        self.stats[kind + "s_lacking"] += lacked > 0

    @staticmethod
    def _holds(te, node, sender, inc, q):
        if sender == te.id and inc == te.inc:
            return q < node.next_seq
        slot = node.find_peer(sender, inc)
        return slot is not None and node.peer_received(slot, q)

    def result(self) -> dict:
        s = self.stats
        pulls = s["pulls"]
        return {"pulls": pulls, "pulls_lacking": s["pulls_lacking"],
                "pull_fail_frac": s["pulls_lacking"] / pulls if pulls else None,
                "pull_ids": s["pull_ids"], "pull_ids_lacked": s["pull_ids_lacked"],
                "retries": s["retrys"], "retry_ids": s["retry_ids"]}


class FrontierReports:
    """Bytes of LASTSEEN sections (a member's receive frontier, one 16-byte
    entry per stream) the engines put in their gossip: the reports a
    logger derives its GC acknowledgments from (thesis §5.2)."""

    def __init__(self, sim):
        self.bytes = 0
        self.sections = 0
        for e in sim.engines.values():
            repair = getattr(e, "repair", None)
            if repair is not None and hasattr(repair, "lastseen_section"):
                repair.lastseen_section = self._wrap(repair.lastseen_section)

    def _wrap(self, orig):
        def call(*args, **kw):
            sec = orig(*args, **kw)
            if sec:
                self.bytes += len(sec)
                self.sections += 1
            return sec
        return call

    def result(self) -> dict:
        return {"lastseen_bytes": self.bytes, "lastseen_sections": self.sections}
