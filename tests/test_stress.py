"""The main job end to end: separate processes, real sockets, checks."""
import json
import os
import subprocess
import sys

import pytest
from stressrun import stress, stress_args

from rpbcast.tools.stress import cli as stress_cli
from rpbcast.tools.stress.plan import make_plan, worker_spec

pytestmark = pytest.mark.timeout(300)


@pytest.mark.netns
def test_five_percent_kernel_loss_exactly_once(tmp_path):
    rc, s = stress("--receivers", "2", "--loggers", "1", "--rate", "20000", "--duration", "1.5",
                   "--loss", "0.05", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["transport"] == "multicast" and s["kernel_drops"][0] > 0
    assert s["gaps"] > 0 and s["repairs_peer"] + s["repairs_logger"] > 0
    assert s["sent"] >= 25000
    # run.json and per-node counters are written
    meta = json.load(open(tmp_path / "run" / "run.json"))
    assert meta["kind"] == "stress" and len(meta["nodes"]) == 4
    assert len(os.listdir(tmp_path / "run" / "counters")) == 4


@pytest.mark.netns
def test_messages_larger_than_a_datagram_are_checked_exactly_once(tmp_path):
    """4 KB messages go out as fragments (a seq each) and are delivered
    with their first fragment's seq: the check finds each message once.
    (It used to expect seqs 0..count-1 and report most messages missing
    and the rest unexpected.)"""
    rc, s = stress("--receivers", "1", "--loggers", "0", "--size", "4000", "--rate", "5000", "--duration", "1",
                   tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["sent"] >= 4000 and s["delivered_fraction"] == 1.0


@pytest.mark.netns
def test_receiver_killed_and_restarted_catches_up_from_the_logger(tmp_path):
    # Dead for 2 s: longer than the peers' gossip buffers keep messages
    # (gc_limit 50 x 20 ms), so only the logger's log still has what it
    # missed.  Without loss, every repair in the run is that catch-up.
    # Flow control by the logger alone: held to its receivers too (the
    # stress default), the sender keeps what the dead receiver lacks and
    # serves it as a peer.
    rc, s = stress("--receivers", "2", "--loggers", "1", "--rate", "20000", "--duration", "3",
                   "--flow-control", "loggers",
                   "--kill-receiver", "0.7", "--restart-after", "2.0", tmp_path=tmp_path)
    assert s["receiver_killed"]
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["repairs_logger"] > 10000, (s["repairs_logger"], s["repairs_peer"])


def test_unicast_fallback_with_in_process_loss(tmp_path):
    rc, s = stress("--transport", "unicast", "--receivers", "2", "--loggers", "1", "--rate", "10000",
                   "--duration", "1", "--loss", "0.02", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["transport"] == "unicast" and s["loss_model"].startswith("in-process")
    assert s["repairs_peer"] + s["repairs_logger"] > 0


@pytest.mark.netns
def test_gsgc_declares_a_killed_receiver_failed_and_gc_resumes(tmp_path):
    rc, s = stress("--receivers", "2", "--loggers", "1", "--rate", "30000", "--duration", "4", "--gsgc",
                   "--kill-receiver", "1.0", "--no-restart", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    victim = s["dead_receivers"][0]
    live = [i for i, g in s["gsgc"].items() if g]
    assert len(live) == 3
    for i in live:
        g = s["gsgc"][i]
        assert victim in g["failed"], f"node {i} did not declare {victim} failed"
        assert g["rounds"] > 10 and g["time_to_stable"]["count"] > 0
    # buffers were collected after the failure: far below a run's worth of messages
    for i, b in s["buffer_end"].items():
        if int(i) != victim:
            assert b["store_entries"] < 0.1 * s["sent"]


@pytest.mark.netns
def test_gsgc_with_a_restarted_receiver_stays_exactly_once(tmp_path):
    rc, s = stress("--receivers", "2", "--loggers", "1", "--rate", "30000", "--duration", "3", "--gsgc",
                   "--kill-receiver", "0.8", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]


@pytest.mark.netns
def test_slow_receiver_with_fifo_srb_converges_with_bounded_memory(tmp_path):
    # FIFO-SRB on real sockets: the first receiver's application reads at
    # a tenth of the send rate.  The group is not slowed, everyone ends with
    # the latest value of every item in FIFO order, and the slow receiver's
    # memory stays bounded (what reliable delivery would have queued for it
    # is far larger).
    rc, s = stress("--receivers", "3", "--loggers", "0", "--labels", "stock", "--srb-window", "1024",
                   "--slow-receiver", "3000", "--rate", "30000", "--duration", "3", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]          # the semantic check: FIFO, latest values
    slow = str(min(int(i) for i in s["per_receiver_rate"]))
    assert s["send_rate"] > 0.9 * 30000
    for i, r in s["per_receiver_receive_rate"].items():
        assert r > 0.9 * s["send_rate"], (i, r)                  # every node keeps taking the stream in
    assert s["per_receiver_rate"][slow] < 0.3 * s["send_rate"]    # ... its application is slow
    assert s["per_receiver_purged"][slow] > 0.5 * s["sent"]       # ... and skips obsolete values
    backlog = s["sent"] - 3000 * 4                                # what reliable delivery would queue
    assert s["buffer_peaks"][slow]["store_entries"] < 0.6 * backlog, (s["buffer_peaks"][slow], backlog)


def test_options_are_checked_before_anything_starts(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rpbcast", "stress", "--size", "4", "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--size must be at least 8" in r.stderr
    assert not (tmp_path / "run").exists()
    problem = stress_cli.check_args(stress_args("--transport", "multicast"), use_ns=False)
    assert "needs root" in problem and "--transport unicast" in problem
    assert stress_cli.check_args(stress_args(), use_ns=False) is None


def test_the_plan_gives_each_worker_its_part(tmp_path):
    """Without a namespace: unicast on 127.0.0.1 with in-process loss; only
    the first receiver is throttled and checkpoints where the restart finds it."""
    args = stress_args("--receivers", "2", "--loggers", "1", "--loss", "0.01", "--slow-receiver", "100",
                       "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    assert (plan.senders, plan.receivers, plan.loggers) == ([1], [2, 3], [4])
    assert plan.transport == "unicast" and plan.loss_model.startswith("in-process")
    assert plan.flow_control == "receivers" and os.path.isdir(plan.work)   # held to receivers and loggers
    first, second = (worker_spec(args, plan, i, "receiver") for i in plan.receivers)
    assert first["slow"] == 100 and second["slow"] == 0
    assert first["config"]["drop_rate"] == 0.01 and first["config"]["transport"] == "unicast"
    restarted = worker_spec(args, plan, 2, "receiver", {"restarted": True})
    assert restarted["restarted"] and restarted["checkpoint"] == first["checkpoint"]
    logger = worker_spec(args, plan, 4, "logger")
    assert logger["config"]["log_dir"].startswith(plan.work) and "checkpoint" not in logger
    assert [m["role"] for m in logger["config"]["members"]] == ["member", "member", "member", "logger"]


@pytest.mark.parametrize("size,batch,want", [(64, None, 1024), (1024, None, 1024), (4000, None, 262),
                                              (65536, None, 16), (4 << 20, None, 1), (65536, "7", 7)])
def test_the_sender_publishes_at_most_a_mebibyte_per_call_unless_told(tmp_path, size, batch, want):
    """A call's messages are stamped before it: 1024 messages of 64 KB per
    call put the call's own ~0.1 s into their latency (p50 ~0.1 s against
    a few ms at 16 per call).  --batch still says exactly."""
    extra = ("--batch", batch) if batch else ()
    args = stress_args("--size", str(size), *extra, "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    assert worker_spec(args, plan, plan.senders[0], "sender")["batch"] == want


def test_pin_puts_senders_on_the_first_cpu_and_receivers_on_the_last(tmp_path):
    """`--pin` (the low-latency setup with --receive-mode spin): each
    sender's and receiver's spec names one CPU of this process's, loggers
    none; without it nobody is pinned.  The worker pins its thread before
    it starts others (checked here in a thread of its own)."""
    cpus = sorted(os.sched_getaffinity(0))
    args = stress_args("--receivers", "2", "--loggers", "1", "--receive-mode", "spin", "--pin",
                       "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    roles = {**{i: "sender" for i in plan.senders}, **{i: "receiver" for i in plan.receivers},
             **{i: "logger" for i in plan.loggers}}
    specs = {i: worker_spec(args, plan, i, r) for i, r in roles.items()}
    assert [specs[i]["cpu"] for i in plan.senders] == [cpus[0]]
    assert [specs[i]["cpu"] for i in plan.receivers] == [cpus[-1]] * 2
    assert all("cpu" not in specs[i] for i in plan.loggers)
    assert all(specs[i]["config"]["receive_mode"] == "spin" for i in plan.receivers)
    unpinned = stress_args("--run-dir", str(tmp_path / "run2"))
    p2 = make_plan(unpinned, use_ns=False)
    assert all("cpu" not in worker_spec(unpinned, p2, i, r) for i, r in
               [(i, "sender") for i in p2.senders] + [(i, "receiver") for i in p2.receivers])

    import threading
    from rpbcast.tools.stress.worker.node import pin
    seen = {}

    def worker():
        pin(specs[plan.receivers[0]])
        seen["cpus"] = os.sched_getaffinity(0)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["cpus"] == {cpus[-1]}
    assert sorted(os.sched_getaffinity(0)) == cpus          # this thread untouched
