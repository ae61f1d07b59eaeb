"""The on-demand commands on a serving host (``verify``, ``rollback``), and the drain rule of every
command that restarts or loads a serving host (those two and the rollout).

Both restart the service (``verify`` once per profile, sending the gate's
benchmark load; ``rollback`` once, on the old stack), so each takes the host
out of the load balancer with the rollout's own drain hooks
(``cuda13_drain_tasks`` / ``cuda13_undrain_tasks``) and puts it back after.
Without a drain hook the host would drop its users' requests while it
restarts: the command refuses before any change unless the operator accepts
that with ``cuda13_allow_undrained=true`` (:func:`drain_plan`). The rollout
(``upgrade``) follows the same rule, applied by its preflight before any change
(:func:`cuda13_upgrade.steps.preflight.check`), and ``plan`` shows it
(:func:`cuda13_upgrade.plan.host_plan`). The hooks themselves are checked by the
options step (:func:`hook_failures`): each file exists on the control node, and a
drain hook comes with an undrain hook.

A rollback needs the pre-upgrade snapshot; a host without one has nothing to
roll back to and is left as it is (:func:`nothing_to_roll_back`). Where an
alternatives group was in auto mode before the upgrade and auto mode would now
pick the newer toolkit, the rollback selects the recorded target in manual
mode and says so (:func:`alternatives_restore`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cuda13_upgrade.errors import format_message

#: The commands and what each does to the serving host (README's table, ``--help``).
COMMANDS = {
    "verify": "restarts {service} into each profile and sends it the benchmark's load",
    "rollback": "restarts {service} on the old stack",
}

#: Every command that restarts or loads a serving host, and what it does to it
#: (:func:`drain_plan`'s refusal): the on-demand ones and the rollout.
SERVING_COMMANDS = {
    **COMMANDS,
    "upgrade": "restarts {service} into each profile on both stacks and sends it the gate's benchmark load",
}

#: How each command is named in its refusal.
_LABELS = {"upgrade": "the rollout"}

#: The one line that enables the ready-made hooks (inventory/blackwell/group_vars/blackwell/serving.yml).
ROUTER_HOOKS = "playbooks/hooks/sglang-router-drain.yml and -undrain.yml with cuda13_router_url"

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
    """Whether ``command`` (``upgrade``, ``verify``, ``rollback``) drains ``host``, or why it refuses.

    The one rule of every command that restarts or loads a serving host: the
    rollout's preflight, the drain step of ``verify`` and ``rollback``
    (:func:`cuda13_upgrade.steps.drain.side`) and ``plan`` call it.

    Returns ``{"drain": bool, "undrain": bool, "refusal": str | None, "warning": str | None}``:
    ``drain`` when ``cuda13_drain_tasks`` names a task file, ``undrain`` when
    ``cuda13_undrain_tasks`` does too (run once the host was drained). With no
    drain hook, ``refusal`` names the host, the service, the empty option and
    the two ways on, unless ``allow_undrained``; then ``warning`` says the host
    keeps taking traffic while it restarts. Raises ``ValueError`` for an unknown
    command.
    """
    if command not in SERVING_COMMANDS:
        raise ValueError(f"unknown command {command!r}: one of {', '.join(SERVING_COMMANDS)}")
    drain = bool(str(drain_tasks or "").strip())
    undrain = drain and bool(str(undrain_tasks or "").strip())
    refusal = None
    warning = None
    if not drain and not allow_undrained:
        does = SERVING_COMMANDS[command].format(service=service)
        refusal = (
            f"{host}: {_LABELS.get(command, command)} {does}, and no drain hook takes the host out of "
            f"service first: cuda13_drain_tasks is empty. Nothing was changed. Set cuda13_drain_tasks and "
            f"cuda13_undrain_tasks ({ROUTER_HOOKS}), or run it while the host serves with "
            f"-e cuda13_allow_undrained=true."
        )
    elif not drain:
        warning = (
            "no drain hook (cuda13_drain_tasks), allowed by cuda13_allow_undrained: the host keeps "
            "taking traffic while its service restarts"
        )
    return {"drain": drain, "undrain": undrain, "refusal": refusal, "warning": warning}


def resolve_hook(path: str, search: list[str | Path]) -> Path | None:
    """The file a hook's ``include_tasks`` would include, or None where there is none.

    ``path``: ``cuda13_drain_tasks`` or ``cuda13_undrain_tasks`` as templated (``{{ playbook_dir
    }}/hooks/...`` is absolute by then). ``search``: the directories a relative path is looked
    up in, in Ansible's order for an include in a role's task file (ansible-core's
    ``DataLoader.path_dwim_relative``: the role's ``tasks/``, the role, then the playbook's
    directory and its ``tasks/``); ``~`` is expanded."""
    candidate = Path(os.path.expanduser(str(path)))
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for directory in search:
        for place in (Path(directory) / candidate, Path(directory) / "tasks" / candidate):
            if place.is_file():
                return place
    return None


def hook_failures(
    drain_tasks: str | None, undrain_tasks: str | None, search: list[str | Path] | None
) -> list[dict[str, Any]]:
    """What is wrong with the drain hooks, as the options step's failures
    (``[{"option", "value", "message"}]``, :func:`cuda13_upgrade.options.validate`'s shape).

    Each hook set must be a file on the control node (:func:`resolve_hook` over ``search``;
    ``search`` None skips this, for a caller that knows no playbook directory):
    a missing one would fail at the drain step, inside the window, after the build. A drain
    hook without an undrain hook would leave a kept host out of the balancer; an undrain hook
    without a drain hook would put back a host nothing took out."""
    drain = str(drain_tasks or "").strip()
    undrain = str(undrain_tasks or "").strip()
    failures: list[dict[str, Any]] = []
    where = ", ".join(str(d) for d in search or [])

    def fail(option: str, value: str, problem: str, remedy: str) -> None:
        message = format_message(problem, value, option=option, remedy=remedy)
        failures.append({"option": option, "value": value, "message": message})

    for option, value in (("cuda13_drain_tasks", drain), ("cuda13_undrain_tasks", undrain)):
        if search is not None and value and resolve_hook(value, search) is None:
            side = option.split("_")[1]
            fail(
                option,
                value,
                f"the {side} hook is no task file on the control node "
                f"(a relative path is looked up in {where})",
                "give the path of the hook's task file, e.g. "
                f'"{{{{ playbook_dir }}}}/hooks/sglang-router-{side}.yml"',
            )
    if drain and not undrain:
        fail(
            "cuda13_undrain_tasks",
            undrain,
            f"a drain hook ({drain}) without an undrain hook: a drained host would stay out of the load "
            "balancer after its upgrade",
            "set cuda13_undrain_tasks to the hook that puts the host back "
            "(playbooks/hooks/sglang-router-undrain.yml pairs with sglang-router-drain.yml)",
        )
    elif undrain and not drain:
        fail(
            "cuda13_drain_tasks",
            drain,
            f"an undrain hook ({undrain}) without a drain hook: nothing takes the host out of the load "
            "balancer before it restarts",
            "set cuda13_drain_tasks to the hook that takes it out "
            "(playbooks/hooks/sglang-router-drain.yml pairs with sglang-router-undrain.yml), or unset both",
        )
    return failures


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
