"""rpbcast as the "own" peer of ../shared/peers/run.sh (the OWN_SEND /
OWN_RECV hook), so rpbcast is measured in the same run as JGroups, ZeroMQ
(OpenPGM, NORM) and NORM:

    OWN_RECV='python3 bench/peers_own.py recv {count} {idle_ms} {max_wait_ms} {rid}' \
    OWN_SEND='python3 bench/peers_own.py send {count} {size}' \
    PEERS="jgroups zmq-epgm zmq-norm norm own" ../shared/peers/run.sh

Runs inside the harness's namespace (loopback multicast).  Receivers are
nodes 100+rid on 127.0.0.1:17600+rid, the sender is node 1 on :17601; no
logger (peers-only repair: the sender's buffer and the receivers' gossip
buffers serve repairs) with receiver-driven flow control (the sender never
runs further ahead of the slowest receiver than its store holds), so the
comparison is protocol against protocol.
"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rpbcast import Config, MemberSpec  # noqa: E402
from rpbcast.api import Node  # noqa: E402
from rpbcast.tools.stress.tally import count_seqs  # noqa: E402

GROUP = "239.192.1.77:17500"
MAX_RECEIVERS = 8


def members():
    m = [MemberSpec(1, "127.0.0.1:17601")]
    m += [MemberSpec(100 + r, f"127.0.0.1:{17600 + 100 + r}") for r in range(1, MAX_RECEIVERS + 1)]
    return m


def config(node_id, port):
    return Config(node_id=node_id, bind=f"127.0.0.1:{port}", group_addr=GROUP, members=members(),
                  gossip_interval=0.01, gc_limit=300, gossip_buffer_bytes=256 << 20,
                  store_bytes=512 << 20, store_entries=1 << 22, rcvbuf=32 << 20, sndbuf=32 << 20,
                  idle_after=0.002, member_timeout=3600, flow_control="receivers")


def recv(count, idle_ms, max_wait_ms, rid):
    node = Node(config(100 + rid, 17600 + 100 + rid))
    print("READY", flush=True)
    seen = np.zeros(count, np.uint8)
    buf = bytearray(64 << 20)
    got = uniq = bad = nbytes = 0
    first = last = t_warm = None
    warm_n = count // 10
    start = time.monotonic_ns()
    while True:
        b = node.recv_batch(65536, buf)
        t = time.monotonic_ns()
        if not b.count:
            if got == 0 and (t - start) / 1e6 > max_wait_ms:
                break
            if got and (t - last) / 1e6 > idle_ms:
                break
            node.transport.wait(0.01)
            continue
        if first is None:
            first = t
        last = t
        q = b.seqs.astype(np.int64)
        ok = q < count
        bad += int((~ok).sum())
        q = q[ok]
        count_seqs(seen, q)
        got += b.count
        nbytes += int(b.lens.sum())
        if t_warm is None and got >= warm_n:
            t_warm = t
        uniq = int((seen > 0).sum()) if got >= count else uniq
        if got >= count and (seen > 0).all():
            break
    uniq = int((seen > 0).sum())
    dups = int((seen > 1).sum())
    el = (last - first) / 1e9 if first and last and last > first else 0.0
    el_w = (last - t_warm) / 1e9 if t_warm and last > t_warm else 0.0
    missing = count - uniq
    fm = int(np.nonzero(seen == 0)[0][0]) if missing else -1
    print(f"RESULT role=recv expected={count} got={got} unique={uniq} dups={dups} missing={missing} ooo=0 "
          f"bad={bad} first_missing={fm} elapsed={el:.4f} msgs_per_s={uniq / el if el else 0:.0f} "
          f"MBps={nbytes / el / 1e6 if el else 0:.2f} steady_msgs_per_s={(got - warm_n) / el_w if el_w else 0:.0f} "
          f"ok={int(missing == 0 and dups == 0 and bad == 0)}", flush=True)
    node.close()


def send(count, size, linger_s=30):
    node = Node(config(1, 17601))
    time.sleep(0.2)
    batch = 4096
    payload = np.zeros(batch * size, np.uint8)
    lens = np.full(batch, size, np.uint32)
    sent = 0
    t0 = time.monotonic_ns()
    while sent < count:
        k = node.publish_batch(payload, lens[:min(batch, count - sent)])
        sent += k
        if k == 0:
            time.sleep(0.0002)
    el = (time.monotonic_ns() - t0) / 1e9
    print(f"RESULT role=send sent={sent} size={size} elapsed={el:.4f} msgs_per_s={sent / el:.0f} "
          f"MBps={sent * size / el / 1e6:.2f}", flush=True)
    time.sleep(linger_s)             # serve repairs until the harness stops us
    node.close()


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "recv":
        recv(*map(int, sys.argv[2:6]))
    elif role == "send":
        send(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("usage: peers_own.py recv COUNT IDLE_MS MAX_WAIT_MS RID | send COUNT SIZE")
