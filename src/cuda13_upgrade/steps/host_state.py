"""The step ``host_state``: what earlier runs left on a host, and what this run does with it (action
``cuda13_host_state``).

One read of the host per pass (module ``cuda13_state_read``,
``hostscripts/stack_digest.py``): before the preflight (``locked`` false, nothing
written on the host) and under the lock. The verdict is
:func:`cuda13_upgrade.rerun.host_verdict`; under the lock it also says whether the
host is staged for this run's target (:func:`staged_verdict`). The step starts the
host's run record (:func:`cuda13_upgrade.steps.host.new_run`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import rerun
from cuda13_upgrade.steps.host import Host, StepFailed, new_run


def resolved_pins(resolved: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The resolved set as ``name==version`` lines, in its order."""
    return [f"{p['name']}=={p['version']}" for p in resolved or []]


def staged_verdict(
    staged: Mapping[str, Any] | None,
    target: Mapping[str, Any],
    resolved: Sequence[Mapping[str, Any]] | None,
    freeze: Mapping[str, Any] | None,
) -> bool:
    """Whether the host is staged for ``target``: ``staged.json``'s target and resolved set are this
    run's, and the new venv's ``pip freeze --all`` (``{"rc", "lines"}``) is the one recorded then."""
    staged = staged or {}
    freeze = freeze or {}
    return bool(
        staged
        and rerun.same_target(staged.get("target"), dict(target))
        and staged.get("resolved_target") == resolved_pins(resolved)
        and freeze.get("rc") == 0
        and staged.get("freeze") == freeze.get("lines")
    )


def read(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_id: str,
    locked: bool,
    resolved: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Read the host's state and decide (see the module docstring).

    ``options``: the validated record. ``resolved``: the preflight's resolved set (under the lock).
    Returns ``{"already_kept", "measure", "differs", "reason", "previous", "stopped", "notice",
    "staged": bool, "staged_state": dict, "target", "run"}`` (``run``: the host's new run record).
    Before the preflight, a state that cannot be read sends the host on to the preflight, which says
    why; under the lock it raises StepFailed (nothing of the upgrade has run yet).
    """
    target = rerun.target(options)
    found = host.module(
        "cuda13_state_read",
        {
            "state_dir": options["cuda13_state_dir"],
            "venv": options["cuda13_new_venv"],
            "unit": options["cuda13_service_name"],
            "nvidia_smi": options.get("nvidia_driver_check_nvidia_smi") or "nvidia-smi",
            "freeze": bool(locked),
        },
        check_mode=False,
        allow_failure=True,
    )
    state = None
    if not found.get("failed") and isinstance(found.get("state"), Mapping):
        state = dict(found["state"])
        state["digest"] = (
            {"digest": found.get("digest"), "parts": found.get("parts")} if found.get("parts") else None
        )
    try:
        verdict = rerun.host_verdict(
            state,
            target,
            run_id,
            reverify=bool(options.get("cuda13_reverify")),
            locked=locked,
            host=host.name,
        )
    except ValueError as exc:
        raise StepFailed(f"{host.name}: {exc}; nothing of the upgrade has run.") from exc
    staged_state = dict((state or {}).get("staged") or {})
    staged = locked and staged_verdict(staged_state, target, resolved, found.get("freeze"))
    if staged:
        host.tell(
            f"staged by run {staged_state.get('run_id')} at {staged_state.get('staged_at')},"
            " its new stack unchanged since: straight to the window."
        )
    if verdict["already_kept"]:
        previous = verdict.get("previous") or {}
        verified = previous.get("verified_in_run") or previous.get("run_id")
        line = (
            f"{host.name}: already kept: run {verified} verified"
            " this target and the stack it kept is unchanged (pip freeze, drop-ins, alternatives, toolkit"
            " packages, driver and GPUs)."
        )
        verdict = {**verdict, "notice": "\n".join(filter(None, [verdict.get("notice"), line]))}
    if verdict.get("notice"):
        for line in str(verdict["notice"]).splitlines():
            host.tell(line.removeprefix(f"{host.name}: "))
    run = new_run(
        run_id=run_id,
        host=host.name,
        target=target,
        state_dir=str(options["cuda13_state_dir"]),
        serving=str(options["cuda13_old_venv"]),
    )
    run = {**run, **left_drained_by_earlier((state or {}).get("step"), run_id)} if locked else run
    if run.get("drained"):
        host.tell(
            f"drained since {run['drained_since']} by run {run['drained_by_run']}: this run puts the host"
            " back into service (its undrain hook) once its server serves."
        )
    return {
        **verdict,
        "staged": bool(staged),
        "staged_state": staged_state,
        "target": target,
        "run": {**run, "measure": bool(verdict["measure"]), "already_kept": bool(verdict["already_kept"])},
    }


def left_drained_by_earlier(step_record: Mapping[str, Any] | None, run_id: str) -> dict[str, Any]:
    """What this run's record inherits from an earlier run that left the host drained.

    ``step_record``: the host's ``step.json`` (:func:`cuda13_upgrade.steps.host.begin_step`); its
    ``drained_at`` is set while a drain hook's undrain has not run (a run interrupted, killed or
    cut off after its drain, or one whose undrain found the server down). Returns
    ``{"drained": True, "drained_since": drained_at, "drained_by_run": that run's id}``, so that
    this run undrains the host too, after a failure before its own drain as well
    (cuda13_upgrade.steps.drain), or ``{}``."""
    record = step_record if isinstance(step_record, Mapping) else {}
    earlier = record.get("run_id")
    if not record.get("drained_at") or not earlier or earlier == run_id:
        return {}
    return {"drained": True, "drained_since": str(record["drained_at"]), "drained_by_run": str(earlier)}
