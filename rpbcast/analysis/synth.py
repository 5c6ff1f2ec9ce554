"""Synthetic run directories: traces with a realistic event mix, for tests,
benchmarks and trying the analysis without a cluster of machines.

    python -m rpbcast.analysis.synth RUN_DIR --events 100e6 [--nodes 10 ...]

Model (one host clock): senders publish at a fixed rate each; every other
node receives each message after a one-way latency (40 us + exponential
25 us, 0.1 % with an extra 0.5-5 ms); a receiver misses a message with
probability ``loss``, detects the gap when the sender's next message arrives,
and gets the id repaired by a random peer (gossip) or, with probability
``logger_share``, by a logger after a gossip round or two; members deliver
every message 3 us after it arrives.  Nodes gossip every
``gossip_interval``.  The counters files hold matching ``traffic`` totals.
The events of each node are written time-ordered with
rpbcast.analysis.tracefile.TraceWriter, in chunks (bounded memory at any size).
"""
from __future__ import annotations

import argparse
import time
from typing import Dict, Iterator, Optional

import numpy as np

from rpbcast.analysis.tracefile import EVENT_CODES, TraceWriter, write_counters, write_run_json

COLS = ("t_ns", "event", "sender", "inc", "seq", "size", "peer", "aux")
DTYPES = {"t_ns": np.int64, "event": np.uint8, "sender": np.uint32, "inc": np.uint32, "seq": np.uint64,
          "size": np.uint32, "peer": np.uint64, "aux": np.uint32}
HDR = 24          # bytes of message header counted in the synthetic traffic
GOSSIP_BYTES = 96
RTX_BYTES = 44


class Params:
    def __init__(self, nodes=10, loggers=1, senders=4, msgs_per_sender=1000, rate=2000.0, size=256, loss=0.01,
                 logger_share=0.2, gossip_interval=0.1, inc=1, seed=1, chunk_msgs=100_000):
        self.nodes, self.loggers, self.senders = int(nodes), int(loggers), int(senders)
        self.msgs_per_sender, self.rate, self.size = int(msgs_per_sender), float(rate), int(size)
        self.loss, self.logger_share, self.gossip_interval = float(loss), float(logger_share), float(gossip_interval)
        self.inc, self.seed, self.chunk_msgs = int(inc), int(seed), int(chunk_msgs)
        self.ids = list(range(1, self.nodes + 1))
        self.logger_ids = self.ids[self.nodes - self.loggers:] if self.loggers else []
        self.member_ids = [i for i in self.ids if i not in self.logger_ids]
        self.sender_ids = self.member_ids[:self.senders]
        self.period = int(1e9 / self.rate)

    def events_per_message(self):
        n, m = self.nodes, len(self.member_ids)
        per = 1 + (n - 1) + (m - 1) + self.loss * (n - 1) * (2 + self.logger_share)
        msgs_per_s = len(self.sender_ids) * self.rate
        return per + 2 * n / (self.gossip_interval * msgs_per_s)

    def meta(self, run_id):
        return {"run_id": run_id, "kind": "sim", "protocol": "rpbcast", "clock": "virtual",
                "nodes": [{"id": i, "role": "logger" if i in self.logger_ids else "member", "addr": i}
                          for i in self.ids],
                "senders": self.sender_ids,
                "params": {"synthetic": True, "nodes": self.nodes, "loggers": self.loggers,
                           "senders": self.senders, "msgs_per_sender": self.msgs_per_sender, "rate": self.rate,
                           "size": self.size, "loss": self.loss, "logger_share": self.logger_share,
                           "gossip_interval": self.gossip_interval, "seed": self.seed}}


def _block(ev, t, sender, inc, seq, size, peer, aux):
    n = len(t)
    b = {"t_ns": np.asarray(t, np.int64), "event": np.full(n, EVENT_CODES[ev], np.uint8),
         "sender": np.broadcast_to(np.asarray(sender, np.uint32), n), "inc": np.full(n, inc, np.uint32),
         "seq": np.broadcast_to(np.asarray(seq, np.uint64), n), "size": np.broadcast_to(np.asarray(size, np.uint32), n),
         "peer": np.broadcast_to(np.asarray(peer, np.uint64), n), "aux": np.broadcast_to(np.asarray(aux, np.uint32), n)}
    return b


def _merge(blocks):
    blocks = [b for b in blocks if len(b["t_ns"])]
    if not blocks:
        return None
    d = {k: np.concatenate([b[k] for b in blocks]).astype(DTYPES[k], copy=False) for k in COLS}
    order = np.argsort(d["t_ns"], kind="stable")
    return {k: v[order] for k, v in d.items()}


def _traffic_add(tr, node, typ, mi=0, bi=0, mo=0, bo=0):
    t = tr.setdefault(node, {}).setdefault(typ, [0, 0, 0, 0])
    t[0] += int(mi)
    t[1] += int(bi)
    t[2] += int(mo)
    t[3] += int(bo)


def chunks(p: Params, traffic: Optional[dict] = None) -> Iterator[Dict[int, dict]]:
    """Yield {node: event columns} for successive ranges of message seqs."""
    rng = np.random.default_rng(p.seed)
    traffic = {} if traffic is None else traffic
    S = np.array(p.sender_ids, np.int64)
    offs = (np.arange(len(S)) * p.period) // max(1, len(S))
    t0 = 1_000_000_000
    gi = int(p.gossip_interval * 1e9)
    next_gossip = {i: t0 + int(rng.integers(0, max(1, gi))) for i in p.ids}
    per_chunk = max(1, p.chunk_msgs // max(1, len(S)))
    for i0 in range(0, p.msgs_per_sender, per_chunk):
        i1 = min(p.msgs_per_sender, i0 + per_chunk)
        seq = np.tile(np.arange(i0, i1, dtype=np.int64), len(S))
        snd = np.repeat(S, i1 - i0)
        ts = t0 + seq * p.period + np.repeat(offs, i1 - i0) + rng.integers(0, 2000, len(seq))
        blocks: Dict[int, list] = {i: [] for i in p.ids}
        for s in p.sender_ids:
            k = snd == s
            blocks[s].append(_block("send", ts[k], s, p.inc, seq[k], p.size, 0, 0))
            _traffic_add(traffic, s, "data", mo=k.sum(), bo=k.sum() * (p.size + HDR))
        for r in p.ids:
            k = snd != r
            ss, qq, tt = snd[k], seq[k], ts[k]
            n = len(tt)
            lat = 40_000 + rng.exponential(25_000, n).astype(np.int64)
            slow = rng.random(n) < 0.001
            lat[slow] += rng.integers(500_000, 5_000_000, int(slow.sum()))
            lost = rng.random(n) < p.loss
            t_recv = tt + lat
            aux = np.zeros(n, np.uint32)
            peer = ss.copy()
            nl = int(lost.sum())
            if nl:
                t_gap = t_recv[lost] + p.period
                use_logger = (rng.random(nl) < p.logger_share) if (p.logger_ids and r not in p.logger_ids) \
                    else np.zeros(nl, bool)
                others = [i for i in p.member_ids if i != r]
                server = np.array(others, np.int64)[rng.integers(0, len(others), nl)]
                if p.logger_ids:
                    server[use_logger] = np.array(p.logger_ids, np.int64)[rng.integers(0, len(p.logger_ids),
                                                                                       int(use_logger.sum()))]
                delay = np.where(use_logger, gi + rng.integers(0, 2 * gi, nl),
                                 rng.integers(0, gi, nl) + 2 * lat[lost])
                t_rep = t_gap + delay
                t_recv[lost] = t_rep
                aux[lost] = 1 | 2 | np.where(use_logger, 4, 0).astype(np.uint32)
                peer[lost] = server
                blocks[r].append(_block("gap", t_gap, ss[lost], p.inc, qq[lost], 1, 0, 0))
                if use_logger.any():
                    ul = use_logger
                    blocks[r].append(_block("rtx_req", t_gap[ul] + gi, 0, 0, 0, 1, server[ul], 1))
                    _traffic_add(traffic, r, "rtx", mo=ul.sum(), bo=ul.sum() * RTX_BYTES)
                for srv in np.unique(server):
                    ks = server == srv
                    is_l = int(srv) in p.logger_ids
                    blocks[int(srv)].append(_block("rtx_served", t_rep[ks] - 30_000, ss[lost][ks], p.inc,
                                                   qq[lost][ks], p.size, r, 1 if is_l else 0))
                    _traffic_add(traffic, int(srv), "repair", mo=ks.sum(), bo=ks.sum() * (p.size + HDR))
                    if is_l:
                        _traffic_add(traffic, int(srv), "rtx", mi=ks.sum(), bi=ks.sum() * RTX_BYTES)
                _traffic_add(traffic, r, "repair", mi=nl, bi=nl * (p.size + HDR))
            _traffic_add(traffic, r, "data", mi=n - nl, bi=(n - nl) * (p.size + HDR))
            blocks[r].append(_block("recv", t_recv, ss, p.inc, qq, p.size, peer, aux))
            if r in p.member_ids:
                blocks[r].append(_block("deliver", t_recv + 3_000, ss, p.inc, qq, p.size, 0, 0))
        # gossip up to the end of this chunk's sends
        t_end = int(ts.max()) if len(ts) else t0
        for g in p.ids:
            tg = []
            while next_gossip[g] <= t_end:
                tg.append(next_gossip[g])
                next_gossip[g] += gi + int(rng.integers(-gi // 10, gi // 10 + 1))
            if not tg:
                continue
            tg = np.array(tg, np.int64)
            others = [i for i in p.ids if i != g]
            tgt = np.array(others, np.int64)[rng.integers(0, len(others), len(tg))]
            blocks[g].append(_block("gossip_out", tg, 0, 0, 0, GOSSIP_BYTES, tgt, 0))
            _traffic_add(traffic, g, "gossip", mo=len(tg), bo=len(tg) * GOSSIP_BYTES)
            for x in np.unique(tgt):
                kx = tgt == x
                blocks[int(x)].append(_block("gossip_in", tg[kx] + 50_000, 0, 0, 0, GOSSIP_BYTES, g, 0))
                _traffic_add(traffic, int(x), "gossip", mi=kx.sum(), bi=kx.sum() * GOSSIP_BYTES)
        yield {i: _merge(b) for i, b in blocks.items()}


def counters_from(traffic):
    return {n: {"traffic": {k: list(v) for k, v in t.items()}, "trace_dropped": 0} for n, t in traffic.items()}


def generate(p: Params):
    """The whole run in memory: (meta, {node: columns}, {node: counters})."""
    traffic = {}
    per = {i: [] for i in p.ids}
    for ch in chunks(p, traffic):
        for i, c in ch.items():
            if c is not None:
                per[i].append(c)
    cols = {i: ({k: np.concatenate([c[k] for c in v]) for k in COLS} if v else None) for i, v in per.items()}
    return p.meta("synth"), cols, counters_from(traffic)


def write(run_dir, meta, cols_by_node, counters, rows_per_group=1 << 20):
    """Write a run directory from in-memory columns (tests edit them first)."""
    write_run_json(run_dir, meta)
    for n, c in cols_by_node.items():
        w = TraceWriter(run_dir, meta["run_id"], n, rows_per_group=rows_per_group)
        w.add(c)
        w.close()
    for n, c in counters.items():
        write_counters(run_dir, n, c)


def generate_to(run_dir, p: Params, run_id="synth", rows_per_group=1 << 20, progress=None):
    """Stream a run straight to disk; returns the number of events written."""
    traffic = {}
    writers = {i: TraceWriter(run_dir, run_id, i, rows_per_group=rows_per_group) for i in p.ids}
    total = 0
    for ch in chunks(p, traffic):
        for i, c in ch.items():
            if c is not None:
                writers[i].add(c)
                total += len(c["t_ns"])
        if progress:
            progress(total)
    for w in writers.values():
        w.close()
    write_run_json(run_dir, p.meta(run_id))
    for n, c in counters_from(traffic).items():
        write_counters(run_dir, n, c)
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rpbcast.analysis.synth", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--events", type=float, help="about this many events (sets --msgs-per-sender)")
    ap.add_argument("--msgs-per-sender", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--loggers", type=int, default=1)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--rate", type=float, default=2000.0, help="messages/s per sender")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--logger-share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-id", default="synth")
    a = ap.parse_args(argv)
    p = Params(nodes=a.nodes, loggers=a.loggers, senders=a.senders, msgs_per_sender=a.msgs_per_sender,
               rate=a.rate, size=a.size, loss=a.loss, logger_share=a.logger_share, seed=a.seed)
    if a.events:
        p.msgs_per_sender = max(1, int(a.events / p.events_per_message() / len(p.sender_ids)))
    t = time.perf_counter()
    last = [0.0]

    def prog(n):
        if time.perf_counter() - last[0] > 10:
            last[0] = time.perf_counter()
            print(f"  {n:,} events, {time.perf_counter() - t:.0f} s", flush=True)

    n = generate_to(a.run_dir, p, a.run_id, progress=prog)
    dt = time.perf_counter() - t
    print(f"wrote {n:,} events ({p.msgs_per_sender * len(p.sender_ids):,} messages) to {a.run_dir} "
          f"in {dt:.1f} s ({n / dt:,.0f} events/s)")


if __name__ == "__main__":
    main()
