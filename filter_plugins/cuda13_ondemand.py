"""Filters of the on-demand commands, verify and rollback (cuda13_upgrade.ondemand)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import ondemand
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_drain_plan
    short_description: Whether verify or rollback drains the host, or why it refuses (ondemand.drain_plan).
    positional: _input, host, service, drain_tasks, undrain_tasks, allow_undrained
    options:
      _input: {description: the command, verify or rollback, type: str, required: true}
      host: {description: the host's inventory name, type: str, required: true}
      service: {description: the systemd unit (cuda13_service_name), type: str, required: true}
      drain_tasks: {description: cuda13_drain_tasks, type: str}
      undrain_tasks: {description: cuda13_undrain_tasks, type: str}
      allow_undrained: {description: cuda13_allow_undrained, type: bool}
  - name: cuda13_nothing_to_roll_back
    short_description: The control node's result of a rollback of a host without a snapshot.
    positional: _input, run_id, snapshot_file, finished_at
    options:
      _input: {description: the host's inventory name, type: str, required: true}
      run_id: {description: the run's identifier, type: str, required: true}
      snapshot_file: {description: the snapshot path looked for, type: str, required: true}
      finished_at: {description: ISO 8601 time, type: str, required: true}
  - name: cuda13_rolled_back
    short_description: The result of an on-demand rollback (ondemand.rolled_back).
    positional: _input, run_id, seconds, alternatives_manual, finished_at
    options:
      _input: {description: the host's inventory name, type: str, required: true}
      run_id: {description: the run's identifier, type: str, required: true}
      seconds: {description: rollback_seconds, type: float}
      alternatives_manual: {description: rollback_alternatives_manual, type: list}
      finished_at: {description: ISO 8601 time, type: str, required: true}
  - name: cuda13_alternatives_restore
    short_description: How the rollback restores one alternatives group (ondemand.alternatives_restore).
    positional: _input, recorded, query
    options:
      _input: {description: the group's name, type: str, required: true}
      recorded: {description: the snapshot's entry for the group, type: dict, required: true}
      query: {description: the group's --query now, parsed; none when it failed, type: dict}
  - name: cuda13_alternatives_note
    short_description: One sentence per alternatives group the rollback left in manual mode.
    options:
      _input: {description: alternatives_restore's left_manual entries, type: list, required: true}
"""

EXAMPLES = r"""
plan: "{{ 'verify' | cuda13_drain_plan(inventory_hostname, cuda13_service_name, cuda13_drain_tasks,
          cuda13_undrain_tasks, cuda13_allow_undrained) }}"
restore: "{{ 'cuda' | cuda13_alternatives_restore(recorded, query_stdout | cuda13_parse_alternatives) }}"
"""

RETURN = r"""
  _value:
    description: "drain_plan: {drain, undrain, refusal}; alternatives_restore: {action, left_manual}"
"""


def cuda13_drain_plan(command, host, service, drain_tasks="", undrain_tasks="", allow_undrained=False):
    if not isinstance(allow_undrained, bool):
        raise AnsibleFilterError(
            f"cuda13_drain_plan: cuda13_allow_undrained must be a boolean, got {allow_undrained!r}"
        )
    return ondemand.drain_plan(
        str(command),
        str(host),
        str(service),
        drain_tasks,
        undrain_tasks,
        allow_undrained,
    )


def cuda13_nothing_to_roll_back(host, run_id, snapshot_file, finished_at):
    return ondemand.nothing_to_roll_back(
        str(host),
        str(run_id),
        str(snapshot_file),
        str(finished_at),
    )


def cuda13_rolled_back(host, run_id, seconds, alternatives_manual, finished_at):
    return ondemand.rolled_back(
        str(host),
        str(run_id),
        seconds,
        list(alternatives_manual or []),
        str(finished_at),
    )


def cuda13_alternatives_restore(group, recorded, query=None):
    if not isinstance(recorded, dict):
        raise AnsibleFilterError(
            f"cuda13_alternatives_restore expects the snapshot's entry as a dict, got {recorded!r}"
        )
    return ondemand.alternatives_restore(str(group), recorded, query or None)


def cuda13_alternatives_note(left_manual):
    if not isinstance(left_manual, list):
        raise AnsibleFilterError(f"cuda13_alternatives_note expects a list, got {left_manual!r}")
    return ondemand.alternatives_note(left_manual)


class FilterModule:
    """The on-demand commands' filters."""

    def filters(self):
        return ansible_filters(
            {
                "cuda13_drain_plan": cuda13_drain_plan,
                "cuda13_nothing_to_roll_back": cuda13_nothing_to_roll_back,
                "cuda13_rolled_back": cuda13_rolled_back,
                "cuda13_alternatives_restore": cuda13_alternatives_restore,
                "cuda13_alternatives_note": cuda13_alternatives_note,
            }
        )
