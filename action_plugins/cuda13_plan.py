"""Action cuda13_plan: what a rollout would do, changing nothing (documentation: library/cuda13_plan.py)."""

from __future__ import annotations

import yaml

from cuda13_upgrade import plan, reportfiles
from cuda13_upgrade.actionbase import StepAction, display, roles_dir
from cuda13_upgrade.steps import planning


class ActionModule(StepAction):
    _requires_connection = False
    ARGUMENT_SPEC = {
        "action": {"type": "str", "choices": ["host", "rollout"], "required": True},
        "run_id": {"type": "str", "default": ""},
        "options_check": {"type": "dict", "default": {}},
        "options": {"type": "dict", "default": {}},
        "state": {"type": "dict", "default": {}},
        "preflight": {"type": "dict", "default": {}},
        "reports_dir": {"type": "path"},
        "allow_partial": {"type": "bool", "default": False},
    }

    def run_step(self, host, args, task_vars):
        if args["action"] == "host":
            with open(
                roles_dir(task_vars) / "nvidia_driver_check" / "files" / "stack-space.yml", encoding="utf-8"
            ) as f:
                figures = yaml.safe_load(f)
            record = planning.host(
                host.name,
                options_check=args["options_check"],
                options=args["options"],
                state=args["state"],
                preflight=args["preflight"],
                figures=figures,
            )
            return {"plan": record, "changed": False}
        hostvars = task_vars["hostvars"]
        fleet = hostvars["localhost"]["cuda13_fleet"]
        hosts = [h for batch in fleet["batches"] for h in batch]
        records = [hostvars[h]["__cuda13_plan"]["plan"] for h in hosts]
        the_plan = planning.rollout(records, fleet, args["run_id"], args["allow_partial"])
        path = (
            reportfiles.run_dir({"cuda13_reports_dir": args["reports_dir"]}, the_plan["run_id"]) / "plan.json"
        )
        reportfiles.write_json(path, the_plan)
        display.display(plan.render_text(the_plan))
        return {"plan": the_plan, "path": str(path), "changed": False}
