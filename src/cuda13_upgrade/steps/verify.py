"""The steps ``verify`` and ``batch_soak``: the new stack measured and decided (action ``cuda13_verify``),
and a kept host watched in service before the next batch (action ``cuda13_batch_soak``).

The verify measures every profile on the new stack, in the restart plan's order,
then reads the kernel log since the switch and decides, in one call of the gate
(:func:`cuda13_upgrade.throughput.gate_verdict`: throughput, the probe's output,
accept length, the load metrics, the soak, speculative gains, unused new-stack
arguments) and of the kernel log's verdict (:func:`cuda13_upgrade.xid.kernel_log_verdict`).
A stack that fails either fails the step: the upgrade's rescue rolls the host
back. A kept host of a batch after which another starts is then watched in
service (:func:`cuda13_upgrade.batch_soak.plan`); one that degrades fails the
soak's step the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cuda13_upgrade import batch_soak, throughput, xid
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import Host, StepFailed
from cuda13_upgrade.steps.serve import serve_options, stack_context


def gate(
    options: Mapping[str, Any],
    candidate: Mapping[str, Any],
    baseline_profiles: Mapping[str, Any],
) -> dict[str, Any]:
    """The gate's verdict on the new stack's ``candidate`` results against the old stack's
    ``baseline_profiles`` (both ``{profile: measured record}``), with the options' settings."""
    names = [str(p["name"]) for p in options["cuda13_profiles"]]
    load_on = (
        int(options.get("verify_throughput_ttft_prompt_len") or 0) > 0
        or int(options.get("verify_throughput_concurrency") or 0) > 0
    )
    return throughput.gate_verdict(
        candidate,
        measure.results_by({"results": baseline_profiles}, "trials"),
        profiles=names,
        **measure.gate_settings(options),
        baseline_probe=(
            measure.results_by({"results": baseline_profiles}, "probe")
            if options.get("verify_throughput_probe")
            else None
        ),
        min_prefix_tokens=int(options["verify_throughput_probe_min_prefix_tokens"]),
        min_agreeing_share=float(options["verify_throughput_probe_min_agreeing_share"]),
        accept_length_drop_pct=float(options["verify_throughput_accept_length_drop_pct"]),
        baseline_load=(
            {k: v or {} for k, v in measure.results_by({"results": baseline_profiles}, "load").items()}
            if load_on
            else None
        ),
        ttft_tolerance_pct=float(options["verify_throughput_ttft_tolerance_pct"]),
        concurrency_tolerance_pct=float(options["verify_throughput_concurrency_tolerance_pct"]),
        speculative_pairs=list(options.get("verify_throughput_require_speculative_gain") or []),
        disabled_flag_action=str(options.get("verify_throughput_disabled_flag_action") or "report"),
        soak=int(options.get("verify_throughput_soak_requests") or 0) > 0,
    )


def verify(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_id: str,
    baseline: Mapping[str, Any],
    restart_plan: Mapping[str, Any],
    switch: Mapping[str, Any],
    manifest: Mapping[str, Any],
    batches: Sequence[Sequence[str]] = (),
    prompts: Mapping[str, Any] | None = None,
    on_trial: Callable[[str, list], None] | None = None,
) -> dict[str, Any]:
    """Measure the new stack and decide (see the module docstring).

    ``baseline``: the baseline step's ``baseline`` (``{"profiles": ...}``); ``restart_plan``: its
    plan; ``switch``: the switch step's record (the new command, the kernel log's mark);
    ``batches``: the rollout's batches (the soak's plan).

    Returns ``{"measured": the phase's record, "verdict": the gate's, "kernel_log_read": the log's
    lines since the switch, "kernel_log": its verdict or None, "regressed": bool, "reason": str,
    "rollback": bool, "reason_to_roll_back": str, "batch_soak": the soak's plan, "restarts",
    "leftovers"}``: a stack that fails the gate is ``rollback`` with ``reason_to_roll_back``
    ``"The new stack fails the gate: <reasons>"``
    (the play fails the host on it, so that the rescue rolls it back). In check mode nothing is
    measured. Raises StepFailed, with the restarts and leftovers and the kernel log's lines, when
    a profile cannot be measured.
    """
    record: dict[str, Any] = {
        "measured": None,
        "verdict": None,
        "kernel_log_read": None,
        "kernel_log": None,
        "regressed": False,
        "reason": None,
        "rollback": False,
        "reason_to_roll_back": "",
        "batch_soak": {"watch": False, "seconds": 0, "why": "not measured this run"},
        "restarts": 0,
        "leftovers": [],
    }
    if host.check_mode:
        return record
    profiles_before = dict((baseline or {}).get("profiles") or {})
    try:
        measured = measure.phase(
            host,
            phase="candidate",
            options=options,
            profiles=list(options["cuda13_profiles"]),
            venv=options["cuda13_new_venv"],
            exec_start=str(switch["exec_start"]),
            run_id=run_id,
            plan=restart_plan.get("candidate"),
            baseline=measure.results_by({"results": profiles_before}, "trials"),
            baseline_probe=measure.results_by({"results": profiles_before}, "probe"),
            service_user=(manifest.get("service") or {}).get("user") or "",
            prompts=prompts,
            on_trial=on_trial,
            stack=stack_context(options, "new"),
        )
    except StepFailed as exc:
        raise StepFailed(
            exc.msg, {**exc.record, "kernel_log_read": read_kernel_log(host, options, switch)}
        ) from exc
    record.update(measured=measured, restarts=measured["restarts"], leftovers=measured["leftovers"])
    record["kernel_log_read"] = read_kernel_log(host, options, switch)
    verdict = gate(options, measured["results"], profiles_before)
    record["verdict"] = verdict
    logged = (
        xid.kernel_log_verdict(switch["kernel_log_mark"], record["kernel_log_read"])
        if switch.get("kernel_log_mark")
        else None
    )
    record["kernel_log"] = logged
    reasons = ([logged["reason"]] if logged and logged["gated"] else []) + (
        [verdict["reason"]] if verdict["regressed"] else []
    )
    record.update(regressed=bool(verdict["regressed"]), reason=verdict["reason"])
    if reasons:
        record.update(
            rollback=True, reason_to_roll_back=f"The new stack fails the gate: {'; '.join(reasons)}"
        )
        return record
    record["batch_soak"] = batch_soak.plan(
        options.get("cuda13_soak_seconds") or 0,
        host=host.name,
        batches=list(batches),
        status="kept",
        measured=True,
    )
    return record


def read_kernel_log(host: Host, options: Mapping[str, Any], switch: Mapping[str, Any] | None) -> dict | None:
    """The kernel log's lines since the switch's mark, or None when no mark was taken."""
    mark = (switch or {}).get("kernel_log_mark")
    if not mark:
        return None
    return host.module(
        "cuda13_kernel_log",
        {"action": "read", "command": options["cuda13_kernel_log_command"], "marker": mark},
        allow_failure=True,
    ).get("log")


def soak_between_batches(
    host: Host,
    options: Mapping[str, Any],
    *,
    verify: Mapping[str, Any],
    baseline: Mapping[str, Any],
    switch: Mapping[str, Any],
    prompts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Watch the kept host in service for ``cuda13_soak_seconds`` (the verify's ``batch_soak`` plan).

    Returns :func:`cuda13_upgrade.batch_soak.verdict`'s record, with ``rollback`` and its reason as
    ``msg``: true and the reason when the host degraded in service (the play fails it: the rescue
    drains it again and rolls it back).
    """
    plan = verify.get("batch_soak") or {}
    if not plan.get("watch") or host.check_mode:
        return {
            "healthy": True,
            "outcome": "not watched",
            "why": plan.get("why", ""),
            "rollback": False,
            "msg": "",
        }
    settings = serve_options(options)
    watched = host.module(
        "cuda13_bench",
        {
            "mode": "watch",
            "url": settings["url"],
            "workload": dict(prompts or measure.prompt_set()),
            "max_new_tokens": int(options["verify_throughput_probe_tokens"]),
            "watch_seconds": float(options["cuda13_soak_seconds"]),
            "watch_interval_s": float(options["cuda13_soak_interval_seconds"]),
            "watch_deadline_s": float(options["verify_throughput_soak_deadline_s"]),
            "unit": options["cuda13_service_name"],
            "auth_unit": options["cuda13_service_name"],
        },
    )
    judged = batch_soak.verdict(
        watched["bench"].get("watch"),
        reference_ids=batch_soak.references(
            ((verify.get("measured") or {}).get("results")) or {}, (baseline or {}).get("profiles") or {}
        ),
        kernel_log_mark=switch.get("kernel_log_mark") or None,
        kernel_log_read=read_kernel_log(host, options, switch),
        min_prefix_tokens=int(options["verify_throughput_probe_min_prefix_tokens"]),
        context=stack_context(options, "new"),
    )
    return {**judged, "rollback": not judged["healthy"], "msg": str(judged.get("reason") or "")}
