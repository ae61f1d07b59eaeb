"""A host's result record: ``result.json``, what a run did with the host, and how it reads.

A run's directory on the control node (``reports/<run id>/``) holds:

``<host>/result.json``
    written at the end of the host's run for every host the run reached
    (:func:`host_result`, by the step ``result``: :mod:`cuda13_upgrade.steps.result`,
    action ``cuda13_result``), also by ``playbooks/rollback.yml``.
``run.json`` (optional)
    written by the ``cuda13-upgrade`` command after ansible-playbook returned:
    the hosts of the run and each host's outcome: for a host with a result
    file, its status (:func:`result_status`: ``"kept"``, ``"already kept"``,
    ``"rolled_back"`` ...); for the others, what the runner saw of them
    (``{"status": "failed", "failed_step", "failed_task", "error"}``,
    ``"unreachable"``, ``"passed"`` ...).

A host of the run without a result (and without an outcome in ``run.json``)
was "not reached" (:data:`NOT_REACHED`): the rollout stopped before its batch.
The fleet summary of these records is :mod:`cuda13_upgrade.summary`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cuda13_upgrade import effective, ondemand, timeline, xid

#: The status of a host of the run without a result: the rollout stopped before its batch.
NOT_REACHED = "not reached"
#: The status run.json gives a host kept by an earlier run, its stack unchanged (no role ran).
ALREADY_KEPT = "already kept"
#: How a status reads in a sentence (the others read as they are).
STATUS_TEXT = {
    "rolled_back": "rolled back",
    ondemand.NOTHING_TO_ROLL_BACK: "nothing to roll back",
    # cuda13-upgrade driver: the driver moved and kept, or at or above the floor and left alone.
    "driver_kept": "driver kept",
    "driver_current": "driver current",
}


def load_results(run_dir: str | Path, hosts: list[str] | None = None) -> list[dict[str, Any]]:
    """The results of ``hosts`` (all result files when None), in host order.

    A host without ``<run_dir>/<host>/result.json`` gets ``{"host": h,
    "status": "not reached"}``. Raises ``ValueError`` naming a result file
    that is not JSON.
    """
    run = Path(run_dir)
    if hosts is None:
        hosts = sorted(p.parent.name for p in run.glob("*/result.json"))
    results = []
    for host in hosts:
        path = run / host / "result.json"
        if not path.exists():
            results.append({"host": host, "status": NOT_REACHED})
            continue
        try:
            results.append(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a JSON result: {exc}") from exc
    return results


def driver_window_times(
    window: Mapping[str, Any] | None, steps: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The driver window's record (:func:`cuda13_upgrade.steps.driver_move.summary`) with its time
    out of service split, in seconds: ``"old_driver_measure_seconds"`` (the ``baseline`` step just
    before ``driver``: the serving stack measured on the old driver) and ``"driver_seconds"`` (the
    ``driver`` step: install, activation, checks and the measurement on the new driver; its
    ``activation_seconds`` and ``measure_seconds`` are the record's own). ``steps``:
    :func:`cuda13_upgrade.timeline.step_durations`. None without a window."""
    if not window:
        return None
    names = [str(step.get("step")) for step in steps]
    record = dict(window)
    at = names.index("driver") if "driver" in names else None
    before = steps[at - 1] if at else None
    record["old_driver_measure_seconds"] = (
        before.get("duration_s") if before is not None and before.get("step") == "baseline" else None
    )
    record["driver_seconds"] = steps[at].get("duration_s") if at is not None else None
    return record


def result_status(result: dict[str, Any]) -> str:
    """A result's status, with a host kept by an earlier run and left there
    (``already_kept``, roles/upgrade_host/tasks/early.yml) as ``"already kept"``:
    ``"kept"``, ``"already kept"``, ``"rolled_back"``, ``"failed"``, ``"staged"``,
    ``"interrupted"`` ..., ``"unknown"`` when it has none."""
    status = str(result.get("status") or "unknown")
    if status == "kept" and result.get("already_kept"):
        return ALREADY_KEPT
    return status


def load_run_record(run_dir: str | Path) -> dict[str, Any]:
    """``<run_dir>/run.json`` as written by the ``cuda13-upgrade`` command, or ``{}``.

    Shape: ``{"command": str, "runner_rc": int, "hosts": [str],
    "outcomes": {host: {"status": str, ...}}, ...}``. Raises ``ValueError``
    when the file exists but is not a JSON object.
    """
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise ValueError(f"{path} is not a JSON object")
    return record


def _module_document(result: Any) -> dict[str, Any] | None:
    """A host module's document as the steps pass it (a non-empty dict, not skipped), else None."""
    if isinstance(result, dict) and result and not result.get("skipped"):
        return result
    return None


def _torch_of(freeze: Any) -> str:
    """torch's version in a ``pip freeze`` list (``"?"`` when absent)."""
    for line in freeze or []:
        if str(line).startswith("torch=="):
            return str(line).split("==", 1)[1]
    return "?"


def _kernel_log(mark: Any, read: Any) -> dict[str, Any] | None:
    """result.json's ``kernel_log``: ``{"xid": [event dicts], "gated", "read", "marker_found",
    "message"}``, or None when the mark before the switch was not taken."""
    if not isinstance(mark, dict) or mark.get("skipped") or not mark:
        return None
    verdict = xid.kernel_log_verdict(mark, read)
    return {key: verdict[key] for key in ("xid", "gated", "read", "marker_found", "message", "reason")}


def failure_message(result: Mapping[str, Any]) -> str:
    """The message a host that did not keep the upgrade ends with (the upgrade's last play).

    ``result``: the host's record (:func:`host_result`). Returns e.g. ``"gpu-node-02: rolled
    back at step 'verify': plain: median 80.1 tok/s ... Cause: ... Fix: ...."``: the host, its
    status, the step that failed (when one did), the reason, and a known diagnosis's cause and
    remedy.
    """
    status = str(result.get("status") or "failed")
    said = STATUS_TEXT.get(status, status)
    step = result.get("failed_step")
    text = f"{result.get('host')}: {said}" + (f" at step '{step}'" if step else "")
    reason = result.get("reason") or result.get("error")
    if reason:
        text += f": {reason}"
    diagnosis = result.get("diagnosis") or {}
    if diagnosis.get("cause"):
        text += f" Cause: {diagnosis['cause']}. Fix: {diagnosis.get('remedy')}."
    return text


def host_result(facts: dict[str, Any]) -> dict[str, Any]:
    """The host's ``result.json``: what the run did with the host, as this module reads it.

    Built once at the end of a host's run (:func:`cuda13_upgrade.steps.result.record`)
    from the run record and the steps' records (:func:`cuda13_upgrade.steps.result.facts`);
    every choice between them is made here. ``facts`` (missing keys read as absent):

    - ``host``, ``run_id``, ``status`` (kept, rolled_back, failed), ``check_mode``,
      ``measure`` (the gate measured this run), ``finished_at`` (ISO 8601);
    - ``rerun``: :func:`cuda13_upgrade.rerun.host_verdict`'s record; ``previous``:
      the host's earlier result.json; ``stopped_run``: the stopped run resolved
      (:func:`cuda13_upgrade.runlock.stopped_run`; its ``drained_at`` starts the time out of
      service, ``out_of_service_since``);
    - ``kept_digest``: ``{"digest", "parts", "errors"}`` (the host module cuda13_state_read's
      digest); ``after_probe``: the host module cuda13_stack_probe's ``probe`` (``{"torch": ...}``);
    - ``failed_step``, ``failed_task``, ``error``, ``diagnosis``
      (:func:`cuda13_upgrade.diagnosis.diagnose` as a dict), ``target``,
      ``staged`` and ``staged_run_id``, ``resolved_target`` (``[{name, version}]``),
      ``started_at``, ``steps`` (``[{step, started_at}]`` as the host's run record keeps
      them, :func:`cuda13_upgrade.steps.host.begin_step`);
    - ``snapshot``: stack_snapshot's manifest; ``apt_changes``, ``transaction``:
      cuda_toolkit's records; ``old_venv``, ``new_venv``;
    - ``throughput`` (per phase, each profile's results,
      :func:`cuda13_upgrade.steps.measure.phase`), ``baseline`` (the recorded
      baseline used, ``{"profiles": ...}``), ``restart_plan``, ``restarts``,
      ``leftover_processes``, ``decisions``, ``speculative``, ``probe``,
      ``accept_length``, ``load``, ``soak``, ``reason``, ``rollback_seconds``, ``rollback_checks``,
      ``rollback_alternatives_manual`` (the alternatives groups the rollback left in
      manual mode, :func:`cuda13_upgrade.ondemand.alternatives_restore`),
      ``rollback_service_restarted``, ``rollback_serving_touched`` (the rescue's
      ``service_restarted`` and ``serving_touched``, :func:`cuda13_upgrade.steps.rollback.rescue`);
    - ``kernel_log_mark``, ``kernel_log_read``: the results of
      ``hostscripts/kernel_log.py`` before the switch and before the decision
      (``kernel_log`` in the record, :func:`cuda13_upgrade.xid.kernel_log_verdict`;
      null when the mark was not taken); ``regressed``: the throughput gate's own
      verdict, for the reason;
    - ``driver_window``: the driver window's move in short, or None when the run made none
      (:func:`cuda13_upgrade.steps.driver_move.summary`).

    Returns the record (plain data). A host already kept keeps the stacks
    before and after of the run that verified it. Raises ``ValueError`` for
    steps that are not in order (:func:`cuda13_upgrade.timeline.step_durations`).
    """
    status = str(facts.get("status") or "failed")
    kept = status == "kept"
    measured = bool(facts.get("measure"))
    rerun = facts.get("rerun") or {}
    previous = facts.get("previous") or {}
    already_kept = bool(rerun.get("already_kept"))
    digest = _module_document(facts.get("kept_digest"))
    if digest is None:
        digest = previous.get("stack_digest") if kept else None
    diagnosis = facts.get("diagnosis") or {}
    finished_at = str(facts.get("finished_at") or "")
    steps = timeline.step_durations(list(facts.get("steps") or []), finished_at)
    # The earlier run this one resolves left the host drained: out of service since its drain.
    stopped = facts.get("stopped_run") if isinstance(facts.get("stopped_run"), dict) else {}
    drained_since = stopped.get("drained_at") or None
    snapshot = facts.get("snapshot") or {}
    cuda = snapshot.get("cuda") or {}
    torch = ((_module_document(facts.get("after_probe")) or {}).get("torch")) or {}
    apt_changes = facts.get("apt_changes") or {}
    throughput = dict(facts.get("throughput") or {})
    baseline = (facts.get("baseline") or {}).get("profiles") or {}
    if baseline:
        throughput["baseline"] = baseline
    checks = facts.get("rollback_checks") or {}
    kernel_log = _kernel_log(facts.get("kernel_log_mark"), facts.get("kernel_log_read"))
    reason = facts.get("reason") if facts.get("reason") is not None else facts.get("error")
    if kernel_log and kernel_log["gated"]:
        # The gate's own reason when it regressed too; a step that failed after the switch, its error.
        other = (
            (facts.get("reason") if facts.get("regressed") else None)
            if facts.get("reason") is not None
            else facts.get("error")
        )
        reason = str(kernel_log["reason"]) + (f"; {other}" if other else "")
    batch_soak = facts.get("batch_soak") if isinstance(facts.get("batch_soak"), dict) else {}
    if batch_soak.get("healthy") is False:
        # Kept by the gate, then degraded in service before the next batch (cuda13_upgrade.batch_soak).
        reason = str(batch_soak.get("reason"))
    record = {
        "host": facts.get("host"),
        "run_id": facts.get("run_id"),
        "status": status,
        "check_mode": bool(facts.get("check_mode")),
        "measured": measured,
        "already_kept": already_kept,
        # Why a kept host went through the roles again (empty when it was not kept before).
        "rerun_reason": str(rerun.get("reason") or "") if previous.get("status") == "kept" else "",
        # The earlier run this run resolved: it stopped part way (lost host, killed, interrupted).
        "recovered": facts.get("stopped_run"),
        "stack_digest": digest,
        "verified_in_run": facts.get("run_id") if measured else previous.get("verified_in_run"),
        "failed_step": facts.get("failed_step"),
        "failed_task": facts.get("failed_task"),
        "error": facts.get("error"),
        "diagnosis": diagnosis if diagnosis.get("known") else None,
        "target": facts.get("target") or {},
        # The stage run whose new stack this run went on with (playbooks/stage.yml), or null.
        "staged_in": facts.get("staged_run_id") if facts.get("staged") else None,
        # The preflight's resolved set the wheels role installed (name==version).
        "resolved_target": [f"{p['name']}=={p['version']}" for p in facts.get("resolved_target") or []],
        "started_at": facts.get("started_at"),
        "finished_at": finished_at,
        # Every step's start and duration (s); the time out of service (s), drain to undrain,
        # from the drain of the earlier run this one resolved when that run left the host drained.
        "steps": steps,
        "out_of_service_s": (
            timeline.out_of_service_s(steps, drained_since)
            if measured or status == "rolled_back" or drained_since
            else 0.0
        ),
        "out_of_service_since": drained_since,
        "stack_before": {
            "venv": (snapshot.get("venv") or {}).get("path"),
            "cuda": cuda.get("resolved"),
            "nvcc": (cuda.get("nvcc") or {}).get("version"),
            "torch": _torch_of((snapshot.get("venv") or {}).get("pip_freeze")),
            "sglang": (snapshot.get("sglang") or {}).get("describe"),
        },
        # What the toolkit step did in apt: driver packages held (and which holds it added),
        # the source it wrote or used, the transaction it installed.
        "apt": {
            "held": apt_changes.get("held") or [],
            "holds_added": apt_changes.get("holds_added") or [],
            "source": apt_changes.get("source_used"),
            "installed": (facts.get("transaction") or {}).get("install") or [],
        },
        "stack_after": {
            "venv": facts.get("new_venv") if kept else facts.get("old_venv"),
            "torch": torch.get("version"),
            "torch_cuda": torch.get("cuda"),
        },
        "throughput": throughput,
        # Per profile: the effective arguments (/get_server_info) that differ between the
        # stacks, the paths each server's start-up log says it turned off, and the
        # new-stack-only arguments the new server does not use (cuda13_upgrade.effective).
        "effective": effective.profile_effective(throughput),
        # The restart plan (cuda13_upgrade.restarts) and the restarts this run made.
        "restart_plan": facts.get("restart_plan"),
        "restarts": int(facts.get("restarts") or 0),
        # Processes the service left after a stop (pid, command, GPU MiB), each ended before the next start.
        "leftover_processes": facts.get("leftover_processes") or [],
        "decisions": facts.get("decisions") or {},
        "speculative": facts.get("speculative") or {},
        "probe": facts.get("probe") or {},
        "accept_length": facts.get("accept_length") or {},
        "load": facts.get("load") or {},
        # Per profile, the new stack's soak as the gate judged it (cuda13_upgrade.soak.judge):
        # the count served and, on failure, the reason and the unit's journal tail.
        "soak": facts.get("soak") or {},
        # The soak between batches (cuda13_upgrade.batch_soak.verdict): the kept host watched in
        # service before the next batch started; null when it was not watched.
        "batch_soak": batch_soak or None,
        "reason": reason,
        # The driver's Xid lines logged between the switch and the decision (cuda13_upgrade.xid).
        "kernel_log": kernel_log,
        # The driver window's move, when the run made one (cuda13_upgrade.steps.driver_move.summary).
        "driver_window": driver_window_times(facts.get("driver_window"), steps),
        "rollback": {
            "performed": status == "rolled_back",
            "seconds": facts.get("rollback_seconds"),
            "checks": checks,
            "confirmed": (all(c.get("verdict") != "regressed" for c in checks.values()) if checks else None),
            "alternatives_manual": list(facts.get("rollback_alternatives_manual") or []),
            # Whether the rollback restarted the service, and why it had to (the step that
            # moved it off its old stack); "" and false: it restored files and links only, the
            # server never having left the old stack (steps.rollback.serving_touched). None
            # where no rescue recorded it.
            "service_restarted": facts.get("rollback_service_restarted"),
            "serving_touched": facts.get("rollback_serving_touched"),
        },
    }
    if already_kept:
        record["stack_before"] = previous.get("stack_before") or {}
        record["stack_after"] = previous.get("stack_after") or {}
    return record
