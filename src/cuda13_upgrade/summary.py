"""The fleet summary of a run: one row per host, as ``summary.md``, ``summary.json`` and ``summary.png``.

Written by :func:`fleet_summary` into the run's directory on the control node
(``reports/<run id>/``), from the hosts' result records and ``run.json``
(:mod:`cuda13_upgrade.hostresult`); the chart is :mod:`cuda13_upgrade.chart`.

A host of the run without a result (and without an outcome in ``run.json``)
was "not reached": the rollout stopped before its batch. ``not_started.json``
(written by :func:`fleet_summary` from the upgrade play's ``cuda13_not_started``)
says why: ``{"said": "not reached" | "not started", "reason", "hosts"}``, the
failure budget spent, the window closed or the breaker tripped
(:mod:`cuda13_upgrade.breaker`); those hosts' decision is ``"not reached:
failure budget spent (...)"``, ``"not started: outside the window ..."`` or
``"not started: breaker tripped (...)"``.

Throughput figures are medians of the trials of one profile, in tokens per
second (tok/s) of the metric the gate measured (``verify_throughput_metric``, decode
throughput by default); see :mod:`cuda13_upgrade.throughput`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from cuda13_upgrade import estimate, notify, ondemand, reportfiles, timeline
from cuda13_upgrade import soak as soak_module
from cuda13_upgrade.chart import plain_median, render_chart
from cuda13_upgrade.hostresult import NOT_REACHED, STATUS_TEXT, load_results, load_run_record
from cuda13_upgrade.redact import redact

#: Result phases of ``result.json``'s ``throughput``: the old stack before the
#: switch, the new stack after it, the old stack again after a rollback.
PHASES = ("baseline", "candidate", "rollback")


def _median(result: dict[str, Any], phase: str, profile: str) -> float | None:
    try:
        value = float(result["throughput"][phase][profile]["summary"]["median"])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _spread(result: dict[str, Any], phase: str, profile: str) -> dict[str, Any] | None:
    """``{"min", "median", "max", "n"}`` of one profile's trials in one phase, or None."""
    try:
        summary = result["throughput"][phase][profile]["summary"]
        spread = {k: _number(summary[k]) for k in ("min", "median", "max")}
        n = int(summary["n"])
    except (KeyError, TypeError, ValueError):
        return None
    if any(v is None for v in spread.values()):
        return None
    return {**spread, "n": n}


def trial_values(entry: Any) -> list[float]:
    """The per-trial tok/s of one profile and phase of ``result.json``
    (``{"trials": [...], "summary": {...}, "metric"?}``): the entry's
    ``metric``, else the trial field (``output_tok_s``, ``decode_tok_s``)
    whose median is the recorded summary's median, else ``output_tok_s``.
    Trials without the field are left out."""
    if not isinstance(entry, dict):
        return []
    trials = [t for t in entry.get("trials") or [] if isinstance(t, dict)]
    candidates = [entry["metric"]] if entry.get("metric") else ["output_tok_s", "decode_tok_s"]
    median = _number((entry.get("summary") or {}).get("median"))
    chosen = candidates[0]
    for metric in candidates:
        values = [_number(t.get(metric)) for t in trials]
        values = [v for v in values if v is not None]
        if values and median is not None and math.isclose(plain_median(values), median, rel_tol=1e-6):
            chosen = metric
            break
    return [v for v in (_number(t.get(chosen)) for t in trials) if v is not None]


def _number(value: Any) -> float | None:
    """``value`` as a float, or None for None/"" and anything not a finite number."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _duration_s(started: Any, finished: Any) -> float | None:
    """Seconds between two ISO 8601 timestamps (``now(utc=true).isoformat()``)."""
    if not started or not finished:
        return None
    try:
        delta = datetime.fromisoformat(str(finished)) - datetime.fromisoformat(str(started))
    except (TypeError, ValueError):
        return None
    return round(delta.total_seconds(), 1)


def profiles_of(results: list[dict[str, Any]]) -> list[str]:
    """Profile names measured anywhere in the run, in first-seen order."""
    names: list[str] = []
    for result in results:
        for phase in (result.get("throughput") or {}).values():
            for name in phase or {}:
                if name not in names:
                    names.append(name)
    return names


def decision_text(row: dict[str, Any]) -> str:
    """One phrase for a row's outcome: ``"kept"``, ``"rolled back at verify"``,
    ``"failed at wheels"``, ``"unreachable at step switch"``, ``"not
    reached"``, ``"staged in 4 min 10 s"`` (playbooks/stage.yml), with
    ``(check mode)``, the run that verified a host kept earlier and not measured
    again (``"already kept (verified in run R)"`` when its stack digest matched
    and no role ran), the earlier run this one resolved (``"kept; resolved run
    R, stopped at step switch"``), and the run that staged the host's new stack
    (``"kept (staged in run R)"``)."""
    status = str(row.get("status") or "unknown")
    text = STATUS_TEXT.get(status, status)
    step = row.get("failed_step")
    if status == "unreachable" and step:
        text += f" at step {step}"
    elif status in ("rolled_back", "failed", "interrupted") and step:
        text += f" at {step}"
    if status == NOT_REACHED and row.get("not_started") and row.get("reason"):
        text = f"{row['not_started']}: {row['reason']}"
    if status == "kept" and row.get("already_kept"):
        text = "already kept"
    if status == "kept" and row.get("measured") is False and row.get("verified_in_run"):
        text += f" (verified in run {row['verified_in_run']})"
    recovered = row.get("recovered")
    if isinstance(recovered, dict) and recovered.get("run_id"):
        text += f"; resolved run {recovered['run_id']}, stopped at step {recovered.get('step') or '?'}"
    if status == "staged" and row.get("duration_s") is not None:
        text += f" in {format_duration(row['duration_s'])}"
    if row.get("staged_in"):
        text += f" (staged in run {row['staged_in']})"
    if row.get("check_mode"):
        text += " (check mode)"
    return text


def summary_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per result, in the order given.

    Each row (also the shape of ``summary.json``'s ``rows``)::

        {"host", "status", "decision", "check_mode", "measured", "verified_in_run",
         "already_kept": bool, "recovered": {"run_id", "step", "started_at", "serving",
                                             "recorded"} | None,
         "stack_before": {"venv", "cuda", "nvcc", "torch", "sglang"},
         "stack_after": {"venv", "torch", "torch_cuda"},
         "profiles": {name: {"before", "after", "after_rollback": tok/s | None,
                             "change_pct": percent | None, "verdict": str | None}},
         "failed_step", "failed_task", "reason",
         "diagnosis": {"kind", "cause", "remedy", ...} | None,
         "rollback": {"performed": bool, "seconds": float | None, "confirmed": bool | None,
                      "alternatives_manual": [{"group", "selected", "auto_would_select"}],
                      "service_restarted": bool | None, "serving_touched": str | None},
         "started_at", "finished_at", "duration_s": float | None,
         "steps": {step: seconds}, "out_of_service_s": float | None,
         "out_of_service_since": ISO 8601 | None (an earlier run left the host drained),
         "resolved_target": ["name==version", ...], "staged_in": run id | None,
         "kernel_log": result.json's kernel_log | None,
         "effective": {profile: result.json's effective[profile]} (profiles read on
                       both stacks, whose effective arguments differ between them, or
                       with new-stack-only arguments the new server does not use)}

    and per profile also ``"tolerance_pct"``, ``"spread": {phase: {"min",
    "median", "max", "n"} | None}`` and ``"trials": {phase: [tok/s, ...]}``
    for the phases of :data:`PHASES`.

    ``before`` is the old stack's baseline median, ``after`` the new stack's,
    ``after_rollback`` the old stack's again after a rollback. Every row has
    every profile of the run (values None where not measured).
    """
    profiles = profiles_of(results)
    rows = []
    for r in results:
        before = r.get("stack_before") or {}
        after = r.get("stack_after") or {}
        rollback = r.get("rollback") or {}
        decisions = r.get("decisions") or {}
        row: dict[str, Any] = {
            "host": r.get("host"),
            "status": r.get("status") or "unknown",
            "check_mode": bool(r.get("check_mode")),
            "measured": r.get("measured"),
            "verified_in_run": r.get("verified_in_run"),
            "already_kept": bool(r.get("already_kept")),
            "recovered": r.get("recovered") if isinstance(r.get("recovered"), dict) else None,
            "stack_before": {k: before.get(k) for k in ("venv", "cuda", "nvcc", "torch", "sglang")},
            "stack_after": {k: after.get(k) for k in ("venv", "torch", "torch_cuda")},
            "profiles": {},
            "failed_step": r.get("failed_step"),
            "failed_task": r.get("failed_task"),
            "reason": r.get("reason") or r.get("error"),
            "diagnosis": r.get("diagnosis") if isinstance(r.get("diagnosis"), dict) else None,
            "rollback": {
                "performed": bool(rollback.get("performed")),
                "seconds": _number(rollback.get("seconds")),
                "confirmed": rollback.get("confirmed"),
                "alternatives_manual": [
                    g
                    for g in rollback.get("alternatives_manual") or []
                    if isinstance(g, dict) and g.get("group")
                ],
                "service_restarted": rollback.get("service_restarted"),
                "serving_touched": rollback.get("serving_touched"),
            },
            "started_at": r.get("started_at"),
            "finished_at": r.get("finished_at"),
            "duration_s": _duration_s(r.get("started_at"), r.get("finished_at")),
            "steps": _steps(r.get("steps")),
            "out_of_service_s": _number(r.get("out_of_service_s")),
            "out_of_service_since": r.get("out_of_service_since"),
            "resolved_target": [str(p) for p in (r.get("resolved_target") or [])],
            "staged_in": r.get("staged_in"),
            "not_started": r.get("not_started"),
        }
        for name in profiles:
            decision = decisions.get(name) or {}
            phases = r.get("throughput") or {}
            row["profiles"][name] = {
                "before": _median(r, "baseline", name),
                "after": _median(r, "candidate", name),
                "after_rollback": _median(r, "rollback", name),
                "change_pct": _number(decision.get("change_pct")),
                "verdict": decision.get("verdict"),
                "tolerance_pct": _number(decision.get("tolerance_pct")),
                "spread": {phase: _spread(r, phase, name) for phase in PHASES},
                "trials": {phase: trial_values((phases.get(phase) or {}).get(name)) for phase in PHASES},
            }
        row["probe"] = probe_summary(r.get("probe") or {})
        row["commands"] = command_lines(r.get("throughput") or {})
        row["kernel_log"] = r.get("kernel_log") if isinstance(r.get("kernel_log"), dict) else None
        row["effective"] = {
            name: value
            for name, value in (r.get("effective") or {}).items()
            if isinstance(value, dict)
            and (
                value.get("unused_flags")
                or (value.get("compared") or {}).get("args")
                or (value.get("compared") or {}).get("disabled")
                or (value.get("compared") or {}).get("read")
            )
        }
        row["accept_length"] = {
            name: {k: v.get(k) for k in ("old", "new", "change_pct", "passed")}
            for name, v in (r.get("accept_length") or {}).items()
            if isinstance(v, dict) and v.get("passed") is not None
        }
        row["soak"] = soak_summary(r)
        row["batch_soak"] = r.get("batch_soak") if isinstance(r.get("batch_soak"), dict) else None
        row["driver_window"] = r.get("driver_window") if isinstance(r.get("driver_window"), dict) else None
        row["decision"] = decision_text(row)
        rows.append(row)
    return rows


def _steps(steps: Any) -> dict[str, float]:
    """``result.json``'s ``steps`` (``[{"step", "started_at", "duration_s"}]``)
    as ``{step: seconds}`` in step order (a step recorded twice adds up)."""
    out: dict[str, float] = {}
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and step.get("step"):
            seconds = _number(step.get("duration_s"))
            if seconds is not None:
                out[str(step["step"])] = round(out.get(str(step["step"]), 0.0) + seconds, 1)
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cell(value: Any) -> str:
    """A Markdown table cell: one line, pipes escaped, "-" when empty."""
    text = " ".join(str(value if value is not None else "").split())
    return text.replace("|", "\\|") or "-"


def format_duration(seconds: float | None) -> str:
    """``3725`` -> ``"1 h 02 min"``, ``750`` -> ``"12 min 30 s"``, ``42`` -> ``"42 s"``."""
    if seconds is None:
        return "-"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _stack_before(row: dict[str, Any]) -> str:
    stack = row["stack_before"]
    parts = []
    if stack.get("torch") and stack["torch"] != "?":  # "?": the snapshot had no torch pin
        parts.append(f"torch {stack['torch']}")
    if stack.get("cuda"):
        parts.append(Path(str(stack["cuda"])).name)
    if stack.get("nvcc"):
        parts.append(f"nvcc {stack['nvcc']}")
    return ", ".join(parts)


def _stack_after(row: dict[str, Any]) -> str:
    stack = row["stack_after"]
    parts = []
    if stack.get("torch"):
        parts.append(f"torch {stack['torch']}")
    if stack.get("torch_cuda"):
        parts.append(f"CUDA {stack['torch_cuda']}")
    return ", ".join(parts)


def _spread_text(spread: dict[str, Any] | None) -> str:
    """``" [89.3–89.6, n=7]"``: min–max and the number of trials beside a median."""
    if not spread:
        return ""
    return f" [{spread['min']:.1f}–{spread['max']:.1f}, n={spread['n']}]"


def _before_cell(p: dict[str, Any]) -> str:
    if p["before"] is None:
        return "-"
    return _fmt(p["before"]) + _spread_text((p.get("spread") or {}).get("baseline"))


def _after_cell(p: dict[str, Any]) -> str:
    spreads = p.get("spread") or {}
    if p["after"] is not None:
        notes = []
        if p["change_pct"] is not None:
            notes.append(f"{p['change_pct']:+.1f}%")
        if p["verdict"]:
            notes.append(str(p["verdict"]))
        text = _fmt(p["after"]) + _spread_text(spreads.get("candidate"))
        return text + (f" ({', '.join(notes)})" if notes else "")
    if p["after_rollback"] is not None:
        return f"{_fmt(p['after_rollback'])}{_spread_text(spreads.get('rollback'))} (rollback)"
    return "-"


def _rollback_cell(row: dict[str, Any]) -> str:
    rollback = row["rollback"]
    if not rollback["performed"]:
        return "no"
    text = "yes"
    if rollback["seconds"] is not None:
        text += f", {rollback['seconds']:.1f} s"
    if rollback.get("service_restarted") is False and not rollback.get("serving_touched"):
        # A failure before the switch: files and links restored only (steps.rollback.NOT_RESTARTED).
        text += ", server not restarted: it never left the old stack"
    if rollback["confirmed"] is True:
        text += ", old throughput confirmed"
    elif rollback["confirmed"] is False:
        text += ", old stack slower than its baseline"
    return text


def _reason_cell(row: dict[str, Any]) -> str:
    """The reason; for a failure the diagnosis recognised (``result.json``'s
    ``diagnosis``, from :mod:`cuda13_upgrade.diagnosis`), its cause and remedy."""
    diagnosis = row.get("diagnosis") or {}
    if diagnosis.get("cause"):
        text = " ".join(f"{diagnosis['cause']}. Fix: {diagnosis.get('remedy') or ''}".split())
        return text if len(text) <= 400 else text[:399] + "…"
    reason = " ".join(str(row.get("reason") or "").split())
    return reason if len(reason) <= 160 else reason[:159] + "…"


def probe_summary(probe: dict[str, Any]) -> dict[str, Any]:
    """Per profile, the correctness probe of a result (``cuda13_upgrade.probe``) in short:
    ``{profile: {"passed", "agreeing", "prompts", "min_prefix_tokens", "example"}}``, the
    example (prompt, old and new output, common prefix in tokens) only where it failed."""
    out: dict[str, Any] = {}
    for name, result in probe.items():
        if not isinstance(result, dict):
            continue
        out[name] = {
            "passed": result.get("passed"),
            "agreeing": result.get("agreeing"),
            "prompts": result.get("prompts"),
            "min_prefix_tokens": result.get("min_prefix_tokens"),
            "example": None if result.get("passed") else result.get("example"),
        }
        batched = result.get("batched")
        if isinstance(batched, dict):
            out[name]["batched"] = {
                "passed": batched.get("passed"),
                "batches": [
                    {
                        k: b.get(k)
                        for k in ("batch_size", "requests", "agreeing", "passed")
                        + (() if b.get("passed") else ("example",))
                    }
                    for b in batched.get("batches") or []
                ],
                "reason": batched.get("reason"),
            }
    return out


def command_lines(throughput: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per profile with new-stack-only arguments, the server command on each stack:
    ``{profile: {"old": str | None, "new": str | None, "new_stack_args": [str]}}`` from the
    result's ``throughput`` (``baseline`` and ``candidate`` phases)."""
    out: dict[str, dict[str, Any]] = {}
    candidate = throughput.get("candidate") or {}
    baseline = throughput.get("baseline") or {}
    for name, measured in candidate.items():
        extra = (measured or {}).get("new_stack_args") or []
        if extra:
            out[name] = {
                "old": (baseline.get(name) or {}).get("command"),
                "new": measured.get("command"),
                "new_stack_args": list(extra),
            }
    return out


def _command_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for row in rows:
        for name, commands in (row.get("commands") or {}).items():
            lines.append(f"- {row['host']} {name} (new stack only: {' '.join(commands['new_stack_args'])})")
            lines.append(f"  - old stack: `{commands['old'] or '-'}`")
            lines.append(f"  - new stack: `{commands['new'] or '-'}`")
    return ["", "## Command lines", "", *lines] if lines else []


def _kernel_log_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The driver's Xid lines each host logged between the switch and the decision, with the
    catalog's action and whether they rolled the host back; a log that could not be read."""
    lines: list[str] = []
    for row in rows:
        log = row.get("kernel_log") or {}
        if not log.get("read", True):
            lines.append(f"- {row['host']}: {log.get('message')}")
        for event in log.get("xid") or []:
            said = "rolled back" if event.get("gate") else "shown, not gated"
            what = f"Xid {event.get('xid')} ({event.get('action')}, {said})"
            lines.append(f"- {row['host']}: {what}: `{event.get('line')}`")
    return ["", "## Kernel log", "", *lines] if lines else []


def _value(value: Any) -> str:
    return "-" if value is None else json.dumps(value)


def _effective_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The section of the summary on what the servers really ran with: per host and
    profile, the new-stack-only arguments the new server does not use, the paths
    turned off on one stack only, and the effective arguments that differ."""
    lines: list[str] = []
    for row in rows:
        for name, value in (row.get("effective") or {}).items():
            compared = value.get("compared") or {}
            lines.append(f"- {row['host']} {name}:")
            for flag in value.get("unused_flags") or []:
                lines.append(
                    f"  - **not used on the new stack: `{flag['flag']}`**, the gain the operator upgraded "
                    f"for is not there ({flag['why']})"
                )
            for path in compared.get("disabled") or []:
                where = "new" if path["new"] else "old"
                lines.append(f"  - {path['path']} turned off on the {where} stack only")
            for arg in compared.get("args") or []:
                lines.append(f"  - `{arg['arg']}`: {_value(arg['old'])} -> {_value(arg['new'])}")
            if not (value.get("unused_flags") or compared.get("disabled") or compared.get("args")):
                version = compared.get("version") or {}
                lines.append(
                    f"  - the same effective arguments on both stacks (GET /get_server_info, SGLang "
                    f"{version.get('old') or '?'} -> {version.get('new') or '?'}); no path turned off"
                )
    return ["", "## Effective server arguments (old -> new stack)", "", *lines] if lines else []


def _probe_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The correctness probe's section of the summary: one line per host and profile, and
    for a failed probe the prompt with the shortest common prefix and both outputs."""
    lines: list[str] = []
    for row in rows:
        for name, probe in (row.get("probe") or {}).items():
            verdict = (
                "output matches the old stack" if probe["passed"] else "output differs from the old stack"
            )
            lines.append(
                f"- {row['host']} {name}: {verdict} ({probe['agreeing']} of {probe['prompts']} prompts "
                f"agree for at least {probe['min_prefix_tokens']} tokens)"
            )
            example = probe.get("example")
            if example:
                for label, key in (("prompt", "prompt"), ("old stack", "old"), ("new stack", "new")):
                    text = " ".join(str(example.get(key) or "").split())
                    lines.append(f"  - {label}: `{text[:200]}`")
            batched = probe.get("batched")
            if batched:
                sizes = ", ".join(str(b["batch_size"]) for b in batched["batches"]) or "none"
                lines.append(
                    f"- {row['host']} {name}, prompts sent together (batch sizes {sizes}): "
                    + ("output matches the same prompts alone" if batched["passed"] else batched["reason"])
                )
    accept = []
    for row in rows:
        for name, value in (row.get("accept_length") or {}).items():
            verdict = "healthy" if value["passed"] else "rolled back"
            if value["new"] is None:
                accept.append(
                    f"- {row['host']} {name}: {value['old']:.2f} -> none: the new stack's server "
                    f"reported no speculative counters ({verdict})"
                )
                continue
            accept.append(
                f"- {row['host']} {name}: {value['old']:.2f} -> {value['new']:.2f} tokens per verify step "
                f"({value['change_pct']:+.1f} %, {verdict})"
            )
    out = ["", "## Correctness probe", "", *lines] if lines else []
    return out + (["", "## Speculative accept length", "", *accept] if accept else [])


# The phases a soak runs in, as the summary names their stacks.
_SOAK_PHASES = {"baseline": "old stack", "candidate": "new stack"}
# Journal lines of a failed soak shown in the summary (result.json keeps them all).
SOAK_JOURNAL_LINES = 12


def soak_summary(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"<phase>/<profile>": soak.judge record}`` of a result's soaks: the records in its
    ``throughput`` (the new stack's, and the old stack's when it was soaked too), judged."""
    out: dict[str, dict[str, Any]] = {}
    for phase in _SOAK_PHASES:
        for name, measured in ((result.get("throughput") or {}).get(phase) or {}).items():
            record = measured.get("soak") if isinstance(measured, dict) else None
            if isinstance(record, dict) and isinstance(record.get("requests"), int):
                out[f"{phase}/{name}"] = soak_module.judge(record, profile=str(name))
    return out


def _soak_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The soak's section of the summary: per host, stack and profile the count served, and
    for a failed soak its reason and the unit's last journal lines."""
    lines: list[str] = []
    for row in rows:
        for key, judged in (row.get("soak") or {}).items():
            phase, _, name = key.partition("/")
            head = f"- {row['host']} {name} ({_SOAK_PHASES.get(phase, phase)}): "
            if judged["passed"]:
                lines.append(
                    head + f"served {judged['served']} of {judged['requests']} requests, "
                    f"{judged['concurrency']} at once, in {_fmt(_number(judged['seconds']))} s"
                )
                continue
            lines.append(head + str(judged["reason"]).removeprefix(f"{name}: "))
            tail = judged.get("journal_tail") or []
            if tail:
                lines += ["", "  ```", *[f"  {line}" for line in tail[-SOAK_JOURNAL_LINES:]], "  ```", ""]
    return ["", "## Soak", "", *lines] if lines else []


def _batch_soak_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The soak between batches: per host watched, how long and how many checks it answered,
    or why it was rolled back, with the unit's last journal lines."""
    lines: list[str] = []
    for row in rows:
        watched = row.get("batch_soak")
        if not watched:
            continue
        if watched.get("healthy"):
            compared = "" if watched.get("output_compared") else " (output not compared: the probe was off)"
            lines.append(
                f"- {row['host']}: watched {_number(watched.get('watched_s')) or 0:.0f} s in service, "
                f"{watched.get('served')} of {watched.get('checks')} checks answered{compared}"
            )
            continue
        lines.append(f"- {row['host']}: {watched.get('reason')}")
        tail = watched.get("journal_tail") or []
        if tail:
            lines += ["", "  ```", *[f"  {line}" for line in tail[-SOAK_JOURNAL_LINES:]], "  ```", ""]
    return ["", "## Soak between batches", "", *lines] if lines else []


def render_markdown(run_id: str, rows: list[dict[str, Any]]) -> str:
    """The fleet summary as Markdown: a title, a count per status, and a table
    with one row per host (decision, stacks, median tok/s per profile before
    and after, rollback with its seconds, duration, reason). Columns empty for
    every host are left out, except host, decision and reason."""
    profiles = list(rows[0]["profiles"]) if rows else []
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = [
        f"# cuda13-upgrade run {run_id}",
        "",
        ", ".join(f"{n} {STATUS_TEXT.get(s, s)}" for s, n in sorted(counts.items())) or "no hosts",
        "",
    ]
    if any(row.get("check_mode") for row in rows):
        lines += ["Check mode: nothing was changed and nothing was measured.", ""]
    columns: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("host", lambda row: str(row["host"])),
        ("decision", lambda row: str(row["decision"])),
        ("stack before", _stack_before),
        ("stack after", _stack_after),
    ]
    for name in profiles:
        columns += [
            (f"{name} before (tok/s)", lambda row, n=name: _before_cell(row["profiles"][n])),
            (f"{name} after (tok/s)", lambda row, n=name: _after_cell(row["profiles"][n])),
        ]
    columns += [
        ("rollback", _rollback_cell),
        ("duration", lambda row: format_duration(row["duration_s"])),
        ("reason", _reason_cell),
    ]
    # Columns with nothing to say for any host (a preflight run has no stacks,
    # no rollback, no durations) are left out; host, decision, reason stay.
    empty = {"", "-", "no"}
    columns = [
        (title, cell)
        for title, cell in columns
        if title in ("host", "decision", "reason") or any(cell(r) not in empty for r in rows)
    ]
    lines.append("| " + " | ".join(title for title, _ in columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_cell(cell(row)) for _, cell in columns) + " |")
    if any(profiles):
        lines += ["", "Medians in tok/s, with [min–max, n=trials] of each stack's trials."]
    lines += _durations_table(rows)
    lines += _driver_window_lines(rows)
    lines += _alternatives_lines(rows)
    lines += _probe_lines(rows)
    lines += _soak_lines(rows)
    lines += _batch_soak_lines(rows)
    lines += _command_lines(rows)
    lines += _kernel_log_lines(rows)
    lines += _effective_lines(rows)
    lines += _resolved_lines(rows)
    return "\n".join(lines) + "\n"


def _driver_window_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The "Driver window" section: per host whose driver the run moved, from and to, kept or put
    back (and why), and its time split: the measurement on the old driver, the activation (reload
    or reboot), the measurement on the new driver, and the whole time out of service.
    E.g. ``- gpu-node-01: 570.211.01 -> 580.142, kept; out of service 52 s: measured on the old
    driver 20 s, activation by reload 0.5 s, measured on the new driver 22 s``."""
    lines = []
    for row in rows:
        window = row.get("driver_window")
        if not window:
            continue
        outcome = "kept" if window.get("kept") else "put back" if window.get("restored") else "not kept"
        if not window.get("kept") and window.get("reason"):
            outcome += f" ({' '.join(str(window['reason']).split())})"
        parts = []
        if window.get("old_driver_measure_seconds") is not None:
            parts.append(
                f"measured on the old driver {format_duration(window['old_driver_measure_seconds'])}"
            )
        how = "reboot" if window.get("reboot") else str(window.get("activation") or "?")
        seconds = window.get("reboot_seconds") if window.get("reboot") else window.get("activation_seconds")
        parts.append(f"activation by {how}" + (f" {seconds} s" if seconds is not None else ""))
        if window.get("measure_seconds") is not None:
            parts.append(f"measured on the new driver {format_duration(window['measure_seconds'])}")
        out = row.get("out_of_service_s")
        lines.append(
            f"- {row['host']}: {window.get('from') or '?'} -> {window.get('to') or '?'}, {outcome}; "
            + (f"out of service {format_duration(out)}: " if out is not None else "")
            + ", ".join(parts)
        )
    return ["", "## Driver window", "", *lines] if lines else []


def _alternatives_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The alternatives groups a rollback left in manual mode on the old toolkit, because
    auto mode would pick the newer one still installed, with what a later
    ``update-alternatives --auto`` would do (:func:`cuda13_upgrade.ondemand.alternatives_note`)."""
    lines = [
        f"- {row['host']}: {ondemand.alternatives_note([group])}"
        for row in rows
        for group in (row.get("rollback") or {}).get("alternatives_manual") or []
    ]
    return ["", "## Alternatives left in manual mode", "", *lines] if lines else []


def _resolved_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The resolved targets the hosts installed: one entry per distinct set, naming its hosts."""
    sets: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        if row.get("resolved_target"):
            sets.setdefault(tuple(row["resolved_target"]), []).append(str(row["host"]))
    lines: list[str] = []
    for target, hosts in sets.items():
        lines.append(f"- {', '.join(hosts)}: {len(target)} distributions: {', '.join(target)}")
    return ["", "## Resolved target", "", *lines] if lines else []


def _durations_table(rows: list[dict[str, Any]]) -> list[str]:
    """The "Step durations" section: per host each step's duration, the time
    out of service and the total; a last row with the sums over all hosts; under it, each
    host whose time out of service began in the earlier run it resolved (that run left it
    drained, ``out_of_service_since``). Empty when no host recorded steps."""
    timed = [row for row in rows if row.get("steps")]
    if not timed:
        return []
    steps: list[str] = []
    for row in timed:
        steps += [name for name in row["steps"] if name not in steps]
    order = {name: i for i, name in enumerate(timeline.STEP_ORDER)}
    steps.sort(key=lambda name: order.get(name, len(order)))
    header = ["host", *steps, "out of service", "total"]
    lines = [
        "",
        "## Step durations",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    totals: dict[str, float] = {}
    for row in timed:
        cells = [str(row["host"])]
        for name in steps:
            seconds = row["steps"].get(name)
            cells.append(format_duration(seconds))
            if seconds is not None:
                totals[name] = totals.get(name, 0.0) + seconds
        cells.append(format_duration(row.get("out_of_service_s")))
        total = row.get("duration_s")
        if total is None:
            total = round(sum(row["steps"].values()), 1)
        cells.append(format_duration(total))
        for key, value in (("out of service", row.get("out_of_service_s")), ("total", total)):
            if value is not None:
                totals[key] = totals.get(key, 0.0) + value
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    label = f"all {len(timed)} hosts" if len(timed) > 1 else "total"
    sums = [format_duration(totals.get(name)) for name in [*steps, "out of service", "total"]]
    lines.append("| " + " | ".join([f"**{label}**", *sums]) + " |")
    notes = []
    for row in timed:
        recovered = row.get("recovered") or {}
        if row.get("out_of_service_since"):
            notes.append(
                f"- {row['host']}: out of service since {row['out_of_service_since']}, the drain of run "
                f"{recovered.get('run_id') or '?'}, which stopped at step {recovered.get('step') or '?'} "
                "and left the host drained"
            )
    return lines + (["", *notes] if notes else [])


def run_hosts(run_dir: str | Path) -> list[str]:
    """The hosts of a run: ``run.json``'s ``hosts`` (the command's record),
    then ``summary.json``'s rows (the play's hosts), then every host with a
    result file, without repeats."""
    run = Path(run_dir)
    hosts: list[str] = list(load_run_record(run).get("hosts") or [])
    summary = run / "summary.json"
    if summary.exists():
        try:
            hosts += [r["host"] for r in json.loads(summary.read_text(encoding="utf-8"))["rows"]]
        except (json.JSONDecodeError, KeyError, TypeError):
            pass  # a damaged summary is rewritten below; the result files still count
    hosts += sorted(p.parent.name for p in run.glob("*/result.json"))
    return list(dict.fromkeys(h for h in hosts if h))


def apply_not_started(results: list[dict[str, Any]], not_started: Any) -> list[dict[str, Any]]:
    """``results`` with each "not reached" host that ``not_started`` names given its reason.

    ``not_started``: the upgrade play's ``cuda13_not_started``, ``{"said": "not
    reached" | "not started", "reason": str, "hosts": [host]}`` (``said``
    defaults to "not reached"), or ``{}``/None. A host with another status is
    left as it is. Returns new dicts; the input is not changed.
    """
    if not isinstance(not_started, dict) or not not_started.get("reason"):
        return list(results)
    named = set(not_started.get("hosts") or [])
    said = str(not_started.get("said") or NOT_REACHED)
    return [
        {**r, "reason": not_started["reason"], "not_started": said}
        if r.get("status") == NOT_REACHED and r.get("host") in named
        else r
        for r in results
    ]


def fleet_summary(
    run_dir: str | Path, hosts: list[str] | None = None, not_started: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Summarise a run and write ``summary.md``, ``summary.json`` and ``summary.png``.

    The chart is drawn only when ``summary.png`` is missing or the rows differ
    from those of the ``summary.json`` it replaces (it shows the rows alone),
    and not at all when no host of the run was measured (no row has a
    profile's figures: hosts already kept, refused, not reached, or a run in
    check mode): ``chart`` is then None and ``chart_note`` says why.

    ``hosts``: the hosts of the run, in report order; None takes
    :func:`run_hosts`. A host without a result file takes its outcome from
    ``run.json`` when the command recorded one, else it is "not reached".

    ``not_started``: the upgrade play's ``cuda13_not_started`` (hosts not
    reached for the failure budget, or not started outside the window or
    under a tripped breaker, and why; :func:`apply_not_started`). With
    ``"before_any_change": true`` (the breaker's refusal, playbooks/start.yml)
    its hosts are "not started" also where ``run.json`` says the refusal
    failed them. When given and not empty it is kept as
    ``not_started.json`` in the run's directory; when None, that file is read,
    so a later summary (the command's, after ``run.json``) keeps the reason.

    ``summary.md`` then says how long a rollout took against its estimate (``## How long the
    run took``, from a closed ``estimate.json``: :func:`cuda13_upgrade.estimate.measured_lines`)
    and ends with the run's notifications (``## Notifications``, from
    ``notifications.json``: :func:`cuda13_upgrade.notify.summary_lines`) when it sent any.

    Also writes the run's Prometheus metrics, ``cuda13_upgrade.prom``
    (:func:`cuda13_upgrade.metrics.fleet_metrics`), there and, when
    ``$CUDA13_METRICS_TEXTFILE_DIR`` is set, into that directory.

    Returns ``{"run_id", "rows", "markdown", "files": {"markdown", "json",
    "chart", "metrics"}}`` (paths as strings; ``chart`` None, with
    ``chart_error`` set, when matplotlib is missing). ``summary.json`` is ``{"run_id", "rows"}``.
    Raises ``ValueError`` for a result file that is not JSON and ``OSError``
    when the directory cannot be written.
    """
    run = Path(run_dir)
    if hosts is None:
        hosts = run_hosts(run)
    outcomes = load_run_record(run).get("outcomes") or {}
    reportfiles.private_dir(run)
    not_started_path = run / "not_started.json"
    if not_started:
        reportfiles.write_text(not_started_path, json.dumps(redact(not_started), indent=2) + "\n")
    elif not_started is None and not_started_path.is_file():
        try:
            not_started = json.loads(not_started_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            not_started = None  # a damaged record: the hosts stay plain "not reached"
    # A run refused before any change (the breaker): the host its refusal failed is not started too.
    refused = (
        set(not_started.get("hosts") or [])
        if isinstance(not_started, dict) and not_started.get("before_any_change")
        else set()
    )
    results = []
    for result in load_results(run, list(hosts)):
        host = result.get("host")
        if (
            result.get("status") == NOT_REACHED
            and isinstance(outcomes.get(host), dict)
            and host not in refused
        ):
            result = {**outcomes[host], "host": host}
        results.append(result)
    results = apply_not_started(results, not_started)
    rows = summary_rows(results)
    # The estimate of the night against what each batch took (a rollout's estimate.json, closed
    # by the report play), then the run's notifications (cuda13_notify): where they went, and
    # each send that failed.
    try:
        took = estimate.measured_lines(estimate.load(run))
    except (TypeError, ValueError, KeyError, AttributeError):
        took = []  # a damaged estimate.json: the summary goes on without the section
    told = notify.summary_lines(run)
    tail = [*took, *told]
    markdown = redact(render_markdown(run.name, rows) + ("\n".join(tail) + "\n" if tail else ""))
    md_path, json_path, png_path = run / "summary.md", run / "summary.json", run / "summary.png"
    summary_json = redact(json.dumps({"run_id": run.name, "rows": rows}, indent=2) + "\n")
    # The chart shows the rows and nothing else: drawn again only when they changed (the
    # summary is written after each batch, again by the report play and by the command).
    try:
        chart_current = png_path.is_file() and json_path.read_text(encoding="utf-8") == summary_json
    except OSError:
        chart_current = False
    reportfiles.write_text(md_path, markdown)
    reportfiles.write_text(json_path, summary_json)
    summary: dict[str, Any] = {
        "run_id": run.name,
        "rows": rows,
        "markdown": markdown,
        "files": {"markdown": str(md_path), "json": str(json_path), "chart": None, "metrics": None},
    }
    from cuda13_upgrade import metrics

    text = metrics.fleet_metrics(rows, run.name, load_run_record(run))
    summary["files"]["metrics"] = str(metrics.write_textfile(run, text))
    textfile_dir = os.environ.get("CUDA13_METRICS_TEXTFILE_DIR")
    if textfile_dir:  # node_exporter's textfile collector directory on the control node
        metrics.write_textfile(textfile_dir, text)
    if not any(row.get("profiles") for row in rows):
        # Nothing measured (hosts already kept, refused, not reached, check mode): no trials to draw.
        summary["chart_note"] = "no chart: no host of this run was measured"
        return summary
    try:
        if not chart_current:
            title = f"Trials per host, profile and stack, run {run.name}"
            render_chart(rows, png_path, title=title)
            os.chmod(png_path, reportfiles.FILE_MODE)
        summary["files"]["chart"] = str(png_path)
    except ImportError as exc:  # the report must not fail an upgrade for want of a chart
        summary["chart_error"] = f"no chart: {exc}"
    return summary
