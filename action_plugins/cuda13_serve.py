"""Action cuda13_serve: put the service into a profile and wait until it generates (documentation:
library/cuda13_serve.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps.serve import serve


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "service": {"type": "str", "default": "sglang.service"},
        "exec_start": {"type": "str", "required": True},
        "venv": {"type": "str", "default": ""},
        "args": {"type": "list", "elements": "str", "default": []},
        "restart": {"type": "str", "choices": ["always", "never", "when-changed"], "default": "always"},
        "changed": {"type": "bool", "default": False},
        "check": {"type": "bool", "default": True},
        "report_changes": {"type": "bool", "default": True},
        "dropin": {"type": "str", "default": "60-cuda13-profile.conf"},
        "url": {"type": "str", "default": "http://127.0.0.1:30000"},
        "timeout": {"type": "int", "default": 900},
        "leftover_timeout": {"type": "float", "default": 30},
        "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        "what": {"type": "str", "default": "the service"},
        "about": {"type": "str", "default": "a profile"},
        "service_user": {"type": "str", "default": ""},
    }

    def run_step(self, host, args, task_vars):
        report_changes = args.pop("report_changes")
        record = serve(host, **args)
        for line in record["report"]:
            host.tell(line)
        changed = bool(record.get("restarted") or record.get("dropin_changed") or record.get("would_restart"))
        return {**record, "changed": changed and report_changes}
