#!/usr/bin/python
"""Action cuda13_wheels (action_plugins/cuda13_wheels.py): the cu130 wheels in a new venv beside the serving one, and the check of its stack."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_wheels
short_description: Install the cu130 Python stack into a new venv beside the serving one, or check that stack
description:
  - C(present) (the upgrade, the stage and the role C(cu130_wheels)) - refuses pins that are not a list and a new venv that is the
    serving one (C(cuda13_old_venv), compared by the host's realpath); creates the venv's directory (0755, the
    service's user executes its python) and pip's temporary directory (0700); then installs with
    C(ansible.builtin.pip) into the venv made with C(<cu130_wheels_python> -m venv), C(TMPDIR) at
    C(cu130_wheels_pip_tmpdir) and the operator's C(cu130_wheels_pip_environment) (pip's output hidden when it
    is set), one of - the hash-pinned lock file C(cu130_wheels_lock_file) from the control node, copied to
    C(<venv>.requirements.lock), C(--require-hashes); the preflight's resolved set O(resolved), written to
    C(<venv>.resolved.txt) and installed exactly (C(--no-deps), C(--require-hashes) when every line has the
    index's sha256; SGLang is left to C(cuda13_sglang)); else C(cu130_wheels_requirements). pip reads the
    artifact cache on the host alone (C(--no-index --find-links)) when there is one (O(find_links), else
    C(cu130_wheels_find_links)), else the indexes. Then, outside check mode, the check below.
  - C(checked) (a staged host's stack at the window, the role's C(tasks/check.yml)) - the stack probe with the venv's own Python (module
    C(cuda13_stack_probe)) and the verdict C(cuda13_upgrade.stack.stack_verdict) (torch's CUDA release, the
    wheels' labels or the CUDA libraries their shared objects load, the kernel's torch pin, pip check, each
    import, torch's arch list against the compute capabilities, files two distributions write with different
    contents, a libcuda other than the driver's on the service's loader path); an inconsistent stack fails with
    "The new stack in <venv> is inconsistent - <problems>" and the diagnosis's cause and fix where known.
    The verdict's summary is shown.
  - An action plugin; the logic is C(cuda13_upgrade.steps.wheels) (C(install), C(check)).
options:
  state:
    description: C(present) installs and checks; C(checked) only checks.
    type: str
    choices: [present, checked]
    default: present
  options:
    description:
      - The validated options record (C(cuda13_options)); read - C(cu130_wheels_*) and C(cuda13_old_venv).
      - Empty (a role's entry point on its own) - the task's C(cu130_wheels_*) and C(cuda13_*) variables.
    type: dict
    default: {}
  resolved:
    description: The preflight's resolved set (C(cuda13_upgrade.steps.resolve.resolve)'s C(resolved)); empty to install the pins.
    type: list
    elements: dict
    default: []
  find_links:
    description: The artifact cache's directory on the host (C(cuda13_artifacts)'s C(find_links)); empty for C(cu130_wheels_find_links).
    type: str
    default: ""
  compute_capabilities:
    description: The GPUs' compute capabilities (the preflight's) that torch's arch list must cover; C(cu130_wheels_compute_capabilities) wins when it is non-empty.
    type: list
    elements: str
    default: []
  driver_version:
    description: The driver version nvidia-smi reports, named when torch cannot reach the GPUs.
    type: str
    default: ""
  gpus:
    description: The GPUs nvidia-smi reports (the preflight's C(gpus) rows); their C(name) is checked when the new stack would load a libcuda other than the driver's (forward compatibility serves data-center GPUs only).
    type: list
    elements: dict
    default: []
  staged:
    description: The host's new stack was staged ahead of the window - C(present) only checks it (and does nothing in check mode).
    type: bool
    default: false
attributes:
  check_mode: {support: full, description: "pip reports what it would install; the stack is not probed after an install that did not happen (C(checked) probes in check mode too)."}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Install the cu130 wheels into the new venv
  cuda13_wheels:
    options: "{{ cuda13_options }}"
    resolved: "{{ nvidia_driver_check_preflight.resolved }}"
    find_links: "{{ __cuda13_artifacts.find_links | default('') }}"
    compute_capabilities: "{{ nvidia_driver_check_preflight.compute_capabilities }}"
    driver_version: "{{ nvidia_driver_check_preflight.driver_version }}"
    gpus: "{{ nvidia_driver_check_preflight.gpus }}"
  register: __cuda13_wheels

- name: Check a venv's stack
  cuda13_wheels:
    state: checked
"""

RETURN = r"""
stack: {description: The probe's record of the venv (C(cuda13_stack_probe)); null when no check ran., type: dict, returned: always}
verdict:
  description: The stack verdict (summary, consistent, problems, conditions, notes, torch, cuda, kernel, ...); null when no check ran.
  type: dict
  returned: always
resolved_target: {description: The resolved set installed (empty for the pins or the lock file; null for C(checked))., type: list, returned: always}
installed: {description: What was installed - C(lock_file), C(resolved) or C(requirements)., type: str, returned: with present}
changed: {description: Whether the venv (or its files) changed., type: bool, returned: always}
ansible_facts:
  description: C(cu130_wheels_stack) and C(cu130_wheels_verdict), as the role's check set them.
  type: dict
  returned: when a check ran
"""
