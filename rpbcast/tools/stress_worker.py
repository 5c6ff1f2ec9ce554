"""One process of `rpbcast stress`: a sender, a receiver or a logger.

Driven by JSON lines: commands on stdin ({"cmd": "start"|"expect"|"stop"}),
events on stdout ({"event": "ready"|"progress"|"sent"|"complete"|"final"}).
Payloads carry the send time (CLOCK_MONOTONIC ns, shared by all processes
on a host) in their first 8 bytes, so receivers measure one-way latency.
"""
from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time

import numpy as np

from rpbcast.config import Config, MemberSpec

# Latency histogram bins, log-linear as in HDR histograms: 16 per octave
# (4.4 % wide) from 64 ns to 2**35 ns (34 s).  LAT_BINS are the bin edges:
# hist[0] counts latencies below LAT_BINS[0], hist[i] those in
# [LAT_BINS[i-1], LAT_BINS[i]), hist[-1] those from LAT_BINS[-1] on.  The
# index of a latency is read off its float64 bits (exponent and top four
# mantissa bits), a few ns per message on the receiving thread.
_LAT_SUB_BITS = 4
_LAT_MIN_EXP, _LAT_MAX_EXP = 6, 35
LAT_BINS = np.array([2.0 ** e * (1 + m / (1 << _LAT_SUB_BITS))
                     for e in range(_LAT_MIN_EXP, _LAT_MAX_EXP) for m in range(1 << _LAT_SUB_BITS)]
                    + [2.0 ** _LAT_MAX_EXP])


def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def commands():
    q = queue.Queue()

    def read():
        for line in sys.stdin:
            line = line.strip()
            if line:
                q.put(json.loads(line))
        q.put({"cmd": "stop"})

    threading.Thread(target=read, daemon=True).start()
    return q


def make_config(spec):
    c = dict(spec["config"])
    c["members"] = [MemberSpec(**m) for m in c.get("members", [])]
    return Config.from_dict(c)


def trace_writer(spec, node):
    run_dir = spec.get("run_dir")
    if not run_dir or not spec.get("trace"):
        return None
    from rpbcast.analysis.tracefile import TraceWriter
    return TraceWriter(run_dir, spec["run_id"], spec["config"]["node_id"], addr_to_node=spec.get("addr_to_node"))


def drain_trace(node, tw):
    if tw is not None:
        tw.add(node.take_trace())


def final_stats(node):
    st = node.stats()
    return {k: v for k, v in st.items() if not isinstance(v, (bytes,))}


def extensions(spec):
    if not spec.get("gsgc"):
        return []
    from rpbcast.protocol.gsgc import GsgcExtension
    return [GsgcExtension(b=spec.get("gsgc_b", 1), newcomer=bool(spec.get("restarted")))]


def gsgc_state(node):
    from rpbcast.protocol.gsgc import GsgcExtension
    st = node.extension_state(GsgcExtension)
    if st is None:
        return None
    return {"rounds_completed": st["rounds_completed"], "tts": st["tts"], "failed": st["failed"],
            "K": st["K"], "S": {f"{s}/{i}": v for (s, i), v in st["S"].items()},
            "events": [[str(x) for x in ev] for ev in st["events"]]}


def buffers(node):
    """Memory held right now: the bounded-buffer evidence."""
    st = node.stats()
    return {"store_entries": st["store_entries"], "store_bytes": st["store_bytes"],
            "gossip_entries": st["gossip_buffer_entries"], "gossip_bytes": st["gossip_buffer_bytes"]}


# ----------------------------------------------------------------------------
def run_sender(spec, node, cmds, tw):
    size, rate, duration = spec["size"], spec["rate"], spec["duration"]
    batch = spec.get("batch", 1024)
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr)
    start = None
    while start is None:
        c = cmds.get()
        if c["cmd"] == "start":
            start = c["at"]
        elif c["cmd"] == "stop":
            return
    while time.monotonic_ns() < start:
        time.sleep(0.0005)
    buf = np.zeros(batch * size, np.uint8)
    stamps = buf.reshape(batch, size)[:, :8].view(np.uint64)   # send time per message
    lens = np.full(batch, size, np.uint32)
    labelled = spec.get("labels", "none") == "stock"
    if labelled:
        from rpbcast.sim.stock import StockWorkload
        wl = StockWorkload(seed=node.node_id)
        pending = wl.labels(batch)
        latest = {}                 # label -> last seq sent with it
    sent = 0
    t0 = time.monotonic_ns()
    end = t0 + int(duration * 1e9)
    next_report = t0
    blocked = 0
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        if rate:
            due = int((now - t0) * rate / 1e9) - sent
            if due <= 0:
                # paced: sleep until the next message is due (spin the last 50 us)
                wait = (sent + 1) * 1e9 / rate + t0 - now
                if wait > 100_000:
                    time.sleep((wait - 50_000) / 1e9)
                continue
            k = min(due, batch)
        else:
            k = batch
        stamps[:k, 0] = time.monotonic_ns()
        if labelled:
            n = node.publish_batch(buf[:k * size], lens[:k], pending[:k])
            for j, l in enumerate(pending[:n].tolist()):
                latest[l] = sent + j
            pending = np.concatenate([pending[n:], wl.labels(n)]) if n else pending
        else:
            n = node.publish_batch(buf[:k * size], lens[:k])
        sent += n
        if n < k:
            blocked += 1
            time.sleep(0.0002)          # back-pressure: let loggers catch up
        if now >= next_report:
            emit(event="progress", id=node.node_id, sent=sent, buffers=buffers(node))
            drain_trace(node, tw)
            next_report = now + 250_000_000
    emit(event="sent", id=node.node_id, inc=node.incarnation, count=sent, blocked=blocked,
         seconds=(time.monotonic_ns() - t0) / 1e9,
         latest={str(k): v for k, v in latest.items()} if labelled else None)
    while True:
        c = cmds.get()
        drain_trace(node, tw)
        if c["cmd"] == "stop":
            break


# ----------------------------------------------------------------------------
def lat_bin(lat):
    """Histogram index of each latency (int64 ns): see LAT_BINS."""
    bits = np.asarray(lat, np.float64).view(np.int64) >> (52 - _LAT_SUB_BITS)
    i = bits - (((1023 + _LAT_MIN_EXP) << _LAT_SUB_BITS) - 1)
    np.clip(i, 0, len(LAT_BINS), out=i)
    return i


def count_seqs(arr, q):
    """arr[q] += 1 for every element of q, repeats counted (np.add.at), with
    fast paths for a contiguous increasing run (a slice) and a strictly
    increasing one (no repeats: plain fancy indexing)."""
    if len(q) > 1:
        d = np.diff(q)
        if (d > 0).all():
            if int(q[-1]) - int(q[0]) + 1 == len(q):
                arr[int(q[0]):int(q[-1]) + 1] += 1
            else:
                arr[q] += 1
            return
        np.add.at(arr, q, 1)
    elif len(q):
        arr[int(q[0])] += 1


def send_stamps(buf, offs, lens):
    """The send time in the first 8 bytes of each payload (payloads shorter
    than 8 bytes are skipped), as int64 ns."""
    k = len(offs)
    if k and int(lens.min()) >= 8:
        size = int(lens[0])
        # recv_batch writes payloads back to back, in order: equal sizes
        # spanning (k - 1) sizes mean a uniform stride, read in one strided view
        if int(lens.max()) == size and int(offs[-1]) - int(offs[0]) == size * (k - 1):
            return np.ndarray((k,), "<u8", buf, int(offs[0]), (size,)).astype(np.int64)
    raw = np.frombuffer(buf, np.uint8)
    ok = lens >= 8
    idx = offs.astype(np.int64)[ok][:, None] + np.arange(8)
    return raw[idx].copy().view("<u8").ravel().astype(np.int64)


class Tally:
    """Per-sender delivery counts (exactly-once check) and latency histogram;
    for FIFO-SRB also FIFO order and the latest value seen per label."""

    def __init__(self):
        self.last_seq = {}        # (sender, inc) -> last seq delivered (FIFO check)
        self.fifo_violations = {}
        self.label_last = {}      # (sender, inc) -> {label: seq}
        self.counts = {}          # (sender, inc) -> np.uint8 array
        self.hist = np.zeros(len(LAT_BINS) + 1, np.int64)
        self.delivered = 0
        self.first = None
        self.last = None

    def add(self, b, now):
        """Count one recv_batch.  Runs on the receiving application's thread
        at millions of messages per second, so every step is a NumPy pass
        with a fast path for the common shapes (one stream per batch, seqs
        increasing, equal payload sizes); the slow paths give the same
        counts (tests/test_stress_tally.py)."""
        k = b.count
        if not k:
            return
        if self.first is None:
            self.first = now
        self.last = now
        self.delivered += k
        senders, incs, seqs = b.senders[:k], b.incs[:k], b.seqs[:k].astype(np.int64)
        if senders.min() == senders.max() and incs.min() == incs.max():
            groups = [((int(senders[0]), int(incs[0])), None)]
        else:
            keys = (senders.astype(np.uint64) << np.uint64(32)) | incs.astype(np.uint64)
            groups = [((int(u >> np.uint64(32)), int(u & np.uint64(0xFFFFFFFF))), keys == u)
                      for u in np.unique(keys)]
        for (s, i), sel in groups:
            q = seqs if sel is None else seqs[sel]
            if self.semantic:
                prev = self.last_seq.get((s, i), -1)
                order = np.concatenate(([prev], q))
                bad = int((np.diff(order) <= 0).sum())
                if bad:
                    self.fifo_violations[(s, i)] = self.fifo_violations.get((s, i), 0) + bad
                self.last_seq[(s, i)] = int(q[-1])
                ll = self.label_last.setdefault((s, i), {})
                labs = b.labels[:k] if sel is None else b.labels[:k][sel]
                for lab, sq in zip(labs.tolist(), q.tolist()):
                    if sq > ll.get(lab, -1):
                        ll[lab] = sq
            arr = self.counts.get((s, i))
            need = int(q.max()) + 1
            if arr is None or len(arr) < need:
                new = np.zeros(max(need, 2 * (len(arr) if arr is not None else 0), 1024), np.uint8)
                if arr is not None:
                    new[:len(arr)] = arr
                arr = self.counts[(s, i)] = new
            count_seqs(arr, q)
        sent_ns = send_stamps(b.buf, b.offs[:k], b.lens[:k])
        self.hist += np.bincount(lat_bin(now - sent_ns), minlength=len(LAT_BINS) + 1)

    semantic = False

    def check(self, expect, latest=None):
        """{sender: {...}} against expected counts {(s, inc): n}."""
        out = {}
        for (s, i), n in expect.items():
            arr = self.counts.get((s, i), np.zeros(0, np.uint8))
            a = np.zeros(n, np.uint8)
            m = min(n, len(arr))
            a[:m] = arr[:m]
            extra = int((arr[n:] > 0).sum()) if len(arr) > n else 0
            missing = np.nonzero(a == 0)[0]
            dups = np.nonzero(a > 1)[0]
            out[f"{s}/{i}"] = {"expected": n, "delivered": int((a > 0).sum()), "missing": int(len(missing)),
                               "missing_ids": missing[:20].tolist(), "duplicates": int(len(dups)),
                               "duplicate_ids": dups[:20].tolist(), "unexpected": extra}
            if self.semantic:
                want = (latest or {}).get(f"{s}/{i}") or {}
                have = self.label_last.get((s, i), {})
                stale = {lab: (have.get(int(lab)), q) for lab, q in want.items() if have.get(int(lab)) != q}
                out[f"{s}/{i}"].update(fifo_violations=self.fifo_violations.get((s, i), 0),
                                       stale_labels=len(stale), stale_examples=dict(list(stale.items())[:5]),
                                       labels_converged=len(want) - len(stale))
        return out

    def complete(self, expect, latest=None):
        if self.semantic:
            # done when the latest value of every label has arrived
            for key, want in (latest or {}).items():
                s, i = map(int, key.split("/"))
                have = self.label_last.get((s, i), {})
                if any(have.get(int(lab)) != q for lab, q in (want or {}).items()):
                    return False
            return True
        for (s, i), n in expect.items():
            arr = self.counts.get((s, i))
            if arr is None or len(arr) < n or not arr[:n].all():
                return False
        return True

    def save(self, path):
        tmp = path + ".tmp.npz"
        np.savez(tmp, **{f"{s}_{i}": a for (s, i), a in self.counts.items()})
        os.replace(tmp, path)

    @classmethod
    def load(cls, path):
        t = cls()
        if path and os.path.exists(path):
            with np.load(path) as z:
                for k in z.files:
                    s, i = map(int, k.split("_"))
                    t.counts[(s, i)] = z[k].copy()
        return t

    def resume_bases(self):
        """First seq not yet delivered, per sender."""
        out = {}
        for key, arr in self.counts.items():
            zero = np.nonzero(arr == 0)[0]
            out[key] = int(zero[0]) if len(zero) else len(arr)
        return out


def run_receiver(spec, cmds, tw_factory):
    ckpt = spec.get("checkpoint")
    tally = Tally.load(ckpt)
    tally.semantic = bool(spec.get("semantic"))
    slow = spec.get("slow", 0)
    from rpbcast.api import Node
    inline = bool(spec.get("inline"))          # drive the loop from this thread (Node.poll)
    node = Node(make_config(spec), resume=tally.resume_bases() or None, trace=spec.get("trace_cap", 0),
                extensions=extensions(spec), start=not inline)
    tw = tw_factory(node)
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr, resumed=len(tally.counts))
    buf = bytearray(64 << 20)
    expect = None
    latest = None
    completed = False
    next_report = 0
    stop = False
    consumed, t_slow = 0, time.monotonic_ns()
    while not stop:
        want = 65536
        if slow:
            # a throttled application: take at most `slow` messages per second
            allowed = int((time.monotonic_ns() - t_slow) * slow / 1e9) - consumed
            want = max(0, min(want, allowed))
            if not want:
                time.sleep(0.001)
        if inline:
            b = node.poll(0.01 if want else 0.0, want, buf)   # waits in the loop itself
        else:
            b = node.recv_batch(want, buf) if want else node.recv_batch(0, buf)
        consumed += b.count
        now = time.monotonic_ns()
        if b.count:
            tally.add(b, now)
        elif not inline:
            node.transport.wait(0.01)
        while not cmds.empty():
            c = cmds.get()
            if c["cmd"] == "expect":
                expect = {tuple(map(int, k.split("/"))): v for k, v in c["counts"].items()}
                latest = c.get("latest")
            elif c["cmd"] == "stop":
                stop = True
        if expect is not None and not completed and tally.complete(expect, latest):
            completed = True
            emit(event="complete", id=node.node_id, t=now)
        if now >= next_report:
            emit(event="progress", id=node.node_id, delivered=tally.delivered, buffers=buffers(node))
            drain_trace(node, tw)
            if ckpt:
                tally.save(ckpt)
            next_report = now + 250_000_000
    # drain what is left
    while True:
        b = node.poll(0.0, 65536, buf) if inline else node.recv_batch(65536, buf)
        if not b.count:
            break
        tally.add(b, time.monotonic_ns())
    if ckpt:
        tally.save(ckpt)
    drain_trace(node, tw)
    rate = tally.delivered / ((tally.last - tally.first) / 1e9) if tally.first and tally.last > tally.first else 0
    emit(event="final", id=node.node_id, role="receiver", delivered=tally.delivered, rate=rate,
         first=tally.first, last=tally.last,
         check=tally.check(expect or {}, latest), hist=tally.hist.tolist(), stats=final_stats(node),
         gsgc=gsgc_state(node) if spec.get("gsgc") else None)
    return node


def run_logger(spec, cmds, tw_factory):
    from rpbcast.api import Node
    node = Node(make_config(spec).replace(role="logger"), extensions=extensions(spec))
    tw = tw_factory(node)
    emit(event="ready", id=node.node_id, inc=node.incarnation, addr=node.addr)
    while True:
        try:
            c = cmds.get(timeout=0.25)
        except queue.Empty:
            drain_trace(node, tw)
            continue
        if c["cmd"] == "stop":
            break
    drain_trace(node, tw)
    emit(event="final", id=node.node_id, role="logger", stats=final_stats(node),
         gsgc=gsgc_state(node) if spec.get("gsgc") else None)
    return node


def main():
    spec = json.loads(sys.argv[1])
    cmds = commands()
    role = spec["role"]
    tw_holder = []

    def twf(node):
        tw = trace_writer(spec, node)
        tw_holder.append(tw)
        return tw

    try:
        if role == "sender":
            from rpbcast.api import Node
            node = Node(make_config(spec), trace=spec.get("trace_cap", 0), extensions=extensions(spec))
            tw = twf(node)
            run_sender(spec, node, cmds, tw)
            emit(event="final", id=node.node_id, role="sender", stats=final_stats(node),
                 gsgc=gsgc_state(node) if spec.get("gsgc") else None)
        elif role == "receiver":
            node = run_receiver(spec, cmds, twf)
        else:
            node = run_logger(spec, cmds, twf)
        for tw in tw_holder:
            if tw is not None:
                tw.close()
        if spec.get("run_dir"):
            from rpbcast.analysis.tracefile import write_counters
            write_counters(spec["run_dir"], node.node_id, final_stats(node))
        node.close()
    except Exception as e:  # report, don't hang the orchestrator
        import traceback
        emit(event="error", role=role, error=f"{type(e).__name__}: {e}", tb=traceback.format_exc())
        sys.exit(1)


if __name__ == "__main__":
    main()
