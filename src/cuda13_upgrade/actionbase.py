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
from collections.abc import Iterator, Mapping
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from cuda13_upgrade.steps.host import RUN_FACT, ModuleFailed, StepFailed

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

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        host = HostSession(self, task_vars)
        try:
            record = self.run_step(host, args, task_vars)
        except StepFailed as exc:
            result.update(exc.record)
            result.update(failed=True, msg=exc.msg, changed=bool(exc.record.get("changed", host.changed)))
            return result
        finally:
            tmpdir = getattr(self._connection._shell, "tmpdir", None)
            if tmpdir:
                self._remove_tmp_path(tmpdir)
        result.update(record)
        result.setdefault("changed", host.changed)
        return result


def run_record(task_vars: Mapping[str, Any], given: Any = None) -> dict[str, Any]:
    """The host's run record: ``given`` when the task passes one, else the fact."""
    if isinstance(given, Mapping) and given:
        return dict(given)
    found = task_vars.get(RUN_FACT)
    return dict(found) if isinstance(found, Mapping) else {}
