"""Filters that write and render the reports of a run (cuda13_upgrade.report)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import report
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_fleet_summary
    short_description: Summarise a run's per-host results; writes summary.json.
    positional: _input, hosts, not_started
    options:
      _input: {description: the run's report directory on the control node, type: path, required: true}
      hosts: {description: the hosts of the run (missing results are "not reached"), type: list}
      not_started: {description: the upgrade play's cuda13_not_started (who and why), type: dict}
  - name: cuda13_host_result
    short_description: The host's result.json record (cuda13_upgrade.report.host_result).
    options:
      _input: {description: what the play knows of the host (see host_result), type: dict, required: true}
  - name: cuda13_failure_message
    short_description: What a host that did not keep the upgrade ends with (report.failure_message).
    options:
      _input: {description: the host's result record (cuda13_result), type: dict, required: true}
"""

EXAMPLES = r"""
summary: "{{ (cuda13_reports_dir ~ '/' ~ cuda13_run_id) | cuda13_fleet_summary(ansible_play_hosts_all) }}"
result: "{{ {'host': inventory_hostname, 'status': 'kept', ...} | cuda13_host_result }}"
"""

RETURN = r"""
  _value:
    description: "{run_id, rows: [one per host], markdown: the table as text}"
"""


def cuda13_fleet_summary(run_dir, hosts=None, not_started=None):
    if not isinstance(run_dir, str):
        raise AnsibleFilterError(f"cuda13_fleet_summary expects a directory path, got {run_dir!r}")
    if hosts is not None and not isinstance(hosts, list):
        raise AnsibleFilterError(f"cuda13_fleet_summary expects a list of hosts, got {hosts!r}")
    try:
        return report.fleet_summary(run_dir, hosts, dict(not_started) if not_started else None)
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"cannot summarise {run_dir}: {exc}") from exc


def cuda13_host_result(facts):
    if not isinstance(facts, dict):
        raise AnsibleFilterError(f"cuda13_host_result expects a dict of the host's facts, got {facts!r}")
    try:
        return report.host_result(facts)
    except (TypeError, KeyError) as exc:  # a ValueError: ansible_filters
        raise AnsibleFilterError(f"cuda13_host_result: {exc}") from exc


def cuda13_failure_message(result):
    if not isinstance(result, dict):
        raise AnsibleFilterError(f"cuda13_failure_message expects the host's result record, got {result!r}")
    return report.failure_message(result)


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_fleet_summary": cuda13_fleet_summary,
                "cuda13_host_result": cuda13_host_result,
                "cuda13_failure_message": cuda13_failure_message,
            }
        )
