"""A running node's counters over its stats socket: where the socket is
(one per group and node under $RPBCAST_RUNTIME_DIR, default /tmp/rpbcast),
reading it, and the table `rpbcast stat` shows."""
from __future__ import annotations

import errno
import glob
import json
import os
import re
import socket
import sys

STATS_DIR = os.environ.get("RPBCAST_RUNTIME_DIR", "/tmp/rpbcast")

# (counter, how it is shown: its total, and per second between two reads)
RATE_KEYS = [("sent", "sent/s"), ("delivered", "delivered/s"), ("rx_new", "received/s"), ("gaps", "gaps/s"),
             ("repairs_peer", "repairs peer/s"), ("repairs_logger", "repairs logger/s"), ("served", "served/s"),
             ("rx_dup", "duplicates/s"), ("rx_bad", "malformed/s"), ("lost", "lost/s")]


def stats_path(group: int, node_id: int) -> str:
    return os.path.join(STATS_DIR, f"{group}-{node_id}.sock")


def path_group(path: str):
    m = re.match(r"(\d+)-(\d+)\.sock$", os.path.basename(path))
    return int(m.group(1)) if m else None


def read_stats(path: str) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    finally:
        s.close()
    return json.loads(b"".join(chunks))


def explain_unreachable(path: str, e: OSError) -> str:
    """Why a stats socket cannot be read, and what to do, in one line."""
    if isinstance(e, FileNotFoundError) or e.errno == errno.ENOENT:
        running = [os.path.basename(p)[:-5] for p in sorted(glob.glob(os.path.join(STATS_DIR, "*.sock")))]
        return (f"cannot read {path}: no such socket (is the node running with its stats socket?); "
                + (f"sockets here (group-node): {', '.join(running)}" if running else f"none in {STATS_DIR}"))
    if e.errno == errno.ECONNREFUSED:
        return (f"cannot read {path}: nobody listens on it -- a stale socket of a node that was killed "
                f"without closing (SIGKILL); the node is not running (starting it again replaces the file)")
    return f"cannot read {path}: {e.strerror or e} (is the node running with its stats socket?)"


def running_nodes():
    """[(path, stats or None, why not)] for every stats socket here."""
    out = []
    for p in sorted(glob.glob(os.path.join(STATS_DIR, "*.sock"))):
        try:
            out.append((p, read_stats(p), None))
        except OSError as e:
            out.append((p, None, explain_unreachable(p, e)))
    return out


def _heard(v) -> str:
    return "never heard from" if v is None else f"heard {v:.1f} s ago"


def render(st, prev, out=None):
    """The counters as a table (the screen cleared first on a terminal);
    rates against the previous read, if any."""
    out = out or sys.stdout
    lines = []
    if out.isatty():
        lines.append("\x1b[H\x1b[2J")
    lines.append(f"rpbcast node {st['node_id']} ({st['role']}, incarnation {st['incarnation']}) at {st['addr']}")
    dt = (st["time"] - prev["time"]) if prev else None
    lines.append(f"{'counter':<22}{'total':>16}{'rate':>16}")
    for key, label in RATE_KEYS:
        tot = st.get(key, 0)
        rate = f"{(tot - prev.get(key, 0)) / dt:,.0f}" if prev and dt else "-"
        lines.append(f"{label.split('/')[0]:<22}{tot:>16,}{rate:>16}")
    sb = st.get("send_buffer") or {}
    unacked = sb.get("unacked", st.get("unacked", 0))
    if st.get("role") != "logger":
        if not sb.get("confirmed", True):
            lines.append("unacknowledged: - (no logger: nothing acknowledges what this node publishes)")
        elif unacked:
            lines.append(f"unacknowledged: {unacked:,} published messages (seqs {sb.get('first')}..{sb.get('last')})"
                         + (f", waiting for {'; '.join(sb['waiting_for'])}" if sb.get("waiting_for") else ""))
        else:
            lines.append("unacknowledged: 0")
        if sb.get("stalled"):
            lines.append(f"STALLED: {sb['stalled']}")
    lines.append(f"lost: {st.get('lost', 0):,} ids given up (lost, purged or unwanted)")
    lines.append(f"store: {st['store_entries']:,} messages, {st['store_bytes'] / 1e6:.1f} MB; gossip buffer "
                 f"{st['gossip_buffer_entries']:,} messages; delivery queue {st.get('pending', '-')}")
    sock = st.get("sock", {})
    lines.append(f"socket: rx {sock.get('rx_dgrams', 0):,} datagrams in {sock.get('rx_calls', 0):,} calls, "
                 f"tx {sock.get('tx_dgrams', 0):,} in {sock.get('tx_calls', 0):,} (GSO {sock.get('gso')}), "
                 f"rcvbuf {sock.get('rcvbuf', 0):,}")
    if st.get("rx_reasons"):
        lines.append("malformed: " + ", ".join(f"{k} {v}" for k, v in st["rx_reasons"].items()))
    if "log_damaged_records" in st:       # a logger: damage its log's recovery or reads found
        lines.append(f"log: {st['log_damaged_records']:,} damaged records ({st['log_damaged_ids']:,} ids lost), "
                     f"{st['log_truncated_bytes']:,} torn-tail bytes cut, catch-up queued "
                     f"{st.get('catchup_pending', 0):,}")
    streams = st.get("streams") or []
    if streams:
        lines.append(f"{'sender/incarnation':<24}{'received':>12}{'next seq':>12}{'missing':>10}{'dups':>8}  last heard")
        for r in streams:
            lines.append(f"{str(r['sender']) + '/' + str(r['inc']):<24}{r['received']:>12,}{r['next']:>12,}"
                         f"{r['missing']:>10,}{r['duplicates']:>8,}  "
                         f"{_heard(r['last_heard_s'])}{' (dead incarnation)' if r.get('dead') else ''}")
    info = st.get("member_info")
    if info:
        lines.append(f"members: {len(info)}")
        for m in info:
            if m.get("self"):
                state = "this node"
            else:
                state = _heard(m["last_heard_s"])
            lines.append(f"  {m['id']:>6} {m['role']:<7} {m['status']:<13} {m['addr'] or '?':<22} {state}")
    else:
        lines.append(f"members: {len(st.get('members', []))}: " +
                     ", ".join(f"{m[0]}{'(L)' if m[3] == 1 else ''}" for m in st.get("members", [])))
    print("\n".join(lines), file=out, flush=True)
