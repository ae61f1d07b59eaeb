"""Action cuda13_batch_soak: a kept host watched in service before the next batch (documentation:
library/cuda13_batch_soak.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction, prompt_set
from cuda13_upgrade.steps import verify


class ActionModule(StepAction):
    STEP = "batch_soak"
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "required": True},
        "verify": {"type": "dict", "required": True},
        "baseline": {"type": "dict", "default": {}},
        "switch": {"type": "dict", "default": {}},
    }

    def run_step(self, host, args, task_vars):
        record = verify.soak_between_batches(
            host,
            args["options"],
            verify=args["verify"],
            baseline=args["baseline"].get("baseline") or {},
            switch=args["switch"],
            prompts=prompt_set(task_vars),
        )
        return {
            "batch_soak": record,
            "rollback": record["rollback"],
            "reason": record["msg"],
            "changed": False,
        }
