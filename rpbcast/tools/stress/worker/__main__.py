"""``python -m rpbcast.tools.stress.worker SPEC``: run one role, then close
its traces, write its counters into the run directory and close its node.
Any failure is reported as an "error" event rather than left to hang the
orchestrator."""
import json
import sys

from rpbcast.tools.stress.worker.channel import commands, emit
from rpbcast.tools.stress.worker.logger import run_logger
from rpbcast.tools.stress.worker.node import final_stats, pin, trace_writer
from rpbcast.tools.stress.worker.receiver import run_receiver
from rpbcast.tools.stress.worker.sender import run_sender

ROLES = {"sender": run_sender, "receiver": run_receiver, "logger": run_logger}


def main():
    spec = json.loads(sys.argv[1])
    pin(spec)                   # before any thread starts: they inherit it
    cmds = commands()
    role = spec["role"]
    tw_holder = []

    def twf(node):
        tw = trace_writer(spec, node)
        tw_holder.append(tw)
        return tw

    roles = ROLES
    if spec.get("atomic"):
        from rpbcast.tools.stress.worker.atomic import ROLES as ATOMIC_ROLES
        roles = {**ROLES, **ATOMIC_ROLES}
    try:
        node = roles.get(role, run_logger)(spec, cmds, twf)
        for tw in tw_holder:
            if tw is not None:
                tw.close()
        if spec.get("run_dir"):
            from rpbcast.analysis.tracefile import write_counters
            write_counters(spec["run_dir"], node.node_id, final_stats(node))
        node.close()
    except Exception as e:  # report, don't hang the orchestrator
        import traceback
        emit(event="error", role=role, error=f"{type(e).__name__}: {e}", tb=traceback.format_exc())
        sys.exit(1)


if __name__ == "__main__":
    main()
