"""The node a worker runs: its configuration, extensions and trace writer
from the worker's spec, and what the worker's events report of it."""
from __future__ import annotations

import time

from rpbcast.config import Config, MemberSpec
from rpbcast.tools.stress.worker.channel import emit


def pin(spec):
    """`rpbcast stress --pin`: this thread onto the worker's CPU, before it
    starts any other (the node's loop thread and the command reader inherit
    it): a spinning receiver keeps its core instead of being moved and
    queued behind others (docs/performance.md)."""
    import os
    cpu = spec.get("cpu")
    if cpu is not None:
        os.sched_setaffinity(0, {int(cpu)})


def make_config(spec) -> Config:
    c = dict(spec["config"])
    c["members"] = [MemberSpec(**m) for m in c.get("members", [])]
    return Config.from_dict(c)


def extensions(spec):
    if not spec.get("gsgc"):
        return []
    from rpbcast.protocol.gsgc import GsgcExtension
    return [GsgcExtension(b=spec.get("gsgc_b", 1), newcomer=bool(spec.get("restarted")))]


def trace_writer(spec, node):
    """The node's event trace file, when the run records traces."""
    run_dir = spec.get("run_dir")
    if not run_dir or not spec.get("trace"):
        return None
    from rpbcast.analysis.tracefile import TraceWriter
    return TraceWriter(run_dir, spec["run_id"], spec["config"]["node_id"], addr_to_node=spec.get("addr_to_node"))


def drain_trace(node, tw):
    if tw is not None:
        tw.add(node.take_trace())


def final_stats(node):
    st = node.stats()
    return {k: v for k, v in st.items() if not isinstance(v, (bytes,))}


def gsgc_state(node):
    from rpbcast.protocol.gsgc import GsgcExtension
    st = node.extension_state(GsgcExtension)
    if st is None:
        return None
    return {"rounds_completed": st["rounds_completed"], "tts": st["tts"], "failed": st["failed"],
            "K": st["K"], "S": {f"{s}/{i}": v for (s, i), v in st["S"].items()},
            "events": [[str(x) for x in ev] for ev in st["events"]]}


def buffers(node):
    """Memory held right now: the bounded-buffer evidence."""
    st = node.stats()
    return {"store_entries": st["store_entries"], "store_bytes": st["store_bytes"],
            "gossip_entries": st["gossip_buffer_entries"], "gossip_bytes": st["gossip_buffer_bytes"]}


def peak_rss_kb() -> int:
    """This process's peak resident set (KiB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class ProtocolEvents:
    """The node's events for the application (Node.events()) as the run
    reports them: a receiver released from or restored to flow control and
    a member declared failed or recovered, each sent to the orchestrator as
    it happens; ids lost for good, counted."""

    NOTABLE = ("released", "restored")

    def __init__(self):
        self.notable = []
        self.lost_ids = 0
        self.lost = {}          # (sender, inc) -> [(lo, hi)] given up by the protocol

    def poll(self, node):
        for ev in node.events():
            if ev[0] == "lost":
                self.lost_ids += int(ev[4]) - int(ev[3]) + 1
                self.lost.setdefault((int(ev[1]), int(ev[2])), []).append((int(ev[3]), int(ev[4])))
            elif ev[0] in self.NOTABLE or (ev[0] == "member" and ev[2] in ("failed", "recovered")):
                rec = {"t": time.monotonic_ns(), "what": [x if isinstance(x, (int, str)) else str(x) for x in ev]}
                self.notable.append(rec)
                emit(event="protocol", id=node.node_id, **rec)


def final_event(spec, node, role, events: ProtocolEvents = None, **more) -> dict:
    """The worker's last report: its role's results, the node's counters,
    its peak memory, its notable protocol events and, with GSGC, the
    extension's state."""
    if events is not None:
        events.poll(node)
    return {"event": "final", "id": node.node_id, "role": role, **more, "stats": final_stats(node),
            "rss_peak_kb": peak_rss_kb(),
            "protocol_events": events.notable if events is not None else [],
            "lost_ids": events.lost_ids if events is not None else 0,
            "gsgc": gsgc_state(node) if spec.get("gsgc") else None}
