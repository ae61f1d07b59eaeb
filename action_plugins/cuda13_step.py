"""Action cuda13_step: one side of the drain bracket (documentation: library/cuda13_step.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import drain


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "step": {"type": "str", "choices": ["drain", "undrain"], "required": True},
        "options": {"type": "dict", "required": True},
        "command": {"type": "str", "choices": ["upgrade", "verify", "rollback"], "default": "upgrade"},
        "after_failure": {"type": "bool", "default": False},
        "interrupted_run": {"type": "str", "default": ""},
    }

    def lost_step(self, args):
        return args["step"]

    def when_lost(self, host, lost, args, task_vars):
        # No hook for a lost host: it stays as it is, drained or serving (steps/lost.py).
        return {"hook": "", "lost": True}

    def run_step(self, host, args, task_vars):
        if args["interrupted_run"]:
            # playbooks/interrupted.yml: the interrupted run's drained host, its undrain decided.
            if args["step"] != "undrain":
                raise drain.StepFailed("cuda13_step: interrupted_run goes with step undrain")
            return {
                **drain.after_interrupt(host, args["options"], run_id=args["interrupted_run"]),
                "changed": False,
            }
        record = drain.side(
            host,
            self.run_state,
            args["options"],
            step=args["step"],
            command=args["command"],
            after_failure=args["after_failure"],
        )
        self.run_state = record["run"]
        return {**record, "changed": False}
