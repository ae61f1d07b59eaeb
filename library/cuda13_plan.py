#!/usr/bin/python
"""Action cuda13_plan (action_plugins/cuda13_plan.py): what a rollout would do, changing nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_plan
short_description: Plan a rollout host by host - its path, apt, wheels, space and restarts - changing nothing
description:
  - C(host) - one host's plan from the records of the rollout's read-only passes (the options, its state, the
    preflight with refusals recorded) (cuda13_upgrade.plan.host_plan).
  - C(rollout) - the hosts' plans with their batches (cuda13_upgrade.plan.rollout_plan), written to
    C(<run dir>/plan.json) and printed.
options:
  action: {description: Which part., type: str, choices: [host, rollout], required: true}
  run_id: {description: The run (C(rollout))., type: str, default: ""}
  options_check: {description: The options task's result (C(host))., type: dict, default: {}}
  options: {description: The validated options (C(host))., type: dict, default: {}}
  state: {description: The host state's record (C(host))., type: dict, default: {}}
  preflight: {description: The preflight's record (C(host))., type: dict, default: {}}
  reports_dir: {description: The reports directory (C(rollout))., type: path}
  allow_partial: {description: C(cuda13_preflight_allow_partial) (C(rollout))., type: bool, default: false}
attributes:
  check_mode: {support: full, description: The same in check mode; it changes nothing anyway.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Put the hosts' plans together
  cuda13_plan:
    action: rollout
    run_id: "{{ cuda13_run_id }}"
    reports_dir: reports
"""

RETURN = r"""
plan: {description: The host's or the rollout's plan., type: dict, returned: always}
"""
