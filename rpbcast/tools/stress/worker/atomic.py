"""`rpbcast stress --atomic`: the worker's atomic mode and its check.

Senders publish atomic messages (``Node.publish_atomic``, a few in flight
per sender: --atomic-window) for the run's duration, paced by --rate if
given, and report every outcome: committed or aborted with its reason, the
commit latency, and for a committed proposal the members left out of its
snapshot (booted ones).  Receivers take committed messages
(``Node.receive_atomic``) and append each id to a file before anything else
(so a receiver killed and restarted still knows what its first life got);
the run's expectation tells each receiver which proposals it must deliver
(the committed ones whose snapshot holds it), and it says "complete" once it
has them.

The check (``summarize``): all or none -- every committed proposal delivered
exactly once by every live receiver of its snapshot, no aborted one by
anyone, nothing twice.  A receiver killed between handing a message over
(the journal's delivered/ has it) and writing it down cannot tell it got it:
those are reported as in flight at the kill, not as missing.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rpbcast.tools.stress.tally import LAT_BINS, lat_bin
from rpbcast.tools.stress.worker.channel import emit
from rpbcast.tools.stress.worker.node import buffers, final_event, make_config

REPORT_EVERY_NS = 250_000_000


def atomic_config(spec):
    """The worker's node configuration with atomic delivery on: its journal
    under the run's work directory, kept across a kill and restart."""
    a = spec["atomic"]
    return make_config(spec).replace(atomic=True, state_dir=a["state_dir"], atomic_votes=a["votes"],
                                     atomic_timeout=a["timeout"])


# ---------------------------------------------------------------------- sender
def run_atomic_sender(spec, cmds, tw_factory):
    from rpbcast.api import Node
    node = Node(atomic_config(spec))
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr)
    start = _wait_for_start(cmds)
    if start is not None:
        while time.monotonic_ns() < start:
            time.sleep(0.0005)
        outcomes = _propose_for(node, spec)
        emit(event="sent", id=node.node_id, inc=node.incarnation, count=0, blocked=0,
             seconds=spec["duration"], latest=None, atomic=outcomes)
        while cmds.get()["cmd"] != "stop":
            pass
    emit(**final_event(spec, node, "sender", atomic_state=node.atomic_state()))
    return node


def _wait_for_start(cmds):
    while True:
        c = cmds.get()
        if c["cmd"] == "start":
            return c["at"]
        if c["cmd"] == "stop":
            return None


def _propose_for(node, spec):
    """Publish atomically for the run's duration, `window` at a time; every
    outcome, keyed by seq."""
    a = spec["atomic"]
    size, rate, window = max(spec["size"], 8), spec["rate"], a["window"]
    end = time.monotonic_ns() + int(spec["duration"] * 1e9)
    committed, aborted, latency, excluded = [], [], [], {}
    lock = threading.Lock()
    members = {m["node_id"] for m in spec["config"]["members"] if m.get("role", "member") != "logger"}
    members.discard(node.node_id)
    sent = [0]

    def one(k):
        payload = bytearray(size)
        payload[:8] = time.monotonic_ns().to_bytes(8, "little")
        o = node.publish_atomic(bytes(payload))
        with lock:
            if o.committed:
                committed.append(o.seq)
                latency.append(o.latency)
                left = _left_out(node, o.seq, members)
                if left:
                    excluded[str(o.seq)] = left
            else:
                aborted.append([o.seq, o.reason])

    t0 = time.monotonic_ns()
    with ThreadPoolExecutor(window) as pool:
        pending = set()
        k = 0
        next_report = t0
        while time.monotonic_ns() < end:
            if rate and k >= (time.monotonic_ns() - t0) * rate / 1e9:
                time.sleep(0.0005)
                continue
            while len(pending) >= window:
                done = next(iter(pending))
                done.result()
                pending = {f for f in pending if not f.done()}
            pending.add(pool.submit(one, k))
            k += 1
            sent[0] = k
            now = time.monotonic_ns()
            if now >= next_report:
                emit(event="progress", id=node.node_id, sent=k, buffers=buffers(node))
                next_report = now + REPORT_EVERY_NS
        for f in pending:
            f.result()
    return {"committed": sorted(committed), "aborted": sorted(aborted), "latency": sorted(latency),
            "excluded": excluded}


def _left_out(node, seq, members):
    """The members a committed proposal's snapshot did not hold (booted)."""
    snap = node.atomic_snapshot(seq)
    return sorted(members - set(snap)) if snap is not None else []


# ---------------------------------------------------------------------- receiver
def run_atomic_receiver(spec, cmds, tw_factory):
    from rpbcast.api import Node
    path = os.path.join(spec["atomic"]["state_dir"], "delivered.txt")
    got = _load(path)
    first_life = len(got)
    node = Node(atomic_config(spec))
    st = node.atomic_state()
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr, resumed=first_life,
         recovered_pending=st.get("recovered_pending", 0))
    hist = np.zeros(len(LAT_BINS) + 1, np.int64)
    expect = None
    completed = False
    stop = False
    next_report = 0
    with open(path, "a") as f:
        while not stop:
            m = node.receive_atomic(timeout=0.02)
            now = time.monotonic_ns()
            if m is not None:
                key = (m.sender, m.inc, m.seq)
                f.write(f"{m.sender} {m.inc} {m.seq}\n")
                f.flush()
                got.append(key)
                if len(m.payload) >= 8:
                    hist[int(lat_bin([now - int.from_bytes(m.payload[:8], "little")])[0])] += 1
            while not cmds.empty():
                c = cmds.get()
                if c["cmd"] == "stop":
                    stop = True
                elif c["cmd"] == "expect" and c.get("atomic"):
                    expect = _my_share(c["atomic"], node.node_id)
            if expect is not None and not completed and expect <= set(got) | _handed_over(node):
                completed = True
                emit(event="complete", id=node.node_id, t=now)
            if now >= next_report:
                emit(event="progress", id=node.node_id, delivered=len(got), buffers=buffers(node))
                next_report = now + REPORT_EVERY_NS
    span = spec["duration"]
    emit(**final_event(spec, node, "receiver", delivered=len(got), rate=len(got) / span if span else 0,
                       first=0, last=0, check={}, hist=hist.tolist(),
                       atomic={"got": [list(k) for k in got], "handed_over": [list(k) for k in _handed_over(node)],
                               "first_life": first_life, "state": node.atomic_state()}))
    return node


def _load(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    out.append(tuple(int(p) for p in parts))
    except FileNotFoundError:
        pass
    return out


def _my_share(outcomes, me):
    """The committed proposals whose snapshot held this receiver."""
    want = set()
    for k, o in outcomes.items():
        if not o:
            continue
        s, inc = (int(x) for x in k.split("/"))
        for q in o["committed"]:
            if me not in o["excluded"].get(str(q), ()):
                want.add((s, inc, q))
    return want


def _handed_over(node):
    """What the journal says reached the application (delivered/)."""
    return node.atomic_delivered()


ROLES = {"sender": run_atomic_sender, "receiver": run_atomic_receiver}


# ---------------------------------------------------------------------- the check
def summarize(receivers, victims, sent, finals) -> dict:
    """The all-or-none check over the run's outcomes and deliveries."""
    committed, aborted, reasons, lat, excluded = set(), set(), {}, [], {}
    for i, ev in sent.items():
        o = ev.get("atomic") or {}
        inc = ev["inc"]
        for q in o.get("committed", []):
            committed.add((i, inc, q))
        for q, why in o.get("aborted", []):
            aborted.add((i, inc, q))
            reasons[why] = reasons.get(why, 0) + 1
        lat += o.get("latency", [])
        for q, left in o.get("excluded", {}).items():
            excluded[(i, inc, int(q))] = set(left)
    problems, in_flight, recovered = {}, 0, {}
    for r in receivers:
        f = finals.get(r)
        if f is None or not f.get("atomic"):
            problems[f"receiver {r}"] = "no final report"
            continue
        a = f["atomic"]
        got = [tuple(k) for k in a["got"]]
        counts = {}
        for k in got:
            counts[k] = counts.get(k, 0) + 1
        dup = sorted(k for k, c in counts.items() if c > 1)
        wrong = sorted(k for k in counts if k in aborted or k not in committed)
        want = {k for k in committed if r not in excluded.get(k, ())}
        missing = want - set(counts)
        if r in victims:
            flight = missing & {tuple(k) for k in a["handed_over"]}
            in_flight += len(flight)
            missing -= flight
            recovered[r] = a["state"].get("recovered_pending", 0)
        if dup or wrong or missing:
            problems[f"receiver {r}"] = {"duplicates": dup[:10], "not_committed": wrong[:10],
                                         "missing": sorted(missing)[:10], "missing_count": len(missing)}
    lat = sorted(lat)

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    return {"proposals": len(committed) + len(aborted), "commits": len(committed), "aborts": len(aborted),
            "abort_reasons": reasons, "commit_latency_p50": pct(0.5), "commit_latency_p99": pct(0.99),
            "all_or_none": not problems, "problems": problems, "in_flight_at_kill": in_flight,
            "recovered_pending": recovered}


def summary_lines(s) -> list:
    a = s["atomic"]

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.2f} ms"
    lines = [f"  atomic          {a['proposals']:,} proposals: {a['commits']:,} committed, {a['aborts']:,} aborted"
             + (f" ({', '.join(f'{k}: {v}' for k, v in a['abort_reasons'].items())})" if a["abort_reasons"] else ""),
             f"  commit latency  p50 {ms(a['commit_latency_p50'])}, p99 {ms(a['commit_latency_p99'])}",
             f"  all or none     {'yes' if a['all_or_none'] else 'NO: ' + str(a['problems'])[:400]}"]
    if a["recovered_pending"]:
        lines.append(f"  killed member   recovered {sum(a['recovered_pending'].values())} voted proposals from its "
                     f"journal; {a['in_flight_at_kill']} handed over as it was killed")
    return lines
