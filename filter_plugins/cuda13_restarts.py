"""Filters of the restart plan (thin wrappers over cuda13_upgrade.restarts)."""

from __future__ import annotations

import base64
import json
import shlex
import sys
import time
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import restarts, scriptout
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_running_args
    short_description: The arguments the running server adds to the service's own command, or None.
    positional: _input, exec_start
    options:
      _input:
        description: "slurp's base64 content of /proc/<MainPID>/cmdline, '' when not running"
        type: str
        required: true
      exec_start: {description: the service's own command, type: str, required: true}
  - name: cuda13_running_venv
    short_description: The venv whose Python the server's main process runs, or None.
    options:
      _input:
        description: "slurp's base64 content of /proc/<MainPID>/cmdline, '' when not running"
        type: str
        required: true
  - name: cuda13_running_command
    short_description: The main process's command line, shell-quoted ('' when not running).
    options:
      _input:
        description: "slurp's base64 content of /proc/<MainPID>/cmdline, '' when not running"
        type: str
        required: true
  - name: cuda13_restart_plan
    short_description: The upgrade's restart plan (baseline, switch, candidate, rollback re-check).
    positional: _input, running, baseline_recorded, rollback_verify
    options:
      _input: {description: the profiles, type: list, required: true}
      running: {description: cuda13_running_args of the old stack's server, type: raw}
      baseline_recorded: {description: a recorded baseline is used, type: bool, default: false}
      rollback_verify: {description: a rollback measures the old stack again, type: bool, default: true}
  - name: cuda13_recorded_baseline
    short_description: Whether the baseline recorded on the host stands for this run's, and the record.
    positional: _input, profiles, max_age_hours
    options:
      _input:
        description: "slurp's base64 content of baseline.json, None when there is none"
        type: raw
        required: true
      profiles: {description: the run's profiles, type: list, required: true}
      max_age_hours: {description: cuda13_baseline_max_age_hours, type: float, required: true}
  - name: cuda13_measure_plan
    short_description: One verify_throughput phase's plan, inputs checked (restarts.measure_plan).
    positional: _input, phase, given
    options:
      _input: {description: the profiles, type: list, required: true}
      phase: {description: baseline, candidate or rollback, type: str, required: true}
      given:
        description: >-
          plan, running, exec_start, baseline, baseline_probe, probe, probe_prompts, probe_tokens
          (the keyword arguments of measure_plan)
        type: dict
        required: true
  - name: cuda13_serve_outcome
    short_description: What one start into a profile came to (cuda13_upgrade.restarts.serve_outcome).
    positional: _input, expected
    options:
      _input:
        description: the registered result of hostscripts/service_cycle.py (skipped in check mode)
        type: dict
        required: true
      expected:
        description: >-
          service, what, exec_start, venv, args, check, url, timeout, leftover_timeout, service_user
          (the keyword arguments of serve_outcome)
        type: dict
        required: true
  - name: cuda13_restart_plan_lines
    short_description: The plan as lines to print.
    options:
      _input: {description: a cuda13_restart_plan, type: dict, required: true}
"""

EXAMPLES = r"""
venv: "{{ slurped.content | cuda13_running_venv }}"
plan: "{{ cuda13_profiles | cuda13_restart_plan(slurped.content | cuda13_running_args(exec_start)) }}"
msg: "{{ plan | cuda13_restart_plan_lines }}"
outcome: "{{ cycle | cuda13_serve_outcome({'service': 'sglang.service', 'what': 'the new stack', ...}) }}"
"""

RETURN = r"""
  _value:
    description: a list of arguments or None / the plan dict / lines
"""


def cuda13_running_args(content, exec_start):
    if not isinstance(content, str) or not isinstance(exec_start, str):
        raise AnsibleFilterError(
            "cuda13_running_args expects base64 text and the ExecStart string, "
            f"got {content!r}, {exec_start!r}"
        )
    return restarts.running_args(_cmdline("cuda13_running_args", content), exec_start)


def _cmdline(name, content):
    if not isinstance(content, str):
        raise AnsibleFilterError(f"{name} expects slurp's base64 text, got {content!r}")
    try:
        return base64.b64decode(content) if content else b""
    except ValueError as exc:
        raise AnsibleFilterError(f"{name}: not base64: {content[:80]!r}") from exc


def cuda13_running_venv(content):
    return restarts.main_process_venv(_cmdline("cuda13_running_venv", content))


def cuda13_running_command(content):
    return shlex.join(restarts.main_process_argv(_cmdline("cuda13_running_command", content)))


def _check_profiles(name, profiles):
    if not isinstance(profiles, list):
        raise AnsibleFilterError(f"{name} expects the list of profiles, got {profiles!r}")


def cuda13_restart_plan(profiles, running=None, baseline_recorded=False, rollback_verify=True):
    _check_profiles("cuda13_restart_plan", profiles)
    return restarts.plan_upgrade(
        profiles,
        running=running,
        baseline_recorded=bool(baseline_recorded),
        rollback_verify=bool(rollback_verify),
    )


def cuda13_recorded_baseline(content, profiles, max_age_hours):
    _check_profiles("cuda13_recorded_baseline", profiles)
    recorded = None
    if content:
        try:
            recorded = json.loads(base64.b64decode(content))
        except ValueError as exc:
            raise AnsibleFilterError(f"cuda13_recorded_baseline: baseline.json is not JSON: {exc}") from exc
    try:
        hours = float(max_age_hours)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"cuda13_recorded_baseline: max_age_hours {max_age_hours!r}") from exc
    return restarts.recorded_baseline(recorded, profiles, max_age_hours=hours, now=time.time())


def cuda13_restart_plan_lines(plan):
    if not isinstance(plan, dict):
        raise AnsibleFilterError(f"cuda13_restart_plan_lines expects a plan, got {plan!r}")
    return restarts.format_plan(plan)


def cuda13_measure_plan(profiles, phase, given):
    _check_profiles("cuda13_measure_plan", profiles)
    if not isinstance(given, dict):
        raise AnsibleFilterError(f"cuda13_measure_plan expects a dict of the phase's inputs, got {given!r}")
    try:
        return restarts.measure_plan(profiles, phase, **given)
    except TypeError as exc:  # a ValueError: ansible_filters
        raise AnsibleFilterError(f"cuda13_measure_plan: {exc}") from exc


def cuda13_serve_outcome(result, expected):
    if not isinstance(result, dict) or not isinstance(expected, dict):
        raise AnsibleFilterError(
            "cuda13_serve_outcome expects the script's registered result and a dict of what was expected, "
            f"got {type(result).__name__}, {type(expected).__name__}"
        )
    cycle = {}
    if result.get("stdout") is not None:
        try:
            cycle = scriptout.result_document(result["stdout"])
        except scriptout.NoResultError as exc:
            raise AnsibleFilterError(
                f"cuda13_serve_outcome: service_cycle.py printed no result ({exc}); it said: "
                f"{scriptout.script_said(result)[:300]}"
            ) from exc
    try:
        return restarts.serve_outcome(cycle, **expected)
    except TypeError as exc:
        raise AnsibleFilterError(f"cuda13_serve_outcome: {exc}") from exc


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_running_args": cuda13_running_args,
                "cuda13_running_venv": cuda13_running_venv,
                "cuda13_running_command": cuda13_running_command,
                "cuda13_restart_plan": cuda13_restart_plan,
                "cuda13_recorded_baseline": cuda13_recorded_baseline,
                "cuda13_restart_plan_lines": cuda13_restart_plan_lines,
                "cuda13_serve_outcome": cuda13_serve_outcome,
                "cuda13_measure_plan": cuda13_measure_plan,
            }
        )
