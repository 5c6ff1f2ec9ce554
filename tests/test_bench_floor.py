"""The machine-floor benches: bench/offcpu.py's trace parsing and off-CPU
attribution (on a synthetic sched_switch/sched_wakeup trace, no tracefs
needed), bench/oneway_floor.py's percentiles, late counts and loss on
synthetic stamps, and -- as root -- both against the real kernel, briefly."""
import importlib.util
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


offcpu = load("offcpu")
floor = load("oneway_floor")


def sw(task, pid, cpu, ts, prev, prev_pid, state, nxt, next_pid):
    return (f"{task:>16}-{pid:<7} [{cpu:03d}] d..2. {ts}: sched_switch: prev_comm={prev} prev_pid={prev_pid} "
            f"prev_prio=120 prev_state={state} ==> next_comm={nxt} next_pid={next_pid} next_prio=120")


def wk(task, pid, cpu, ts, comm, wpid, target):
    return f"{task:>16}-{pid:<7} [{cpu:03d}] dNh4. {ts}: sched_wakeup: comm={comm} pid={wpid} prio=120 target_cpu={target:03d}"


# The spinning receiver (tid 100) on CPU 1: preempted 3.5 ms (kdamond 3 ms,
# its loop thread 101 0.5 ms), preempted 50 us (101), asleep 300 us (idle;
# woken 200 us before it ran), off at the end (not a whole interval).  CPU 0
# runs a sender (200) and a host agent throughout: never on CPU 1.
TRACE = "\n".join([
    "# tracer: nop",
    "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION",
    sw("tokio-rt-worker", 300, 0, "10.000000", "tokio-rt-worker", 300, "S", "python3", 200),
    sw("python3", 100, 1, "10.001000", "python3", 100, "R", "kdamond.0", 77),
    sw("python3", 200, 0, "10.001500", "python3", 200, "R", "tokio-rt-worker", 300),
    sw("kdamond.0", 77, 1, "10.004000", "kdamond.0", 77, "S", "python3", 101),
    sw("python3", 101, 1, "10.004500", "python3", 101, "S", "python3", 100),
    sw("tokio-rt-worker", 300, 0, "10.006000", "tokio-rt-worker", 300, "S", "python3", 200),
    sw("python3", 100, 1, "10.007000", "python3", 100, "R+", "python3", 101),
    sw("python3", 101, 1, "10.007050", "python3", 101, "S", "python3", 100),
    sw("python3", 100, 1, "10.010000", "python3", 100, "S", "swapper/1", 0),
    wk("<idle>", 0, 1, "10.010100", "python3", 100, 1),
    wk("<idle>", 0, 1, "10.010200", "python3", 100, 1),      # a second wake-up: the first one counts
    "   some other line that is not an event",
    sw("<idle>", 0, 1, "10.010300", "swapper/1", 0, "R", "python3", 100),
    sw("python3", 100, 1, "10.020000", "python3", 100, "D", "my worker-thread", 400),
    sw("python3", 200, 0, "10.030000", "python3", 200, "R", "swapper/0", 0),
]).splitlines()


def test_offcpu_parses_the_trace_text():
    ev = offcpu.parse(TRACE)
    assert len(ev) == 14                       # the comment lines and the stray line skipped
    assert ev[0] == ("switch", 10_000_000_000, 0, 300, "tokio-rt-worker", "S", 200, "python3")
    assert ev[9] == ("wakeup", 10_010_100_000, 1, 100, "python3", 0)     # woken with the CPU idle
    assert ev[12][6:] == (400, "my worker-thread")          # a comm with a space and a dash
    assert [offcpu.state_class(s) for s in ("R", "R+", "S", "D", "I")] == \
        ["preempted", "preempted", "sleeping", "sleeping", "other"]


def test_offcpu_attributes_the_receivers_off_cpu_time():
    rep = offcpu.attribute(offcpu.parse(TRACE), [100], threshold_us=200)
    (th,) = rep["threads"]
    assert th["off"]["preempted"]["n"] == 2
    assert th["off"]["preempted"]["max_us"] == 3500.0
    assert th["off"]["preempted"]["total_ms"] == pytest.approx(3.55)
    assert th["off"]["sleeping"]["n"] == 1 and th["off"]["sleeping"]["max_us"] == 300.0
    assert th["off"]["other"]["n"] == 0
    assert th["wake_to_run"]["n"] == 1 and th["wake_to_run"]["max_us"] == 200.0
    # on CPU: 10.0045-10.007, 10.00705-10.010, 10.0103-10.020 (before its first switch-in: unknown)
    assert th["on_cpu_ms"] == pytest.approx(2.5 + 2.95 + 9.7)
    over = th["over_threshold"]
    assert (over["n"], over["preempted"], over["sleeping"]) == (2, 1, 1)
    assert over["total_ms"] == pytest.approx(3.8)
    assert over["excess_ms"] == pytest.approx(3.3 + 0.1)          # 3.5 - 0.2 and 0.3 - 0.2
    takers = {t["task"]: t for t in th["takers"]}
    assert set(takers) == {"kdamond.0-77", "python3-101", "<idle>"}       # nothing from CPU 0
    assert takers["kdamond.0-77"]["total_us"] == 3000.0
    assert takers["python3-101"]["total_us"] == 500.0 and takers["python3-101"]["intervals"] == 1
    assert takers["<idle>"]["total_us"] == 300.0
    assert [t["task"] for t in th["takers"]] == ["kdamond.0-77", "python3-101", "<idle>"]
    assert th["longest"][0]["us"] == 3500.0 and th["longest"][0]["cpu"] == 1
    assert list(th["longest"][0]["ran"]) == ["kdamond.0-77", "python3-101"]
    # a window that cuts segments counts only their overlap
    segs = offcpu.run_segments(offcpu.parse(TRACE))
    assert offcpu.ran_meanwhile(segs, 1, 10_002_000_000, 10_004_200_000) == \
        {"kdamond.0-77": 2_000_000, "python3-101": 200_000}
    # a lower threshold lets the 50 us preemption in as well
    low = offcpu.attribute(offcpu.parse(TRACE), [100], threshold_us=10)["threads"][0]
    assert low["over_threshold"]["n"] == 3
    assert {t["task"]: t["total_us"] for t in low["takers"]}["python3-101"] == 550.0
    # a window: only the intervals beginning 5-8 ms after the first event
    win = offcpu.attribute(offcpu.parse(TRACE), [100], threshold_us=10, window=(0.005, 0.008))["threads"][0]
    assert win["off"]["preempted"]["n"] == 1 and win["off"]["preempted"]["max_us"] == 50.0
    assert win["off"]["sleeping"]["n"] == 0
    # the whole trace's time per CPU
    cpu1 = {t["task"]: t["ms"] for t in rep["cpus"]["1"]}
    assert cpu1["kdamond.0-77"] == 3.0 and cpu1["<idle>"] == 0.3
    assert "python3-200" not in cpu1
    assert th["dropped_unknown_end"] == 0 and rep["repaired"] == {"inferred": 0, "unknown": 0}
    text = offcpu.table(rep)
    assert "kdamond.0-77" in text and "over 200 us: 2 intervals" in text


def test_offcpu_repairs_the_switches_the_trace_missed():
    # the kernel's trace can miss a switch.  (1) tid 100 is seen running
    # (waking another task) on a CPU the trace gave to kdamond: when it got
    # the CPU back is unknown, that interval is dropped and counted, the
    # CPU's time until then is <unknown>.  (2) it sleeps, is woken on the
    # idle CPU and is next seen switching out, the idle CPU's switch to it
    # missing: it ran from its wake-up (inferred).  kdamond, seen running
    # (waking a kworker) until 5.0015, keeps that time; the rest is unknown.
    trace = [
        sw("python3", 100, 1, "5.000000", "python3", 100, "R", "kdamond.0", 77),
        wk("kdamond.0", 77, 1, "5.001500", "kworker/1:1", 33, 1),     # kdamond seen running until 5.0015
        wk("python3", 100, 1, "5.002000", "python3", 101, 0),
        sw("python3", 100, 1, "5.003000", "python3", 100, "S", "swapper/1", 0),
        wk("<idle>", 0, 1, "5.004000", "python3", 100, 1),
        sw("<idle>", 0, 1, "5.004500", "swapper/1", 0, "R", "python3", 100),
        sw("python3", 100, 1, "5.005000", "python3", 100, "S", "swapper/1", 0),
        wk("<idle>", 0, 1, "5.006000", "python3", 100, 1),
        sw("python3", 100, 1, "5.009000", "python3", 100, "R", "python3", 101),
        sw("python3", 101, 1, "5.009500", "python3", 101, "S", "python3", 100),
    ]
    events, fixed = offcpu.repair(offcpu.parse(trace))
    assert fixed == {"inferred": 1, "unknown": 1}
    assert [e[1:] for e in events if len(e) > 8] == [
        (5_002_000_000, 1, 77, "kdamond.0", "?", 100, "?", "unknown"),
        (5_006_000_000, 1, 0, "swapper/1", "?", 100, "python3", "inferred")]
    rep = offcpu.attribute(offcpu.parse(trace), [100], threshold_us=200)
    (th,) = rep["threads"]
    assert th["dropped_unknown_end"] == 1 and th["inferred_end"] == 1
    assert th["off"]["sleeping"]["n"] == 2 and th["off"]["sleeping"]["total_ms"] == 2.5     # 1.5 + 1.0 ms
    assert th["off"]["preempted"]["n"] == 1 and th["off"]["preempted"]["max_us"] == 500.0
    assert rep["repaired"] == {"inferred": 1, "unknown": 1}
    assert {t["task"]: t["total_us"] for t in th["takers"]} == {"<idle>": 2500.0, "python3-101": 500.0}
    cpu1 = {t["task"]: t["ms"] for t in rep["cpus"]["1"]}
    assert cpu1["<unknown>"] == 0.5 and cpu1["kdamond.0-77"] == 1.5
    assert cpu1["python3-100"] == 1.0 + 0.5 + 3.0
    text = offcpu.table(rep)
    assert "1 off-CPU intervals dropped" in text and "1 ended by an inferred switch" in text


def test_offcpu_ignores_intervals_not_wholly_in_the_trace():
    # the sender (200) is off at the start (unknown since when) and at the end
    rep = offcpu.attribute(offcpu.parse(TRACE), [200, 300], threshold_us=200)
    by_tid = {t["tid"]: t for t in rep["threads"]}
    assert by_tid[200]["off"]["preempted"]["n"] == 1               # 10.0015 -> 10.006 only
    assert by_tid[200]["off"]["preempted"]["max_us"] == 4500.0
    assert {t["task"] for t in by_tid[200]["takers"]} == {"tokio-rt-worker-300"}
    assert by_tid[300]["off"]["sleeping"]["n"] == 1                # 10.000 -> 10.0015


def test_floor_percentiles_late_counts_and_loss():
    n, warm = 1000, 100
    seq = np.arange(n, dtype=np.uint64)
    due = 1_000_000_000 + seq.astype(np.int64) * 10_000
    sent = due + 1_000                                   # every send call 1 us after its due time
    rx = due + 10_000                                    # 10 us from due
    rx[warm:warm + 20] = due[warm:warm + 20] + 150_000   # 20 late by 150 us
    rx[500:505] = due[500:505] + 2_000_000               # 5 late by 2 ms
    sent[500:505] = due[500:505] + 1_500_000             # ... of which the sender was 1.5 ms late
    rx[:warm] = due[:warm] + 50_000_000                  # the warm-up's 50 ms: not counted
    keep = np.ones(n, bool)
    keep[700] = False                                    # one lost
    order = np.concatenate([np.flatnonzero(keep), [600]])   # one duplicate, arriving last
    r = floor.summarize(seq[order], due[order], sent[order], rx[order], warm_seq=warm, expected=n)
    assert r["received"] == 900 and r["lost"] == 1 and r["duplicates"] == 1 and r["reordered"] == 1
    assert r["late_100us"] == 25 and r["late_1ms"] == 5
    assert r["sent_late_100us"] == 5
    assert r["from_due"]["p50"] == 10.0 and r["from_due"]["p90"] == 10.0
    assert r["from_due"]["p99"] == 150.0                 # 875 at 10 us, 20 at 150, 5 at 2 ms
    assert r["from_due"]["p99.9"] == 2000.0 and r["from_due"]["max"] == 2000.0
    assert r["from_send"]["p50"] == 9.0 and r["from_send"]["max"] == 500.0
    assert r["lag"]["p50"] == 1.0 and r["lag"]["max"] == 1500.0
    # exactly 100 us late is not "late by > 100 us"
    assert floor.summarize(seq[:10], due[:10], due[:10], due[:10] + 100_000)["late_100us"] == 0
    assert floor.summarize(seq[:10], due[:10], due[:10], due[:10] + 100_001)["late_100us"] == 10
    line = floor.result_line("recv", r, 100000)
    kv = floor.kv(line)
    assert kv["from_due_p999_us"] == "2000.0" and kv["late_1ms"] == "5" and kv["lost"] == "1"


def test_floor_decodes_the_receivers_slots():
    buf = bytearray(3 * floor.SLOT)
    for i, (s, d, t, r) in enumerate([(5, 100, 110, 130), (6, 200, 205, 260), (floor.END, 0, 0, 9)]):
        floor.HEAD.pack_into(buf, i * floor.SLOT, s, d, t, r)
    seq, due, sent, rx = floor.decode(buf, 2)
    assert list(seq) == [5, 6] and list(due) == [100, 200] and list(sent) == [110, 205] and list(rx) == [130, 260]


root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


@pytest.mark.netns
def test_floor_runs_one_way_in_a_namespace():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "oneway_floor.py"), "--rate", "5000",
                          "--seconds", "0.2", "--warm", "0.05", "--no-pin"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if " RESULT " in ln]
    kv = floor.kv(line.split(" floor ", 1)[1])
    assert int(kv["received"]) == 1000 and kv["lost"] == "0" and kv["dup"] == "0", line
    q = [float(kv[f"from_due_{k}_us"]) for k in ("p50", "p90", "p99", "p999", "max")]
    assert 0 < q[0] <= q[1] <= q[2] <= q[3] <= q[4], line


@root
@pytest.mark.skipif(not os.path.isdir("/sys/kernel/tracing/instances"), reason="no tracefs instances")
def test_offcpu_records_a_sleeping_thread_and_removes_its_instance():
    child = "import time\nfor _ in range(6): time.sleep(0.005)"
    with offcpu.Recorder(buffer_kb=2048) as rec:
        inst = rec.dir
        assert open(os.path.join(inst, "tracing_on")).read().strip() == "1"
        p = subprocess.Popen([sys.executable, "-c", child])
        pid = p.pid
        p.wait()
        time.sleep(0.01)
        rec.stop()
        text = rec.text()
    assert not os.path.exists(inst)
    rep = offcpu.attribute(offcpu.parse(text.splitlines()), [pid], threshold_us=2000)
    sleeps = rep["threads"][0]["off"]["sleeping"]
    assert sleeps["n"] >= 4
    assert 4000 < sleeps["max_us"] < 1_000_000
    assert rep["threads"][0]["over_threshold"]["sleeping"] >= 4
