"""Action cuda13_host_state: what earlier runs left on the host and what this run does with it
(documentation: library/cuda13_host_state.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import host_state


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "required": True},
        "run_id": {"type": "str", "required": True},
        "locked": {"type": "bool", "default": False},
        "resolved": {"type": "list", "elements": "dict", "default": []},
    }

    def run_step(self, host, args, task_vars):
        record = host_state.read(
            host, args["options"], run_id=args["run_id"], locked=args["locked"], resolved=args["resolved"]
        )
        # The host's run record starts here.
        self.run_state = record["run"]
        facts = {"cuda13_notice": record["notice"]} if record.get("notice") else {}
        return {**record, "changed": False, "ansible_facts": facts}
