"""Action cuda13_switch: the service moved to the new stack (documentation: library/cuda13_switch.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import switch


class ActionModule(StepAction):
    STEP = "switch"
    CHANGES_HOST = True
    OPTION_PREFIXES = ("stack_switch_", "cuda13_")
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "default": {}},
        "snapshot": {"type": "dict", "required": True},
        "baseline": {"type": "dict", "default": {}},
    }

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        measuring = bool(self.run_state.get("measure", True)) and not host.check_mode
        plan = (args["baseline"] or {}).get("restart_plan") or {}
        if self.run_state:
            # From the switch on the service points at the new stack, whatever happens next.
            self.run_state["serving"] = options["stack_switch_new_venv"]
        return switch.switch(
            host,
            options,
            manifest=args["snapshot"].get("manifest") or {},
            profile_args=(plan.get("switch_args") or []) if measuring else [],
            mark_kernel_log=measuring,
        )
