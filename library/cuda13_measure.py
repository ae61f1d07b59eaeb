#!/usr/bin/python
"""Action cuda13_measure (action_plugins/cuda13_measure.py): the decode throughput the host serves now, per profile."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_measure
short_description: Measure the decode throughput (tok/s) the host serves now, per server profile
description:
  - Every profile measured on what serves now (the unit's own command, unless O(exec_start)) in the order that
    restarts the service least, ending on its own command - the correctness probe, the decode trials, the load
    metrics when on (cuda13_upgrade.steps.measure.phase); the medians are printed.
  - The on-demand verify (C(playbooks/verify.yml)) and the role C(verify_throughput) run it.
options:
  options: {description: The validated options; without them the task's C(verify_throughput_*) and C(cuda13_*) variables., type: dict, default: {}}
  run_id: {description: This run's identifier (the trials' series)., type: str, required: true}
  phase: {description: The phase the figures are of., type: str, choices: [baseline, candidate, rollback], default: baseline}
  profiles: {description: The profiles (default C(cuda13_profiles))., type: list, elements: dict}
  exec_start: {description: The service's own command (default - read from the unit)., type: str, default: ""}
  venv: {description: The venv that serves (default - from the command)., type: str, default: ""}
attributes:
  check_mode: {support: full, description: Measures nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Measure each profile
  cuda13_measure:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
"""

RETURN = r"""
measured: {description: The phase's record (results per profile, restarts)., type: dict, returned: always}
"""
