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
        # A host lost after its state was read (unreachable in the preflight) has no plan of its own.
        records = [
            (hostvars[h].get("__cuda13_plan") or {}).get("plan")
            or plan.unreachable_plan(h, "lost its connection during the plan's preflight")
            for h in hosts
        ]
        # Where each must-set value came from (cuda13_inventory, playbooks/start.yml).
        sources = hostvars["localhost"].get("cuda13_must_set_sources") or {}
        records = [{**r, "must_set_from": dict(sources.get(r["host"]) or {})} for r in records]
        the_plan = planning.rollout(
            records, fleet, args["run_id"], args["allow_partial"], reports_dir=args["reports_dir"]
        )
        path = (
            reportfiles.run_dir({"cuda13_reports_dir": args["reports_dir"]}, the_plan["run_id"]) / "plan.json"
        )
        reportfiles.write_json(path, the_plan)
        display.display(plan.render_text(the_plan))
        return {"plan": the_plan, "path": str(path), "changed": False}
