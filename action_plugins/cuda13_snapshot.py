"""Action cuda13_snapshot: the pre-upgrade snapshot (documentation: library/cuda13_snapshot.py)."""

from __future__ import annotations

from cuda13_upgrade import reportfiles
from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import snapshot


class ActionModule(StepAction):
    STEP = "snapshot"
    OPTION_PREFIXES = ("stack_snapshot_", "cuda13_")
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "default": {}},
        "run_id": {"type": "str", "required": True},
    }

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        report = reportfiles.run_dir(options, args["run_id"]) / host.name / "snapshot.json"
        return snapshot.take(
            host,
            options,
            run_id=args["run_id"],
            write_report=lambda manifest: reportfiles.write_json(report, manifest),
        )
