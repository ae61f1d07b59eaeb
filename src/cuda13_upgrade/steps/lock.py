"""The step ``lock``: one upgrade run per host at a time (action plugin ``cuda13_lock``).

The host's side is ``hostscripts/statedir.py`` (module ``cuda13_lock``); the
verdict on a lock found held is :func:`cuda13_upgrade.runlock.lock_verdict`, on
the control node, which knows whether the holder's ansible-playbook still runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from cuda13_upgrade import runlock
from cuda13_upgrade.steps.host import Host, StepFailed


def owner_record(
    *,
    run_id: str,
    control_node: str,
    pid: int,
    playbook: str,
    lease_hours: float,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The lock's ``owner.json``: ``{"run_id", "control_node", "pid" (this run's
    ansible-playbook), "started_at", "lease_expires_at" (ISO 8601, UTC), "playbook"}``."""
    now = now or datetime.now(UTC)
    expires = now + timedelta(hours=float(lease_hours))
    return {
        "run_id": run_id,
        "control_node": control_node,
        "pid": int(pid),
        "started_at": now.isoformat(),
        "lease_expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
        "playbook": playbook,
    }


def acquire(
    host: Host,
    *,
    state_dir: str,
    owner: Mapping[str, Any],
    break_lock: bool = False,
    pid_alive: Any = runlock.ansible_playbook_alive,
) -> dict[str, Any]:
    """Take the host's lock for the run that ``owner`` describes (:func:`owner_record`).

    Returns ``{"held": bool, "taken_over": owner of the dead run or None, "owner",
    "notice": str}``. In check mode nothing is taken (``held`` false). Raises
    StepFailed naming the holder when a live run holds the lock and ``break_lock``
    is false.
    """
    if host.check_mode:
        return {"held": False, "taken_over": None, "owner": dict(owner), "notice": ""}
    found = host.module("cuda13_lock_dir", {"action": "acquire", "state_dir": state_dir})
    taken_over = None
    notice = ""
    if not found.get("acquired"):
        holder = found.get("held_by") or {}
        verdict = runlock.lock_verdict(
            holder,
            control_node=str(owner.get("control_node")),
            result=found.get("result"),
            pid_alive=pid_alive,
        )
        lock_dir = f"{state_dir}/run.lock"
        if not break_lock and not verdict["dead"]:
            raise StepFailed(
                f"Another cuda13-upgrade run holds the lock {lock_dir} on {host.name}: {verdict['reason']}."
                " Nothing on the host was changed. Wait for it to finish."
                " If that run is dead, run again with -e cuda13_break_lock=true,"
                f" or remove the directory on the host. Holder: {json.dumps(holder, sort_keys=True)}.",
                {"held": False, "holder": holder, "verdict": verdict},
            )
        step = found.get("step") or {}
        why = "cuda13_break_lock=true" if break_lock and not verdict["dead"] else verdict["reason"]
        began = (
            f" That run had begun step {step.get('step')} at {step.get('started_at')}."
            if step.get("run_id") and step.get("run_id") == verdict.get("run_id")
            else ""
        )
        notice = (
            f"{host.name}: took over the lock {lock_dir} of run {verdict.get('run_id') or '?'}: {why}.{began}"
        )
        taken_over = holder
        # tell() names the host itself.
        host.tell(notice.removeprefix(f"{host.name}: "))
    host.module("cuda13_lock_dir", {"action": "own", "state_dir": state_dir, "owner": dict(owner)})
    return {"held": True, "taken_over": taken_over, "owner": dict(owner), "notice": notice}


def release(host: Host, *, state_dir: str, lock: Mapping[str, Any]) -> dict[str, Any]:
    """Release the lock ``lock`` (what :func:`acquire` returned) says this run holds.

    Returns ``{"held": bool, "released": bool}``; a lock this run does not hold is left.
    """
    held = bool(lock.get("held"))
    if not held or host.check_mode:
        return {"held": held, "released": False}
    result = host.module("cuda13_lock_dir", {"action": "release", "state_dir": state_dir})
    return {"held": True, "released": bool(result.get("changed"))}
