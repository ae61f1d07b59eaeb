"""Filters of the rollout's plan (thin wrappers over cuda13_upgrade.plan)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import plan, space
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_host_plan
    short_description: What the rollout would do with one host (cuda13_upgrade.plan.host_plan).
    positional: _input, given
    options:
      _input: {description: the inventory name, type: str, required: true}
      given:
        description: >-
          verdict, state, target, refusals, preflight, toolkit, resolved, space_stack,
          space_record (stack-space.yml), profiles, rollback_verify, drain_tasks, undrain_tasks
        type: dict
        required: true
  - name: cuda13_rollout_plan
    short_description: The hosts' plans with their batches and the fleet's summary.
    positional: _input, fleet, run_id, allow_partial
    options:
      _input: {description: the cuda13_host_plan records, type: list, required: true}
      fleet: {description: the run's batch plan (cuda13_fleet_plan), type: dict, required: true}
      run_id: {description: the run's identifier, type: str, required: true}
      allow_partial: {description: cuda13_preflight_allow_partial, type: bool, default: false}
  - name: cuda13_plan_text
    short_description: The plan as the terminal shows it.
    options:
      _input: {description: a cuda13_rollout_plan, type: dict, required: true}
"""

EXAMPLES = r"""
plan: "{{ records | cuda13_rollout_plan(hostvars['localhost'].cuda13_fleet, run_id) }}"
msg: "{{ (plan | cuda13_plan_text).splitlines() }}"
"""

RETURN = r"""
  _value:
    description: the host's plan / the rollout's plan / text
"""


def cuda13_host_plan(host, given):
    if not isinstance(given, Mapping):
        raise AnsibleFilterError(f"cuda13_host_plan expects a dict of what the passes found, got {given!r}")
    inputs = dict(given)
    record, stack = inputs.pop("space_record", None), inputs.pop("space_stack", "")
    wheels_bytes, wheels_record = None, ""
    if stack and isinstance(record, Mapping):
        wheels_bytes = space.stack_figures(record, stack)["bytes"]["wheels"]
        measured = ((record.get("stacks") or {}).get(stack) or {}).get("measured") or {}
        wheels_record = f"stack-space.yml, stack {stack}: {str(measured.get('wheels') or '').strip()}"
    return plan.host_plan(str(host), wheels_bytes=wheels_bytes, wheels_record=wheels_record, **inputs)


def cuda13_rollout_plan(records, fleet, run_id, allow_partial=False):
    if not isinstance(records, list) or not isinstance(fleet, Mapping):
        raise AnsibleFilterError("cuda13_rollout_plan takes the hosts' plans and the run's batch plan")
    options = fleet.get("options") or {}
    lines = []
    if fleet.get("window_text"):
        lines.append(f"batches start only inside the window cuda13_window: {fleet['window_text']}")
    if fleet.get("until_at"):
        lines.append(f"no batch starts after cuda13_until: {fleet['until_at']}")
    if fleet.get("max_failed_hosts") is not None:
        lines.append(
            f"no batch starts once more than {fleet['max_failed_hosts']} host(s) of the fleet failed"
            " or rolled back (cuda13_max_failed_hosts)"
        )
    return plan.rollout_plan(
        records,
        serial=options.get("cuda13_serial"),
        max_parallel=options.get("cuda13_max_parallel"),
        run_id=str(run_id),
        allow_partial=bool(allow_partial),
        fleet_lines=lines,
    )


def cuda13_plan_text(the_plan):
    if not isinstance(the_plan, Mapping):
        raise AnsibleFilterError(f"cuda13_plan_text expects a plan, got {the_plan!r}")
    return plan.render_text(the_plan)


class FilterModule:
    """The rollout plan's filters."""

    def filters(self):
        return ansible_filters(
            {
                "cuda13_host_plan": cuda13_host_plan,
                "cuda13_rollout_plan": cuda13_rollout_plan,
                "cuda13_plan_text": cuda13_plan_text,
            }
        )
