"""Action cuda13_artifacts: the fleet's wheels to the host (documentation: library/cuda13_artifacts.py)."""

from __future__ import annotations

import os
import socket

from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps import artifacts


def run_identity() -> str:
    """This run: the worker's parent, this run's ansible-playbook, by host, pid and start time."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/stat", encoding="ascii", errors="replace") as handle:
            start = handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = ""
    return f"{socket.gethostname()}:{ppid}:{start}"


class ActionModule(StepAction):
    STEP = "artifact_cache"
    OPTION_PREFIXES = ("artifact_cache_", "cuda13_")
    ARGUMENT_SPEC = {"options": {"type": "dict", "default": {}}, "run_id": {"type": "str", "default": ""}}

    def _copy(self, task_vars):
        """Ansible's own copy action, run as the template action runs it, on a copy of this task."""

        def copy(src: str, dest: str, mode: str) -> dict:
            task = self._task.copy()
            task.args = {"src": src, "dest": dest, "mode": mode}
            action = self._shared_loader_obj.action_loader.get(
                "ansible.legacy.copy",
                task=task,
                connection=self._connection,
                play_context=self._play_context,
                loader=self._loader,
                templar=self._templar,
                shared_loader_obj=self._shared_loader_obj,
            )
            return action.run(task_vars=task_vars)

        return copy

    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        controller = artifacts.Controller(copy=self._copy(task_vars), run_id=args["run_id"] or run_identity())
        record = artifacts.fetch_and_copy(host, options, controller=controller)
        record["ansible_facts"] = {
            "artifact_cache_find_links": record["find_links"],
            "artifact_cache_files": record["files"],
            "artifact_cache_fetched_files": record["fetched_files"],
            "artifact_cache_fetched_bytes": record["fetched_bytes"],
        }
        return record
