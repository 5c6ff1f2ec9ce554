"""Retransmission load per node and the share served by loggers (thesis
Fig. 7-2 from real runs), and the per-node event counts.

One aggregation over all events: (node, event, detail) -> events, sum(size),
where detail is the part of ``aux`` that matters (recv: repair and
from-logger bits; rtx_served / gcnote / heartbeat: aux).  The small result is
turned into the per-node table in Python.
"""
from __future__ import annotations

from typing import Dict, List, Optional


def event_counts(ev):
    """Arrow table: node, event, detail, events, size_sum (one Spark job)."""
    from pyspark.sql import functions as F
    e, aux = F.col("event"), F.col("aux")
    detail = (F.when(e.isin("recv", "recv_dup"), aux.bitwiseAND(6))
              .when(e.isin("rtx_served", "gcnote", "heartbeat", "lost"), aux).otherwise(F.lit(0)))
    return (ev.groupBy("node", "event", detail.alias("detail"))
            .agg(F.count(F.lit(1)).alias("events"), F.sum(F.col("size").cast("long")).alias("size_sum"),
                 F.min("t_ns").alias("t_min"), F.max("t_ns").alias("t_max"))
            .orderBy("node", "event", "detail").toArrow())


FIELDS = ["node", "role", "source", "events", "sent", "delivered", "recv", "recv_dup", "gap_ids",
          "rtx_served", "rtx_served_bytes", "served_as_logger", "repairs_in_peer", "repairs_in_logger",
          "rtx_req", "rtx_req_ids", "gossip_out", "gossip_out_bytes", "gossip_in", "gossip_in_bytes",
          "gcnote_out", "gcnote_in", "heartbeat_out", "heartbeat_in", "member", "purge", "lost_ids"]


def from_counters(node: int, role: str, c: Optional[dict]) -> dict:
    """A node that wrote no trace (a logger run without one, a process that
    died before writing): its row from its final counters
    (counters/node=<id>.json) where they say the same thing, so it is still
    in the tables.  source = "counters" ("none" without counters either)."""
    d = {f: 0 for f in FIELDS} | {"node": node, "role": role, "source": "none"}
    if not c:
        return d
    tr = c.get("traffic") or {}

    def t(typ, i):                      # traffic: [msgs_in, bytes_in, msgs_out, bytes_out]
        v = tr.get(typ)
        return int(v[i]) if v else 0

    served = int(c.get("served", 0))
    d.update(source="counters", sent=int(c.get("sent", 0)), delivered=int(c.get("delivered", 0)),
             recv=int(c.get("rx_new", 0)) + int(c.get("rx_fill", 0)), recv_dup=int(c.get("rx_dup", 0)),
             gap_ids=int(c.get("gap_ids", 0)), rtx_served=served, rtx_served_bytes=t("repair", 3),
             served_as_logger=served if role == "logger" else 0,
             repairs_in_peer=int(c.get("repairs_peer", 0)), repairs_in_logger=int(c.get("repairs_logger", 0)),
             rtx_req=t("rtx", 2), gossip_out=t("gossip", 2), gossip_out_bytes=t("gossip", 3),
             gossip_in=t("gossip", 0), gossip_in_bytes=t("gossip", 1), gcnote_out=t("gcnote", 2),
             gcnote_in=t("gcnote", 0), heartbeat_out=t("heartbeat", 2), heartbeat_in=t("heartbeat", 0),
             purge=int(c.get("purged", 0)), lost_ids=int(c.get("forgotten", 0)))
    return d


def per_node(counts, roles: Dict[int, str], counters: Optional[Dict[int, dict]] = None) -> List[dict]:
    """Per-node rows (FIELDS) from event_counts() and run.json roles; every
    node run.json names has a row -- one without events from its counters."""
    rows: Dict[int, dict] = {}
    for r in counts.to_pylist():
        n = int(r["node"])
        d = rows.setdefault(n, {f: 0 for f in FIELDS} | {"node": n, "role": roles.get(n, "?"), "source": "trace"})
        ev, det, k, sz = r["event"], int(r["detail"] or 0), int(r["events"]), int(r["size_sum"] or 0)
        d["events"] += k
        if ev == "send":
            d["sent"] += k
        elif ev == "deliver":
            d["delivered"] += k
        elif ev == "recv":
            d["recv"] += k
            if det & 2:
                d["repairs_in_logger" if det & 4 else "repairs_in_peer"] += k
        elif ev == "recv_dup":
            d["recv_dup"] += k
        elif ev == "gap":
            d["gap_ids"] += sz
        elif ev == "rtx_served":
            d["rtx_served"] += k
            d["rtx_served_bytes"] += sz
            if det == 1:
                d["served_as_logger"] += k
        elif ev == "rtx_req":
            d["rtx_req"] += k
            d["rtx_req_ids"] += sz
        elif ev in ("gossip_out", "gossip_in"):
            d[ev] += k
            d[ev + "_bytes"] += sz
        elif ev == "gcnote":
            d["gcnote_in" if det else "gcnote_out"] += k
        elif ev == "heartbeat":
            d["heartbeat_in" if det else "heartbeat_out"] += k
        elif ev == "member":
            d["member"] += k
        elif ev == "purge":
            d["purge"] += k
        elif ev == "lost":
            d["lost_ids"] += sz
    for n, role in roles.items():
        if n not in rows:
            rows[n] = from_counters(n, role, (counters or {}).get(n))
    return [rows[n] for n in sorted(rows)]


def shares(nodes: List[dict]) -> dict:
    """Retransmission totals and the logger shares.

    served_by_logger_role: share of rtx_served recorded at logger-role nodes;
    served_as_logger: share of rtx_served flagged aux=1 (served as a logger);
    received_from_logger: share of repairs received (recv with the repair
    bit) that came from a logger (the receivers' view)."""
    total = sum(d["rtx_served"] for d in nodes)
    at_loggers = sum(d["rtx_served"] for d in nodes if d["role"] == "logger")
    flagged = sum(d["served_as_logger"] for d in nodes)
    rin_l = sum(d["repairs_in_logger"] for d in nodes)
    rin = rin_l + sum(d["repairs_in_peer"] for d in nodes)
    busiest = max(nodes, key=lambda d: d["rtx_served"], default=None)
    members = [d["rtx_served"] for d in nodes if d["role"] != "logger"]
    return {
        "rtx_served": total,
        "served_by_logger_role": at_loggers / total if total else 0.0,
        "served_as_logger": flagged / total if total else 0.0,
        "repairs_received": rin,
        "received_from_logger": rin_l / rin if rin else 0.0,
        "busiest_node": busiest["node"] if busiest and total else None,
        "busiest_share": busiest["rtx_served"] / total if busiest and total else 0.0,
        "member_max_over_mean": (max(members) / (sum(members) / len(members))
                                 if members and sum(members) else 0.0),
    }
