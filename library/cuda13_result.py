#!/usr/bin/python
"""Action cuda13_result (action_plugins/cuda13_result.py): the host's record, on the host and on the control node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_result
short_description: Record how a host's run ended - result.json on the host and in the run's report, and its metrics
description:
  - One record shape for every way a host's run ends (cuda13_upgrade.hostresult.host_result) - kept, already kept,
    rolled back, failed, staged, interrupted - built from the host's run record and the steps' records.
  - Writes C(result.json) on the host (0600) and in the run's report on the control node, the host's metrics for
    node_exporter's textfile collector (C(cuda13_metrics_textfile_dir)), and for a staged host C(staged.json).
  - With O(mode) C(interrupted) (after the command's Ctrl-C) - on a host whose lock that run still holds, records
    where it was and releases the lock; a host whose undrain hook ran has its drain cleared in C(step.json).
  - Sets the fact C(cuda13_result) (the record), which the failure budget and the run's last play read.
options:
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  run_id: {description: This run's identifier., type: str, required: true}
  mode: {description: How the run ends., type: str, choices: [upgrade, stage, interrupted], default: upgrade}
  records: {description: "The steps' records by step (host_state, preflight, snapshot, toolkit, wheels, sglang, baseline, switch, verify, batch_soak, rollback).", type: dict, default: {}}
  step: {description: With C(interrupted), the step the run was in., type: str, default: unknown}
  by: {description: "With C(interrupted), what stopped the run: Ctrl-C, SIGTERM or SIGHUP (the record's error names it).", type: str, default: Ctrl-C}
  undrain:
    description: >-
      With C(interrupted), what cuda13_step (interrupted_run) decided, its undrain hook run before (C(failed) - the
      hook's error). After a hook that ran, C(step.json)'s C(drained_at) is cleared; a host left drained has the line
      that says so in its record's error.
    type: dict
    default: {}
attributes:
  check_mode: {support: full, description: Writes the control node's copy only.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Record the host's result
  cuda13_result:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
    records: {host_state: "{{ host }}", verify: "{{ verify | default({}) }}"}
"""

RETURN = r"""
result: {description: The record (C(result.json))., type: dict, returned: always}
"""
