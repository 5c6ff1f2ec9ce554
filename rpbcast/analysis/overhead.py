"""Protocol overhead per data byte, by message type (thesis Figs. 7-6 and
7-7 from real runs), from the nodes' ``traffic`` counters
(counters/node=<id>.json: {type: [msgs_in, bytes_in, msgs_out, bytes_out]}).

For each message type: bytes and messages sent by all nodes together, per
byte (and per message) of application data published (the sum of ``send``
sizes in the trace; the ``data`` type's bytes out if the trace has none).
``non_repair`` is the thesis's §7.4 measure: everything except first
transmissions (data), repairs and padding.
"""
from __future__ import annotations

from typing import Dict, List, Optional

NOT_OVERHEAD = ("data", "repair", "pad")


def traffic_totals(counters: Dict[int, dict]) -> Dict[str, List[int]]:
    """{type: [msgs_in, bytes_in, msgs_out, bytes_out]} summed over nodes."""
    tot: Dict[str, List[int]] = {}
    for c in counters.values():
        for typ, v in (c.get("traffic") or {}).items():
            t = tot.setdefault(typ, [0, 0, 0, 0])
            for i in range(4):
                t[i] += int(v[i])
    return tot


def per_type(counters: Dict[int, dict], data_bytes: Optional[int], data_msgs: Optional[int]) -> List[dict]:
    """Rows: type, msgs_out, bytes_out, msgs_in, bytes_in, bytes_per_data_byte,
    msgs_per_data_msg, overhead (bool: counted in non_repair)."""
    tot = traffic_totals(counters)
    if not data_bytes:
        data_bytes = tot.get("data", [0, 0, 0, 0])[3]
    if not data_msgs:
        data_msgs = tot.get("data", [0, 0, 0, 0])[2]
    rows = []
    for typ in sorted(tot):
        mi, bi, mo, bo = tot[typ]
        rows.append({"type": typ, "msgs_out": mo, "bytes_out": bo, "msgs_in": mi, "bytes_in": bi,
                     "bytes_per_data_byte": bo / data_bytes if data_bytes else None,
                     "msgs_per_data_msg": mo / data_msgs if data_msgs else None,
                     "overhead": typ not in NOT_OVERHEAD})
    ov = [r for r in rows if r["overhead"]]
    bo = sum(r["bytes_out"] for r in ov)
    mo = sum(r["msgs_out"] for r in ov)
    rows.append({"type": "non_repair", "msgs_out": mo, "bytes_out": bo,
                 "msgs_in": sum(r["msgs_in"] for r in ov), "bytes_in": sum(r["bytes_in"] for r in ov),
                 "bytes_per_data_byte": bo / data_bytes if data_bytes else None,
                 "msgs_per_data_msg": mo / data_msgs if data_msgs else None, "overhead": True})
    return rows
