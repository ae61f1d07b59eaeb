"""Filters over a host's step records: durations, time out of service
(thin wrappers over cuda13_upgrade.timeline)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from cuda13_upgrade import timeline
except ImportError:  # the package is not installed: use the checkout's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cuda13_upgrade import timeline

DOCUMENTATION = r"""
  - name: cuda13_step_durations
    short_description: Each step's start and duration (s) from the play's step records.
    positional: _input, finished_at
    options:
      _input: {description: "[{step, started_at}] in the order recorded", type: list, required: true}
      finished_at: {description: when the last step ended (ISO 8601 with offset), type: str, required: true}
  - name: cuda13_out_of_service
    short_description: Seconds from the start of drain to the end of undrain (None before drain).
    options:
      _input: {description: the steps cuda13_step_durations returns, type: list, required: true}
"""

EXAMPLES = r"""
steps: "{{ __cuda13_steps | cuda13_step_durations(now(utc=true).isoformat()) }}"
out_of_service_s: "{{ steps | cuda13_out_of_service }}"
"""

RETURN = r"""
  _value:
    description: "[{step, started_at, duration_s}] / seconds or None"
"""


def cuda13_step_durations(records, finished_at):
    if not isinstance(records, list):
        raise AnsibleFilterError(f"cuda13_step_durations expects a list of step records, got {records!r}")
    try:
        return timeline.step_durations(records, finished_at)
    except ValueError as exc:
        raise AnsibleFilterError(f"cuda13_step_durations: {exc}") from exc


def cuda13_out_of_service(steps):
    if not isinstance(steps, list):
        raise AnsibleFilterError(f"cuda13_out_of_service expects a list of steps, got {steps!r}")
    return timeline.out_of_service_s(steps)


class FilterModule:
    def filters(self):
        return {
            "cuda13_step_durations": cuda13_step_durations,
            "cuda13_out_of_service": cuda13_out_of_service,
        }
