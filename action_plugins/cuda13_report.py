"""Action cuda13_report: the run's summary on the control node (documentation: library/cuda13_report.py)."""

from __future__ import annotations

from cuda13_upgrade import notify
from cuda13_upgrade.actionbase import StepAction, display
from cuda13_upgrade.reportfiles import run_dir
from cuda13_upgrade.steps import fleet
from cuda13_upgrade.summary import fleet_summary


class ActionModule(StepAction):
    _requires_connection = False
    ARGUMENT_SPEC = {
        "reports_dir": {"type": "path", "required": True},
        "run_id": {"type": "str", "required": True},
        "hosts": {"type": "list", "elements": "str"},
        "not_started": {"type": "dict", "default": {}},
        "show": {"type": "bool", "default": False},
        "notify": {"type": "bool", "default": False},
        "close_estimate": {"type": "bool", "default": False},
    }

    def run_step(self, host, args, task_vars):
        directory = run_dir({"cuda13_reports_dir": args["reports_dir"]}, args["run_id"])
        if args["close_estimate"] and not self._task.check_mode:
            # The run's end (the report play, not a host's summary after its batch): the estimate
            # of the night against what it took (estimate.json, the summary's section).
            fleet.close_estimate(directory)
        summary = fleet_summary(directory, args["hosts"], args["not_started"] or None)
        if args["notify"] and not self._task.check_mode:
            # The run's end, once per run whose start was told (cuda13_notify; its URLs read from
            # the inventory, as the gates read them).
            hostvars = task_vars.get("hostvars") or {}
            value = None
            for h in [*(args["hosts"] or []), "localhost"]:
                if h in hostvars and notify.OPTION in hostvars[h]:
                    value = hostvars[h][notify.OPTION]
                    break
            told = fleet.end(
                directory,
                run_id=args["run_id"],
                statuses={row["host"]: row["status"] for row in summary["rows"]},
                report=summary["files"]["markdown"],
                notify_value=value,
            )
            for line in notify.failure_lines(told):
                display.display(line)
            if told:  # the summary again, with the end in its notifications
                summary = fleet_summary(directory, args["hosts"], args["not_started"] or None)
        if args["show"]:
            display.display(summary["markdown"])
        return {
            "markdown": summary["markdown"],
            "files": summary["files"],
            "changed": False,
        }
