"""Action cuda13_toolkit: the toolkit step with apt (documentation: library/cuda13_toolkit.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import toolkit
from cuda13_upgrade.steps.host import begin_step


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "state": {"type": "str", "choices": ["planned", "present", "reverted"], "default": "present"},
        "options": {"type": "dict"},
        "plan": {"type": "dict", "default": {}},
        "apt_dir": {"type": "path", "default": toolkit.APT_DIR},
    }
    OPTION_PREFIXES = ("cuda_toolkit_", "cuda13_", "rollback_")

    def run_step(self, host, args, task_vars):
        options = self.step_options(args.get("options"), task_vars)
        if args["state"] == "planned":
            return {**toolkit.plan(host, options, apt_dir=args["apt_dir"]), "changed": False}
        if args["state"] == "reverted":
            return toolkit.revert(host, options)
        run = getattr(self, "run_state", None)
        if run:
            # The step begins in the host's run record (STEP, for this state only); from here on
            # the host changes, so a failure rolls it back.
            self.run_state = begin_step(host, run, "toolkit", record_on_host=not run.get("already_kept"))
            if not host.check_mode:
                self.run_state["changed"] = True
        return toolkit.install(host, options, args["plan"], apt_dir=args["apt_dir"])
