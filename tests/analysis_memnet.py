"""A small rpbcast group on the in-memory network, for the analysis tests:
the function `run` is both a sweep simulation (params dict -> result dict)
and, given params["run_dir"], a writer of a real protocol trace
(docs/traces.md).  Self-contained (imports only rpbcast) so Spark executors
can import it from the single file."""
from __future__ import annotations

import collections
import tempfile


def run(params: dict) -> dict:
    from rpbcast.config import Config
    from rpbcast.drivers.memnet import NS, MemNet

    if params.get("fail"):
        raise ValueError("this configuration fails on purpose")
    n = int(params.get("nodes", 4))
    n_loggers = int(params.get("loggers", 1))
    n_senders = int(params.get("senders", 1))
    msgs = int(params.get("msgs", 100))
    loss = float(params.get("loss", 0.0))
    seed = int(params.get("seed", 1))
    run_dir = params.get("run_dir")
    ids = list(range(1, n + 1))
    loggers = ids[n - n_loggers:] if n_loggers else []
    members = [i for i in ids if i not in loggers]
    senders = members[:n_senders]
    tmp = tempfile.TemporaryDirectory(prefix="rpbcast-sweep-")
    try:
        net = MemNet(seed=seed, loss=loss)
        specs = MemNet.member_specs(ids, loggers=loggers)
        E = {}
        for i in ids:
            role = "logger" if i in loggers else "member"
            E[i] = net.add(Config(node_id=i, members=specs, role=role, incarnation=1, gossip_interval=0.05,
                                  log_dir=f"{tmp.name}/log{i}" if role == "logger" else None))
        writers = {}
        if run_dir:
            from rpbcast.analysis.tracefile import TraceWriter
            for i in ids:
                E[i].node.enable_trace(1 << 16)
                writers[i] = TraceWriter(run_dir, "memnet", i)
        got = collections.defaultdict(collections.Counter)
        left = {s: msgs for s in senders}

        def publish(net):
            more = False
            for s in senders:
                for _ in range(5):
                    if left[s] <= 0:
                        break
                    E[s].publish(b"m%d" % left[s], now=net.now)
                    left[s] -= 1
                more |= left[s] > 0
            if more:
                net.at(net.now + NS // 1000, publish)

        net.at(net.now + NS // 100, publish)

        def drain():
            for i in members:
                for d in E[i].recv(now=net.now):
                    got[i][(d.sender, d.inc, d.seq)] += 1
            for i, w in writers.items():
                w.add(E[i].node.take_trace())

        def done(net):
            drain()
            if any(left.values()):
                return False
            return all(sum(1 for k in got[i] if k[0] != i) == msgs * sum(1 for s in senders if s != i)
                       for i in members)

        complete = net.run_until_true(done, timeout=float(params.get("timeout", 30.0)))
        net.run(0.2)                # let late gossip settle, then record the last events
        drain()
        dup = sum(c - 1 for g in got.values() for c in g.values() if c > 1)
        res = {"complete": bool(complete), "delivered": sum(sum(g.values()) for g in got.values()),
               "expected": sum(msgs * sum(1 for s in senders if s != i) for i in members), "duplicates": dup,
               "gaps": sum(E[i].counters()["gaps"] for i in ids),
               "repairs_peer": sum(E[i].counters()["repairs_peer"] for i in ids),
               "repairs_logger": sum(E[i].counters()["repairs_logger"] for i in ids),
               "datagrams_dropped": net.dropped, "virtual_s": (net.now - NS) / NS}
        if run_dir:
            from rpbcast.analysis.tracefile import write_counters, write_run_json
            for i, w in writers.items():
                w.close()
                c = dict(E[i].counters())
                c["traffic"] = E[i].traffic()
                write_counters(run_dir, i, c)
            write_run_json(run_dir, {
                "run_id": "memnet", "kind": "sim", "protocol": "rpbcast", "clock": "virtual",
                "nodes": [{"id": i, "role": "logger" if i in loggers else "member", "addr": i} for i in ids],
                "senders": senders, "params": {k: v for k, v in params.items() if k != "run_dir"}})
        return res
    finally:
        tmp.cleanup()
