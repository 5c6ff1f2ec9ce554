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
