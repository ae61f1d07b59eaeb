"""Action cuda13_preflight: read-only checks of a host before any change (documentation:
library/cuda13_preflight.py)."""

from __future__ import annotations

import yaml

from cuda13_upgrade import reportfiles
from cuda13_upgrade.actionbase import StepAction, roles_dir
from cuda13_upgrade.steps import preflight


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "required": True},
        "run_id": {"type": "str", "required": True},
        "refuse": {"type": "bool", "default": True},
    }

    def run_step(self, host, args, task_vars):
        options = args["options"]
        figures_file = roles_dir(task_vars) / "nvidia_driver_check" / "files" / "stack-space.yml"
        with open(figures_file, encoding="utf-8") as handle:
            figures = yaml.safe_load(handle)
        record = preflight.check(
            host,
            options,
            run_dir=reportfiles.run_dir(options, args["run_id"]),
            refuse=args["refuse"],
            figures=figures,
        )
        return {**record, "changed": False}
