"""`rpbcast stress --flow-ack-every N` (issue 15, the maximum-rate goal):
the receivers' acknowledgment cadence of the flow window, on every node,
so an A/B can set it beside --flow-window; without it, Config's default
(the window / 8)."""
from stressrun import stress_args

from rpbcast.config import Config
from rpbcast.tools.stress.plan import make_plan, worker_spec


def _every(tmp_path, *argv):
    args = stress_args(*argv, "--run-dir", str(tmp_path / "run"))
    plan = make_plan(args, use_ns=False)
    return {i: worker_spec(args, plan, i, role)["config"].get("flow_ack_every")
            for role, ids in (("sender", plan.senders), ("receiver", plan.receivers), ("logger", plan.loggers))
            for i in ids}


def test_the_ack_cadence_reaches_every_node(tmp_path):
    e = _every(tmp_path, "--flow-window", "16384", "--flow-ack-every", "4096")
    assert len(e) == 4 and set(e.values()) == {4096}
    cfg = worker_spec(*(lambda a: (a, make_plan(a, use_ns=False)))(
        stress_args("--flow-window", "16384", "--flow-ack-every", "4096", "--run-dir", str(tmp_path / "r2"))), 2,
        "receiver")["config"]
    assert Config(**{k: v for k, v in cfg.items() if k in ("flow_window", "flow_ack_every")},
                  node_id=2).flow_ack_every == 4096


def test_without_the_option_config_decides(tmp_path):
    assert set(_every(tmp_path, "--flow-window", "16384").values()) == {None}
    assert Config(node_id=1, flow_window=16384).flow_ack_every == 0     # 0: the window / 8
