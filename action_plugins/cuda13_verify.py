"""Action cuda13_verify: the new stack measured and decided (documentation: library/cuda13_verify.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction, prompt_set, trial_line
from cuda13_upgrade.steps import verify


class ActionModule(StepAction):
    STEP = "verify"
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "required": True},
        "run_id": {"type": "str", "required": True},
        "snapshot": {"type": "dict", "required": True},
        "baseline": {"type": "dict", "required": True},
        "switch": {"type": "dict", "required": True},
        "batches": {"type": "list", "elements": "list", "default": []},
    }

    def run_step(self, host, args, task_vars):
        record = verify.verify(
            host,
            args["options"],
            run_id=args["run_id"],
            baseline=args["baseline"].get("baseline") or {},
            restart_plan=args["baseline"].get("restart_plan") or {},
            switch=args["switch"],
            manifest=args["snapshot"].get("manifest") or {},
            batches=args["batches"],
            prompts=prompt_set(task_vars),
            on_trial=trial_line(host, "candidate"),
        )
        return {**record, "changed": False}
