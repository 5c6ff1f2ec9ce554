"""What a stress run tells: the summary (the exactly-once verdict, rates,
latency percentiles, repairs, overhead, buffers, GSGC), printed as text or
JSON, the run's run.json for the analysis pipeline, and why a run failed."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

import numpy as np

from rpbcast.config import Config
from rpbcast.tools.stress.plan import flow_window, receivers_commit
from rpbcast.tools.stress.tally import LAT_BINS


def percentile(hist, q):
    total = hist.sum()
    if not total:
        return None
    c = np.cumsum(hist)
    i = int(np.searchsorted(c, q * total))
    if i == 0:
        return float(LAT_BINS[0])
    if i >= len(LAT_BINS):
        return float(LAT_BINS[-1])
    return float(np.sqrt(LAT_BINS[i - 1] * LAT_BINS[i]))   # geometric bin centre


def fmt_ns(v):
    if v is None:
        return "-"
    if v < 1e3:
        return f"{v:.0f} ns"
    if v < 1e6:
        return f"{v / 1e3:.1f} us"
    if v < 1e9:
        return f"{v / 1e6:.2f} ms"
    return f"{v / 1e9:.2f} s"


def gsgc_brief(st):
    if not st:
        return None
    tts = st.get("tts") or st.get("time_to_stable") or {}
    return {"rounds": st.get("rounds_completed", st.get("rounds")), "time_to_stable": tts,
            "failed": st.get("failed"), "K": st.get("K"), "events": (st.get("events") or [])[-20:]}


def worker_spec_group(args, plan):
    """The group address the run's nodes were given (plan.worker_spec)."""
    from rpbcast.config import Config
    if plan.ipv6:
        from rpbcast.tools.stress.plan import GROUP_PORT
        return plan.hostnet().group(GROUP_PORT)
    return Config.group_addr


def summarize(args, plan, sup, finals, dropped, t_start):
    """The summary of a finished run (sup: its Supervisor; finals: the
    workers' final reports by node id; dropped: the kernel's loss counters)."""
    live = sup.live_receivers()
    s = delivery_summary(args, plan, live, sup.streams, finals, dropped, sup.complete, t_start, sup.killed)
    agree_problems = stream_agreement(finals, live, sup.dead_streams)
    if agree_problems:
        s["problems"].update(agree_problems)
        s["exactly_once"] = False
    s["sent"] += sum(agreed_count(finals, live, k) for k in sup.dead_streams)
    s.update(delivered_fractions(args, finals, live, s["sent"]))
    s["hosts"] = plan.hosts
    s["ipv6"] = plan.ipv6
    s["group_addr"] = worker_spec_group(args, plan)
    s["dead_receivers"] = sorted(sup.dead)
    s["dead_nodes"] = sorted(sup.dead_nodes)
    s["killed"] = [list(k) for k in sup.killed_nodes]
    s["killed_sender_streams"] = dict(sup.dead_streams)
    s["buffer_peaks"] = sup.buffer_peaks
    # "at the end" is when everyone was stopped (the final stats), not a
    # node's last progress report: a sender reports only while sending
    s["buffer_end"] = {i: _final_buffers(f["stats"], sup.buffer_last.get(i, {}))
                       for i, f in finals.items() if f.get("stats")} or sup.buffer_last
    s["buffer_series"] = sup.buffer_series
    s["kill_at_s"] = round(sup.kill_t - t_start, 2) if sup.kill_t else None
    s["faults"] = [dict(f.to_json(), catch_up_s=catch_up_s(sup, f)) for f in sup.faults.faults]
    s["fault_drops"] = sup.faults.dropped() if sup.faults.firewalls else None
    s["protocol_events"] = sup.protocol_events
    s["released"] = [e for e in sup.protocol_events if e["event"][0] == "released"]
    s["lost_ids"] = {i: f.get("lost_ids", 0) for i, f in finals.items() if f.get("lost_ids")}
    s["rss_peak_kb"] = {i: f.get("rss_peak_kb") for i, f in finals.items()}
    s["window_counters"] = {i: window_counters(f) for i, f in finals.items() if f.get("stats")}
    by_role = {}
    for i, f in finals.items():
        by_role[f["role"]] = max(by_role.get(f["role"], 0), f.get("rss_peak_kb") or 0)
    s["rss_peak_kb_by_role"] = by_role
    if args.gsgc:
        s["gsgc"] = {i: gsgc_brief(f.get("gsgc")) for i, f in finals.items() if f.get("gsgc")}
    if getattr(args, "atomic", False):
        from rpbcast.tools.stress.worker import atomic
        s["atomic"] = atomic.summarize([r for r in plan.receivers if r not in sup.dead], set(sup.victims()),
                                       sup.sent, finals)
        s["exactly_once"] = s["exactly_once"] and s["atomic"]["all_or_none"]
    s["run_dir"] = plan.run_dir
    return s


def window_counters(final) -> dict:
    """What a window turn costs each node (issue 15, the maximum-rate goal):
    datagrams per receive call, messages per application take, and the
    publisher's waits for room -- the batching a window may break."""
    st = final["stats"]
    sock, loop = st.get("sock", {}), st.get("loop", {})
    calls, dgrams = sock.get("rx_calls", 0), sock.get("rx_dgrams", 0)
    takes, delivered = loop.get("takes", 0), st.get("delivered", 0)
    return {"role": final.get("role"), "rx_calls": calls, "rx_dgrams": dgrams,
            "dgrams_per_rx_call": round(dgrams / calls, 2) if calls else None,
            "app_rx_calls": loop.get("app_rx_calls", 0), "app_rx_dgrams": loop.get("app_rx_dgrams", 0),
            "takes": takes, "delivered": delivered,
            "msgs_per_take": round(delivered / takes, 1) if takes else None,
            "window_waits": loop.get("window_waits", 0), "window_rx": loop.get("window_rx", 0),
            "window_closed": loop.get("window_closed", 0),
            "window_spun": loop.get("window_spun", 0), "window_sleeps": loop.get("window_sleeps", 0)}


# What each protocol promises (docs/protocols.md); the check is the same for
# all four -- every message to every live receiver, once -- and a protocol
# that falls short is reported with its delivered fraction, never as a pass.
GUARANTEES = {
    "rpbcast": "exactly once (peers, then loggers with stable storage)",
    "lbrm": "exactly once while the logger lives (its log holds everything)",
    "srm": "exactly once while some member still buffers the message (buffer_time)",
    "pbcast": "probabilistic: most messages to most members; ids nobody holds any more are given up",
}


def delivered_fractions(args, finals, receivers, sent):
    """Distinct messages each live receiver delivered over those sent: the
    figure a protocol without an exactly-once guarantee is judged by."""
    per = {}
    for i in receivers:
        f = finals.get(i)
        if f is None:
            per[i] = 0.0        # no final report: nothing it delivered can be confirmed
            continue
        have = sum(c.get("delivered", 0) for c in f["check"].values())       # distinct ids
        per[i] = have / sent if sent else None
    vals = [v for v in per.values() if v is not None]
    protocol = getattr(args, "protocol", "rpbcast")
    return {"protocol": protocol, "guarantee": GUARANTEES[protocol],
            "delivered_fraction": min(vals) if vals else None,
            "delivered_fraction_per_receiver": per,
            "given_up_ids": sum(finals[i].get("lost_ids", 0) for i in receivers if i in finals)}


def stream_agreement(finals, receivers, dead_streams):
    """A killed sender's stream has no known count: every live receiver
    must have delivered the same set of its messages, each once."""
    bad = {}
    for key in dead_streams:
        views = {i: finals[i]["check"].get(key) for i in receivers if i in finals}
        seen = {(c or {}).get("digest") for c in views.values()}
        if len(seen) > 1 or None in seen:
            bad[f"killed sender stream {key}"] = {i: (c and {k: c[k] for k in ("delivered", "highest")})
                                                  for i, c in views.items()}
    return bad


def agreed_count(finals, receivers, key):
    counts = [finals[i]["check"].get(key, {}).get("delivered", 0) for i in receivers if i in finals]
    return max(counts, default=0)


def catch_up_s(sup, fault):
    """From the end of a fault (healed, resumed, restarted) until every
    live receiver had delivered everything sent before it ended (per
    stream, every seq below the sender's last report by then): seconds, at
    the workers' report interval; None for a fault that never ended, when
    it never happened, or when some receiver never caught up."""
    if fault.ended is None:
        return None
    end = sup.at + int(fault.ended * 1e9)
    target = {}
    for key, series in sup.sent_series.items():
        before = [n for t, n in series if t <= end]
        if before and before[-1]:
            target[key] = before[-1]

    def caught(prefix):
        return prefix is None or all(prefix.get(k, 0) >= n for k, n in target.items())

    worst = end
    for r in sup.live_receivers():
        series = sorted(sup.prefix_series.get(r, []), key=lambda e: (e[0], e[1] is None))
        # from its last report before the end on (it may have had it all then)
        k = max([j for j, (t, _) in enumerate(series) if t <= end] or [0])
        t = next((t for t, p in series[k:] if caught(p)), None)
        if t is None:
            return None
        worst = max(worst, t)
    return round((worst - end) / 1e9, 3)


def delivery_summary(args, plan, receivers, sent, finals, dropped, complete, t_start, killed):
    """The live receivers' check, rates and latency, and the group's repair
    and overhead counters."""
    senders, loggers = plan.senders, plan.loggers
    total_sent = sum(v["count"] for v in sent.values())          # every finished incarnation's count
    send_secs = max((v["seconds"] for v in sent.values()), default=0)
    recv = [finals[i] for i in receivers if i in finals]
    rates = [f["rate"] for f in recv]
    hist = np.sum([np.array(f["hist"]) for f in recv], axis=0) if recv else np.zeros(1)
    semantic = bool(args.srb_window)
    bad = delivery_problems(recv, semantic)
    for i in receivers:
        if i not in finals:
            # never answered the stop: hung (a control plane that held its
            # node), or dead -- nothing it delivered can be checked
            bad[f"receiver {i}"] = "no final report (hung or killed)"

    def tot(key, ids):
        return sum(finals[i]["stats"].get(key, 0) for i in ids if i in finals)
    data_bytes, repair_bytes, other_bytes = traffic_bytes(finals)
    window = flow_window(args, plan)                     # None: Config's default
    return {
        "transport": plan.transport, "loss": args.loss, "loss_model": plan.loss_model,
        "flow_control": plan.flow_control,
        "flow_commit": receivers_commit(args, plan),
        "flow_window": Config.flow_window if window is None else window,     # the effective one
        "kernel_drops": dropped, "senders": len(senders), "receivers": len(receivers), "loggers": len(loggers),
        "size": args.size, "sent": total_sent, "send_rate": total_sent / send_secs if send_secs else 0,
        "recv_rate_min": min(rates) if rates else 0, "recv_rate_max": max(rates) if rates else 0,
        "mb_s_min": (min(rates) * args.size / 1e6) if rates else 0,
        "latency_p50": percentile(hist, 0.50), "latency_p99": percentile(hist, 0.99),
        "latency_p999": percentile(hist, 0.999), "latency_max": percentile(hist, 1.0),
        "repairs_peer": tot("repairs_peer", receivers), "repairs_logger": tot("repairs_logger", receivers),
        "gaps": tot("gaps", receivers), "served_by_loggers": tot("served", loggers),
        # repairs served by anyone per id a receiver found missing (1.0: each once)
        "served_per_missing": (tot("served", list(finals)) / tot("gap_ids", receivers)
                               if tot("gap_ids", receivers) else None),
        "overhead_per_data_byte": other_bytes / data_bytes if data_bytes else None,
        "repair_bytes_per_data_byte": repair_bytes / data_bytes if data_bytes else None,
        "exactly_once": not bad and len(recv) == len(receivers) and all(i in complete for i in receivers),
        "semantics": "fifo-srb (latest value per label, FIFO, no duplicates)" if semantic else "exactly once",
        "purged_at_receivers": tot("purged", receivers),
        "per_receiver_rate": {f["id"]: round(f["rate"]) for f in recv},
        # messages arriving (first receipts) per second of sending: what the
        # network path sustains, whatever the application consumes
        "per_receiver_receive_rate": {f["id"]: round((f["stats"].get("rx_new", 0) + f["stats"].get("rx_fill", 0))
                                                     / send_secs) if send_secs else 0 for f in recv},
        "per_receiver_purged": {f["id"]: f["stats"].get("purged", 0) for f in recv},
        "store_entries_end": {i: finals[i]["stats"].get("store_entries") for i in receivers if i in finals},
        "problems": bad, "receivers_complete": sorted(complete), "receiver_killed": killed,
        "repair_tail_s": None,
        "wall_s": time.time() - t_start,
    }


def delivery_problems(recv, semantic):
    """{"receiver R sender S/I": its check} for every stream a receiver got
    wrong.  FIFO-SRB: obsolete values may be skipped, but nothing twice,
    nothing out of FIFO order, and the latest value of every label."""
    bad = {}
    for f in recv:
        for k, c in f["check"].items():
            if semantic:
                if c["duplicates"] or c["unexpected"] or c.get("fifo_violations") or c.get("stale_labels"):
                    bad[f"receiver {f['id']} sender {k}"] = c
            elif c["missing"] or c["duplicates"] or c["unexpected"]:
                bad[f"receiver {f['id']} sender {k}"] = c
    return bad


def traffic_bytes(finals):
    """Bytes sent by every node: (data, repairs, everything else but padding)."""
    data_bytes = repair_bytes = other_bytes = 0
    for i, f in finals.items():
        for t, (mi, bi, mo, bo) in f["stats"].get("traffic", {}).items():
            if t == "data":
                data_bytes += bo
            elif t == "repair":
                repair_bytes += bo
            elif t != "pad":
                other_bytes += bo
    return data_bytes, repair_bytes, other_bytes


def run_meta(args, plan, sup, summary) -> dict:
    """run.json: the run for the analysis pipeline (docs/traces.md)."""
    # Who must deliver what (the analysis pipeline's exactly-once check):
    # every receiver, every sender's stream; senders do not deliver.  A
    # killed receiver is left out: its first life's trace died with it
    # (and what it delivered after its last checkpoint it delivers again).
    victims = sup.victims()
    verified = [r for r in plan.receivers if r not in victims]
    meta = {"run_id": plan.run_id, "kind": "stress", "protocol": getattr(args, "protocol", "rpbcast"),
            "clock": "monotonic",
            "nodes": [{"id": i, "role": plan.role_of(i), "addr": plan.addrs[i]} for i in plan.addrs],
            "senders": plan.senders,
            "params": vars(args) | {"transport": plan.transport, "loss_model": plan.loss_model},
            "members_at_send": {str(s): verified for s in plan.senders},
            "unverified_receivers": victims,
            "summary": summary}
    meta["params"].pop("func", None)
    return meta


def close_run_dir(args, plan, meta):
    """After the workers exit: set broken trace files aside (noted in
    run.json), remove a temporary run directory, or say where the traces are."""
    if args.trace and meta is not None:
        from rpbcast.analysis.tracefile import quarantine_broken, write_run_json
        broken = quarantine_broken(plan.run_dir)
        if broken:
            meta["trace_incomplete"] = broken
            write_run_json(plan.run_dir, meta)
    if not args.run_dir and not args.trace:
        shutil.rmtree(plan.run_dir, ignore_errors=True)
    elif args.trace and not args.quiet:
        print(f"traces in {plan.run_dir}: rpbcast analyze {plan.run_dir}", file=sys.stderr)


def print_json(s):
    print(json.dumps(s, indent=1, default=str))


def print_summary(s):
    ok = "yes" if s["exactly_once"] else "NO"
    lines = [
        f"rpbcast stress ({s.get('protocol', 'rpbcast')}): {s['senders']} sender(s) -> {s['receivers']} receiver(s), {s['loggers']} logger(s), "
        f"{s['size']} B messages, {s['transport']}" + (" between hosts on a bridge" if s.get("hosts") else "") +
        (f", flow control by {s.get('flow_control', 'loggers')}" if s.get("flow_control") in ("loggers", "receivers")
         else f", flow control: {s.get('flow_control')}") +
        (" (receivers report what they checkpointed)" if s.get("flow_commit") else "") +
        (f", flow window {s['flow_window']:,}" if s.get("flow_window") else ""),
        f"  group           {s.get('group_addr')}" + (" (IPv6)" if s.get("ipv6") else "") + "\n" +
        f"  loss            {s['loss']:.2%} ({s['loss_model']})" + (f", {s['kernel_drops'][0]:,} packets dropped by the kernel" if s.get("kernel_drops") else ""),
        f"  sent            {s['sent']:,} messages at {s['send_rate']:,.0f} msgs/s",
        f"  received        {s['recv_rate_min']:,.0f} msgs/s delivered by the slowest receiver, {s['mb_s_min']:.1f} MB/s",
        f"  latency         p50 {fmt_ns(s['latency_p50'])}, p99 {fmt_ns(s['latency_p99'])}, p99.9 {fmt_ns(s['latency_p999'])}",
        f"  repairs         {s['repairs_peer']:,} by peers, {s['repairs_logger']:,} by loggers ({s['gaps']:,} gaps)",
        (f"  overhead        {s['overhead_per_data_byte']:.4f} control bytes and "
         f"{s['repair_bytes_per_data_byte']:.4f} repair bytes per data byte")
        if s["overhead_per_data_byte"] is not None else "  overhead        -",
        f"  {'delivery check':<15} {s['semantics']}: {ok}" + ("" if s["exactly_once"] else f": {json.dumps(s['problems'])[:400]}"),
    ]
    if s.get("delivered_fraction") is not None:
        lines.append(f"  {'delivered':<15} {s['delivered_fraction']:.4%} of the messages sent, at the worst receiver "
                     f"({s['given_up_ids']:,} ids given up by the protocol); "
                     f"{s['protocol']} promises {s['guarantee']}")
    if s["semantics"] != "exactly once":
        lines.append("  per receiver    " + ", ".join(
            f"{i}: {s['per_receiver_receive_rate'][i]:,}/s in, {s['per_receiver_rate'][i]:,}/s delivered, "
            f"{s['per_receiver_purged'][i]:,} obsolete dropped" for i in s["per_receiver_rate"]))
    if s.get("atomic"):
        from rpbcast.tools.stress.worker import atomic
        lines += atomic.summary_lines(s)
    for f in s.get("faults") or []:
        when = (f"applied at {f['applied']:.2f} s" if f.get("applied") is not None else "never applied") + \
            (f", ended at {f['ended']:.2f} s" if f.get("ended") is not None else "")
        caught = f", everyone caught up {f['catch_up_s']:.2f} s later" if f.get("catch_up_s") is not None else ""
        lines.append(f"  {'fault':<15} {f['what']}: {when}{caught}" + (f" ({f['note']})" if f.get("note") else ""))
    for e in s.get("released") or []:
        lines.append(f"  {'released':<15} sender {e['node']} stopped waiting for receiver {e['event'][1]} "
                     f"at {e['t_s']:.2f} s: {e['event'][2]}")
    if s.get("receiver_killed") and not s.get("faults"):
        lines.append("  a receiver was killed (SIGKILL) " + (f"and left dead: node {s['dead_receivers']}"
                                                           if s.get("dead_receivers") else "and restarted") +
                     " during the run")
    if s.get("buffer_peaks"):
        peak = max((p.get("store_entries", 0) for p in s["buffer_peaks"].values()), default=0)
        end = max((p.get("store_entries", 0) for p in s.get("buffer_end", {}).values()), default=0)
        lines.append(f"  buffers         peak {peak:,} stored messages on a node, {end:,} at the end")
    if s.get("gsgc"):
        for i, g in sorted(s["gsgc"].items()):
            if g:
                tts = g.get("time_to_stable") or {}
                lines.append(f"  gsgc node {i:<5} rounds {g.get('rounds')}, time-to-stable "
                             f"p50 {tts.get('p50')} p99 {tts.get('p99')}, failed {g.get('failed')}")
    print("\n".join(lines))


def failure(errors, work):
    """Say what went wrong in which worker (with the tail of its stderr);
    the exit code."""
    for e in errors:
        print(f"stress: {e.get('_proc')}: {e.get('error') or 'exited with ' + str(e.get('code'))}", file=sys.stderr)
        if e.get("tb"):
            print(e["tb"], file=sys.stderr)
        name = e.get("_proc")
        if name:
            try:
                with open(os.path.join(work, f"{name}.err")) as f:
                    tail = f.read()[-2000:]
                if tail.strip():
                    print(tail, file=sys.stderr)
            except OSError:
                pass
    return 1


def _final_buffers(stats, last):
    """A node's buffers from its final stats (its last report as a fallback)."""
    return {"store_entries": stats.get("store_entries", last.get("store_entries", 0)),
            "store_bytes": stats.get("store_bytes", last.get("store_bytes", 0)),
            "gossip_entries": stats.get("gossip_buffer_entries", last.get("gossip_entries", 0)),
            "gossip_bytes": stats.get("gossip_buffer_bytes", last.get("gossip_bytes", 0))}
