#!/usr/bin/python
"""Action cuda13_preflight (action_plugins/cuda13_preflight.py): read-only checks of a host before any change."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_preflight
short_description: Check a host against the CUDA 13 target before any change, and resolve the target
description:
  - Read-only; nothing on the host changes. In order, each refusing the host with what is wrong, the
    option and what to do - the options against the host (the unit runs the serving venv's Python,
    NVIDIA's repository offers the toolkit's package at the pinned version, the indexes answer);
    nvidia-smi answers in time; the driver supports the target toolkit release, every GPU's compute
    capability is allowed, the GPU count, the processes on the GPUs, the disk where each step writes,
    Python (cuda13_upgrade.preflight.evaluate); what the toolkit step will do with apt, simulated in a
    scratch apt state; the whole target resolved by pip's resolver in a throwaway venv, once per
    distinct target of the run; the driver against the floor of every CUDA component of the resolved
    target (NVIDIA's CUDA Toolkit Release Notes, Table 3).
  - The record is the role C(nvidia_driver_check)'s output C(nvidia_driver_check_preflight), which the
    upgrade's steps read (the resolved set, the apt plan, the GPUs).
  - An action plugin; the host's side is the module C(cuda13_host_facts) and the modules of the toolkit
    and resolution steps.
options:
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  run_id: {description: This run's identifier (the resolution's lock is in its report directory)., type: str, required: true}
  refuse:
    description: Fail the host on the first refusal; false records it in C(refusals) and stops the host's checks (C(cuda13-upgrade plan)).
    type: bool
    default: true
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Check the host and resolve its target
  cuda13_preflight:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
  register: nvidia_driver_check_preflight
"""

RETURN = r"""
ok: {description: Every check passed., type: bool, returned: always}
refusals: {description: "With O(refuse) false, the refusal's message.", type: list, elements: str, returned: always}
report: {description: The checks' record (passed and failures; cuda13_upgrade.preflight.evaluate)., type: dict, returned: always}
gpus: {description: The GPUs nvidia-smi reported., type: list, elements: dict, returned: always}
compute_capabilities: {description: "The GPUs' compute capabilities, each once.", type: list, elements: str, returned: always}
driver_version: {description: The driver version nvidia-smi reported., type: str, returned: always}
toolkit: {description: What the toolkit step will do with apt (its plan)., type: dict, returned: always}
resolved: {description: "The resolved target, C([{name, version, sha256, ...}]), or null.", type: list, returned: success}
resolved_count: {description: "A refused host's result (kept small, it is printed whole) - the size of the resolved target in place of O(resolved), or null.", type: int, returned: failure}
resolved_by: {description: The host whose resolution this target's hosts share., type: str, returned: always}
stack_driver: {description: The driver against the resolved target's CUDA components., type: dict, returned: always}
"""
