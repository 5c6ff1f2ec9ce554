"""The flow window a plain `rpbcast stress` runs with (issue 15, the
maximum-rate goal): 16384 on every node unless --flow-window says
otherwise; runs that slow or stop a receiver on purpose, atomic delivery,
FIFO-SRB and the other protocols keep Config's default (off).  The summary
says which window the run had."""
import pytest
from stressrun import stress, stress_args

from rpbcast.config import Config
from rpbcast.tools.stress.plan import STRESS_FLOW_WINDOW, make_plan, worker_spec


def _windows(tmp_path, *argv, faults=False):
    args = stress_args(*argv, "--run-dir", str(tmp_path / "run"))
    args.faults_named = faults
    plan = make_plan(args, use_ns=False)
    return {i: worker_spec(args, plan, i, role)["config"].get("flow_window")
            for role, ids in (("sender", plan.senders), ("receiver", plan.receivers), ("logger", plan.loggers))
            for i in ids}


def test_a_plain_stress_run_has_the_flow_window_on_every_node(tmp_path):
    assert STRESS_FLOW_WINDOW == 16384
    assert Config(node_id=1).flow_window == 0           # the library's default is unchanged
    w = _windows(tmp_path)
    assert len(w) == 4 and set(w.values()) == {STRESS_FLOW_WINDOW}      # sender, 2 receivers, logger
    assert set(_windows(tmp_path, "--receivers", "1", "--loggers", "0", "--loss", "0.01").values()) == {
        STRESS_FLOW_WINDOW}


@pytest.mark.parametrize("argv,faults", [(("--flow-window", "0"), False), (("--flow-window", "4096"), False),
                                         (("--slow-receiver", "1000"), False), ((), True),
                                         (("--srb-window", "4", "--labels", "stock"), False),
                                         (("--protocol", "pbcast", "--loggers", "0"), False),
                                         (("--atomic",), False)])
def test_an_explicit_window_wins_and_runs_that_pace_a_receiver_keep_the_default(tmp_path, argv, faults):
    w = set(_windows(tmp_path, *argv, faults=faults).values())
    if "--flow-window" in argv:
        assert w == {int(argv[1])}
    else:
        assert w == {None}                              # Config's default: off


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_the_default_stress_prints_its_flow_window_and_latency_in_milliseconds(tmp_path):
    rc, s = stress("--duration", "1", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["flow_window"] == STRESS_FLOW_WINDOW
    assert 0 < s["latency_p99"] < 1e9, s["latency_p99"]  # ns: below a second


def test_the_report_interval_option_reaches_every_node(tmp_path):
    args = stress_args("--flow-report-interval", "0.01", "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    assert {worker_spec(args, plan, i, "receiver")["config"]["flow_report_interval"] for i in plan.receivers} == {0.01}
    assert worker_spec(args, plan, plan.senders[0], "sender")["config"]["flow_report_interval"] == 0.01
    args = stress_args("--run-dir", str(tmp_path / "run2"))
    assert "flow_report_interval" not in worker_spec(args, make_plan(args, use_ns=False), 1, "sender")["config"]
