"""The plan of a rollout, changing nothing (action ``cuda13_plan``; ``cuda13-upgrade plan``).

The rollout's own read-only passes run first (``playbooks/plan.yml``: the options,
each host's state, the preflight with its refusals recorded instead of failing);
:func:`host` reads their records into one host's plan
(:func:`cuda13_upgrade.plan.host_plan`), and :func:`rollout` puts the hosts'
plans together with the batch plan (:func:`cuda13_upgrade.plan.rollout_plan`),
written to ``<run dir>/plan.json`` and printed, with the estimate of how long the
night takes (:mod:`cuda13_upgrade.estimate`: each host's time from earlier runs under the
reports directory, else its stage run, else a rough default; each batch's start and end;
whether the window holds them all).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cuda13_upgrade import driverplan, estimate, plan, space


def _failed(record: Any) -> str:
    if isinstance(record, Mapping) and record.get("failed"):
        return str(record.get("msg") or "")
    return ""


def host(
    name: str,
    *,
    options_check: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None,
    state: Mapping[str, Any] | None,
    preflight: Mapping[str, Any] | None,
    figures: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One host's plan from the records of the passes: ``options_check`` (the ``cuda13_options``
    task's result), ``options`` (the record), ``state`` (``cuda13_host_state``'s), ``preflight``
    (``cuda13_preflight``'s, run with ``refuse`` false), ``figures`` (the stacks' space figures)."""
    options = options or {}
    if isinstance(state, Mapping) and state.get("unreachable"):
        return plan.unreachable_plan(name, str(state.get("msg") or ""))
    state = state if isinstance(state, Mapping) and not state.get("skipped") else {}
    preflight = preflight if isinstance(preflight, Mapping) and not preflight.get("skipped") else {}
    refusals = [r for r in (_failed(options_check), _failed(state)) if r]
    refusals += list(preflight.get("refusals") or [])
    stack = str(options.get("nvidia_driver_check_space_stack") or "")
    wheels_bytes, wheels_record = None, ""
    if stack and isinstance(figures, Mapping):
        wheels_bytes = space.stack_figures(figures, stack)["bytes"]["wheels"]
        measured = ((figures.get("stacks") or {}).get(stack) or {}).get("measured") or {}
        wheels_record = f"stack-space.yml, stack {stack}: {str(measured.get('wheels') or '').strip()}"
    toolkit = preflight.get("toolkit") or {}
    record = plan.host_plan(
        name,
        verdict=state if state and not state.get("failed") else None,
        state={"staged": state.get("staged_state") or None} if state else None,
        target=state.get("target"),
        refusals=refusals,
        preflight=preflight.get("report"),
        toolkit={
            "package": f"{toolkit.get('package', '')}={toolkit.get('version', '')}" if toolkit else "",
            "to_install": bool(toolkit.get("to_install", True)),
            "transaction": toolkit.get("transaction"),
        },
        resolved=preflight.get("resolved"),
        wheels_bytes=wheels_bytes,
        wheels_record=wheels_record,
        profiles=list(options.get("cuda13_profiles") or []),
        rollback_verify=bool(options.get("cuda13_rollback_verify", True)),
        drain_tasks=str(options.get("cuda13_drain_tasks") or ""),
        undrain_tasks=str(options.get("cuda13_undrain_tasks") or ""),
        allow_undrained=bool(options.get("cuda13_allow_undrained")),
        service=str(options.get("cuda13_service_name") or "the service"),
        gpu_model=", ".join(
            sorted({str(g.get("name")) for g in preflight.get("gpus") or [] if isinstance(g, Mapping)})
        ),
        soak_s=_soak(options.get("cuda13_soak_seconds")),
        driver=_driver_lines(preflight.get("driver_window"), bool(options.get("cuda13_driver_only"))),
        driver_move=_driver_move(preflight.get("driver_window")),
    )
    # cuda13-upgrade driver: the driver window alone (its plan's summary says so).
    return {**record, "driver_only": bool(options.get("cuda13_driver_only"))}


def _driver_lines(window: Any, driver_only: bool) -> list[str]:
    """The driver window's lines of a host's plan (:func:`cuda13_upgrade.driverplan.describe`) and,
    for a host below the floor, whether the CUDA 13 stack follows in the same run."""
    if not isinstance(window, Mapping):
        return []
    lines = driverplan.describe(window)
    if window.get("needs_move"):
        lines.append(
            "  then the stack: left as it is (cuda13-upgrade driver); a later rollout upgrades it"
            if driver_only
            else "  then the stack: the CUDA 13 upgrade follows in the same run"
        )
    return lines


def _driver_move(window: Any) -> dict[str, Any] | None:
    """The driver window's verdict for the plan's summary (:func:`cuda13_upgrade.plan.host_plan`)."""
    if not isinstance(window, Mapping):
        return None
    if not window.get("needs_move"):
        return {"state": "at_floor", "blockers": []}
    checks = [str(b.get("check")) for b in window.get("blockers") or [] if isinstance(b, Mapping)]
    return {"state": "ready" if window.get("ready") and not checks else "blocked", "blockers": checks}


def _soak(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def night(
    the_plan: Mapping[str, Any],
    fleet: Mapping[str, Any],
    reports_dir: str | Path | None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The estimate of the plan's batches (:func:`cuda13_upgrade.estimate.schedule`) from the
    runs under ``reports_dir`` (this run's left out), starting ``now`` (None: the control
    node's clock), in the window and before ``cuda13_until`` of ``fleet``. Returns the schedule
    with ``"hosts"``: :func:`cuda13_upgrade.estimate.host_estimates`' record, ``"skipped"``: the
    corrupt earlier results left out (:func:`cuda13_upgrade.estimate.history`; the lines begin
    with :func:`cuda13_upgrade.estimate.skipped_line` for them). Raises nothing: on an
    unexpected error it returns ``{"error": why, "lines": ["no estimate: <why>"]}`` (no
    ``"hosts"``, so the rollout's start makes its own): an estimate never stops a plan."""
    now = now or datetime.now(UTC)
    try:
        return _night(the_plan, fleet, reports_dir, now)
    except Exception as exc:  # noqa: BLE001 - an estimate never stops a plan
        why = f"{type(exc).__name__}: {exc}"
        return {"error": why, "lines": [f"no estimate: {why}"]}


def _night(
    the_plan: Mapping[str, Any], fleet: Mapping[str, Any], reports_dir: str | Path | None, now: datetime
) -> dict[str, Any]:
    by_host = {r["host"]: r for r in the_plan.get("hosts") or []}
    infos = []
    for batch in the_plan.get("batches") or []:
        for name in batch:
            r = by_host.get(name) or {}
            infos.append(
                {
                    "host": name,
                    "gpu_model": r.get("gpu_model") or "",
                    "profiles": r.get("profile_count"),
                    "restarts": (r.get("restarts") or {}).get("upgrade"),
                    "staged": r.get("path") == plan.STAGED,
                }
            )
    skipped: list[dict[str, str]] = []
    records = (
        estimate.history(reports_dir, str(the_plan.get("run_id") or ""), skipped=skipped)
        if reports_dir
        else []
    )
    per_host = estimate.host_estimates(infos, records)
    soaks = [r.get("soak_s") for r in by_host.values() if r.get("soak_s") is not None]
    until_at = fleet.get("until_at")
    until = datetime.fromisoformat(str(until_at).replace("Z", "+00:00")) if until_at else None
    try:
        scheduled = estimate.schedule(
            the_plan.get("batches") or [],
            per_host,
            now=now,
            soak_s=max(soaks) if soaks else estimate.SOAK_S,
            window_value=fleet.get("window") or None,
            until=until,
        )
    except ValueError:  # a bad window: the start gate refused the run already
        scheduled = estimate.schedule(the_plan.get("batches") or [], per_host, now=now, until=until)
    note = estimate.skipped_line(skipped)
    return {
        **scheduled,
        "lines": ([note] if note else []) + scheduled["lines"],
        "skipped": skipped,
        "hosts": per_host,
        "window": fleet.get("window") or {},
        "until_at": until_at or "",
    }


def rollout(
    hosts: Sequence[Mapping[str, Any]],
    fleet: Mapping[str, Any],
    run_id: str,
    allow_partial: bool = False,
    reports_dir: str | Path | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The whole plan: :func:`cuda13_upgrade.plan.rollout_plan` over the hosts' plans, with the
    window and the failure budget of the run's batch plan (``cuda13_fleet``) and, for a plan
    that changes hosts, ``"estimate"``: :func:`night` over ``reports_dir`` at ``now``, its lines
    at the end of the summary's."""
    options = fleet.get("options") or {}
    lines = []
    if fleet.get("window_text"):
        lines.append(f"batches start only inside the window cuda13_window: {fleet['window_text']}")
    if fleet.get("until_at"):
        lines.append(f"no batch starts after cuda13_until: {fleet['until_at']}")
    if fleet.get("max_failed_hosts") is not None:
        lines.append(
            f"no batch starts once more than {fleet['max_failed_hosts']} host(s) of the fleet failed"
            " or rolled back (cuda13_max_failed_hosts)"
        )
    if fleet.get("alerts_text"):  # cuda13_block_on_alerts (cuda13_upgrade.alerts.describe)
        lines.append(str(fleet["alerts_text"]))
    the_plan = plan.rollout_plan(
        list(hosts),
        serial=options.get("cuda13_serial"),
        max_parallel=options.get("cuda13_max_parallel"),
        run_id=str(run_id),
        allow_partial=bool(allow_partial),
        fleet_lines=lines,
    )
    if the_plan["batches"] and not the_plan["summary"]["stops"]:
        the_plan["estimate"] = night(the_plan, fleet, reports_dir, now)
        the_plan["summary"]["lines"] += the_plan["estimate"]["lines"]
    return the_plan
