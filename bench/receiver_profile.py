"""Where a receiving process's CPU goes at line rate (issue 15, the
maximum-rate goal): runs `rpbcast stress --json ARGS` from a checkout,
finds the (first) receiver's process once it runs, records it with
`perf record --call-graph dwarf` for a while in the middle of the sending,
and sorts every sample into one part of the receive path by its call
chain: the kernel's recvmmsg, the node's per-message receive, the store
put, the take into the application's buffer, FLOWACKs, waits and thread
switches, the store's rounds, the control plane, and the stress receiver's
own Python (its tally, its checkpoint, the interpreter).

    python3 bench/receiver_profile.py --tree . --tree ../main -- \\
        --loggers 0 --receivers 1 --duration 5 --flow-window 8192 --pin

Prints, per tree, the share of the receiver's samples in each part, the
page faults among them (first touch of the store and of the tally's
arrays), and the run's delivered rate and p99.  perf must be installed and
the caller root (or perf_event_paranoid low enough); one run per tree, so
compare trees of one invocation only."""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

# first match wins; a part matches when any key is in a frame of the chain
PARTS = [
    ("stress checkpoint, other writes (np.savez, CRC, stdout)",
     ("savez", "crc32_z", "ksys_write", "vfs_write", "_ZipWrite", "do_unlinkat", "do_renameat")),
    ("FLOWACK: build and send", ("rp_flowack", "rp_sock_send", "__sys_sendmsg", "__x64_sys_sendmmsg",
                                 "udp_sendmsg", "rp_loop_flush")),
    ("take: node -> buffer (rp_node_recv_ex, deliver_one, payload copy)", ("rp_node_recv_ex", "deliver_one")),
    ("take: columns copied out, Batch (Cython, NumPy)", ("Transport_45take", "Transport_44take", "_copied",
                                                          "Transport__take_into")),
    ("receive: store put (copy, index, first touch of the arena)", ("rp_mstore_put", "rp_seqidx_put")),
    ("receive: kernel (recvmmsg, copy to user)", ("__x64_sys_recvmmsg", "do_recvmmsg", "rp_sock_recv")),
    ("receive: node per message (parse, track, count)", ("rp_node_rx", "rx_into_node", "rx_data", "rp_wire_")),
    ("store rounds (gc)", ("rp_mstore_gc", "free_tail", "rp_node_round", "Node_177round", "rp_mstore_release")),
    ("waits, wake-ups, thread switches", ("do_sys_poll", "__x64_sys_ppoll", "do_epoll_wait", "epoll_pwait",
                                          "__x64_sys_futex", "futex_", "schedule", "finish_task_switch",
                                          "asm_sysvec_reschedule_ipi", "irqentry_exit_to_user_mode",
                                          "__x64_sys_read", "ppoll")),
    ("control plane (Python, loop thread)", ("_on_control", "handle_timer", "on_data_plane", "wire_")),
    ("stress tally (NumPy)", ("array_", "ufunc", "PyArray", "arr_bincount", "_multiarray", "npy_", "LONG_",
                              "UBYTE_", "UINT_", "ULONG_", "dispatcher_vectorcall")),
    ("interpreter (stress loop, API)", ("_PyEval_EvalFrameDefault", "_Py", "Py", "libpython")),
]


def part(chain):
    s = " ".join(chain)
    for name, keys in PARTS:
        if any(k in s for k in keys):
            return name
    return "other"


def chains(perf_data):
    """[(tid, [frame symbol, leaf first])] of a perf.data file."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "tid,ip,sym"], capture_output=True,
                         text=True).stdout
    samples, cur = [], None
    for line in out.splitlines():
        if not line.strip():
            if cur:
                samples.append(cur)
            cur = None
        elif not line.startswith("\t"):
            cur = (line.split()[0], [])
        elif cur is not None:
            f = line.strip().split(None, 1)
            cur[1].append(f[1] if len(f) > 1 else f[0])
    if cur:
        samples.append(cur)
    return samples


def _receiver(root):
    """The pid of the first process under root whose spec says receiver."""
    todo = [root]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        todo += kids
        for a in argv:
            if a.startswith(b"{") and json.loads(a).get("role") == "receiver":
                return p
    return None


def profile(tree, args, after, seconds, freq):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    st = subprocess.Popen([sys.executable, "-m", "rpbcast", "stress", "--json", *args], cwd=os.path.abspath(tree),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    for _ in range(200):
        pid = _receiver(st.pid)
        if pid:
            break
        time.sleep(0.05)
    time.sleep(after)
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        if pid:
            subprocess.run(["perf", "record", "-q", "-F", str(freq), "--call-graph", "dwarf,16384", "-p", str(pid),
                            "-o", data, "--", "sleep", str(seconds)], capture_output=True)
        out, err = st.communicate()
        samples = chains(data) if pid and os.path.exists(data) else []
    try:
        summary = json.loads(out)
    except ValueError:
        summary = {"error": (out + err)[-400:]}
    return samples, summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", help="checkout to run (repeatable; default .)")
    ap.add_argument("--after", type=float, default=1.5, help="seconds after the receiver starts")
    ap.add_argument("--seconds", type=float, default=1.5, help="seconds recorded")
    ap.add_argument("--freq", type=int, default=999)
    ap.add_argument("stress", nargs=argparse.REMAINDER, help="-- then rpbcast stress arguments")
    o = ap.parse_args()
    args = [a for a in o.stress if a != "--"]
    for tree in o.tree or ["."]:
        samples, s = profile(tree, args, o.after, o.seconds, o.freq)
        if "error" in s:
            print(f"## {tree}: ERROR {s['error']}")
            continue
        n = len(samples) or 1
        threads = collections.Counter(t for t, _ in samples)
        faults = sum(1 for _, c in samples if any(f.startswith("exc_page_fault") for f in c))
        print(f"## {tree}: delivered {s['recv_rate_min'] / 1e6:.2f} M msgs/s, p99 "
              f"{(s['latency_p99'] or 0) / 1e6:.2f} ms, exactly once {s['exactly_once']}; {len(samples)} samples "
              f"({', '.join(str(v) for _, v in threads.most_common(2))} by thread: application, loop), "
              f"{100 * faults / n:.1f} % in page faults")
        shares = collections.Counter(part(c) for _, c in samples)
        for name, _ in PARTS + [("other", ())]:
            print(f"| {name} | {100 * shares[name] / n:.1f} % |")


if __name__ == "__main__":
    main()
