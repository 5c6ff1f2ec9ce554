"""The logger, message by message: where its CPU goes (docs/performance.md, "Logger").

    python bench/bench_logger.py [--json out.json] [--rounds 7] [--perf]
    python bench/bench_logger.py --outage 10 [--outage-rate 50000] [--outage-runs 3]
    python bench/bench_logger.py --line-rate 5 [--compare ../other-checkout] [-- STRESS ARGS]

Cases, each beside a same-run baseline (alternating, medians of best-of-N):

* rx: 64 B messages of one sender, whole datagrams through the logger's C
  data plane (parse, gap detection) with the log attached (append, CRC,
  index, the write buffer, pwrite when it fills; a logger keeps no copy in
  its store), against the same node without a log (which stores them).  The difference is what logging
  costs per message; ``--perf`` splits it by function (perf record of this
  case alone, grouped into append / CRC / index / copy / write syscall).
* fsync: the log's sync after 5 ms worth of messages at 1.5 M msgs/s (what
  fsync = "interval" does every fsync_interval), ms per call, and the share
  of the loop thread it takes when the loop waits for it.
* acks: the logger role's per-interval work in Python (durable frontiers
  snapshot, LOGACK), per call and per message at 1.5 M msgs/s.
* serve: a logger serving a request for consecutive ids from its log, from
  the segment being written and from older segments, against serving the
  same ids from the message store.

``--outage S`` instead runs the catch-up figure of issue 13 on real sockets
(tests/outage.py): one receiver frozen S seconds at 50 k msgs/s, then
resumed; per run, whether it completed exactly once, how long after the
heal, and messages served per missing message (root; its own namespace).

``--line-rate N`` runs the issue's goal: the default ``rpbcast stress``
(1 sender, 2 receivers, 1 logger) against the same run with ``--loggers 0``,
alternating in one run, N pairs; with ``--compare TREE`` each pair also
runs TREE's logger (another checkout, its own PYTHONPATH).  Per run: sent
and slowest-receiver msgs/s, exactly once, and the stores at the end (the
sender's, the logger's, and the logger's peak); medians and the ratio of
medians with and without the logger.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from harness import compare, machine, report  # noqa: E402

from rpbcast.core.logstore import LogStore  # noqa: E402
from rpbcast.core.node import Node  # noqa: E402

N = 100_000
SIZE = 64
RATE = 1_500_000           # msgs/s: the order of the default stress run's rate
INTERVAL = 0.005           # Config.fsync_interval


def datagrams(n, size, sender=1, inc=1):
    """n messages of one sender as packed datagrams: (buf, offs, lens, srcs,
    positions of every message's seq field)."""
    snd = Node(1, sender, inc, mtu=1472, store_bytes=1 << 30, store_entries=1 << 22)
    out = []
    body = bytes(size)
    for seq in range(n):
        snd.publish(body, None, 0)
        if seq % 1024 == 1023:
            out += snd.datagrams()
            snd.logger_ack(snd.next_seq)
    out += snd.datagrams()
    dgs = [d for _, d in out]
    buf = np.frombuffer(b"".join(dgs), np.uint8).copy()
    lens = np.array([len(d) for d in dgs], np.uint32)
    offs = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.uint32)
    raw = buf.tobytes()
    pos = []
    for o, ln in zip(offs.tolist(), lens.tolist()):
        count = int.from_bytes(raw[o + 16:o + 18], "little")
        p = o + 24
        for _ in range(count):
            pos.append(p + 16)
            p += 24 + int.from_bytes(raw[p + 2:p + 4], "little")
    return buf, offs, lens, np.zeros(len(dgs), np.uint64), np.array(pos, np.int64)


class Stream:
    """The same datagrams, each call the next n messages of the stream."""

    def __init__(self, n, size):
        self.buf, self.offs, self.lens, self.srcs, pos = datagrams(n, size)
        self.n = n
        self.idx = pos[:, None] + np.arange(8)
        self.base = self.buf[self.idx].copy().view("<u8").ravel()
        self.k = 0

    def advance(self):
        self.k += 1
        self.buf[self.idx] = (self.base + np.uint64(self.n * self.k)).view(np.uint8).reshape(-1, 8)

    def rx(self, node):
        node.rx_batch(self.buf, self.offs, self.lens, self.srcs, 0)


def logger_node(store_bytes=64 << 20):
    return Node(1, 9, 1, mtu=1472, store_bytes=store_bytes, store_entries=1 << 20, is_logger=True,
                no_deliver=True)


def bench_rx(tmp, rounds):
    s_log, s_base = Stream(N, SIZE), Stream(N, SIZE)
    log = LogStore(os.path.join(tmp, "rx"), segment_bytes=64 << 20)
    with_log, without = logger_node(), logger_node()
    with_log.attach_log(log)

    def case():
        s_log.advance()
        s_log.rx(with_log)
        log.flush()
        with_log.round(1)

    def baseline():
        s_base.advance()
        s_base.rx(without)
        without.round(1)

    def tidy():
        log.gc(1, 1, N * s_log.k)      # keep the disk use bounded: old segments go

    r = compare(f"rx + log, {SIZE} B (baseline: rx, no log)", case, baseline, N, rounds=rounds, reps=3,
                prepare=tidy)
    log.close()
    return r


def rx_loop(tmp, seconds):
    """The rx + log case alone, for perf."""
    s = Stream(N, SIZE)
    log = LogStore(os.path.join(tmp, "perf"), segment_bytes=64 << 20)
    node = logger_node()
    node.attach_log(log)
    end = time.time() + seconds
    while time.time() < end:
        s.advance()
        s.rx(node)
        log.flush()
        node.round(1)
        log.gc(1, 1, N * s.k)
    log.close()


# perf symbols -> the component they belong to (first match wins)
COMPONENTS = [
    ("CRC32C", r"crc32c"),
    ("index (per-stream seq -> position)", r"lp_set|lp_get|lp_|idx_|run_idx|ridx"),
    ("log append (record header, run bookkeeping)", r"rp_log_append|seg_note|stream_note|rp_log_stream|"
                                                    r"log_run|close_run|open_run|rp_log_"),
    ("payload copy (memcpy)", r"memcpy|memmove"),
    ("write syscall (pwrite into the page cache)", r"\[k\]|pwrite|__libc_pwrite|entry_SYSCALL|copy_user|"
                                                   r"ext4|filemap|iomap|generic_perform"),
    ("receive path (parse, tracker, store)", r"rp_node_rx|rp_wire|rp_seqtrack|rp_mstore|rx_data|rp_iset|"
                                             r"hmap|rp_node_round|rp_sigvec"),
]


def perf_breakdown(tmp, seconds, ns_per_msg_total):
    """perf record of the rx + log loop; shares of its samples by component
    (and the rest), scaled to ns per message with the measured total."""
    data = os.path.join(tmp, "perf.data")
    cmd = ["perf", "record", "-q", "-F", "2999", "-o", data, "--", sys.executable, __file__, "--rx-loop",
           str(seconds), "--tmp", tmp]
    subprocess.run(cmd, check=True, capture_output=True)
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "symbol"],
                         capture_output=True, text=True).stdout
    shares = {}
    other = 0.0
    python = 0.0
    for line in rep.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(.*)$", line)
        if not m:
            continue
        pct, sym = float(m.group(1)), m.group(2).strip()
        if re.search(r"_Py|Py[A-Z]|numpy|npy_|array_|ufunc", sym):
            python += pct
            continue
        for name, pat in COMPONENTS:
            if re.search(pat, sym):
                shares[name] = shares.get(name, 0) + pct
                break
        else:
            other += pct
    total = sum(shares.values()) + other
    out = {name: {"share_pct": round(100 * v / total, 1), "ns_per_msg": round(ns_per_msg_total * v / total, 2)}
           for name, v in shares.items()}
    out["other"] = {"share_pct": round(100 * other / total, 1),
                    "ns_per_msg": round(ns_per_msg_total * other / total, 2)}
    out["_python_share_excluded_pct"] = round(python, 1)
    return out


def bench_fsync(tmp, reps=40):
    """fdatasync after INTERVAL seconds' worth of messages at RATE."""
    log = LogStore(os.path.join(tmp, "fsync"), segment_bytes=256 << 20)
    per = int(RATE * INTERVAL)
    payload = bytes(SIZE)
    times = []
    seq = 0
    for _ in range(reps):
        for _ in range(per):
            log.append(1, 1, seq, payload)
            seq += 1
        log.flush()
        t0 = time.perf_counter_ns()
        log.sync()
        times.append(time.perf_counter_ns() - t0)
    log.close()
    times.sort()
    med = times[len(times) // 2]
    return {"name": f"fdatasync after {per:,} messages ({INTERVAL * 1e3:g} ms at {RATE / 1e6:g} M msgs/s)",
            "ms_per_call_median": round(med / 1e6, 2), "ms_per_call_p90": round(times[int(len(times) * 0.9)] / 1e6, 2),
            "ns_per_msg": round(med / per, 1),
            "loop_share_if_waited_pct": round(100 * med / (med + INTERVAL * 1e9), 1)}


def bench_acks(tmp, rounds):
    """The logger role's timer work besides the sync: snapshot the durable
    frontiers and send LOGACKs (fsync "never": flush only)."""
    from rpbcast.config import Config, MemberSpec
    from rpbcast.protocol.engine import Engine
    members = [MemberSpec(node_id=i, addr=f"127.0.0.1:{7000 + i}", role="logger" if i == 9 else "member")
               for i in (1, 2, 3, 9)]
    cfg = Config(node_id=9, group=1, role="logger", log_dir=os.path.join(tmp, "acks"), fsync="never",
                 members=members)
    eng = Engine(cfg, 1, log=None)
    s = Stream(4096, SIZE)
    lg = eng.logger
    now = [10**9]

    def case():
        s.advance()
        s.rx(eng.node)                 # the frontier moves: an ACK is due
        now[0] += int(INTERVAL * 1e9)
        lg._sync()
        lg._send_acks(now[0], force=False)
        eng.node.datagrams()

    def baseline():
        s.advance()
        s.rx(eng.node)
        eng.node.datagrams()

    r = compare("logger role timer: flush + snapshot + LOGACK (per call)", case, baseline, 1, rounds=rounds,
                reps=5, unit="call")
    per = RATE * INTERVAL
    r["ns_per_msg_at_rate"] = round((r["ns_per_call"] - r["baseline_ns_per_call"]) / per, 2)
    eng.logger.log.close()
    return r


def bench_serve(tmp, rounds, span=20_000):
    """Serving `span` consecutive ids: from the log's current segment, from
    older segments, and (baseline) from the message store."""
    n = 200_000
    s = Stream(n, SIZE)
    log = LogStore(os.path.join(tmp, "serve"), segment_bytes=4 << 20)
    lg = logger_node(store_bytes=1 << 20)       # a small cache: the log serves
    lg.attach_log(log)
    s.rx(lg)
    log.sync()
    holder = Node(1, 8, 1, mtu=1472, store_bytes=256 << 20, store_entries=1 << 20)
    s.rx(holder)
    iv_old = np.array([[0, span - 1]], np.uint64)
    iv_new = np.array([[n - span, n - 1]], np.uint64)
    assert lg.serve(1, 1, iv_old, 5, True)[0] == span, "the log serves the old ids"
    lg.datagrams()

    def clear():
        lg.datagrams()
        holder.datagrams()

    out = []
    for name, iv in (("older segments", iv_old), ("current segment", iv_new)):
        out.append(compare(f"serve {span:,} ids from the log, {name} (baseline: from the store)",
                           lambda iv=iv: lg.serve(1, 1, iv, 5, True),
                           lambda iv=iv: (holder.serve(1, 1, iv, 5), holder.datagrams()),
                           span, rounds=rounds, reps=3, prepare=clear))
    log.close()
    return out


def bench_outage(a):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from outage import run_outage
    runs = []
    for k in range(a.outage_runs):
        r = run_outage(a.outage_rate, a.outage, before=1.0, after=2.0, timeout=60.0)
        r.pop("check", None)
        runs.append(r)
        print(f"  run {k + 1}: complete {r['complete']} exactly-once {r['exactly_once']}, "
              f"heal->complete {r['heal_to_complete_s']} s, missing {r['missing']:,}, served {r['served']:,} "
              f"({r['served_per_missing']:.2f} per missing; logger {r['served_by_logger']:,}), "
              f"duplicates {r['duplicates']:,}, logger logged {r['logger_logged']:,} of {r['sent']:,}", flush=True)
    ratios = [r["served_per_missing"] for r in runs if r["served_per_missing"]]
    heals = [r["heal_to_complete_s"] for r in runs if r["heal_to_complete_s"] is not None]
    print(f"outage {a.outage:g} s at {a.outage_rate:,} msgs/s, {len(runs)} runs: "
          f"{sum(r['complete'] and r['exactly_once'] for r in runs)} complete exactly once; median "
          f"heal->complete {np.median(heals) if heals else None} s, served/missing {np.median(ratios):.2f}")
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "argv": sys.argv, "outage_runs": runs}, f, indent=1)


def stress_once(tree, args):
    """One `rpbcast stress --json` of checkout tree; the figures the
    line-rate table shows."""
    import json
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        p = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--json", *args], cwd=os.path.abspath(tree),
                           env=env, stdout=f, stderr=subprocess.PIPE, text=True, timeout=600)
        f.seek(0)
        try:
            d = json.load(f)
        except ValueError:
            return {"rc": p.returncode, "error": p.stderr[-400:]}
    loggers = [str(i) for i in range(1, 64) if str(i) in (d.get("buffer_end") or {})][-int(d["loggers"]):] \
        if d.get("loggers") else []
    end = d.get("buffer_end") or {}
    peaks = d.get("buffer_peaks") or {}
    return {"rc": p.returncode, "sent_rate": round(d["send_rate"]), "recv_rate_min": round(d["recv_rate_min"]),
            "exactly_once": bool(d.get("exactly_once")), "repairs_logger": d.get("repairs_logger"),
            "gaps": d.get("gaps"), "flow_control": d.get("flow_control"),
            "sender_store_end": end.get("1", {}).get("store_entries"),
            "logger_store_end": [end.get(i, {}).get("store_entries", 0) for i in loggers],
            # peaks come from progress reports, the end from final stats
            "logger_store_peak": [max(peaks.get(i, {}).get("store_entries", 0),
                                      end.get(i, {}).get("store_entries", 0)) for i in loggers],
            "p99_ms": round(d["latency_p99"] / 1e6, 2) if d.get("latency_p99") else None}


def bench_line_rate(a, stress_args):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    cells = [("logger", here, []), ("no logger", here, ["--loggers", "0"])]
    if a.compare:
        cells.append(("other's logger", a.compare, []))
    runs = {name: [] for name, _, _ in cells}
    for k in range(a.line_rate):
        for name, tree, extra in (cells if k % 2 == 0 else cells[::-1]):
            r = stress_once(tree, [*stress_args, *extra])
            runs[name].append(r)
            print(f"pair {k + 1} {name}: {r}", flush=True)
    med = {}
    for name in runs:
        ok = [r for r in runs[name] if "sent_rate" in r]
        med[name] = {key: float(np.median([r[key] for r in ok])) if ok else None
                     for key in ("sent_rate", "recv_rate_min")}
        med[name]["exactly_once"] = f"{sum(r.get('exactly_once', False) for r in runs[name])}/{len(runs[name])}"
        print(f"median {name}: {med[name]}")
    base = med["no logger"]
    for name in runs:
        if name != "no logger" and med[name]["sent_rate"] and base["sent_rate"]:
            print(f"{name} / no logger: sent {med[name]['sent_rate'] / base['sent_rate']:.2f}, "
                  f"slowest receiver {med[name]['recv_rate_min'] / base['recv_rate_min']:.2f}")
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "argv": sys.argv, "runs": runs, "medians": med}, f, indent=1)


def main():
    argv = sys.argv[1:]
    stress_args = []
    if "--" in argv:
        stress_args = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--perf", action="store_true", help="split the rx + log case by function (perf record)")
    ap.add_argument("--perf-seconds", type=float, default=6.0)
    ap.add_argument("--outage", type=float, help="catch-up after a receiver away this many seconds")
    ap.add_argument("--outage-rate", type=int, default=50_000)
    ap.add_argument("--outage-runs", type=int, default=3)
    ap.add_argument("--line-rate", type=int, metavar="PAIRS",
                    help="default stress with and without the logger, alternating, this many pairs")
    ap.add_argument("--compare", metavar="TREE", help="with --line-rate: also run this checkout's logger")
    ap.add_argument("--rx-loop", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.line_rate:
        bench_line_rate(a, stress_args)
        return
    if a.rx_loop:
        rx_loop(a.tmp, a.rx_loop)
        return
    if a.outage:
        bench_outage(a)
        return
    tmp = tempfile.mkdtemp(prefix="bench-logger-", dir=os.environ.get("BENCH_LOG_DIR"))
    try:
        res = [bench_rx(tmp, a.rounds)]
        res += bench_serve(tmp, a.rounds)
        acks = bench_acks(tmp, a.rounds)
        res.append(acks)
        report(res, "bench_logger (the logger's data plane and timers)")
        fs = bench_fsync(tmp)
        print(f"  {fs['name']}: {fs['ms_per_call_median']} ms per call (p90 {fs['ms_per_call_p90']}), "
              f"{fs['ns_per_msg']} ns/msg; {fs['loop_share_if_waited_pct']} % of a loop that waits for it")
        print(f"  acks per message at {RATE / 1e6:g} M msgs/s: {acks['ns_per_msg_at_rate']} ns")
        extra = {"fsync": fs}
        if a.perf:
            total = res[0]["ns_per_msg"]
            logging_cost = res[0]["ns_per_msg"] - res[0]["baseline_ns_per_msg"]
            br = perf_breakdown(tmp, a.perf_seconds, total)
            extra["perf_breakdown"] = br
            print(f"  rx + log: {total} ns/msg, of which logging {logging_cost:.1f}; by function (perf):")
            for k, v in sorted(br.items(), key=lambda kv: -kv[1]["share_pct"] if isinstance(kv[1], dict) else 0):
                if isinstance(v, dict):
                    print(f"    {k:<48} {v['share_pct']:>5.1f} %  {v['ns_per_msg']:>7.2f} ns/msg")
            print(f"    (Python's own samples, excluded: {br['_python_share_excluded_pct']} %)")
        if a.json:
            import json
            with open(a.json, "w") as f:
                json.dump({"machine": machine(), "argv": sys.argv, "results": res, **extra}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in glob.glob(os.path.join(tmp, "*")):
            pass


if __name__ == "__main__":
    main()
