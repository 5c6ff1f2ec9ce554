"""A simulated run's directory (docs/traces.md, ``kind: "sim"``): run.json
with the results as its summary, the engines' counters, links.json,
nodes.json, topology.json and, with ``trace``, the per-node Parquet event
traces that ``rpbcast analyze`` reads.
"""
from __future__ import annotations

import json
import os


class RunDir:
    def __init__(self, path: str, run_id: str):
        self.path = path
        self.run_id = run_id
        self.writers = {}

    def open_traces(self, members):
        from rpbcast.analysis.tracefile import TraceWriter
        for v in members:
            self.writers[v] = TraceWriter(self.path, self.run_id, v)

    def take_traces(self, engines):
        """Move what the engines' data planes recorded into the trace files."""
        for v, w in self.writers.items():
            w.add(engines[v].node.take_trace())

    def write(self, sim, res: dict):
        from rpbcast.analysis.tracefile import write_counters, write_run_json
        if self.writers:
            self.take_traces(sim.engines)
            for w in self.writers.values():
                w.close()
        params = {k: v for k, v in sim.p.items() if k != "run_dir"}
        params["topology"] = sim.topo.name
        meta = {"run_id": self.run_id, "kind": "sim", "protocol": sim.p["protocol"], "clock": "virtual",
                "nodes": [{"id": v, "role": "logger" if v in sim.loggers else "member", "addr": v}
                          for v in sim.members],
                "senders": sorted(sim.pub.published), "params": params, "summary": res,
                "t0_ns": sim.net.t0}
        write_run_json(self.path, meta)
        for v, e in sim.engines.items():
            c = dict(e.counters())
            c["traffic"] = {k: list(map(int, x)) for k, x in e.traffic().items()}
            write_counters(self.path, v, c)
        self._json("links.json", sim.link_table())
        self._json("nodes.json", sim.node_table())
        self._json("topology.json", sim.topo.to_dict())

    def _json(self, name, obj):
        with open(os.path.join(self.path, name), "w") as f:
            json.dump(obj, f)
