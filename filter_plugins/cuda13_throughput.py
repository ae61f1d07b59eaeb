"""Filters of the gate: throughput (cuda13_upgrade.throughput), the kernel log (cuda13_upgrade.xid)
and the soak between batches (cuda13_upgrade.batch_soak)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import batch_soak, scriptout, soak, throughput, xid
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_throughput_decide
    short_description: Decide whether the new stack regressed for one profile.
    positional: _input, baseline
    options:
      _input: {description: candidate trials (new stack), type: list, required: true}
      baseline: {description: baseline trials (old stack), type: list, required: true}
      profile: {description: profile name for the report, type: str, default: plain}
      tolerance_pct: {description: allowed slowdown of the median in percent, type: float, default: 3.0}
      z: {description: confidence factor of early decisions, type: float, default: 1.5}
      max_trials: {description: cap on candidate trials, type: int, default: 21}
      metric: {description: trial metric compared, type: str, default: output_tok_s}
  - name: cuda13_gate_verdict
    short_description: The gate's verdict over the new stack's profiles (regressed, final, reason, records).
    positional: _input, baseline, settings
    options:
      _input: {description: "per profile, the new stack's {trials, probe, load}", type: dict, required: true}
      baseline: {description: per profile, the old stack's trials, type: dict, required: true}
      settings:
        description: >-
          keyword arguments of cuda13_upgrade.throughput.gate_verdict (metric, tolerance_pct, z,
          max_trials, baseline_probe, min_prefix_tokens, min_agreeing_share, accept_length_drop_pct,
          baseline_load, ttft_tolerance_pct, concurrency_tolerance_pct, speculative_pairs,
          disabled_flag_action, soak)
        type: dict
        default: {}
  - name: cuda13_kernel_log_verdict
    short_description: The kernel log's Xid lines since the switch, judged (cuda13_upgrade.xid).
    positional: _input, read
    options:
      _input:
        description: hostscripts/kernel_log.py mark's registered result (before the switch)
        type: dict
        required: true
      read: {description: "hostscripts/kernel_log.py read's registered result", type: dict}
  - name: cuda13_soak_failed
    short_description: The first profile of one phase's results whose soak failed, or none.
    positional: _input
    options:
      _input: {description: "per profile, one phase's {trials, soak, ...}", type: dict, required: true}
  - name: cuda13_batch_soak_plan
    short_description: Whether a kept host is watched in service before the next batch starts.
    positional: _input, settings
    options:
      _input: {description: cuda13_soak_seconds, type: int, required: true}
      settings:
        description: keyword arguments of cuda13_upgrade.batch_soak.plan (host, batches, status, measured)
        type: dict
        required: true
  - name: cuda13_batch_soak_verdict
    short_description: The soak between batches, judged (cuda13_upgrade.batch_soak.verdict).
    positional: _input, settings
    options:
      _input: {description: "the watch's registered result", type: dict, required: true}
      settings:
        description: >-
          candidate and baseline (per profile, the gate's records with their probe outputs),
          kernel_log_mark, kernel_log_read, min_prefix_tokens
        type: dict
        default: {}
  - name: cuda13_trials
    short_description: Normalize client and bench_serving trials to one shape.
  - name: cuda13_trials_summary
    short_description: Median, mean, min, max and spread of the trials' metric.
"""

EXAMPLES = r"""
decision: "{{ new_trials | cuda13_throughput_decide(old_trials, profile='eagle3') }}"
verdict: "{{ {'plain': {'trials': new_trials}} | cuda13_gate_verdict({'plain': old_trials}, {'z': 1.5}) }}"
"""

RETURN = r"""
  _value:
    description: >-
      Decision dict (verdict keep/regressed/undecided, final, change_pct, se_pct,
      reason, baseline and candidate summaries), or trials, summary, gain.
"""


def _check_list(name, value):
    if not isinstance(value, list):
        raise AnsibleFilterError(f"{name} expects a list of trials, got {type(value).__name__}: {value!r}")


def cuda13_trials(trials):
    _check_list("cuda13_trials", trials)
    return throughput.normalize_trials(trials)


def cuda13_trials_summary(trials, metric="output_tok_s"):
    _check_list("cuda13_trials_summary", trials)
    values = throughput.trial_metric(throughput.normalize_trials(trials), metric)
    return throughput.summarize(values).__dict__


def cuda13_throughput_decide(
    candidate,
    baseline,
    profile="plain",
    tolerance_pct=throughput.DEFAULT_TOLERANCE_PCT,
    z=throughput.DEFAULT_Z,
    max_trials=throughput.DEFAULT_MAX_TRIALS,
    metric="output_tok_s",
):
    _check_list("cuda13_throughput_decide", candidate)
    _check_list("cuda13_throughput_decide (baseline)", baseline)
    try:
        return throughput.decide(
            throughput.trial_metric(throughput.normalize_trials(baseline), metric),
            throughput.trial_metric(throughput.normalize_trials(candidate), metric),
            profile=str(profile),
            tolerance_pct=float(tolerance_pct),
            z=float(z),
            max_trials=int(max_trials),
        ).to_dict()
    except (ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"cannot decide profile {profile!r}: {exc}") from exc


def cuda13_gate_verdict(candidate, baseline, settings=None):
    for name, value in (("candidate", candidate), ("baseline", baseline), ("settings", settings or {})):
        if not isinstance(value, dict):
            raise AnsibleFilterError(
                f"cuda13_gate_verdict: {name} must be a dict, got {type(value).__name__}"
            )
    try:
        return throughput.gate_verdict(candidate, baseline, **(settings or {}))
    except (TypeError, KeyError) as exc:  # a ValueError: ansible_filters
        raise AnsibleFilterError(f"cuda13_gate_verdict: {exc}") from exc


def cuda13_kernel_log_verdict(mark, read=None):
    if not isinstance(mark, dict):
        raise AnsibleFilterError(
            "cuda13_kernel_log_verdict: mark must be the kernel_log.py mark task's result, "
            f"got {type(mark).__name__}"
        )
    return xid.kernel_log_verdict(mark, read)


def cuda13_soak_failed(results):
    if not isinstance(results, dict):
        raise AnsibleFilterError(f"cuda13_soak_failed expects a dict, got {type(results).__name__}")
    return soak.failed_profile(results)


def cuda13_batch_soak_plan(seconds, settings):
    if not isinstance(settings, dict):
        raise AnsibleFilterError(
            f"cuda13_batch_soak_plan: settings must be a dict, got {type(settings).__name__}"
        )
    return batch_soak.plan(
        seconds,
        host=str(settings.get("host")),
        batches=settings.get("batches") or [],
        status=str(settings.get("status")),
        measured=bool(settings.get("measured")),
    )


def cuda13_batch_soak_verdict(run, settings=None):
    settings = settings or {}
    if not isinstance(run, dict) or not isinstance(settings, dict):
        raise AnsibleFilterError(
            "cuda13_batch_soak_verdict: expects the watch's registered result and a dict"
        )
    record = scriptout.result_document(str(run.get("stdout") or "")).get("watch")
    return batch_soak.verdict(
        record,
        reference_ids=batch_soak.references(settings.get("candidate"), settings.get("baseline")),
        kernel_log_mark=settings.get("kernel_log_mark"),
        kernel_log_read=settings.get("kernel_log_read"),
        min_prefix_tokens=int(settings.get("min_prefix_tokens") or 4),
    )


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_throughput_decide": cuda13_throughput_decide,
                "cuda13_gate_verdict": cuda13_gate_verdict,
                "cuda13_kernel_log_verdict": cuda13_kernel_log_verdict,
                "cuda13_soak_failed": cuda13_soak_failed,
                "cuda13_batch_soak_plan": cuda13_batch_soak_plan,
                "cuda13_batch_soak_verdict": cuda13_batch_soak_verdict,
                "cuda13_trials": cuda13_trials,
                "cuda13_trials_summary": cuda13_trials_summary,
            }
        )
