"""How a step reaches its host, and the host's run record that the steps keep.

:class:`Host` is what every step's ``run`` takes: the managed host as the
control node sees it. ``actionbase.HostSession`` implements it over Ansible's
``ActionBase._execute_module`` (one SSH round trip per call, pipelined); the
unit tests' ``tests/fakehost.py`` implements it over the host modules' own
functions, on the test's machine.

The host's run record, ``cuda13_host_run``, is the one fact the steps of a host's
upgrade share, kept by Python (:func:`begin_step`, :func:`with_changes`), never by
a ``set_fact``::

    {"run_id": str, "host": str, "started_at": ISO 8601 (UTC),
     "target": {...} (cuda13_upgrade.rerun.target), "state_dir": str,
     "serving": the venv the service points at, "drained": bool (a drain hook ran
     and its undrain has not, in this run or an earlier one), "drained_since": ISO 8601 (when
     an earlier run left the host drained; absent otherwise), "changed": bool (a step changed the host),
     "steps": [{"step": str, "started_at": ISO 8601}, ...],
     "failure": None | {"step", "task", "error", "diagnosis"}}

Each step, as it begins, appends itself to ``steps`` and writes the same
boundary to ``<state_dir>/step.json`` on the host (``{"run_id", "step",
"started_at", "run_started_at", "serving", "target", "steps", "drained_at"}``), so that a run
cut off by a lost connection, a kill or a power cut leaves the step it was in
for the next run to resolve (cuda13_upgrade.runlock.stopped_run). ``drained_at``: when the
drain the host is still in began (:func:`drained_at`), else null: the next run counts the
host out of service from there (cuda13_upgrade.timeline.out_of_service_s).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

#: The fact that holds the host's run record.
RUN_FACT = "cuda13_host_run"

#: The step of a host's life each action plugin begins (action_plugins/cuda13_*.py); the drain
#: and undrain steps begin with the action ``cuda13_step``.
STEPS = {
    "cuda13_artifacts": "artifact_cache",
    "cuda13_snapshot": "snapshot",
    "cuda13_toolkit": "toolkit",
    "cuda13_wheels": "wheels",
    "cuda13_sglang": "sglang_build",
    "cuda13_baseline": "baseline",
    "cuda13_switch": "switch",
    "cuda13_verify": "verify",
    "cuda13_batch_soak": "batch_soak",
    "cuda13_rollback": "rollback",
    "cuda13_result": "result",
}

#: The steps from which on the host has changed: a failure there rolls it back.
CHANGING_STEPS = ("driver", "toolkit", "wheels", "sglang_build", "switch")


class StepFailed(Exception):
    """A step cannot go on: ``msg`` is what the operator reads (what went wrong, what to do),
    ``record`` what the step had done and found so far (returned with the failure)."""

    def __init__(self, msg: str, record: Mapping[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.record = dict(record or {})


class ModuleFailed(StepFailed):
    """A module run on the host failed: ``module`` its name, ``result`` what it returned."""

    def __init__(self, module: str, result: Mapping[str, Any], msg: str | None = None) -> None:
        self.module = module
        self.result = dict(result)
        text = msg or module_message(result) or f"{module} failed"
        super().__init__(text, {"module": module, "module_result": self.result})


def module_message(result: Mapping[str, Any]) -> str:
    """A failed module's message: ``msg``, else the last line of its stderr."""
    msg = str(result.get("msg") or "").strip()
    if msg:
        return msg
    for key in ("stderr", "module_stderr"):
        text = str(result.get(key) or "").strip()
        if text:
            return text.splitlines()[-1]
    return ""


class Host(Protocol):
    """The managed host as a step sees it."""

    #: The host's inventory name.
    name: str
    #: Whether the play runs in check mode (--check): the steps change nothing.
    check_mode: bool

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
        """Run the module ``name`` on the host with ``args`` and return its result.

        ``python``: the interpreter that runs it (default: the host's, as the
        inventory gives it). ``check_mode``: override the play's (False runs a
        read in --check too). ``environment``: variables for the module's
        process. Raises :class:`ModuleFailed` when the result says ``failed``,
        unless ``allow_failure``; a host that cannot be reached raises
        Ansible's connection error, which makes the task unreachable.
        """
        ...

    def tell(self, line: str) -> None:
        """Show the operator one line now (ansible-playbook's output, the command's progress)."""
        ...


def now_iso() -> str:
    """The current time, ISO 8601 in UTC with its offset."""
    return datetime.now(UTC).isoformat()


def new_run(
    *,
    run_id: str,
    host: str,
    target: Mapping[str, Any],
    state_dir: str,
    serving: str,
    started_at: str | None = None,
) -> dict[str, Any]:
    """A host's run record at its start (see the module docstring)."""
    return {
        "run_id": run_id,
        "host": host,
        "started_at": started_at or now_iso(),
        "target": dict(target),
        "state_dir": state_dir,
        "serving": serving,
        "drained": False,
        "changed": False,
        "steps": [],
        "failure": None,
    }


def drained_at(run: Mapping[str, Any]) -> str | None:
    """When the drain the host is in began (ISO 8601): the start of the run record's last
    ``drain`` step while ``drained`` (a drain hook ran, or is running, and its undrain has not
    ended), or ``drained_since`` when an earlier run left the host drained (it has been out of
    service since then: cuda13_upgrade.steps.host_state.read); None otherwise."""
    if not run.get("drained"):
        return None
    if run.get("drained_since"):
        return str(run["drained_since"])
    for step in reversed(run.get("steps") or []):
        if isinstance(step, Mapping) and step.get("step") == "drain":
            return str(step.get("started_at") or "") or None
    return None


def begin_step(
    host: Host,
    run: Mapping[str, Any],
    step: str,
    *,
    serving: str | None = None,
    record_on_host: bool = True,
) -> dict[str, Any]:
    """The run record with ``step`` begun now, and the boundary written to the host's ``step.json``.

    ``serving``: the venv the service points at as the step begins (default: as
    before). ``record_on_host``: False for a host whose record must stay as an
    earlier run left it (an already kept host). The write is not checked: a host
    whose disk is full still runs the step, above all a rollback. Nothing is
    written in check mode.
    """
    started = now_iso()
    updated = {
        **run,
        "serving": serving if serving is not None else run.get("serving"),
        "steps": [*run.get("steps", []), {"step": step, "started_at": started}],
    }
    if record_on_host and not host.check_mode and run.get("state_dir"):
        record = {
            "run_id": updated.get("run_id"),
            "step": step,
            "started_at": started,
            "run_started_at": updated.get("started_at"),
            "serving": updated.get("serving"),
            "target": updated.get("target") or {},
            "steps": [s["step"] for s in updated["steps"]],
            "drained_at": drained_at(updated),
        }
        host.module(
            "cuda13_record",
            {
                "files": [
                    {"path": f"{run['state_dir']}/step.json", "content": json_text(record), "mode": "0600"}
                ]
            },
            allow_failure=True,
        )
    return updated


def failed_in(run: Mapping[str, Any], action: str) -> dict[str, Any]:
    """The run record as it was when a task of ``action`` failed: a failed task's facts are not
    kept, so the step it had begun (:data:`STEPS`) is added here, and the host counts as changed
    from a step of :data:`CHANGING_STEPS` on."""
    step = STEPS.get(str(action).rsplit(".", 1)[-1])
    updated = dict(run)
    if step and current_step(run, "") != step:
        updated["steps"] = [*run.get("steps", []), {"step": step, "started_at": now_iso()}]
    if step in CHANGING_STEPS:
        updated["changed"] = True
    return updated


def current_step(run: Mapping[str, Any] | None, default: str = "snapshot") -> str:
    """The step the run record says the host is in."""
    steps = (run or {}).get("steps") or []
    return str(steps[-1]["step"]) if steps else default


def json_text(value: Any) -> str:
    """``value`` as the state files hold it: indented JSON and a final newline."""
    return json.dumps(value, indent=4, sort_keys=True) + "\n"
