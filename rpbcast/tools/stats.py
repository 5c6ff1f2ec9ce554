"""A running node's counters over its stats socket: where the socket is
(one per group and node under $RPBCAST_RUNTIME_DIR, default /tmp/rpbcast),
reading it, and the table `rpbcast stat` shows."""
from __future__ import annotations

import json
import os
import socket
import sys

STATS_DIR = os.environ.get("RPBCAST_RUNTIME_DIR", "/tmp/rpbcast")

# (counter, how it is shown: its total, and per second between two reads)
RATE_KEYS = [("sent", "sent/s"), ("delivered", "delivered/s"), ("rx_new", "received/s"), ("gaps", "gaps/s"),
             ("repairs_peer", "repairs peer/s"), ("repairs_logger", "repairs logger/s"), ("served", "served/s"),
             ("rx_dup", "duplicates/s"), ("rx_bad", "malformed/s")]


def stats_path(group: int, node_id: int) -> str:
    return os.path.join(STATS_DIR, f"{group}-{node_id}.sock")


def read_stats(path: str) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(path)
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            break
        chunks.append(b)
    s.close()
    return json.loads(b"".join(chunks))


def render(st, prev):
    """The counters as a table on stdout (the screen cleared first on a
    terminal); rates against the previous read, if any."""
    out = []
    if sys.stdout.isatty():
        out.append("\x1b[H\x1b[2J")
    out.append(f"rpbcast node {st['node_id']} ({st['role']}, incarnation {st['incarnation']}) at {st['addr']}")
    dt = (st["time"] - prev["time"]) if prev else None
    out.append(f"{'counter':<22}{'total':>16}{'rate':>16}")
    for key, label in RATE_KEYS:
        tot = st.get(key, 0)
        rate = f"{(tot - prev.get(key, 0)) / dt:,.0f}" if prev and dt else "-"
        out.append(f"{label.split('/')[0]:<22}{tot:>16,}{rate:>16}")
    out.append(f"store: {st['store_entries']:,} messages, {st['store_bytes'] / 1e6:.1f} MB; gossip buffer "
               f"{st['gossip_buffer_entries']:,} messages; delivery queue {st.get('pending', '-')}")
    sock = st.get("sock", {})
    out.append(f"socket: rx {sock.get('rx_dgrams', 0):,} datagrams in {sock.get('rx_calls', 0):,} calls, "
               f"tx {sock.get('tx_dgrams', 0):,} in {sock.get('tx_calls', 0):,} (GSO {sock.get('gso')}), "
               f"rcvbuf {sock.get('rcvbuf', 0):,}")
    if st.get("rx_reasons"):
        out.append("malformed: " + ", ".join(f"{k} {v}" for k, v in st["rx_reasons"].items()))
    if "log_damaged_records" in st:       # a logger: damage its log's recovery or reads found
        out.append(f"log: {st['log_damaged_records']:,} damaged records ({st['log_damaged_ids']:,} ids lost), "
                   f"{st['log_truncated_bytes']:,} torn-tail bytes cut, catch-up queued "
                   f"{st.get('catchup_pending', 0):,}")
    out.append(f"members: {len(st.get('members', []))}: " +
               ", ".join(f"{m[0]}{'(L)' if m[3] == 1 else ''}" for m in st.get("members", [])))
    print("\n".join(out), flush=True)
