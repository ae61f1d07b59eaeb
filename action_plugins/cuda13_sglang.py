"""Action cuda13_sglang: SGLang into the new venv (documentation: library/cuda13_sglang.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import sglang


class ActionModule(StepAction):
    STEP = "sglang_build"
    CHANGES_HOST = True
    OPTION_PREFIXES = ("sglang_build_", "cuda13_")
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "default": {}},
        "resolved": {"type": "list", "elements": "dict", "default": []},
        "compute_capabilities": {"type": "list", "elements": "str", "default": []},
    }

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        return sglang.build(
            host, options, resolved=args["resolved"], compute_capabilities=args["compute_capabilities"]
        )
