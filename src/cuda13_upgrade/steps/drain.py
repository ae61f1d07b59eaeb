"""The drain bracket's two sides (action ``cuda13_step``): the step boundary and the hook to run.

The hooks are the operator's task files (``cuda13_drain_tasks`` /
``cuda13_undrain_tasks``, e.g. ``playbooks/hooks/sglang-router-drain.yml``): only
YAML can include them, so a side of the bracket is two tasks
(``roles/upgrade_host/tasks/drain.yml``): this step, which records the boundary on
the host and in the run record and says which hook file to include, then the
include. The run record's ``drained`` says whether the host is out of service
by a hook, so that the undrain side runs exactly once for each drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuda13_upgrade import ondemand
from cuda13_upgrade.steps.host import Host, StepFailed, begin_step, current_step


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
        updated = begin_step(host, run, "drain") if run.get("steps") is not None else dict(run)
        if failed_step:
            updated["failed_step"] = failed_step
        updated["drained"] = bool(hook)
        # The undrain hook is run only where one is set (playbooks/rollback.yml: a drain without it).
        updated["undrain_hook"] = undrain_tasks
        return {"step": step, "hook": hook, "run": updated}
    if step != "undrain":
        raise StepFailed(f"cuda13_step: step must be drain or undrain, got {step!r}")
    if not run.get("drained"):
        return {"step": step, "hook": "", "run": dict(run)}
    updated = begin_step(host, run, "undrain")
    updated["drained"] = False
    return {"step": step, "hook": undrain_tasks, "run": updated}
