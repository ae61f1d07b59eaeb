"""A host Ansible lost part way through the upgrade play: recorded, never touched again, counted.

Ansible ends a play after a batch whose every host it counts as failed or unreachable
(``PlaybookExecutor.run``: ``if len(batch) == failed_hosts_count: break_play``), and the
playbook with it: the later batches are not started and the report play never runs, so a
batch of hosts lost together (a rack's switch, a power feed) would end the rollout without
the fleet report's reasons. And a host Ansible counts as unreachable runs neither ``rescue``
nor ``always`` (ansible/ansible#13870): no result is written for it.

So in the upgrade play (``playbooks/upgrade.yml`` sets ``__cuda13_record_lost``) a step
whose connection to the host fails does not leave the host to Ansible's unreachable path:
the step records the loss (:func:`lost_record`, the fact :data:`LOST_FACT`) and fails, the
role's ``rescue`` and ``always`` run, and every later step leaves the host alone: the
rollback rolls nothing back (:func:`rescue_record`), the undrain hook does not run (the
host stays out of service), the lock stays (the next run takes it over once its lease
shows this run ended), and the result, status ``unreachable`` at the step the host was in
(:func:`result_facts`), is written on the control node only. Ansible counts the host as
neither failed nor unreachable until the play that fails the hosts which did not keep the
upgrade; the batch gate counts it against the failure budget (``budget.COUNTED``) like a
rolled-back host, and the next run resolves where it stopped as it resolves a killed run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuda13_upgrade.steps.host import now_iso

#: The fact (and the key of a failed step's result) that says Ansible lost the host.
LOST_FACT = "cuda13_host_lost"

#: The play variable that turns the recording on (the upgrade play sets it).
RECORD_VAR = "__cuda13_record_lost"


def lost_record(step: str, task: str, error: str, run_id: str = "") -> dict[str, Any]:
    """The loss as recorded: ``{"step", "task", "error", "at", "run_id"}``; ``error`` is the
    connection's own message (e.g. ssh's ``Connection refused`` or ``Timeout, server not
    responding``), ``at`` ISO 8601 UTC, ``run_id`` the run that lost the host."""
    return {
        "step": step,
        "task": task,
        "error": " ".join(str(error).split()),
        "at": now_iso(),
        "run_id": run_id,
    }


def found(task_vars: Mapping[str, Any], args: Mapping[str, Any], run_id: str = "") -> dict[str, Any] | None:
    """The loss recorded earlier in this run: the fact, else the one a ``rescue`` passes in
    the failed step's result (``args["failed"]``: a failed task's facts are not applied). A
    record of another run (a fact cache that keeps facts across runs) is not this run's loss."""
    for candidate in (task_vars.get(LOST_FACT), (args.get("failed") or {}).get(LOST_FACT)):
        if isinstance(candidate, Mapping) and candidate.get("step") and candidate.get("run_id", "") == run_id:
            return dict(candidate)
    return None


#: What was left undone on a host lost at a step, by the step (:func:`message`).
_LEFT = {
    "lock": "Nothing was done on it in this run; no lock was taken",
    "rollback": "The rollback was interrupted and may be partial; nothing more is done on it in this run, "
    "its lock stays for the next run to take over",
    "undrain": "Nothing more is done on it in this run; its lock stays for the next run to take over",
    "result": "Its result could not be written on the host; its lock stays for the next run to take over",
}


def message(host: str, lost: Mapping[str, Any]) -> str:
    """What the step that found the host gone says (the failed task's ``msg``): the step, the
    task and the connection's error, what this run leaves undone there, and what to do."""
    error = str(lost["error"]).rstrip(".")
    left = _LEFT.get(
        str(lost["step"]),
        "Nothing more is done on it in this run: no rollback, no undrain, its lock stays for the next run "
        "to take over",
    )
    return (
        f"{host}: Ansible lost the host at step {lost['step']} ({lost['task']}): {error}. {left}. "
        "Check that it is up and answers ssh (ansible HOST -m ping), then run the same command again: "
        "the next run finishes or rolls back the step it stopped at."
    )


def rescue_record(
    host: str, lost: Mapping[str, Any], failed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``rescue``'s record for a lost host (the step ``rollback`` without touching it).
    ``failed``: the failed task's result the rescue was given; when the host was lost during
    the rollback itself, that failure (the reason for the rollback) is kept as ``reason``."""
    reason = failed.get("msg") if failed and not failed.get(LOST_FACT) else None
    return {
        "status": "unreachable",
        "failed_step": lost["step"],
        "failed_task": lost["task"],
        "error": message(host, lost) + (f" The rollback was for: {reason}" if reason else ""),
        "rollback_for": reason,
        "lost": dict(lost),
        "changed": False,
    }


def result_facts(
    facts: Mapping[str, Any],
    lost: Mapping[str, Any],
    run: Mapping[str, Any],
    rescue: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`cuda13_upgrade.hostresult.host_result`'s facts for a lost host: status
    ``unreachable`` at the step it was lost in, whatever the steps' records say, the reason of
    the rollback it was lost in (``rescue``: :func:`rescue_record`), and a note when it was
    drained and the undrain hook did not run."""
    error = message(str(facts.get("host")), lost)
    if (rescue or {}).get("rollback_for"):
        error += f" The rollback was for: {rescue['rollback_for']}"
    if run.get("drained") and lost["step"] not in ("undrain", "result"):
        error += " It stays drained: the undrain hook did not run."
    return {
        **facts,
        "status": "unreachable",
        "failed_step": lost["step"],
        "failed_task": lost["task"],
        "error": error,
    }
