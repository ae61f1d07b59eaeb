#!/usr/bin/python
"""Action cuda13_step (action_plugins/cuda13_step.py): one side of the drain bracket."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_step
short_description: Begin the drain or the undrain step of a host, and name the hook to run
description:
  - The drain hooks are the operator's task files (C(cuda13_drain_tasks), C(cuda13_undrain_tasks));
    only a play can include them. This step records the boundary (the host's C(step.json) and the
    run record C(cuda13_host_run), which the report's time out of service reads) and returns the hook
    file to include next, or an empty string.
  - C(drain) - the drain hook when one is set (none in check mode). The commands C(verify) and
    C(rollback), which restart a serving host on demand, refuse a host without a drain hook before
    any change, unless C(cuda13_allow_undrained) (cuda13_upgrade.ondemand.drain_plan).
  - C(undrain) - the undrain hook when a drain hook ran; otherwise nothing is recorded.
  - C(undrain) with O(interrupted_run) (C(playbooks/interrupted.yml)) - whether the interrupted run's
    drained host goes back into service; it records nothing. The hook is named when the host's lock is
    still that run's, its C(step.json) says drained (C(drained_at)), the run stopped before the switch
    or while undraining, and the server generates now (one C(/health_generate) attempt, no restart);
    otherwise C(left_drained) says why the host stays drained and how to put it back
    (cuda13_upgrade.steps.drain.after_interrupt).
  - After a failure (O(after_failure)), C(undrain) names the hook only when the server generates; a
    server that does not leaves the host drained, and the run says so.
  - An action plugin; its only write on the host is the step boundary.
options:
  step: {description: The side of the bracket., type: str, choices: [drain, undrain], required: true}
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  command:
    description: The command the host is drained for (C(verify) and C(rollback) refuse without a hook).
    type: str
    choices: [upgrade, verify, rollback]
    default: upgrade
  after_failure:
    description: The drain of a rescue - the run record keeps the step that failed (C(failed_step)) for the rollback to report.
    type: bool
    default: false
  interrupted_run:
    description: The interrupted run whose drained host is decided (with C(step=undrain) only).
    type: str
    default: ""
attributes:
  check_mode: {support: full, description: Records nothing and names no hook in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Begin the drain step
  cuda13_step:
    step: drain
    options: "{{ cuda13_options }}"
  register: drain

- name: Run the drain hook
  ansible.builtin.include_tasks: "{{ drain.hook }}"
  when: drain.hook | length > 0
"""

RETURN = r"""
step: {description: The side begun., type: str, returned: always}
hook: {description: The task file to include, or an empty string., type: str, returned: always}
run: {description: The host's run record, updated (also the fact C(cuda13_host_run))., type: dict, returned: without interrupted_run}
drained_at: {description: When the interrupted run's drain began (C(step.json)) or null., type: str, returned: with interrupted_run}
left_drained: {description: The line that says why the host stays drained and how to undrain it, or an empty string., type: str, returned: with interrupted_run}
"""
