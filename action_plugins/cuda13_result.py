"""Action cuda13_result: the host's record, on the host and on the control node (documentation:
library/cuda13_result.py)."""

from __future__ import annotations

from cuda13_upgrade import reportfiles
from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import result


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "required": True},
        "run_id": {"type": "str", "required": True},
        "mode": {"type": "str", "choices": ["upgrade", "stage", "interrupted"], "default": "upgrade"},
        "records": {"type": "dict", "default": {}},
        "step": {"type": "str", "default": "unknown"},
        "by": {"type": "str", "default": "Ctrl-C"},
        "undrain": {"type": "dict", "default": {}},
    }

    def when_lost(self, host, lost, args, task_vars):
        if args["mode"] == "interrupted":
            return None
        # The record of a host Ansible lost, on the control node only (steps/lost.py).
        path = reportfiles.run_dir(args["options"], args["run_id"]) / host.name / "result.json"
        done = result.record_lost(
            host.name,
            args["options"],
            self.run_state,
            args["records"],
            lost,
            check_mode=host.check_mode,
            write_report=lambda record: reportfiles.write_json(path, record),
        )
        return {"result": done, "changed": False, "ansible_facts": {"cuda13_result": done}}

    def run_step(self, host, args, task_vars):
        options = args["options"]
        path = reportfiles.run_dir(options, args["run_id"]) / host.name / "result.json"

        def write(record):
            # The control node's copy is written in check mode too: the run's report says what it checked.
            reportfiles.write_json(path, record)

        if args["mode"] == "interrupted":
            done = result.interrupted(
                host,
                options,
                run_id=args["run_id"],
                step=args["step"],
                write_report=write,
                by=args["by"],
                undrain=args["undrain"],
            )
            return {**done, "changed": done["recorded"]}
        done = result.record(
            host, options, self.run_state, args["records"], mode=args["mode"], write_report=write
        )
        self.run_state = done["run"]
        return {
            "result": done["result"],
            "changed": False,
            "ansible_facts": {"cuda13_result": done["result"]},
        }
