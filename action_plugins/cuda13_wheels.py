"""Action cuda13_wheels: the cu130 wheels in a new venv (documentation: library/cuda13_wheels.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import wheels


class ActionModule(StepAction):
    STEP = "wheels"
    CHANGES_HOST = True
    OPTION_PREFIXES = ("cu130_wheels_", "cuda13_")
    ARGUMENT_SPEC = {
        "state": {"type": "str", "choices": ["present", "checked"], "default": "present"},
        "options": {"type": "dict", "default": {}},
        "resolved": {"type": "list", "elements": "dict", "default": []},
        "find_links": {"type": "str", "default": ""},
        "compute_capabilities": {"type": "list", "elements": "str", "default": []},
        "driver_version": {"type": "str", "default": ""},
        "gpus": {"type": "list", "elements": "dict", "default": []},
        "staged": {"type": "bool", "default": False},
    }

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        gpus = {
            "compute_capabilities": args["compute_capabilities"],
            "driver_version": args["driver_version"],
            "gpu_names": [str(g["name"]) for g in args["gpus"] if g.get("name")],
        }
        if args["state"] == "present" and args["staged"] and host.check_mode:
            return {"stack": None, "verdict": None, "resolved_target": None, "changed": False}
        if args["state"] == "checked" or args["staged"]:
            record = wheels.check(host, options, **gpus)
        else:
            record = wheels.install(
                host, options, resolved=args["resolved"], find_links=args["find_links"], **gpus
            )
        if record.get("verdict") is not None:
            record["ansible_facts"] = {
                "cu130_wheels_stack": record["stack"],
                "cu130_wheels_verdict": record["verdict"],
            }
        return record
