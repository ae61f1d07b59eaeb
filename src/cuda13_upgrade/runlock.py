"""Whether a host's upgrade lock still belongs to a live run.

A run takes ``/var/lib/cuda13-upgrade/run.lock`` on each host (``mkdir`` is
atomic) and writes ``owner.json`` into it: the run id, the control node's
host name, the pid of its ``ansible-playbook``, when it started and the end of
its lease. A run that ends releases the lock in its ``always:`` section; a run
killed by SIGKILL, a lost control node or a power cut leaves it behind. The
next run takes such a lock over, with a message naming the old run, and still
refuses a lock whose run may be alive (:func:`lock_verdict`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def ansible_playbook_alive(pid: int, proc: Path = Path("/proc")) -> bool:
    """True when ``pid`` is a running ``ansible-playbook`` on this machine
    (Linux ``/proc/<pid>/cmdline`` names it; a reused pid of another program
    does not count). ``proc``: the proc file system (tests)."""
    try:
        cmdline = (proc / str(int(pid)) / "cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return any(Path(arg.decode(errors="replace")).name == "ansible-playbook" for arg in cmdline.split(b"\0"))


def _when(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def lock_verdict(
    owner: Mapping[str, Any] | None,
    *,
    control_node: str,
    result: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    pid_alive: Callable[[int], bool] = ansible_playbook_alive,
) -> dict[str, Any]:
    """Decide whether the run that holds a lock is dead.

    ``owner``: the lock's ``owner.json`` (``run_id``, ``control_node``,
    ``pid``, ``started_at``, ``lease_expires_at``, ISO 8601 times), None or
    ``{}`` when it could not be read. ``control_node``: this run's control
    node (``hostname``). ``result``: the host's ``result.json`` (its
    ``run_id`` and ``finished_at``), if any. ``now``: the current UTC time.
    ``pid_alive``: whether a pid is a live ``ansible-playbook`` here.

    The holder is dead when the host's result records that very run as
    finished; when it ran from this control node and its ``ansible-playbook``
    is gone; or when its lease has expired. Otherwise, and when the owner is
    unknown (a lock without a readable ``owner.json``: a run may be between
    taking the lock and writing it), it may be alive.

    Returns ``{"dead": bool, "run_id": str | None, "reason": str}``, the
    reason in words for the operator.
    """
    now = now or datetime.now(UTC)
    owner = owner or {}
    run_id = owner.get("run_id")
    if not run_id:
        return {
            "dead": False,
            "run_id": None,
            "reason": "the lock names no run (owner.json missing or empty)",
        }
    result = result or {}
    if result.get("run_id") == run_id and result.get("finished_at"):
        return {
            "dead": True,
            "run_id": run_id,
            "reason": f"run {run_id} recorded its result on the host at {result['finished_at']}",
        }
    pid = owner.get("pid")
    node = owner.get("control_node")
    if node == control_node and pid not in (None, ""):
        try:
            alive = pid_alive(int(pid))
        except (TypeError, ValueError):
            alive = True
        if not alive:
            return {
                "dead": True,
                "run_id": run_id,
                "reason": f"the ansible-playbook of run {run_id} (pid {pid} on {node}) is no longer running",
            }
        return {
            "dead": False,
            "run_id": run_id,
            "reason": f"the ansible-playbook of run {run_id} (pid {pid} on {node}) is running",
        }
    expires = _when(owner.get("lease_expires_at"))
    where = node or "an unknown control node"
    if expires is not None and expires <= now:
        return {
            "dead": True,
            "run_id": run_id,
            "reason": f"the lease of run {run_id} (from {where}) expired at {expires.isoformat()}",
        }
    until = f" until {expires.isoformat()}" if expires else ""
    return {
        "dead": False,
        "run_id": run_id,
        "reason": f"run {run_id} from {where} holds a lease{until}",
    }


def this_control_node() -> str:
    """This machine's host name, as ``hostname`` prints it."""
    return os.uname().nodename


def stopped_run(
    step_record: Mapping[str, Any] | None,
    result: Mapping[str, Any] | None,
    run_id: str,
) -> dict[str, Any] | None:
    """The earlier run that stopped on a host part way, or None.

    ``step_record``: the host's ``step.json``, the last step boundary a run
    passed (:func:`cuda13_upgrade.steps.host.begin_step`: ``run_id``, ``step``,
    ``started_at``, ``serving``, ``steps``), None or ``{}`` when there is
    none. ``result``: the host's ``result.json``, if any. ``run_id``: this
    run.

    A run that ends, whatever its outcome, passes its ``result`` step; one
    that lost its host (Ansible runs neither ``rescue`` nor ``always`` for an
    unreachable host: ansible/ansible#13870), was killed or interrupted
    stays at the step it was in. That run, when it is not this one, is the
    one to resolve.

    Returns ``{"run_id", "step", "started_at", "serving", "recorded", "drained_at"}``:
    ``serving`` the venv the service pointed at when that step began,
    ``recorded`` the status that run itself recorded in ``result.json``
    (``"interrupted"`` after Ctrl-C of the ``cuda13-upgrade`` command) or
    None, ``drained_at`` when that run's drain began if it left the host drained
    (step.json's, :func:`cuda13_upgrade.steps.host.drained_at`), else None.
    """
    record = step_record or {}
    earlier = record.get("run_id")
    if not earlier or earlier == run_id or record.get("step") in (None, "", "result"):
        return None
    result = result or {}
    return {
        "run_id": earlier,
        "step": record.get("step"),
        "started_at": record.get("started_at"),
        "serving": record.get("serving"),
        "recorded": result.get("status") if result.get("run_id") == earlier else None,
        "drained_at": record.get("drained_at") or None,
    }
