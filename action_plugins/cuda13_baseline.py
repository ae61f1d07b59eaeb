"""Action cuda13_baseline: the old stack measured or its recorded baseline reused, and the restart plan
(documentation: library/cuda13_baseline.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction, prompt_set, trial_line
from cuda13_upgrade.steps import baseline


class ActionModule(StepAction):
    STEP = "baseline"
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "required": True},
        "run_id": {"type": "str", "required": True},
        "snapshot": {"type": "dict", "required": True},
    }

    def run_step(self, host, args, task_vars):
        return baseline.take(
            host,
            args["options"],
            run_id=args["run_id"],
            manifest=args["snapshot"].get("manifest") or {},
            prompts=prompt_set(task_vars),
            on_trial=trial_line(host, "baseline"),
        )
