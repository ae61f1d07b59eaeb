"""The plan of a rollout, changing nothing (action ``cuda13_plan``; ``cuda13-upgrade plan``).

The rollout's own read-only passes run first (``playbooks/plan.yml``: the options,
each host's state, the preflight with its refusals recorded instead of failing);
:func:`host` reads their records into one host's plan
(:func:`cuda13_upgrade.plan.host_plan`), and :func:`rollout` puts the hosts'
plans together with the batch plan (:func:`cuda13_upgrade.plan.rollout_plan`),
written to ``<run dir>/plan.json`` and printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import plan, space


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
    return plan.host_plan(
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
    )


def rollout(
    hosts: Sequence[Mapping[str, Any]], fleet: Mapping[str, Any], run_id: str, allow_partial: bool = False
) -> dict[str, Any]:
    """The whole plan: :func:`cuda13_upgrade.plan.rollout_plan` over the hosts' plans, with the
    window and the failure budget of the run's batch plan (``cuda13_fleet``)."""
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
    return plan.rollout_plan(
        list(hosts),
        serial=options.get("cuda13_serial"),
        max_parallel=options.get("cuda13_max_parallel"),
        run_id=str(run_id),
        allow_partial=bool(allow_partial),
        fleet_lines=lines,
    )
