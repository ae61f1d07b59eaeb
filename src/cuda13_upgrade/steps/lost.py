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


def lost_record(step: str, task: str, error: str) -> dict[str, Any]:
    """The loss as recorded: ``{"step", "task", "error", "at"}``; ``error`` is the
    connection's own message (e.g. ssh's ``Connection refused`` or ``Timeout, server not
    responding``), ``at`` ISO 8601 UTC."""
    return {"step": step, "task": task, "error": " ".join(str(error).split()), "at": now_iso()}


def found(task_vars: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The loss recorded earlier in the play: the fact, else the one a ``rescue`` passes in
    the failed step's result (``args["failed"]``: a failed task's facts are not applied)."""
    for candidate in (task_vars.get(LOST_FACT), (args.get("failed") or {}).get(LOST_FACT)):
        if isinstance(candidate, Mapping) and candidate.get("step"):
            return dict(candidate)
    return None


def message(host: str, lost: Mapping[str, Any]) -> str:
    """What the step that found the host gone says (the failed task's ``msg``)."""
    lock = "no lock was taken" if lost["step"] == "lock" else "its lock stays for the next run to take over"
    error = str(lost["error"]).rstrip(".")
    return (
        f"{host}: Ansible lost the host at step {lost['step']} ({lost['task']}): {error}. "
        f"Nothing more is done on it in this run: no rollback, no undrain, {lock}. "
        "Check that it is up and answers ssh (ansible HOST -m ping), then run the same command again: "
        "the next run finishes or rolls back the step it stopped at."
    )


def rescue_record(host: str, lost: Mapping[str, Any]) -> dict[str, Any]:
    """The ``rescue``'s record for a lost host (the step ``rollback`` without touching it)."""
    return {
        "status": "unreachable",
        "failed_step": lost["step"],
        "failed_task": lost["task"],
        "error": message(host, lost),
        "lost": dict(lost),
        "changed": False,
    }


def result_facts(facts: Mapping[str, Any], lost: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`cuda13_upgrade.hostresult.host_result`'s facts for a lost host: status
    ``unreachable`` at the step it was lost in, whatever the steps' records say, and a note
    when it was drained (the undrain hook did not run)."""
    error = message(str(facts.get("host")), lost)
    if run.get("drained"):
        error += " It stays drained: the undrain hook did not run."
    return {
        **facts,
        "status": "unreachable",
        "failed_step": lost["step"],
        "failed_task": lost["task"],
        "error": error,
    }
