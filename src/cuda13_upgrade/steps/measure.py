"""Measuring one phase: every profile served, probed, its trials retried to a final verdict (actions
``cuda13_measure``, ``cuda13_baseline``, ``cuda13_verify`` and the rollback's re-check).

:func:`phase` measures the profiles of one phase - ``baseline`` (the stack that
serves, before the switch), ``candidate`` (the new stack) or ``rollback`` (the
old stack again) - in the order of the restart plan
(:func:`cuda13_upgrade.restarts.measure_plan`), each on a server started into it
(:func:`cuda13_upgrade.steps.serve.serve`):

1. the correctness probe (greedy ``/generate`` of the prompt set's first prompts);
2. ``verify_throughput_min_trials`` decode trials, then, on the new stack, one more
   at a time until the gate's verdict on them is final
   (:func:`cuda13_upgrade.throughput.gate_verdict`) or ``verify_throughput_max_trials``
   is reached; the trials accumulate on the host, in
   ``<verify_throughput_dir>/<phase>-<profile>.json``, under this run's id;
3. the gated load metrics and the soak, when on.

After a failed soak of the new stack the profiles left are not measured (the
server crashed or stopped answering: the host rolls back). The service ends on
its own command when the plan says so. Python loops the profiles: an extra
profile costs module runs on the host, not tasks.

The options are the validated record (``cuda13_options``): the
``verify_throughput_*`` settings of the gate, the trials and the probe.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cuda13_upgrade import diagnosis, probe, restarts, soak, throughput
from cuda13_upgrade.steps.host import Host, StepFailed
from cuda13_upgrade.steps.serve import serve, serve_options

#: The prompt set of the probe, the workload and the soak (roles/verify_throughput/files/prompts.json).
PROMPTS_FILE = Path(__file__).resolve().parents[3] / "roles" / "verify_throughput" / "files" / "prompts.json"


def prompt_set(path: Path | None = None) -> dict[str, Any]:
    """The prompt set, ``{"seed": int, "prompts": [str]}``."""
    with open(path or PROMPTS_FILE, encoding="utf-8") as handle:
        return json.load(handle)


def gate_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """The throughput rule's settings of the gate's verdict, from the options."""
    return {
        "metric": options.get("verify_throughput_metric", "output_tok_s"),
        "tolerance_pct": float(options["verify_throughput_tolerance_pct"]),
        "z": float(options["verify_throughput_z"]),
        "max_trials": int(options["verify_throughput_max_trials"]),
    }


def _load_on(options: Mapping[str, Any], phase: str) -> tuple[bool, int]:
    """Whether the load metrics or the soak run in ``phase``, and the soak's request count."""
    soak_requests = int(options.get("verify_throughput_soak_requests") or 0)
    if not (phase == "candidate" or (phase == "baseline" and options.get("verify_throughput_soak_baseline"))):
        soak_requests = 0
    metrics = (
        int(options.get("verify_throughput_ttft_prompt_len") or 0) > 0
        or int(options.get("verify_throughput_concurrency") or 0) > 0
    )
    return metrics or soak_requests > 0, soak_requests


def role_inputs(options: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs of :func:`phase` that roles/verify_throughput takes as options, for its entry
    point run on its own (action ``cuda13_measure``): ``{"plan": verify_throughput_plan,
    "baseline": verify_throughput_baseline, "baseline_probe": verify_throughput_baseline_probe}``,
    each None where the option is empty or unset (the phase then plans from what runs now; a
    candidate phase without the old stack's trials is refused by
    :func:`cuda13_upgrade.restarts.measure_plan`). The upgrade's own steps give :func:`phase`
    their records instead (cuda13_upgrade.steps.baseline, cuda13_upgrade.steps.verify).
    """
    return {
        "plan": options.get("verify_throughput_plan") or None,
        "baseline": options.get("verify_throughput_baseline") or None,
        "baseline_probe": options.get("verify_throughput_baseline_probe") or None,
    }


def phase(
    host: Host,
    *,
    phase: str,
    options: Mapping[str, Any],
    profiles: Sequence[Mapping[str, Any]],
    venv: str,
    exec_start: str,
    run_id: str,
    plan: Mapping[str, Any] | None = None,
    baseline: Mapping[str, list] | None = None,
    baseline_probe: Mapping[str, list] | None = None,
    service_user: str = "",
    prompts: Mapping[str, Any] | None = None,
    on_trial: Callable[[str, list], None] | None = None,
    stack: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Measure ``profiles`` on the stack in ``venv`` (see the module docstring).

    ``plan``: the calling step's plan for this phase (:func:`cuda13_upgrade.restarts.plan_phase`),
    or None to plan from what the service runs now, ending on its own command.
    ``baseline``/``baseline_probe``: per profile, the old stack's trials and probe outputs
    (the candidate phase's retries compare with them). ``on_trial(profile, trials)``: called
    after each run of trials (the progress display's tok/s). ``stack``: which stack serves
    (:func:`cuda13_upgrade.steps.serve.stack_context`): a start, a probe, trials or load that
    fail say the cause and remedy for that stack (the journal's diagnosis).

    Returns ``{"phase", "plan", "results": {profile: {"server_args", "new_stack_args", "command",
    "effective", "method", "trials", "probe", "probe_batched", "load", "soak", "summary"}}, "restarts": int,
    "leftovers": [process], "soak_failed": profile or None}``. Raises StepFailed (the server did
    not serve a profile, the benchmark failed on every try) with the restarts and leftovers so far.
    """
    prompts = dict(prompts or prompt_set())
    settings = serve_options(options)
    probe_on = bool(options.get("verify_throughput_probe"))
    running = None
    if not plan:
        running = _running(host, settings["service"], exec_start)
    try:
        chosen = restarts.measure_plan(
            profiles,
            phase,
            plan=plan,
            running=running,
            exec_start=exec_start,
            baseline=baseline,
            baseline_probe=baseline_probe,
            probe=probe_on,
            probe_prompts=int(options.get("verify_throughput_probe_prompts") or 1),
            probe_tokens=int(options.get("verify_throughput_probe_tokens") or 1),
        )
    except ValueError as exc:
        raise StepFailed(f"{host.name}: cannot measure the {phase} phase: {exc}") from exc
    record: dict[str, Any] = {
        "phase": phase,
        "plan": chosen,
        "results": {},
        "restarts": 0,
        "leftovers": [],
        "soak_failed": None,
    }
    by_name = {str(p["name"]): p for p in profiles}
    load_on, soak_requests = _load_on(options, phase)
    for step in chosen["steps"]:
        if phase == "candidate" and record["soak_failed"]:
            break
        profile = by_name[str(step["profile"])]
        args = restarts.profile_args(profile, phase)
        try:
            served = serve(
                host,
                **settings,
                exec_start=exec_start,
                venv=venv,
                args=args,
                restart="always" if step["restart"] else "never",
                what=f"profile {profile['name']}, {phase} phase, {venv}",
                about=f'the "{profile["name"]}" profile, while its throughput is measured',
                service_user=service_user,
                stack=stack,
            )
        except StepFailed as exc:
            _count(record, exc.record)
            raise StepFailed(exc.msg, _counts(record)) from exc
        _count(record, served)
        try:
            entry = _profile(
                host,
                profile,
                args,
                phase,
                options,
                run_id,
                prompts,
                served,
                baseline,
                on_trial,
                exec_start,
                venv,
                probe_on,
                load_on,
                soak_requests,
                record,
            )
        except StepFailed as exc:
            # The probe, the trials or the load failed at a request: what the server logged says why.
            raise StepFailed(_with_journal(host, settings["service"], exc.msg, stack), exc.record) from exc
        record["results"][str(profile["name"])] = entry
        if phase == "candidate" and soak_requests > 0:
            record["soak_failed"] = soak.failed_profile(record["results"])
    if chosen.get("restore") and not (phase == "candidate" and record["soak_failed"]):
        try:
            served = serve(
                host,
                **settings,
                exec_start=exec_start,
                venv=venv,
                args=[],
                check=False,
                what=f"its own command, {venv}",
                service_user=service_user,
                stack=stack,
            )
        except StepFailed as exc:
            _count(record, exc.record)
            raise StepFailed(exc.msg, _counts(record)) from exc
        _count(record, served)
    return record


def _counts(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a failed phase's record keeps (a failed task's result is printed whole): the
    restarts it made and the processes the service left."""
    return {"restarts": record["restarts"], "leftovers": list(record["leftovers"])}


def _running(host: Host, service: str, exec_start: str) -> list[str] | None:
    from cuda13_upgrade.steps.serve import running

    return running(host, service=service, exec_start=exec_start)["running_args"]


def _count(record: dict[str, Any], served: Mapping[str, Any]) -> None:
    record["restarts"] += int(bool(served.get("restarted")))
    record["leftovers"] += list(served.get("leftovers") or [])


def _with_journal(host: Host, service: str, msg: str, stack: Mapping[str, Any] | None) -> str:
    """``msg`` of a request that failed on a server that had started, with the unit's last
    journal lines and, when :func:`cuda13_upgrade.diagnosis.diagnose` knows them, their cause
    and remedy for the stack that serves (``stack``, :func:`cuda13_upgrade.steps.serve.stack_context`):
    a JIT build that fails at first use leaves its compiler's error there, not in the request's
    answer. ``msg`` unchanged when the journal is empty or cannot be read."""
    read = host.module(
        "cuda13_service",
        {"unit": service, "restart": "never", "url": "", "journal": True},
        check_mode=False,
        allow_failure=True,
    )
    journal = [str(line) for line in ((read.get("cycle") or {}).get("journal") or [])]
    if read.get("failed") or not journal:
        return msg
    known = diagnosis.diagnose(journal, source="journal", context=stack)
    cause = [f"Cause: {known.cause}. Fix: {known.remedy}."] if known.known else []
    return "\n".join([msg, *cause, "Last lines of its journal:", *journal[-15:]])


def _bench(host: Host, mode: str, args: Mapping[str, Any], what: str, record: Mapping[str, Any]) -> dict:
    result = host.module("cuda13_bench", {"mode": mode, **args}, allow_failure=True)
    if result.get("failed"):
        raise StepFailed(f"{host.name}: {what}: {result.get('msg')}", _counts(record))
    return result["bench"]


def _profile(
    host: Host,
    profile: Mapping[str, Any],
    args: list[str],
    phase: str,
    options: Mapping[str, Any],
    run_id: str,
    prompts: Mapping[str, Any],
    served: Mapping[str, Any],
    baseline: Mapping[str, list] | None,
    on_trial: Callable[[str, list], None] | None,
    exec_start: str,
    venv: str,
    probe_on: bool,
    load_on: bool,
    soak_requests: int,
    record: Mapping[str, Any],
) -> dict[str, Any]:
    name = str(profile["name"])
    url = serve_options(options)["url"]
    # The unit whose server's --api-key the requests send (read on the host, never here).
    auth_unit = serve_options(options)["service"]
    where = f"{name}/{phase}"
    outputs: list = []
    batched: dict[str, Any] = {}
    if probe_on:
        # The probe's prompts also go together: at the profile's serving concurrency and past
        # the server's largest CUDA graph (probe.batch_sizes).
        sizes = probe.batch_sizes(
            int(profile.get("soak_concurrency") or options["verify_throughput_soak_concurrency"]),
            (served.get("effective") or {}).get("args"),
        )
        document = _bench(
            host,
            "probe",
            {
                "url": url,
                "auth_unit": auth_unit,
                "workload": prompts,
                "probe": int(options["verify_throughput_probe_prompts"]),
                "max_new_tokens": int(options["verify_throughput_probe_tokens"]),
                "probe_batch_sizes": sizes["sizes"],
            },
            f"the correctness probe of {where} failed",
            record,
        )
        outputs = document["outputs"]
        batched = {**sizes, "batches": list(document.get("batched") or [])}
    trials = _trials(host, name, phase, options, run_id, prompts, url, venv, baseline, on_trial, record)
    load: dict[str, Any] = {}
    soak_record: dict[str, Any] = {}
    if load_on:
        document = _bench(
            host,
            "load",
            {
                "url": url,
                "auth_unit": auth_unit,
                "workload": prompts,
                "max_tokens": int(options["verify_throughput_output_len"]),
                "ttft_prompt_len": int(options["verify_throughput_ttft_prompt_len"]),
                "ttft_requests": int(options["verify_throughput_ttft_requests"]),
                "concurrency": int(options["verify_throughput_concurrency"]),
                "soak_requests": soak_requests,
                "soak_concurrency": int(
                    profile.get("soak_concurrency") or options["verify_throughput_soak_concurrency"]
                ),
                "soak_deadline_s": float(options["verify_throughput_soak_deadline_s"]),
                "unit": serve_options(options)["service"],
            },
            f"the load metrics of {where} failed",
            record,
        )
        load = document.get("load") or {}
        soak_record = document.get("soak") or {}
    normalized = throughput.normalize_trials(trials)
    metric = options.get("verify_throughput_metric", "output_tok_s")
    return {
        "server_args": list(profile.get("server_args") or []),
        "new_stack_args": list(profile.get("new_stack_args") or []) if phase == "candidate" else [],
        "command": " ".join([exec_start, *(_quote(a) for a in args)]),
        "effective": served.get("effective"),
        "method": options.get("verify_throughput_method", "builtin"),
        "trials": normalized,
        "probe": outputs,
        "probe_batched": batched,
        "load": load,
        "soak": soak_record,
        "summary": throughput.summarize(throughput.trial_metric(normalized, metric)).__dict__,
    }


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(str(arg))


def _trials(
    host: Host,
    name: str,
    phase: str,
    options: Mapping[str, Any],
    run_id: str,
    prompts: Mapping[str, Any],
    url: str,
    venv: str,
    baseline: Mapping[str, list] | None,
    on_trial: Callable[[str, list], None] | None,
    record: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """``min_trials`` trials, then (the candidate phase) one more per try until the verdict is
    final; a try whose benchmark fails is tried again, up to ``max_trials - min_trials`` retries."""
    min_trials = int(options["verify_throughput_min_trials"])
    retries = max(0, int(options["verify_throughput_max_trials"]) - min_trials)
    gate = gate_settings(options)
    args = {
        "url": url,
        "auth_unit": serve_options(options)["service"],
        "append": f"{options['verify_throughput_dir']}/{phase}-{name}.json",
        "series": run_id,
        "min_trials": min_trials,
        "trials": 1,
        "warmup": int(options["verify_throughput_warmup"]),
        "max_tokens": int(options["verify_throughput_output_len"]),
        "prompt_len": int(options["verify_throughput_prompt_len"]),
        "method": options.get("verify_throughput_method", "builtin"),
        "python": f"{venv}/bin/python",
        "prompts": int(options["verify_throughput_bench_prompts"]),
        "workload": prompts if options.get("verify_throughput_vary_prompts") else None,
        "flush_cache": bool(options.get("verify_throughput_flush_cache")),
    }
    error = ""
    for _attempt in range(retries + 1):
        result = host.module("cuda13_bench", {"mode": "trials", **args}, allow_failure=True)
        if result.get("failed"):
            error = str(result.get("msg") or "")
            continue
        trials = list(result["bench"]["trials"])
        if on_trial is not None:
            on_trial(name, trials)
        if phase != "candidate":
            return trials
        verdict = throughput.gate_verdict(
            {name: {"trials": throughput.normalize_trials(trials)}},
            {name: list((baseline or {})[name])},
            **gate,
        )
        if verdict["final"]:
            return trials
    if error:
        raise StepFailed(
            f"{host.name}: the decode benchmark of {name}/{phase} failed on every try"
            f" ({retries + 1} tries): {error}",
            _counts(record),
        )
    return trials


def results_by(record: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``{profile: result[key]}`` of a phase's record (the trials, the probe outputs, the load)."""
    return {name: entry.get(key) for name, entry in (record.get("results") or {}).items()}
