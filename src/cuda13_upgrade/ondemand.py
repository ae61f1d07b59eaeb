"""The on-demand commands on a serving host: ``verify`` and ``rollback``.

Both restart the service (``verify`` once per profile, sending the gate's
benchmark load; ``rollback`` once, on the old stack), so each takes the host
out of the load balancer with the rollout's own drain hooks
(``cuda13_drain_tasks`` / ``cuda13_undrain_tasks``) and puts it back after.
Without a drain hook the host would drop its users' requests while it
restarts: the command refuses before any change unless the operator accepts
that with ``cuda13_allow_undrained=true`` (:func:`drain_plan`).

A rollback needs the pre-upgrade snapshot; a host without one has nothing to
roll back to and is left as it is (:func:`nothing_to_roll_back`). Where an
alternatives group was in auto mode before the upgrade and auto mode would now
pick the newer toolkit, the rollback selects the recorded target in manual
mode and says so (:func:`alternatives_restore`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The commands and what each does to the serving host (README's table, ``--help``).
COMMANDS = {
    "verify": "restarts {service} into each profile and sends it the benchmark's load",
    "rollback": "restarts {service} on the old stack",
}

#: The status of a rollback of a host without a snapshot (nothing changed).
NOTHING_TO_ROLL_BACK = "nothing_to_roll_back"

#: How the reason of an on-demand rollback's ``result.json`` begins (:func:`rolled_back`).
ON_DEMAND_REASON = "rolled back on demand (playbooks/rollback.yml)"


def drain_plan(
    command: str,
    host: str,
    service: str,
    drain_tasks: str | None,
    undrain_tasks: str | None,
    allow_undrained: bool = False,
) -> dict[str, Any]:
    """Whether ``command`` (``verify``, ``rollback``) drains ``host``, or why it refuses.

    Returns ``{"drain": bool, "undrain": bool, "refusal": str | None}``:
    ``drain`` when ``cuda13_drain_tasks`` names a task file (the rollout's
    rule, :func:`cuda13_upgrade.steps.drain.side`), ``undrain`` when
    ``cuda13_undrain_tasks`` does too (run once the host was drained). With no
    drain hook, ``refusal`` names the host, the service, the empty option and
    the two ways on, unless ``allow_undrained``. Raises ``ValueError`` for an
    unknown command.
    """
    if command not in COMMANDS:
        raise ValueError(f"unknown on-demand command {command!r}: one of {', '.join(COMMANDS)}")
    drain = bool(str(drain_tasks or "").strip())
    undrain = drain and bool(str(undrain_tasks or "").strip())
    refusal = None
    if not drain and not allow_undrained:
        does = COMMANDS[command].format(service=service)
        refusal = (
            f"{host}: {command} {does}, and no drain hook takes the host out of service first: "
            f"cuda13_drain_tasks is empty. Nothing was changed. Set cuda13_drain_tasks and "
            f"cuda13_undrain_tasks (playbooks/hooks/sglang-router-drain.yml and -undrain.yml with "
            f"cuda13_router_url), or run it while the host serves with -e cuda13_allow_undrained=true."
        )
    return {"drain": drain, "undrain": undrain, "refusal": refusal}


def nothing_to_roll_back(host: str, run_id: str, snapshot_file: str, finished_at: str) -> dict[str, Any]:
    """The control node's ``result.json`` of a rollback of a host without the
    snapshot ``snapshot_file`` (the stack_snapshot role writes it before a
    rollout's first change): status ``nothing_to_roll_back``, the reason naming
    the host and the path looked for; nothing on the host was changed."""
    return {
        "host": host,
        "run_id": run_id,
        "status": NOTHING_TO_ROLL_BACK,
        "finished_at": finished_at,
        "reason": (
            f"nothing to roll back to: {host} has no pre-upgrade snapshot at {snapshot_file} "
            f"(rollback_snapshot_file); nothing on the host was changed"
        ),
        "rollback": {"performed": False, "seconds": None},
    }


def rolled_back(
    host: str, run_id: str, seconds: Any, alternatives_manual: list[Mapping[str, Any]], finished_at: str
) -> dict[str, Any]:
    """The ``result.json`` of an on-demand rollback that put ``host`` back on
    its snapshot's stack in ``seconds``: status ``rolled_back``, and in
    ``rollback.alternatives_manual`` the groups left in manual mode
    (:func:`alternatives_restore`), which the reason names too."""
    note = alternatives_note(alternatives_manual)
    return {
        "host": host,
        "run_id": run_id,
        "status": "rolled_back",
        "measured": False,
        "finished_at": finished_at,
        "reason": ON_DEMAND_REASON + (f"; {note}" if note else ""),
        "rollback": {
            "performed": True,
            "seconds": seconds,
            "alternatives_manual": [dict(g) for g in alternatives_manual],
        },
    }


def alternatives_restore(
    group: str, recorded: Mapping[str, Any], query: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What the rollback does to one alternatives group, and whether it stays in manual mode.

    ``recorded``: the snapshot's entry for ``group`` (``{"status": "auto" |
    "manual", "value": path, "link": path}``, the stack_snapshot role's).
    ``query``: ``update-alternatives --query`` of the group now, parsed
    (:func:`cuda13_upgrade.stack.parse_alternatives_query`: ``status``,
    ``best``, ``value``), or None when the query failed (no such group).

    Returns ``{"action": "auto" | "select" | "none", "left_manual": None |
    {"group", "selected", "auto_would_select"}}``. A group that was in auto
    mode goes back to auto (``update-alternatives --auto``) only when auto mode
    picks the recorded target again (Debian's update-alternatives(1): auto
    mode follows the highest priority, "Best"); while a newer toolkit stays
    installed, auto would pick it, so the recorded target is selected (manual
    mode), and ``left_manual`` says what a later ``update-alternatives --auto
    GROUP`` would select.
    """
    value = recorded.get("value")
    if query is None:
        return {"action": "select", "left_manual": None}
    best = query.get("best")
    if recorded.get("status") == "manual":
        return {"action": "select", "left_manual": None}
    if best == value:
        return {"action": "none" if query.get("status") == "auto" else "auto", "left_manual": None}
    return {
        "action": "select",
        "left_manual": {"group": group, "selected": value, "auto_would_select": best},
    }


def alternatives_note(left_manual: list[Mapping[str, Any]]) -> str:
    """One sentence per group left in manual mode (:func:`alternatives_restore`),
    or "" for none: ``"cuda stays in manual mode on /usr/local/cuda-12.8:
    update-alternatives --auto cuda would select /usr/local/cuda-13.0."``"""
    return " ".join(
        f"{g['group']} stays in manual mode on {g['selected']}: "
        f"update-alternatives --auto {g['group']} would select {g['auto_would_select']}."
        for g in left_manual
    )
