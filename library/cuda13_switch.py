#!/usr/bin/python
"""Action cuda13_switch (action_plugins/cuda13_switch.py): the service moved to the new stack."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_switch
short_description: Switch the SGLang service to the new stack with one atomic drop-in and start it into the first profile
description:
  - Marks the kernel log first (the driver's Xid lines the new stack causes are those after the mark).
  - Creates the new stack's cache directories owned by the unit's user, writes the switch drop-in (the new venv's
    command, C(CUDA_HOME), the caches) to a temporary file renamed over the old one - one atomic change of one
    file - and points C(/usr/local/cuda) at the new toolkit (the C(cuda) alternatives group, manual mode).
  - Starts the service on the new stack straight into the first profile the verify measures (a restart when a
    drop-in changed or the main process does not run it yet), waiting until it generates.
  - Begins the step C(switch) of the host's run record, which from here says the service points at the new venv.
  - An action plugin; the host's side is Ansible's C(file) and C(community.general.alternatives) and the modules
    C(cuda13_record), C(cuda13_kernel_log) and C(cuda13_service).
options:
  options: {description: The validated options (C(cuda13_options)); without them the task's C(stack_switch_*) and C(cuda13_*) variables., type: dict, default: {}}
  snapshot: {description: The snapshot step's record (the service's own command, its user)., type: dict, required: true}
  baseline: {description: The baseline step's record (the restart plan's C(switch_args))., type: dict, default: {}}
attributes:
  check_mode: {support: full, description: Reports the files and the link that would change and the restart that would follow.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Switch the service to the new stack
  cuda13_switch:
    options: "{{ cuda13_options }}"
    snapshot: "{{ snapshot }}"
    baseline: "{{ baseline }}"
"""

RETURN = r"""
exec_start: {description: The new stack's command., type: str, returned: always}
dropin_changed: {description: The switch drop-in changed., type: bool, returned: always}
kernel_log_mark: {description: The kernel log's mark before the switch, or null., type: dict, returned: always}
served: {description: What the start came to (cuda13_upgrade.restarts.serve_outcome)., type: dict, returned: always}
"""
