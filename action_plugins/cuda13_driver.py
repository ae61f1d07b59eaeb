"""Action cuda13_driver: the driver window's change, checks, measurement and rollback
(documentation: library/cuda13_driver.py)."""

from __future__ import annotations

from cuda13_upgrade.actionbase import StepAction, prompt_set, trial_line
from cuda13_upgrade.steps import driver_move
from cuda13_upgrade.steps.host import StepFailed, begin_step


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "state": {
            "type": "str",
            "choices": ["cached", "moved", "checked", "measured", "restored"],
            "required": True,
        },
        "options": {"type": "dict", "required": True},
        "plan": {"type": "dict", "default": {}},
        "run_id": {"type": "str", "default": ""},
        "cache": {"type": "dict", "default": {}},
        "moved": {"type": "dict", "default": {}},
        "checked": {"type": "dict", "default": {}},
        "snapshot": {"type": "dict", "default": {}},
        "baseline": {"type": "dict", "default": {}},
        "gpus": {"type": "list", "elements": "dict", "default": []},
        "in_rescue": {"type": "bool", "default": False},
    }

    def _begin(self, host, step):
        run = getattr(self, "run_state", None)
        if run:
            self.run_state = begin_step(host, run, step, record_on_host=not run.get("already_kept"))
            if not host.check_mode:
                self.run_state["changed"] = True

    def run_step(self, host, args, task_vars):
        options, plan, state = args["options"], args["plan"], args["state"]
        service = options["cuda13_service_name"]
        manifest = args["snapshot"].get("manifest") or {}
        if state == "cached":
            return {**driver_move.cache(host, options, plan), "changed": False}
        if state == "moved":
            self._begin(host, "driver")
            return driver_move.move(host, options, plan)
        if state == "checked":
            target = str(plan.get("target") or "")
            if args["in_rescue"]:
                # The old driver after the rescue's reboot: a failure is recorded (the host's result
                # is failed with it) and the stack's rollback still runs.
                try:
                    return {
                        **driver_move.check(
                            host,
                            options,
                            expected=target,
                            gpus=args["gpus"],
                            start=[u for u in args["moved"].get("clients") or [] if u != service],
                        ),
                        "changed": False,
                    }
                except StepFailed as exc:
                    return {**exc.record, "restore_failed": True, "msg": exc.msg, "changed": False}
            return {
                **driver_move.check(
                    host,
                    options,
                    expected=target,
                    branch=int(plan.get("target_branch") or 0),
                    floor=str(plan.get("floor") or ""),
                    gpus=driver_move.gpus_before(args["gpus"], args["moved"]),
                    start=[u for u in args["moved"].get("stopped") or [] if u != service],
                ),
                "changed": False,
            }
        if state == "measured":
            return {
                **driver_move.measure_after(
                    host,
                    options,
                    run_id=args["run_id"],
                    baseline=args["baseline"],
                    manifest=manifest,
                    moved={**args["moved"], "check": args["checked"]},
                    prompts=prompt_set(task_vars),
                    on_trial=trial_line(host, "driver"),
                ),
                "changed": False,
            }
        try:
            return driver_move.restore(
                host, options, cached=args["cache"], moved=args["moved"], gpus=args["gpus"]
            )
        except StepFailed as exc:
            # In the rescue: the stack's rollback still runs, and the result is failed with this.
            return {**exc.record, "restore_failed": True, "msg": exc.msg, "changed": True}
