"""The step ``baseline``: the old stack measured, or a recorded baseline reused, and the restart plan
(action ``cuda13_baseline``).

A baseline recorded on the host (``<cuda13_state_dir>/baseline.json``) stands for
this run's when it is younger than ``cuda13_baseline_max_age_hours``, measured
every profile with the same server arguments, holds each profile's probe and
was taken on the driver the host runs now (nvidia-smi's driver version, recorded
with each baseline; :func:`cuda13_upgrade.restarts.recorded_baseline`): a re-run
after a lost connection does not restart the old stack again, and the driver
window's measurement on the new driver stands for the stack's baseline. The restart plan
(:func:`cuda13_upgrade.restarts.plan_upgrade`) orders every phase's profiles so
that the service restarts as few times as they need; it is printed before it
runs. A host that already runs the new stack (the switch drop-in is there) but
has no usable baseline is refused: the old stack cannot be measured without
putting it back, which the rollback does.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any

from cuda13_upgrade import restarts
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import Host, StepFailed, json_text, now_iso
from cuda13_upgrade.steps.serve import running, stack_context


def running_driver(host: Host, options: Mapping[str, Any]) -> str:
    """The NVIDIA driver version the host runs now (nvidia-smi's ``driver_version``, one per host),
    ``""`` when nvidia-smi fails or its GPUs disagree; read in check mode too."""
    smi = str(options.get("nvidia_driver_check_nvidia_smi") or "nvidia-smi")
    run = host.module(
        "ansible.builtin.command",
        {"argv": [*shlex.split(smi), "--query-gpu=driver_version", "--format=csv,noheader"]},
        check_mode=False,
        allow_failure=True,
    )
    versions = {line.strip() for line in str(run.get("stdout") or "").splitlines() if line.strip()}
    return versions.pop() if run.get("rc") == 0 and len(versions) == 1 else ""


def take(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_id: str,
    manifest: Mapping[str, Any],
    prompts: Mapping[str, Any] | None = None,
    on_trial: Callable[[str, list], None] | None = None,
) -> dict[str, Any]:
    """Measure the old stack or reuse the recorded baseline, with the upgrade's restart plan.

    ``manifest``: the pre-upgrade snapshot (the service's own command). Returns
    ``{"baseline": {"run_id", "profiles": {profile: measured record}, ...}, "recorded": bool (a
    recorded baseline was reused), "restart_plan", "measured": the phase's record or None,
    "restarts", "leftovers"}``. In check mode it plans and measures nothing. Raises StepFailed on
    a switched host without a usable baseline, and when a profile cannot be measured.
    """
    profiles = list(options["cuda13_profiles"])
    service = options["cuda13_service_name"]
    switch_dropin = f"/etc/systemd/system/{service}.d/{options['cuda13_switch_dropin']}"
    baseline_file = f"{options['cuda13_state_dir']}/baseline.json"
    found = host.module("cuda13_record", {"read": [switch_dropin, baseline_file]}, check_mode=False)["read"]
    switched = bool(found[switch_dropin]["exists"])
    recorded = None
    if found[baseline_file]["content"]:
        try:
            recorded = json.loads(found[baseline_file]["content"])
        except ValueError:
            recorded = None
    driver_version = running_driver(host, options)
    judged = restarts.recorded_baseline(
        recorded,
        profiles,
        max_age_hours=float(options["cuda13_baseline_max_age_hours"]),
        now=time.time(),
        driver_version=driver_version,
    )
    exec_start = (manifest.get("service") or {}).get("exec_start") or ""
    now_running = None if switched else running(host, service=service, exec_start=exec_start)["running_args"]
    plan = restarts.plan_upgrade(
        profiles,
        running=now_running,
        baseline_recorded=bool(judged["usable"]),
        rollback_verify=bool(options.get("cuda13_rollback_verify", True)),
    )
    for line in restarts.format_plan(plan):
        host.tell(line)
    record: dict[str, Any] = {
        "recorded": bool(judged["usable"]),
        "restart_plan": plan,
        "measured": None,
        "restarts": 0,
        "leftovers": [],
    }
    if switched and not judged["usable"]:
        raise StepFailed(
            f"{host.name} already runs the new stack ({switch_dropin}) but has no baseline of the old stack"
            f" recorded within cuda13_baseline_max_age_hours={options['cuda13_baseline_max_age_hours']}"
            f" for the profiles {', '.join(str(p['name']) for p in profiles)}: the host goes back to its old"
            " stack now; run the upgrade again to measure both.",
        )
    if judged["usable"]:
        record["baseline"] = judged["record"]
        return record
    if host.check_mode:
        record["baseline"] = {"run_id": run_id, "profiles": {}}
        return record
    try:
        measured = measure.phase(
            host,
            phase="baseline",
            options=options,
            profiles=profiles,
            venv=options["cuda13_old_venv"],
            exec_start=exec_start,
            run_id=run_id,
            plan=plan["baseline"],
            service_user=(manifest.get("service") or {}).get("user") or "",
            prompts=prompts,
            on_trial=on_trial,
            stack=stack_context(options, "old", manifest),
        )
    except StepFailed as exc:
        raise StepFailed(exc.msg, {"recorded": False, **exc.record}) from exc
    record.update(measured=measured, restarts=measured["restarts"], leftovers=measured["leftovers"])
    written = {
        "run_id": run_id,
        "taken_at": now_iso(),
        "taken_at_epoch": time.time(),
        "driver_version": driver_version,
        "profiles": measured["results"],
    }
    host.module(
        "cuda13_record", {"files": [{"path": baseline_file, "content": json_text(written), "mode": "0600"}]}
    )
    record["baseline"] = {"run_id": run_id, "profiles": measured["results"]}
    return record
