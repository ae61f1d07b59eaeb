"""The drain bracket's two sides (action ``cuda13_step``): the step boundary and the hook to run.

The hooks are the operator's task files (``cuda13_drain_tasks`` /
``cuda13_undrain_tasks``, e.g. ``playbooks/hooks/sglang-router-drain.yml``): only
YAML can include them, so a side of the bracket is two tasks
(``roles/upgrade_host/tasks/drain.yml``): this step, which records the boundary on
the host and in the run record and says which hook file to include, then the
include. The run record's ``drained`` says whether the host is out of service
by a hook, so that the undrain side runs exactly once for each drain; a host an earlier
run left drained (its ``step.json``'s ``drained_at``) starts this run drained
(``cuda13_upgrade.steps.host_state.read``), so this run's undrain puts it back too.

The rule for putting a host back: undrain what is drained, whether this run or a stopped one
drained it, once its server serves a stack that may take traffic. After a failure (the rescue's
undrain, ``after_failure``) and after an interrupted run (:func:`after_interrupt`,
``playbooks/interrupted.yml``) the server is asked once whether it generates
(:func:`serves`: ``/health_generate``, no restart); a server that does not stays drained, and
the run says so (:func:`left_drained`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cuda13_upgrade import ondemand
from cuda13_upgrade.steps.host import Host, StepFailed, begin_step, current_step, json_text, now_iso
from cuda13_upgrade.steps.rollback import BEFORE_SWITCH

#: Seconds of the readiness check before an undrain: one attempt (``service_cycle.wait_until_generates``
#: makes one when the timeout is under its 1 s interval; the attempt itself waits up to 30 s).
READY_PROBE_S = 0.5

#: The steps of an interrupted run at which its drained host may go back into service once its server
#: generates: before the switch the old stack serves (cuda13_upgrade.steps.rollback.BEFORE_SWITCH); at
#: ``undrain`` the run had kept the new stack or put the old one back. At ``switch``, ``verify`` and
#: ``rollback`` the server may run a new stack that no gate kept: the host stays drained.
UNDRAIN_AFTER = (*BEFORE_SWITCH, "undrain")


def side(
    host: Host,
    run: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    step: str,
    command: str = "upgrade",
    after_failure: bool = False,
) -> dict[str, Any]:
    """Begin the ``drain`` or ``undrain`` step of ``command`` (``upgrade``, ``verify``, ``rollback``).

    ``drain``: the drain hook when one is set (none in check mode). For ``verify`` and ``rollback``,
    which restart a serving host on the operator's demand, no drain hook refuses before any change
    unless ``cuda13_allow_undrained`` (:func:`cuda13_upgrade.ondemand.drain_plan`). ``undrain``: the
    undrain hook when the run record says a drain hook ran; without one nothing is recorded.

    ``after_failure``: the drain of a rescue (a host that went back into service for the soak
    between batches, taken out again before its rollback): the run record keeps the step that
    failed as ``failed_step``, which the rollback reports.

    Returns ``{"step", "hook": the task file to include or "", "run": the updated run record}``.
    Raises StepFailed with the refusal.
    """
    drain_tasks = str(options.get("cuda13_drain_tasks") or "")
    undrain_tasks = str(options.get("cuda13_undrain_tasks") or "")
    if step == "drain":
        if command in ondemand.COMMANDS:
            plan = ondemand.drain_plan(
                command,
                host.name,
                str(options.get("cuda13_service_name")),
                drain_tasks,
                undrain_tasks,
                bool(options.get("cuda13_allow_undrained")),
            )
            if plan["refusal"]:
                raise StepFailed(plan["refusal"], {"step": step, "hook": "", "run": dict(run)})
        hook = drain_tasks if drain_tasks and not host.check_mode else ""
        failed_step = current_step(run, "") if after_failure else None
        # Drained as the step begins: step.json says so from here (steps.host.drained_at). A host an
        # earlier run left drained stays drained, hook or none.
        draining = {**run, "drained": bool(hook) or bool(run.get("drained"))}
        updated = begin_step(host, draining, "drain") if run.get("steps") is not None else draining
        if failed_step:
            updated["failed_step"] = failed_step
        # The undrain hook is run only where one is set (playbooks/rollback.yml: a drain without it).
        updated["undrain_hook"] = undrain_tasks
        return {"step": step, "hook": hook, "run": updated}
    if step != "undrain":
        raise StepFailed(f"cuda13_step: step must be drain or undrain, got {step!r}")
    if not run.get("drained"):
        return {"step": step, "hook": "", "run": dict(run)}
    if after_failure and not host.check_mode:
        ready, last = serves(host, options)
        if not ready:
            note = left_drained(
                "not_serving",
                host=host.name,
                undrain_tasks=undrain_tasks,
                last=last,
                when="after the failure",
            )
            host.tell(note)
            return {"step": step, "hook": "", "run": {**run, "left_drained": note}}
    updated = begin_step(host, run, "undrain")
    updated["drained"] = False
    updated.pop("drained_since", None)
    return {"step": step, "hook": undrain_tasks, "run": updated}


def serves(host: Host, options: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the host's server generates now: one readiness attempt at ``cuda13_server_url``
    (``/health_generate``, else a one-token ``/v1/completions``; module ``cuda13_service`` with
    restart ``never``: nothing is restarted or written). Returns (generates, what it answered last,
    e.g. "Request failed: <urlopen error [Errno 111] Connection refused>")."""
    result = host.module(
        "cuda13_service",
        {
            "unit": str(options.get("cuda13_service_name")),
            "restart": "never",
            "url": str(options.get("cuda13_server_url") or ""),
            "ready_timeout": READY_PROBE_S,
            "server_info": False,
        },
        check_mode=False,
        allow_failure=True,
    )
    ready = (result.get("cycle") or {}).get("ready") or {}
    last = str(ready.get("last") or result.get("msg") or "no answer")
    return bool(ready.get("generated")), last


def left_drained(
    why: str,
    *,
    host: str,
    undrain_tasks: str,
    last: str = "",
    step: str = "",
    when: str = "when the run was interrupted",
) -> str:
    """The line that says a drained host stays out of service, and how to put it back.

    ``why``: ``not_serving`` (the readiness check failed, ``last`` what it answered), ``not_kept``
    (interrupted at ``step``, where the server may run a new stack no gate kept) or ``no_hook``
    (no ``cuda13_undrain_tasks``). ``when``: for ``not_serving``, when it was found so."""
    how = (
        f"the undrain hook {undrain_tasks} (cuda13_undrain_tasks) for {host}, or run the same command"
        " again, which undrains the host once its server serves"
        if undrain_tasks
        else "put it back into the balancer by hand"
    )
    if why == "not_kept":
        return (
            f"{host}: left drained: the run was interrupted at step '{step}', before a gate kept the new"
            f" stack, so the server may run a stack that is not verified; undrain it after checking: {how}."
        )
    if why == "no_hook":
        return (
            f"{host}: left drained: no undrain hook is set (cuda13_undrain_tasks); {how}, or set"
            " cuda13_undrain_tasks and run the same command again."
        )
    said = f" ({last})" if last else ""
    return f"{host}: left drained: the server was not serving {when}{said}; undrain it after checking: {how}."


def after_interrupt(host: Host, options: Mapping[str, Any], *, run_id: str) -> dict[str, Any]:
    """Whether a host the interrupted run ``run_id`` left drained goes back into service
    (``playbooks/interrupted.yml``, before its lock is released).

    Only a host whose lock ``run_id`` still holds (``run.lock/owner.json``) and whose ``step.json``
    says it is drained (``drained_at``: that run's drain, or one it inherited from a stopped run) is
    considered. It is undrained when its step is one of :data:`UNDRAIN_AFTER` and its server
    generates (:func:`serves`), and an undrain hook is set; otherwise it stays drained, and
    ``left_drained`` says why and how to put it back (:func:`left_drained`).

    Returns ``{"hook": the undrain hook to include or "", "drained_at": ISO 8601 or None,
    "step": step.json's step, "left_drained": the line or ""}``.
    """
    state_dir = str(options["cuda13_state_dir"])
    owner_path, step_path = f"{state_dir}/run.lock/owner.json", f"{state_dir}/step.json"
    found = host.module("cuda13_record", {"read": [owner_path, step_path]}, check_mode=False)["read"]
    owner, record = _json(found.get(owner_path)), _json(found.get(step_path))
    step = str(record.get("step") or "")
    drained = record.get("drained_at") or None
    out: dict[str, Any] = {"hook": "", "drained_at": drained, "step": step, "left_drained": ""}
    if owner.get("run_id") != run_id or not drained:
        return out
    undrain_tasks = str(options.get("cuda13_undrain_tasks") or "")
    if not undrain_tasks:
        out["left_drained"] = left_drained("no_hook", host=host.name, undrain_tasks="")
    elif step not in UNDRAIN_AFTER:
        out["left_drained"] = left_drained("not_kept", host=host.name, undrain_tasks=undrain_tasks, step=step)
    else:
        ready, last = serves(host, options)
        if ready:
            out["hook"] = undrain_tasks
            host.tell(
                f"undrained: the interrupted run left the host drained since {drained} and its server"
                f" generates; running the undrain hook {undrain_tasks}."
            )
            return out
        out["left_drained"] = left_drained(
            "not_serving", host=host.name, undrain_tasks=undrain_tasks, last=last
        )
    host.tell(out["left_drained"].removeprefix(f"{host.name}: "))
    return out


def forget_drain(host: Host, options: Mapping[str, Any]) -> bool:
    """After the undrain hook of :func:`after_interrupt` ran: ``step.json``'s ``drained_at`` cleared
    (``undrained_at`` now), its step kept, so that the next run neither counts the old drain as time
    out of service nor undrains the host again. Returns whether a drain was cleared."""
    path = f"{options['cuda13_state_dir']}/step.json"
    found = host.module("cuda13_record", {"read": [path]}, check_mode=False)["read"]
    record = _json(found.get(path))
    if not record.get("drained_at") or host.check_mode:
        return False
    record = {**record, "drained_at": None, "undrained_at": now_iso()}
    host.module("cuda13_record", {"files": [{"path": path, "content": json_text(record), "mode": "0600"}]})
    return True


def _json(found: Mapping[str, Any] | None) -> dict[str, Any]:
    """A record file read by the module cuda13_record, as a dict ({} when absent or unreadable)."""
    try:
        value = json.loads((found or {}).get("content") or "{}")
    except ValueError:
        return {}
    return dict(value) if isinstance(value, Mapping) else {}
