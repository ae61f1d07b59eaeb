"""Action cuda13_measure: the decode throughput the host serves now, per profile (documentation:
library/cuda13_measure.py)."""

from __future__ import annotations

import posixpath

from cuda13_upgrade import stack
from cuda13_upgrade.actionbase import StepAction, prompt_set, trial_line
from cuda13_upgrade.steps import measure


class ActionModule(StepAction):
    OPTION_PREFIXES = ("verify_throughput_", "cuda13_", "nvidia_driver_check_")
    ARGUMENT_SPEC = {
        "options": {"type": "dict", "default": {}},
        "run_id": {"type": "str", "required": True},
        "phase": {"type": "str", "choices": ["baseline", "candidate", "rollback"], "default": "baseline"},
        "profiles": {"type": "list", "elements": "dict"},
        "exec_start": {"type": "str", "default": ""},
        "venv": {"type": "str", "default": ""},
    }

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        profiles = (
            args["profiles"] or options.get("cuda13_profiles") or options.get("verify_throughput_profiles")
        )
        exec_start = args["exec_start"]
        if not exec_start:
            unit = host.module(
                "ansible.builtin.command",
                {
                    "argv": [
                        "systemctl",
                        "cat",
                        options.get("verify_throughput_service_name") or options["cuda13_service_name"],
                    ]
                },
                check_mode=False,
            )
            exec_start = stack.service_exec_start(unit["stdout"])
        venv = args["venv"] or posixpath.dirname(posixpath.dirname(exec_start.split()[0]))
        if host.check_mode:
            return {"measured": None, "exec_start": exec_start, "venv": venv, "changed": False}
        record = measure.phase(
            host,
            phase=args["phase"],
            options=options,
            profiles=list(profiles),
            venv=venv,
            exec_start=exec_start,
            run_id=args["run_id"],
            prompts=prompt_set(task_vars),
            on_trial=trial_line(host, args["phase"]),
            **measure.role_inputs(options),
        )
        for name, result in record["results"].items():
            summary = result["summary"]
            host.tell(
                f"{name}: median {summary['median']:.1f} tok/s (min {summary['min']:.1f},"
                f" max {summary['max']:.1f}, {summary['n']} trials)"
            )
        return {"measured": record, "exec_start": exec_start, "venv": venv, "changed": False}
