"""How late do the send window's acknowledgments arrive at line rate?
1 sender -> 1 receiver (receiver flow control, no logger) in a network
namespace, the sender in this process, the receiver in a child process (as
`rpbcast stress` has them); the sender publishes 64 B messages as fast as
its windows let it for DURATION seconds.  Prints the gaps between the
acknowledgments that moved the sender's frontier: the control plane's
receiver reports (GOSSIP LASTSEEN, every flow_report_interval = 2 ms) as a
histogram in microseconds, and the data plane's FLOWACKs as flow_stats'
log2 histogram (bucket b: [2^b, 2^(b+1)) us).

    python3 bench/ack_gaps.py FLOW_WINDOW [DURATION]     # run from the checkout; FLOW_WINDOW 0: off
"""
import sys, os, time, subprocess, json
import numpy as np
from rpbcast.config import Config, MemberSpec
from rpbcast.tools import netns

W = int(sys.argv[1]); DUR = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
PORT = 28300
def cfg(i):
    return Config(node_id=i, members=[MemberSpec(j, f"127.0.0.1:{PORT + j}") for j in (1, 2)],
                  bind=f"127.0.0.1:{PORT + i}", group_addr=f"239.255.77.29:{PORT}", linger=0.0,
                  flow_control="receivers", flow_window=W, send_window=1 << 17,
                  store_entries=1 << 22, store_bytes=512 << 20, rcvbuf=32 << 20, sndbuf=32 << 20)
RX = f"""
import sys, time
sys.path.insert(0, {os.getcwd()!r})
from rpbcast import Node
from rpbcast.config import Config, MemberSpec
c = Config(node_id=2, members=[MemberSpec(j, f"127.0.0.1:{{{PORT}+j}}") for j in (1, 2)],
           bind="127.0.0.1:{PORT + 2}", group_addr="239.255.77.29:{PORT}", linger=0.0,
           flow_control="receivers", flow_window={W}, store_entries=1 << 22, store_bytes=512 << 20,
           rcvbuf=32 << 20, sndbuf=32 << 20)
n = Node(c); t_end = time.monotonic() + {DUR} + 2.5
while time.monotonic() < t_end:
    if n.wait(0.05):
        n.recv_batch()
n.close(report=False)
"""
with netns.namespace() as ns, netns.entered(ns):
    p = subprocess.Popen([sys.executable, "-c", RX])
    from rpbcast import Node
    tx = Node(cfg(1))
    sb = tx.engine.send_buffer
    gaps, last = [], [0]
    orig = sb.on_receiver_report
    def rec(source, source_inc, entries, now):
        before = sb.reports.get(source, (0, 0))[1]
        orig(source, source_inc, entries, now)
        if sb.reports.get(source, (0, 0))[1] > before:
            if last[0]:
                gaps.append((now - last[0]) / 1e3)
            last[0] = now
    sb.on_receiver_report = rec
    time.sleep(1.0)
    lens = np.full(1024, 64, np.uint32); buf = np.zeros(1024 * 64, np.uint8)
    t0 = time.monotonic(); sent = 0
    while time.monotonic() - t0 < DUR:
        k = tx.publish_batch(buf, lens)
        sent += k
        if k < 1024:
            tx.wait_writable(0.005)
    dt = time.monotonic() - t0
    st = tx.engine.node.flow_stats()
    g = np.array(gaps)
    def hist_us(a):
        edges = [0, 500, 1000, 2000, 3000, 5000, 10000, 20000, 50000, 1e12]
        h, _ = np.histogram(a, bins=edges)
        return {f"<{int(e) if e < 1e12 else 'inf'}us": int(x) for e, x in zip(edges[1:], h)}
    print(json.dumps({"W": W, "rate": round(sent / dt), "load": os.getloadavg()[0],
        "py_reports_moved": len(gaps) + 1, "py_gap_us_p50_p99": [float(np.percentile(g, 50)), float(np.percentile(g, 99))] if len(g) else None,
        "py_gap_hist": hist_us(g) if len(g) else None,
        "c_acks": st["acks_received"] if st else None, "c_gap_log2_us": st["ack_gap_us_log2"] if st else None}))
    tx.close(report=False)
    p.wait()
