"""A run's results from its records: deliveries against what was published,
latencies, the engines' counters and traffic, the network's statistics and
the hashes that identify a run (docs/simulator.md, "Results").

Each function computes one group of result keys; Simulation.results (run.py)
puts them together in the order of the table in docs/simulator.md.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Dict, List

import numpy as np

from rpbcast.sim.topology import NS


# ---------------------------------------------------------------------- deliveries
@dataclass
class Published:
    """Every published message by id: a sender's messages are consecutive ids
    from base[sender], seq order."""
    M: int                      # messages
    t: np.ndarray               # publish time by id
    sender: np.ndarray          # sender by id
    base: np.ndarray            # per node: first id, -1 if it sent nothing
    count: np.ndarray           # per node: messages
    inc: np.ndarray             # per node: incarnation it sent in


def published(pub, n1: int) -> Published:
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
    base_arr = np.full(n1, -1, np.int64)
    cnt_arr = np.zeros(n1, np.int64)
    inc_arr = np.full(n1, -1, np.int64)
    for s in senders:
        base_arr[s] = base[s]
        cnt_arr[s] = pub.published[s]
        inc_arr[s] = pub.inc[s]
    return Published(M, pub_t, sender_of, base_arr, cnt_arr, inc_arr)


@dataclass
class Tally:
    """Deliveries over every receiver against the published messages."""
    delivered: int
    missing: int
    duplicates: int
    extras: int
    lat: np.ndarray             # publish to first receipt, per (receiver, message)
    first_all: np.ndarray       # by id: the latest first receipt over receivers
    got_by: np.ndarray          # by id: receivers that got it
    per_node: Dict[int, dict]   # receiver -> delivered, missing, duplicates
    hashes: Dict[int, bytes]    # receiver -> hash of its delivery sequence


def tally(records_of, receivers: List[int], pm: Published) -> Tally:
    """records_of(v) -> (senders, incs, seqs, rx_times) of receiver v, in delivery order."""
    t = Tally(0, 0, 0, 0, None, np.zeros(max(pm.M, 1), np.int64), np.zeros(max(pm.M, 1), np.int64), {}, {})
    lat_parts = []
    for v in receivers:
        snd, inc, seq, rxt = records_of(v)
        # the node's delivery sequence: (sender, inc, seq) records in order
        t.hashes[v] = hashlib.blake2b(np.stack((snd, inc, seq), axis=1).tobytes(), digest_size=16).digest()
        ids, rx, extras = _message_ids(v, snd, inc, seq, rxt, pm)
        t.extras += extras
        c = np.bincount(ids, minlength=pm.M) if pm.M else np.zeros(0, np.int64)
        dup = int(np.maximum(c - 1, 0).sum())
        t.duplicates += dup
        want = pm.sender[:pm.M] != v
        miss = int(((c == 0) & want).sum())
        t.missing += miss
        t.delivered += int((c > 0).sum())
        if len(ids):
            fid, ft = _first_receipts(ids, rx, dup)
            lat_parts.append(ft - pm.t[fid])
            t.first_all[fid] = np.maximum(t.first_all[fid], ft)
            t.got_by[fid] += 1
        t.per_node[v] = {"delivered": int((c > 0).sum()), "missing": miss, "duplicates": dup}
    t.lat = np.concatenate(lat_parts) if lat_parts else np.zeros(0, np.int64)
    return t


def _message_ids(v, snd, inc, seq, rxt, pm: Published):
    """Ids and receipt times of v's deliveries of published messages (not
    its own), and how many deliveries were of anything else."""
    n1 = len(pm.base)
    sc = np.clip(snd, 0, n1 - 1)
    valid = (snd < n1) & (pm.base[sc] >= 0) & (inc == pm.inc[sc]) & (seq >= 0) & (seq < pm.count[sc])
    valid &= snd != v
    return pm.base[sc[valid]] + seq[valid], rxt[valid], int((~valid).sum())


def _first_receipts(ids, t, duplicates):
    """(id, time) of the first receipt of each id."""
    if not duplicates:
        return ids, t
    order = np.lexsort((t, ids))
    ids_s, t_s = ids[order], t[order]
    firsts = np.ones(len(ids_s), bool)
    firsts[1:] = ids_s[1:] != ids_s[:-1]
    return ids_s[firsts], t_s[firsts]


def everywhere(t: Tally, receivers: List[int], pm: Published) -> np.ndarray:
    """By id: the message reached every receiver but its sender."""
    recv_set = set(receivers)
    need = len(recv_set) - np.isin(pm.sender[:pm.M], list(recv_set)).astype(np.int64)
    return (t.got_by[:pm.M] == need) & (need > 0)


def latency_results(t: Tally, reached: np.ndarray, pm: Published) -> dict:
    """lat_*: publish to first receipt; lat_all_*: publish until every
    receiver had it, over the messages that reached everyone."""
    lat = t.lat
    lat_all = (t.first_all[:pm.M] - pm.t[:pm.M])[reached]
    lat_q = _quantiles(lat, [50, 90, 99])
    lat_all_q = _quantiles(lat_all, [99])
    return {
        "lat_mean": float(lat.mean()) / NS if len(lat) else None,
        "lat_p50": lat_q[0], "lat_p90": lat_q[1], "lat_p99": lat_q[2],
        "lat_max": float(lat.max()) / NS if len(lat) else None,
        "lat_all_mean": float(lat_all.mean()) / NS if len(lat_all) else None,
        "lat_all_std": float(lat_all.std()) / NS if len(lat_all) else None,
        "lat_all_p99": lat_all_q[0],
        "lat_all_max": float(lat_all.max()) / NS if len(lat_all) else None,
        "msgs_everywhere": int(reached.sum()),
    }


def _quantiles(a, qs):
    if not len(a):
        return [None] * len(qs)
    return [float(x) / NS for x in np.percentile(a, qs)]


# ---------------------------------------------------------------------- engines
@dataclass
class EngineTotals:
    per_node: Dict[int, dict]   # node -> the engine's counters
    total: Dict[str, int]       # integer counters summed over engines
    traffic: Dict[str, list]    # message type -> [messages, bytes] sent

    def of(self, key, nodes) -> int:
        return sum(int(self.per_node[v].get(key, 0)) for v in nodes)


def engine_totals(engines: Dict[int, object]) -> EngineTotals:
    e_tot = EngineTotals({}, {}, {})
    for v, e in sorted(engines.items()):
        c = e.counters()
        e_tot.per_node[v] = c
        for k, x in c.items():
            if isinstance(x, (int, np.integer)):
                e_tot.total[k] = e_tot.total.get(k, 0) + int(x)
        for typ, (mi, bi, mo, bo) in e.traffic().items():
            a = e_tot.traffic.setdefault(typ, [0, 0])
            a[0] += int(mo)
            a[1] += int(bo)
    return e_tot


def repair_results(et: EngineTotals, members, receivers, loggers) -> dict:
    """Repairs received and served, gaps, the repair-rate limit (engine counters)."""
    served = {v: int(et.per_node[v].get("served", 0)) for v in members}
    member_served = [served[v] for v in receivers] or [0]
    return {
        "repairs_peer": et.of("repairs_peer", receivers),
        "repairs_logger": et.of("repairs_logger", receivers),
        "gaps": et.of("gaps", receivers), "gap_ids": et.of("gap_ids", receivers),
        "served_total": sum(served.values()),
        "served_by_loggers": sum(served[v] for v in loggers),
        "served_max_member": int(max(member_served)),
        "served_mean_member": float(np.mean(member_served)),
        "serve_limited": int(et.total.get("serve_limited", 0)),
        "to_logger_ids": et.of("to_logger_ids", receivers),
    }


def traffic_results(traffic: Dict[str, list]) -> dict:
    """Bytes and messages the engines sent: overhead (every type but DATA,
    REPAIR and PAD), data, repairs."""
    overhead = [t for t in traffic if t not in ("data", "repair", "pad")]
    return {
        "overhead_bytes": int(sum(traffic[t][1] for t in overhead)),
        "overhead_msgs": int(sum(traffic[t][0] for t in overhead)),
        "data_bytes": int(traffic.get("data", [0, 0])[1]),
        "repair_bytes": int(traffic.get("repair", [0, 0])[1]),
        "repair_msgs": int(traffic.get("repair", [0, 0])[0]),
    }


def traffic_by_type(traffic: Dict[str, list]) -> dict:
    out = {}
    for typ, (m, b) in sorted(traffic.items()):
        out[f"msgs_{typ}"] = m
        out[f"bytes_{typ}"] = b
    return out


# ---------------------------------------------------------------------- network
def network_results(ls: dict, ns: dict) -> dict:
    """Link traffic, queue drops, losses and queue lengths."""
    def top(k, cast, empty):
        return cast(ls[k].max()) if len(ls[k]) else empty
    return {
        "link_pkts": int(ls["pkts"].sum()), "link_bytes": int(ls["bytes"].sum()),
        "link_bytes_max": top("bytes", int, 0),
        "link_data_pkts": int(ls["data_pkts"].sum()), "link_repair_pkts": int(ls["repair_pkts"].sum()),
        "link_control_pkts": int(ls["control_pkts"].sum()),
        "queue_drops": int(ls["drops"].sum()), "queue_drops_data": int(ls["data_drops"].sum()),
        "queue_drops_repair": int(ls["repair_drops"].sum()),
        "queue_drops_control": int(ls["control_drops"].sum()), "link_lost": int(ls["lost"].sum()),
        "rx_lost": int(ns["rx_lost"].sum()),
        "max_queue": top("max_queue", int, 0),
        "avg_queue_mean": float(ls["avg_queue"].mean()) if len(ls["avg_queue"]) else 0.0,
        "avg_queue_max": top("avg_queue", float, 0.0),
        "util_max": top("utilisation", float, 0.0),
    }


def loop_results(cc: dict) -> dict:
    """The event loop's counters."""
    return {"events": int(cc["events"]), "fast_rx": int(cc["fast_rx"]), "slow_rx": int(cc["slow_rx"]),
            "control_rx": int(cc["control_rx"]), "timers": int(cc["timers"]),
            "unroutable": int(cc["unroutable"]), "max_heap": int(cc["max_heap"])}


# ---------------------------------------------------------------------- hashes
def delivery_hash(hashes: Dict[int, bytes]) -> str:
    """Every receiver's delivery sequence, receivers in order."""
    h = hashlib.blake2b(digest_size=16)
    for v in sorted(hashes):
        h.update(v.to_bytes(4, "little"))
        h.update(hashes[v])
    return h.hexdigest()


def state_hash(delivery: str, per_counters: Dict[int, dict], ls: dict, ns: dict, now: int) -> str:
    """The deliveries, every engine counter, every link and node statistic and the end time."""
    h = hashlib.blake2b(digest_size=16)
    h.update(delivery.encode())
    h.update(json.dumps({str(v): {k: int(x) for k, x in sorted(c.items()) if isinstance(x, (int, np.integer))}
                         for v, c in sorted(per_counters.items())}, sort_keys=True).encode())
    for k in sorted(ls):
        h.update(k.encode())
        h.update(np.ascontiguousarray(ls[k]).tobytes())
    for k in sorted(ns):
        h.update(k.encode())
        h.update(np.ascontiguousarray(ns[k]).tobytes())
    h.update(int(now).to_bytes(8, "little", signed=True))
    return h.hexdigest()


# ---------------------------------------------------------------------- tables
def link_table(s: dict) -> List[dict]:
    """One row per directed link from Network.link_stats: a, b and every statistic."""
    keys = list(s)
    return [{k: (s[k][i].item() if hasattr(s[k][i], "item") else s[k][i]) for k in keys}
            for i in range(len(s["a"]))]


def node_table(s: dict, members, loggers, senders, engines) -> List[dict]:
    """One row per member from Network.node_stats: network statistics and engine counters."""
    rows = []
    for v in members:
        r = {"node": v, "role": "logger" if v in loggers else "member", "sender": v in senders}
        r.update({k: int(s[k][v]) for k in s})
        c = engines[v].counters()
        r.update({f"engine_{k}": x for k, x in c.items() if isinstance(x, (int, float, np.integer))})
        rows.append(r)
    return rows
