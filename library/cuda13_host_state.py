#!/usr/bin/python
"""Action cuda13_host_state (action_plugins/cuda13_host_state.py): what earlier runs left on the host, and what this run does with it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_host_state
short_description: Read what earlier runs left on a host and decide what this run does with it
description:
  - One read of the host per pass - before the preflight, and under the lock. The module reads
    the state directory (the last C(result.json), C(step.json), the lock's owner, C(staged.json))
    and, where the last result is C(kept), digests the stack the host serves (C(pip freeze) of the
    new venv, the unit's drop-ins, the CUDA alternatives, the toolkit packages, the driver and the
    GPUs from nvidia-smi). With O(freeze) it also reads the new venv's C(pip freeze --all).
  - The action, on the control node, decides (cuda13_upgrade.rerun.host_verdict) - a host kept for
    this very target, its stack unchanged, no lock held and no run stopped part way, is C(already
    kept) and leaves the run; a stopped run is resolved by this one, which measures; and, under the
    lock, whether the host is staged for this target (C(staged.json)'s target and resolved set equal
    this run's and the new venv unchanged since), which skips the toolkit, wheels and build steps.
  - The action starts the host's run record, the fact C(cuda13_host_run) (cuda13_upgrade.steps.host),
    that the later steps keep, and sets C(cuda13_notice) to what the operator must read.
  - Read-only.
options:
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  run_id: {description: This run's identifier., type: str, required: true}
  locked: {description: Whether this run holds the host's lock (the full pass) or not (the early pass)., type: bool, default: false}
  resolved:
    description: The preflight's resolved set (C([{name, version}])), compared with the staged one under the lock.
    type: list
    elements: dict
    default: []
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read what earlier runs left on the host and decide
  cuda13_host_state:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
    locked: true
    resolved: "{{ nvidia_driver_check_preflight.resolved | default([]) }}"
  register: host
"""

RETURN = r"""
already_kept: {description: The host is kept for this target, its stack unchanged; the run leaves it., type: bool, returned: action}
measure: {description: The gate measures the host in this run., type: bool, returned: action}
staged: {description: The host is staged for this target (under the lock)., type: bool, returned: action}
staged_state: {description: The host's C(staged.json), or an empty dict., type: dict, returned: action}
reason: {description: Why the host is or is not already kept., type: str, returned: action}
notice: {description: What the operator must read about the host, or an empty string., type: str, returned: action}
previous: {description: The host's last C(result.json), or an empty dict., type: dict, returned: action}
stopped: {description: The earlier run that stopped part way on the host, or null., type: dict, returned: action}
state: {description: The module's read of the state directory., type: dict, returned: always}
digest: {description: The module's digest of the kept stack, or null., type: str, returned: always}
"""
