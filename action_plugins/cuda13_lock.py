"""Action cuda13_lock: take or release a host's upgrade lock (documentation: library/cuda13_lock.py)."""

from __future__ import annotations

import os

from cuda13_upgrade import runlock
from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import lock


class ActionModule(StepAction):
    ARGUMENT_SPEC = {
        "state": {"type": "str", "choices": ["acquired", "released"], "required": True},
        "state_dir": {"type": "path", "required": True},
        "run_id": {"type": "str", "required": True},
        "lease_hours": {"type": "float", "default": 24},
        "break": {"type": "bool", "default": False},
        "lock": {"type": "dict", "default": {}},
    }

    def when_lost(self, host, lost, args, task_vars):
        # Lost before its lock was taken, or before it was released: the lock stays as it is
        # (a lease the next run takes over), and the role's steps leave the host alone.
        return {"acquired": False, "released": False, "lost": True}

    def run_step(self, host, args, task_vars):
        if args["state"] == "released":
            return lock.release(host, state_dir=args["state_dir"], lock=args["lock"])
        owner = lock.owner_record(
            run_id=args["run_id"],
            control_node=runlock.this_control_node(),
            # The worker's parent: this run's ansible-playbook.
            pid=os.getppid(),
            playbook=str(task_vars.get("ansible_play_name") or ""),
            lease_hours=args["lease_hours"],
        )
        record = lock.acquire(host, state_dir=args["state_dir"], owner=owner, break_lock=args["break"])
        if record["notice"]:
            record["ansible_facts"] = {"cuda13_notice": record["notice"]}
        return record
