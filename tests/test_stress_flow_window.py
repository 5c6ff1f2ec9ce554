"""The flow window `rpbcast stress` runs with (issue 15): Config's default
(4096) unless --flow-window says otherwise, on every node, so what the tool
prints is what the library does out of the box; the summary says which
window the run had."""
import pytest
from stressrun import stress, stress_args

from rpbcast.config import Config
from rpbcast.tools.stress.plan import make_plan, worker_spec


def _windows(tmp_path, *argv, faults=False):
    args = stress_args(*argv, "--run-dir", str(tmp_path / "run"))
    args.faults_named = faults
    plan = make_plan(args, use_ns=False)
    return {i: worker_spec(args, plan, i, role)["config"].get("flow_window")
            for role, ids in (("sender", plan.senders), ("receiver", plan.receivers), ("logger", plan.loggers))
            for i in ids}


def test_a_plain_stress_run_keeps_the_library_default_on_every_node(tmp_path):
    assert Config(node_id=1).flow_window == 4096
    w = _windows(tmp_path)
    assert len(w) == 4 and set(w.values()) == {None}       # sender, 2 receivers, logger: Config's
    assert set(_windows(tmp_path, "--receivers", "1", "--loggers", "0", "--loss", "0.01").values()) == {None}


@pytest.mark.parametrize("argv,faults", [(("--flow-window", "0"), False), (("--flow-window", "4096"), False),
                                         (("--slow-receiver", "1000"), False), ((), True),
                                         (("--srb-window", "4", "--labels", "stock"), False),
                                         (("--protocol", "pbcast", "--loggers", "0"), False),
                                         (("--atomic",), False)])
def test_an_explicit_window_reaches_every_node_and_other_runs_keep_the_default(tmp_path, argv, faults):
    w = set(_windows(tmp_path, *argv, faults=faults).values())
    if "--flow-window" in argv:
        assert w == {int(argv[1])}
    else:
        assert w == {None}                              # Config's default


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_the_default_stress_prints_latency_in_milliseconds(tmp_path):
    rc, s = stress("--duration", "1", tmp_path=tmp_path)
    assert rc == 0 and s["exactly_once"], s["problems"]
    assert s["flow_window"] == 4096                     # the library's default, as the summary says
    assert 0 < s["latency_p99"] < 1e9, s["latency_p99"]  # ns: below a second


def test_the_report_interval_option_reaches_every_node(tmp_path):
    args = stress_args("--flow-report-interval", "0.01", "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    assert {worker_spec(args, plan, i, "receiver")["config"]["flow_report_interval"] for i in plan.receivers} == {0.01}
    assert worker_spec(args, plan, plan.senders[0], "sender")["config"]["flow_report_interval"] == 0.01
    args = stress_args("--run-dir", str(tmp_path / "run2"))
    assert "flow_report_interval" not in worker_spec(args, make_plan(args, use_ns=False), 1, "sender")["config"]
