"""bench/pingpong.py, the peers harness's OWN_PING/OWN_PONG hook, speaks the
harness's protocol: the pong prints READY, the ping prints one RESULT line
with the fields the harness parses, every echo came back (short, in a
namespace of its own)."""
import os
import pathlib
import subprocess
import sys
import time

import pytest

from rpbcast.tools import netns

ROOT = pathlib.Path(__file__).resolve().parent.parent
PINGPONG = str(ROOT / "bench" / "pingpong.py")


def kv(line):
    return dict(f.split("=", 1) for f in line.split()[2:])


@pytest.mark.netns
@pytest.mark.parametrize("mode", [[], ["--inline"]])
def test_pingpong_hook_round_trips(mode):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with netns.namespace() as ns:
        pong = subprocess.Popen(netns.exec_argv(ns, [sys.executable, PINGPONG, "pong", "30", *mode]),
                                stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert pong.stdout.readline().strip() == "READY"
            t0 = time.monotonic()
            out = subprocess.run(netns.exec_argv(ns, [sys.executable, PINGPONG, "ping", "200", "64", *mode]),
                                 capture_output=True, text=True, env=env, timeout=60).stdout
        finally:
            pong.kill()
            pong.wait()
    results = [ln for ln in out.splitlines() if ln.startswith("RESULT role=ping ")]
    assert len(results) == 1, out
    r = kv(results[0])
    assert int(r["samples"]) == 200 and int(r["timeouts"]) == 0, out
    q = [float(r[k]) for k in ("rtt_min_us", "rtt_p50_us", "rtt_p99_us", "rtt_max_us")]
    assert 0 < q[0] <= q[1] <= q[2] <= q[3] < (time.monotonic() - t0) * 1e6, out
    stages = [ln for ln in out.splitlines() if ln.startswith("STAGES ")]
    assert len(stages) == 1, out
    assert [f.split("_us=")[0] for f in stages[0].split()[1:]] == ["pub", "fwd", "wake", "turn", "back", "wake2"]


@pytest.mark.netns
def test_lossy_ping_hands_its_options_with_their_values_to_the_pong():
    """`ping --loss P` starts its own pong: options that take a value
    (--receive-mode spin, --flow-window 0) reach the pong with the value.
    (They used to be handed on without it: the pong refused its arguments
    and the ping waited out every echo.)"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, PINGPONG, "ping", "200", "64", "--timeout", "0.5", "--loss", "0.01",
                        "--receive-mode", "spin", "--flow-window", "0", "--gc-freeze"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "EXACT yes" in r.stdout, r.stdout + r.stderr
    results = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT role=ping ")]
    assert len(results) == 1 and int(kv(results[0])["samples"]) == 200, r.stdout


def test_shared_flags_rebuild_every_option_with_its_value():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import pingpong
    finally:
        sys.path.remove(str(ROOT / "bench"))
    import argparse
    ap = argparse.ArgumentParser()
    pingpong._shared(ap)
    argv = ["--receive-mode", "spin", "--flow-window", "0", "--tail-probe", "0.0002", "--pin", "--gc-freeze"]
    assert pingpong.shared_flags(ap.parse_args(argv)) == ["--tail-probe", "0.0002", "--flow-window", "0",
                                                          "--receive-mode", "spin", "--pin", "--gc-freeze"]
    assert pingpong.shared_flags(ap.parse_args([])) == []
