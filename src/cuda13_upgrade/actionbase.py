"""The base of the package's action plugins (``action_plugins/cuda13_*.py``), under Ansible.

An action plugin runs on the control node, in the worker that runs the task.
:class:`StepAction` checks the task's arguments against the plugin's
``ARGUMENT_SPEC`` (Ansible's own validator: the message names the argument),
hands the step a :class:`HostSession` and returns the step's record as the
task's result. A :class:`~cuda13_upgrade.steps.host.StepFailed` becomes a
failed result carrying its message and the record so far, so that a ``rescue``
reads what the step found in ``ansible_failed_result``.

:class:`HostSession` is the :class:`~cuda13_upgrade.steps.host.Host` of a task:
``module()`` runs a module of ``library/`` (or one of Ansible's) on the task's
host through ``ActionBase._execute_module``: with pipelining on (ansible.cfg),
one SSH round trip per call, no temporary files. A step that loops over
profiles or retries trials costs module runs, not tasks.

Only the action plugins import this module; the rest of the package needs no Ansible.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from cuda13_upgrade.steps import lost as lost_host
from cuda13_upgrade.steps.host import RUN_FACT, STEPS, ModuleFailed, StepFailed, begin_step

display = Display()


class HostSession:
    """The :class:`~cuda13_upgrade.steps.host.Host` of one task of an action plugin."""

    def __init__(self, action: ActionBase, task_vars: Mapping[str, Any]) -> None:
        self._action = action
        self._task_vars = dict(task_vars)
        self.name = str(task_vars.get("inventory_hostname", ""))
        self.check_mode = bool(action._task.check_mode)
        self.changed = False

    @contextlib.contextmanager
    def _task_settings(
        self, check_mode: bool | None, environment: Mapping[str, str] | None
    ) -> Iterator[None]:
        task = self._action._task
        saved = (task.check_mode, task.environment)
        try:
            if check_mode is not None:
                task.check_mode = check_mode
            if environment is not None:
                task.environment = [dict(environment)]
            yield
        finally:
            task.check_mode, task.environment = saved

    def module(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        python: str | None = None,
        check_mode: bool | None = None,
        environment: Mapping[str, str] | None = None,
        allow_failure: bool = False,
    ) -> dict[str, Any]:
        task_vars = self._task_vars
        if python is not None:
            task_vars = {**task_vars, "ansible_python_interpreter": python}
        with self._task_settings(check_mode, environment):
            result = self._action._execute_module(
                module_name=name, module_args=dict(args or {}), task_vars=task_vars
            )
        result.pop("invocation", None)
        if result.get("changed"):
            self.changed = True
        if result.get("failed") and not allow_failure:
            raise ModuleFailed(name, result)
        return result

    def tell(self, line: str) -> None:
        display.display(f"{self.name}: {line}")


class StepAction(ActionBase):
    """An action plugin that runs one step (:meth:`run_step`) and returns its record."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = True

    #: The task's arguments, as Ansible's ``validate_argument_spec`` takes them.
    ARGUMENT_SPEC: dict[str, Any] = {}
    #: The step of the host's life this action begins in the host's run record (the fact
    #: ``cuda13_host_run``, when the play keeps one), or None.
    STEP: str | None = None
    #: From this step on a failure rolls the host back (the run record's ``changed``).
    CHANGES_HOST: bool = False

    #: The prefixes of the options a step reads, for a role's entry point called on its own
    #: (:meth:`step_options`).
    OPTION_PREFIXES: tuple[str, ...] = ("cuda13_",)

    def step_options(self, given: Any, task_vars: dict[str, Any]) -> dict[str, Any]:
        """The options a step reads: ``given`` (the validated record, ``cuda13_options``, which
        the upgrade's steps pass), else - a role's entry point called on its own, as an
        operator's play or a test does - the variables with :attr:`OPTION_PREFIXES` as the task
        sees them (the role's defaults, its ``vars:``, the inventory), templated."""
        if isinstance(given, dict) and given:
            return dict(given)
        found: dict[str, Any] = {}
        for name in task_vars:
            if not name.startswith(self.OPTION_PREFIXES):
                continue
            try:
                found[name] = self._templar.template(task_vars[name])
            except Exception:  # noqa: BLE001 - an option this step does not read may be undefined
                continue
        return found

    def run_step(self, host: HostSession, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """The step itself: returns its record (raise StepFailed to fail the task)."""
        raise NotImplementedError

    def when_lost(
        self, host: HostSession, lost: dict[str, Any], args: dict[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The step's record for a host Ansible lost (:mod:`cuda13_upgrade.steps.lost`), made
        without touching it; None (the default) fails the task with the loss, so that the
        block's ``rescue`` takes over."""
        return None

    def lost_step(self, args: dict[str, Any]) -> str:
        """The step a host lost during this task was in: the action's own (:attr:`STEP`, else
        :data:`~cuda13_upgrade.steps.host.STEPS`), else the action's name without its prefix
        (``lock``)."""
        action = self._task.action.split(".")[-1]
        return self.STEP or STEPS.get(action) or action.removeprefix("cuda13_")

    def _lost(
        self, result: dict[str, Any], host: HostSession, lost: dict[str, Any], args: dict[str, Any], task_vars
    ) -> dict[str, Any]:
        record = self.when_lost(host, lost, args, task_vars)
        facts = {lost_host.LOST_FACT: lost}
        if self.run_state:
            facts[RUN_FACT] = self.run_state
        if record is None:
            # The failed task's facts are not applied: the rescue reads the loss from its result.
            result.update(failed=True, changed=False, msg=lost_host.message(host.name, lost))
            result[lost_host.LOST_FACT] = lost
        else:
            result.update(record)
            result.setdefault("changed", False)
            facts = {**(record.get("ansible_facts") or {}), **facts}
        result["ansible_facts"] = facts
        return result

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        host = HostSession(self, task_vars)
        #: The host's run record (the fact cuda13_host_run), with this step begun (STEP).
        self.run_state = run_record(task_vars)
        recording = bool(task_vars.get(lost_host.RECORD_VAR))
        run_id = str(task_vars.get("cuda13_run_id") or "")
        lost = lost_host.found(task_vars, args, run_id) if recording else None
        # An action that needs no connection (the report, the fleet's gates) runs as usual.
        if lost is not None and self._requires_connection:
            return self._lost(result, host, lost, args, task_vars)
        try:
            if self.STEP and self.run_state:
                self.run_state = begin_step(
                    host, self.run_state, self.STEP, record_on_host=not self.run_state.get("already_kept")
                )
                if self.CHANGES_HOST and not host.check_mode:
                    self.run_state["changed"] = True
            record = self.run_step(host, args, task_vars)
        except AnsibleConnectionFailure as exc:
            if not recording:
                raise
            lost = lost_host.lost_record(self.lost_step(args), self._task.get_name(), str(exc), run_id)
            return self._lost(result, host, lost, args, task_vars)
        except StepFailed as exc:
            result.update(exc.record)
            result.update(failed=True, msg=exc.msg, changed=bool(exc.record.get("changed", host.changed)))
            if self.run_state:
                # Not applied as a fact (the task failed): the rescue reads it from ansible_failed_result.
                result["ansible_facts"] = {
                    **(exc.record.get("ansible_facts") or {}),
                    RUN_FACT: self.run_state,
                }
            return result
        finally:
            tmpdir = getattr(self._connection._shell, "tmpdir", None)
            if tmpdir:
                try:
                    self._remove_tmp_path(tmpdir)
                except AnsibleConnectionFailure:
                    if not recording:
                        raise
        result.update(record)
        result.setdefault("changed", host.changed)
        if self.run_state:
            result["ansible_facts"] = {**(record.get("ansible_facts") or {}), RUN_FACT: self.run_state}
        return result


def roles_dir(task_vars: Mapping[str, Any]) -> Path:
    """The roles' directory: the running role's parent, else the checkout's ``roles/``."""
    role_path = task_vars.get("role_path")
    return Path(role_path).parent if role_path else Path(__file__).resolve().parents[2] / "roles"


def prompt_set(task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The probe's and the workload's prompt set (``roles/verify_throughput/files/prompts.json``)."""
    with open(
        roles_dir(task_vars) / "verify_throughput" / "files" / "prompts.json", encoding="utf-8"
    ) as handle:
        return json.load(handle)


def trial_line(host: HostSession, phase: str) -> Any:
    """A callback that shows each run of trials' last tok/s (the command's progress reads the line)."""

    def tell(profile: str, trials: list) -> None:
        last = trials[-1] if trials else {}
        value = last.get("output_tok_s", last.get("decode_tok_s")) if isinstance(last, Mapping) else None
        if isinstance(value, int | float):
            host.tell(f"{profile} ({phase}) trial {len(trials)}: {value:.1f} tok/s")

    return tell


def run_record(task_vars: Mapping[str, Any], given: Any = None) -> dict[str, Any]:
    """The host's run record: ``given`` when the task passes one, else the fact."""
    if isinstance(given, Mapping) and given:
        return dict(given)
    found = task_vars.get(RUN_FACT)
    return dict(found) if isinstance(found, Mapping) else {}
