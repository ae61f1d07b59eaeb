#!/usr/bin/python
"""Action cuda13_report (action_plugins/cuda13_report.py): the run's summary on the control node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_report
short_description: Write the run's summary - summary.md, summary.json, summary.png and the run's metrics
description:
  - One row per host of the run (cuda13_upgrade.summary.fleet_summary); a host without a result is
    C(not reached), or C(not started) with the reason O(not_started) gives (the failure budget, the window,
    the breaker).
  - With O(notify), the run's end is told to C(cuda13_notify)'s webhooks (the last batch's end, each of its hosts
    that did not keep the upgrade, then the counts and the summary's path), once per run whose start was told
    (action cuda13_fleet); a send waits at most the option's C(timeout_s) and never fails the task.
  - With O(close_estimate), the run's end closes its C(estimate.json) (a rollout's estimate of the night,
    cuda13_upgrade.estimate.close) - each batch's estimate against what it took - and the summary says it
    (C(## How long the run took)); not in check mode.
  - Runs on the control node only.
options:
  reports_dir: {description: The reports directory (C(cuda13_reports_dir))., type: path, required: true}
  run_id: {description: The run., type: str, required: true}
  hosts: {description: The hosts of the run, in report order (default - every result file)., type: list, elements: str}
  not_started: {description: The hosts not started and why., type: dict, default: {}}
  show: {description: Print the summary., type: bool, default: false}
  notify: {description: Tell the run's end to C(cuda13_notify)'s webhooks (the report play)., type: bool, default: false}
  close_estimate: {description: Close the run's estimate at its end (the report play)., type: bool, default: false}
attributes:
  check_mode: {support: full, description: Writes the summary in check mode too (the run's report says what it checked).}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Write and show the run's summary
  cuda13_report:
    reports_dir: reports
    run_id: "{{ cuda13_run_id }}"
    show: true
"""

RETURN = r"""
markdown: {description: The summary's text., type: str, returned: always}
files: {description: The files written., type: dict, returned: always}
"""
