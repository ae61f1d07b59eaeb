"""The step ``result``: the host's record, on the host and on the control node (action ``cuda13_result``).

One record shape for every way a host's run ends (:func:`cuda13_upgrade.hostresult.host_result`):
kept, already kept, rolled back, failed, staged, and interrupted (the command's
``playbooks/interrupted.yml`` after Ctrl-C). :func:`facts` reads the steps' records
(what each action returned, registered by the play) into that function's facts;
:func:`record` decides the status and writes: ``result.json`` on the host (0600)
and in the run's report on the control node, the host's metrics for
node_exporter's textfile collector, and, for a staged host, ``staged.json``
(the target, the resolved set and the new venv's ``pip freeze``, which a later
rollout compares before it skips the build).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cuda13_upgrade import hostresult, metrics
from cuda13_upgrade.steps import driver_move
from cuda13_upgrade.steps import lost as lost_host
from cuda13_upgrade.steps.host import Host, begin_step, json_text, now_iso
from cuda13_upgrade.steps.host_state import resolved_pins

#: The steps whose records a result reads, as the play registers them.
RECORDS = (
    "host_state",
    "preflight",
    "artifacts",
    "snapshot",
    "toolkit",
    "wheels",
    "sglang",
    "baseline",
    "switch",
    "verify",
    "batch_soak",
    "rollback",
    "driver_window",
)


def _ok(records: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A step's record, ``{}`` when the step did not run (skipped, or never reached)."""
    value = records.get(name)
    if not isinstance(value, Mapping) or value.get("skipped"):
        return {}
    return dict(value)


#: The statuses of ``cuda13-upgrade driver`` (``cuda13_driver_only``), apart from a rescue's: the
#: driver moved and kept, or already at or above the floor and left alone. Neither is ``kept``: the
#: stack has not changed, so a later rollout walks the host (cuda13_upgrade.rerun).
DRIVER_KEPT = "driver_kept"
DRIVER_CURRENT = "driver_current"


def status_of(records: Mapping[str, Any], mode: str) -> str:
    """How the host ends: a rescue's record decides (its status; ``failed`` when the rescue itself
    failed); without one the block ran through - ``kept``, ``staged`` for the stage, and for the
    driver window alone (``mode`` ``driver``) :data:`DRIVER_KEPT` when it moved the driver,
    :data:`DRIVER_CURRENT` when the host needed no move."""
    rescue = _ok(records, "rollback")
    if _driver_restore_error(records):
        return "failed"  # the old driver could not be put back (cuda13_upgrade.steps.driver_move)
    if rescue:
        return "failed" if rescue.get("failed") else str(rescue.get("status") or "failed")
    if mode == "driver":
        moved = driver_move.summary(records.get("driver_window"))
        return DRIVER_KEPT if moved and moved["kept"] else DRIVER_CURRENT
    return "staged" if mode == "stage" else "kept"


def _driver_restore_error(records: Mapping[str, Any]) -> str | None:
    """The message of a driver window whose old driver could not be put back (the restore, or its
    check after the rescue's reboot), else None."""
    window = _ok(records, "driver_window")
    for name in ("restored", "restored_check"):
        record = _ok(window, name)
        if record.get("restore_failed"):
            return str(record.get("msg"))
    return None


def _phase(record: Mapping[str, Any], key: str = "measured") -> dict[str, Any]:
    measured = record.get(key) or {}
    return dict(measured.get("results") or {}) if isinstance(measured, Mapping) else {}


def facts(
    host: str,
    options: Mapping[str, Any],
    run: Mapping[str, Any],
    records: Mapping[str, Any],
    *,
    status: str,
    check_mode: bool,
    kept_digest: Mapping[str, Any] | None,
    after_probe: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """:func:`cuda13_upgrade.hostresult.host_result`'s facts from the run record and the steps' records."""
    state = _ok(records, "host_state")
    preflight = _ok(records, "preflight")
    toolkit = _ok(records, "toolkit")
    baseline = _ok(records, "baseline")
    switch = _ok(records, "switch")
    verify = _ok(records, "verify")
    rescue = _ok(records, "rollback")
    verdict = verify.get("verdict") or {}
    soak = _ok(records, "batch_soak").get("batch_soak") or {}
    throughput = {
        phase: results
        for phase, results in (
            ("baseline", _phase(baseline)),
            ("candidate", _phase(verify)),
            ("rollback", _phase(rescue)),
        )
        if results
    }
    counted = [baseline, switch, verify, rescue]
    return {
        "host": host,
        "run_id": run.get("run_id"),
        "status": status,
        "check_mode": check_mode,
        "measure": bool(run.get("measure")) and not check_mode,
        "finished_at": now_iso(),
        "rerun": {k: state.get(k) for k in ("already_kept", "differs", "reason", "measure")} if state else {},
        "previous": state.get("previous") or {},
        "stopped_run": state.get("stopped"),
        "kept_digest": kept_digest,
        "after_probe": after_probe,
        "failed_step": rescue.get("failed_step"),
        "failed_task": rescue.get("failed_task"),
        "error": _driver_restore_error(records)
        or rescue.get("error")
        or (rescue.get("msg") if rescue.get("failed") else None),
        "diagnosis": rescue.get("diagnosis") or {},
        "target": run.get("target") or {},
        "staged": bool(state.get("staged")),
        "staged_run_id": (state.get("staged_state") or {}).get("run_id"),
        # The driver window alone installs no stack: no resolved target to report.
        "resolved_target": [] if options.get("cuda13_driver_only") else preflight.get("resolved") or [],
        "started_at": run.get("started_at"),
        "steps": list(run.get("steps") or []),
        "snapshot": _ok(records, "snapshot").get("manifest") or {},
        "apt_changes": toolkit.get("apt_changes") or {},
        "transaction": toolkit.get("transaction") or {},
        "old_venv": options.get("cuda13_old_venv"),
        "new_venv": options.get("cuda13_new_venv"),
        "throughput": throughput,
        "baseline": baseline.get("baseline") or {},
        "restart_plan": baseline.get("restart_plan"),
        "restarts": sum(int(r.get("restarts") or 0) for r in counted),
        "leftover_processes": [p for r in counted for p in r.get("leftovers") or []],
        "decisions": verdict.get("decisions") or {},
        "speculative": verdict.get("speculative") or {},
        "probe": verdict.get("probe") or {},
        "accept_length": verdict.get("accept_length") or {},
        "load": verdict.get("load") or {},
        "soak": verdict.get("soak") or {},
        "batch_soak": soak if soak.get("outcome") not in (None, "not watched") else {},
        "reason": verify.get("reason"),
        "regressed": bool(verify.get("regressed")),
        "driver_window": driver_move.summary(records.get("driver_window")),
        "kernel_log_mark": switch.get("kernel_log_mark") or {},
        "kernel_log_read": verify.get("kernel_log_read") or rescue.get("kernel_log_read") or {},
        "rollback_seconds": rescue.get("seconds"),
        "rollback_alternatives_manual": rescue.get("alternatives_manual") or [],
        "rollback_checks": rescue.get("checks") or {},
        "rollback_service_restarted": rescue.get("service_restarted"),
        "rollback_serving_touched": rescue.get("serving_touched"),
    }


def record_lost(
    host: str,
    options: Mapping[str, Any],
    run: Mapping[str, Any],
    records: Mapping[str, Any],
    lost: Mapping[str, Any],
    *,
    check_mode: bool,
    write_report: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """The result of a host Ansible lost (:mod:`cuda13_upgrade.steps.lost`): status
    ``unreachable`` at the step it was in, built without reaching the host and written on the
    control node only (``write_report``). Returns the record."""
    built = facts(
        host,
        options,
        run,
        records,
        status="unreachable",
        check_mode=check_mode,
        kept_digest=None,
        after_probe=None,
    )
    result = hostresult.host_result(lost_host.result_facts(built, lost, run, _ok(records, "rollback")))
    if write_report is not None:
        write_report(result)
    return result


def record(
    host: Host,
    options: Mapping[str, Any],
    run: Mapping[str, Any],
    records: Mapping[str, Any],
    *,
    mode: str = "upgrade",
    write_report: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Build and keep the host's result (see the module docstring).

    ``mode``: ``upgrade`` or ``stage`` (``upgrade`` with ``cuda13_driver_only`` is ``driver``: the
    driver window alone, :func:`status_of`). ``write_report(result)`` writes the control node's copy.
    Returns ``{"result": the record, "run": the run record}``.
    """
    already = bool(run.get("already_kept"))
    if mode == "upgrade" and options.get("cuda13_driver_only"):
        mode = "driver"
    updated = dict(run) if already else begin_step(host, run, "result")
    status = status_of(records, mode)
    kept = status == "kept"
    venv = options["cuda13_new_venv"] if kept else options["cuda13_old_venv"]
    after_probe = None
    if not already:
        probed = host.module(
            "cuda13_stack_probe",
            {"modules": ["torch"]},
            python=f"{venv}/bin/python",
            check_mode=False,
            allow_failure=True,
        )
        after_probe = probed.get("probe")
    read = None
    if not host.check_mode and not already and (kept or mode == "stage"):
        read = host.module(
            "cuda13_state_read",
            {
                "state_dir": options["cuda13_state_dir"],
                "venv": options["cuda13_new_venv"],
                "unit": options["cuda13_service_name"],
                "nvidia_smi": options.get("nvidia_driver_check_nvidia_smi") or "nvidia-smi",
                "digest": kept,
                "freeze": mode == "stage",
            },
            allow_failure=True,
        )
    digest = (
        {"digest": read.get("digest"), "parts": read.get("parts"), "errors": read.get("errors")}
        if kept and read and read.get("parts")
        else None
    )
    result = hostresult.host_result(
        facts(
            host.name,
            options,
            updated,
            records,
            status=status,
            check_mode=host.check_mode,
            kept_digest=digest,
            after_probe=after_probe,
        )
    )
    state_dir = options["cuda13_state_dir"]
    files = []
    # A host the driver window left alone keeps its last result (a kept stack stays "already kept").
    if (result["measured"] or result["status"] != "kept") and status != DRIVER_CURRENT:
        files.append({"path": f"{state_dir}/result.json", "content": json_text(result), "mode": "0600"})
    previous = (_ok(records, "host_state").get("previous")) or {}
    if (
        kept
        and not result["measured"]
        and not result["already_kept"]
        and result.get("stack_digest") is not None
        and previous.get("status") == "kept"
    ):
        # A kept host walked without measuring (its record lacked digest parts): the verified
        # record stays, with the whole digest of the stack it was verified with.
        completed = {**previous, "stack_digest": result["stack_digest"]}
        files.append({"path": f"{state_dir}/result.json", "content": json_text(completed), "mode": "0600"})
    if options.get("cuda13_metrics_textfile_dir") and not result["already_kept"] and status != DRIVER_CURRENT:
        files.append(
            {
                "path": f"{options['cuda13_metrics_textfile_dir']}/cuda13_upgrade.prom",
                "content": metrics.host_metrics(result),
                "mode": "0644",
            }
        )
    if mode == "stage" and status == "staged":
        freeze = (read or {}).get("freeze") or {}
        staged = {
            "run_id": run.get("run_id"),
            "started_at": run.get("started_at"),
            "staged_at": now_iso(),
            "target": run.get("target") or {},
            "resolved_target": resolved_pins(_ok(records, "preflight").get("resolved")),
            "freeze": freeze.get("lines") or [],
        }
        files.append({"path": f"{state_dir}/staged.json", "content": json_text(staged), "mode": "0600"})
    if files and not host.check_mode:
        host.module("cuda13_record", {"files": files})
    if write_report is not None:
        write_report(result)
    return {"result": result, "run": updated}


def interrupted(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_id: str,
    step: str,
    write_report: Callable[[dict], None] | None = None,
    by: str = "Ctrl-C",
    undrain: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """After an interrupted run (the command's handling of Ctrl-C, SIGTERM and SIGHUP, ``by``
    naming which: "Ctrl-C", "SIGTERM", "SIGHUP"; ``playbooks/interrupted.yml``): on a
    host whose lock the run ``run_id`` still holds, record where it was (status ``interrupted``, the
    step) unless that run recorded its own result, and release the lock. A host interrupted after
    the switch serves the new stack unverified until the next run measures it.

    ``undrain``: :func:`cuda13_upgrade.steps.drain.after_interrupt`'s record, its undrain hook run
    before this step (``failed``: the hook's error, "" when it ran). After a hook that ran,
    ``step.json``'s ``drained_at`` is cleared (:func:`cuda13_upgrade.steps.drain.forget_drain`); a
    host left drained has the line that says so (``left_drained``) in its result's ``error``.

    Returns ``{"held": bool, "recorded": bool, "result": record or None, "undrained": bool,
    "left_drained": the line or ""}``.
    """
    from cuda13_upgrade.steps import drain

    undrain = dict(undrain or {})
    note = str(undrain.get("left_drained") or "")
    if undrain.get("hook") and undrain.get("failed"):
        note = (
            f"{host.name}: left drained: its undrain hook {undrain['hook']} failed"
            f" ({undrain['failed']}); undrain it after checking: the undrain hook {undrain['hook']}"
            f" (cuda13_undrain_tasks) for {host.name}, or run the same command again, which undrains"
            " the host once its server serves."
        )
        host.tell(note.removeprefix(f"{host.name}: "))
    state_dir = options["cuda13_state_dir"]
    owner_path, result_path = f"{state_dir}/run.lock/owner.json", f"{state_dir}/result.json"
    found = host.module("cuda13_record", {"read": [owner_path, result_path]}, check_mode=False)["read"]

    def run_of(path: str) -> str:
        import json

        try:
            return str((json.loads(found[path]["content"] or "{}") or {}).get("run_id") or "")
        except ValueError:
            return ""

    held = run_of(owner_path) == run_id
    recorded = False
    result = None
    if held and run_of(result_path) != run_id:
        result = hostresult.host_result(
            {
                "host": host.name,
                "run_id": run_id,
                "status": "interrupted",
                "failed_step": step,
                "error": (
                    f"The run was interrupted ({by}) during step '{step}'. Run the same command again to"
                    " continue the upgrade, or playbooks/rollback.yml to put the old stack back."
                    + (f" {_sentence(note.removeprefix(host.name + ': '))}" if note else "")
                ),
                "finished_at": now_iso(),
            }
        )
        host.module(
            "cuda13_record", {"files": [{"path": result_path, "content": json_text(result), "mode": "0600"}]}
        )
        if write_report is not None:
            write_report(result)
        recorded = True
    undrained = bool(held and undrain.get("hook") and not undrain.get("failed")) and drain.forget_drain(
        host, options
    )
    if held:
        host.module("cuda13_record", {"absent": [f"{state_dir}/run.lock"]})
    return {
        "held": held,
        "recorded": recorded,
        "result": result,
        "undrained": undrained,
        "left_drained": note,
    }


def _sentence(text: str) -> str:
    """``text`` with its first letter upper case (the rest as it is)."""
    return text[:1].upper() + text[1:]
