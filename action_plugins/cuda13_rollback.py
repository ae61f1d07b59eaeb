"""Action cuda13_rollback: a host put back on its snapshot's stack (documentation:
library/cuda13_rollback.py)."""

from __future__ import annotations

from cuda13_upgrade import ondemand, reportfiles
from cuda13_upgrade.actionbase import StepAction, prompt_set
from cuda13_upgrade.steps import rollback
from cuda13_upgrade.steps.host import failed_in, json_text, now_iso
from cuda13_upgrade.steps.lost import rescue_record


def _revert_apt(host, options):
    from cuda13_upgrade.steps import toolkit

    return toolkit.revert(host, options)


class ActionModule(StepAction):
    OPTION_PREFIXES = ("rollback_", "cuda13_")
    ARGUMENT_SPEC = {
        "state": {
            "type": "str",
            "choices": ["after_failure", "planned", "restored"],
            "default": "after_failure",
        },
        "mode": {"type": "str", "choices": ["upgrade", "stage"], "default": "upgrade"},
        "options": {"type": "dict", "default": {}},
        "run_id": {"type": "str", "default": ""},
        "failed": {"type": "dict", "default": {}},
        "failed_task": {"type": "str", "default": ""},
        "failed_action": {"type": "str", "default": ""},
        "records": {"type": "dict", "default": {}},
    }

    def when_lost(self, host, lost, args, task_vars):
        if args["state"] != "after_failure":
            return None
        # The rescue of a host Ansible lost: nothing is rolled back (steps/lost.py).
        return rescue_record(host.name, lost, args["failed"])

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        if args["state"] == "after_failure":
            # A failed task's facts are not kept: the step it had begun is added here.
            self.run_state = failed_in(self.run_state, args["failed_action"])
            record = rollback.after_failure(
                host,
                options,
                run=self.run_state,
                failed=args["failed"],
                failed_task=args["failed_task"],
                records=args["records"],
                prompts=prompt_set(task_vars),
                revert_apt=_revert_apt,
                undo=args["mode"] == "upgrade",
            )
            self.run_state = record.pop("run")
            return {**record, "changed": record["status"] == "rolled_back"}
        snapshot_file = options["rollback_snapshot_file"]
        report = reportfiles.run_dir(options, args["run_id"]) / host.name / "result.json"
        if args["state"] == "planned":
            found = host.module("cuda13_record", {"read": [snapshot_file]}, check_mode=False)["read"][
                snapshot_file
            ]
            if not found["exists"]:
                nothing = ondemand.nothing_to_roll_back(host.name, args["run_id"], snapshot_file, now_iso())
                reportfiles.write_json(report, nothing, check_mode=host.check_mode)
                host.tell(nothing["reason"])
                return {
                    "nothing": True,
                    "result": nothing,
                    "changed": False,
                    "ansible_facts": {"cuda13_notice": f"{host.name}: {nothing['reason']}"},
                }
            return {"nothing": False, "changed": False}
        restored = rollback.restore(host, options, revert_apt=_revert_apt)
        result = ondemand.rolled_back(
            host.name, args["run_id"], restored["seconds"], restored["alternatives_manual"], now_iso()
        )
        if not host.check_mode:
            host.module(
                "cuda13_record",
                {
                    "files": [
                        {
                            "path": f"{options['cuda13_state_dir']}/result.json",
                            "content": json_text(result),
                            "mode": "0600",
                        }
                    ]
                },
            )
        reportfiles.write_json(report, result, check_mode=host.check_mode)
        return {"nothing": False, "result": result, **{k: v for k, v in restored.items() if k != "manifest"}}
