#!/usr/bin/python
"""Action cuda13_sglang (action_plugins/cuda13_sglang.py): SGLang into the new venv, built from its ref or its release wheel."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_sglang
short_description: Build SGLang from a pinned ref, or install its release wheel, into the cu130 venv
description:
  - Writes the step's record C(sglang_build_record) on the host first (merged with earlier runs'), for the
    rollback that removes the new stack.
  - C(sglang_build_method=source) - refuses a tree that is the serving one (C(cuda13_old_sglang_src)); checks the
    ref out into C(sglang_build_src) (C(ansible.builtin.git), C(force=false)); SGLang needs a build when the
    checkout changed, the venv has no sglang, or its sglang is not the tree's (C(pip show --files)). The build
    checks that C(sglang_build_cuda_home)'s nvcc runs and is torch's CUDA release, installs the build
    requirements, freezes the venv, constrains every installed distribution (pip, setuptools and wheel aside)
    and installs the tree editable with C(CUDA_HOME), C(PATH), C(TMPDIR), C(TORCH_CUDA_ARCH_LIST) and
    C(sglang_build_environment) over them.
  - C(sglang_build_method=wheel) - the plan from C(pip show) (an editable tree of an earlier source build, or
    another version, is removed first); the venv constrained as for the build; the preflight's resolution of
    the wheel (exact file, its hash, C(--no-deps)) when O(resolved) holds it, else C(sglang==<version>) from
    the indexes. Nothing is cloned or compiled.
  - Both end, outside check mode, in the same checks - when this run installed, no wheel of the stack was
    replaced; sglang imports from where the method puts it (the tree, or the venv itself at the release's
    version).
  - An action plugin; the logic is C(cuda13_upgrade.steps.sglang.build).
options:
  options:
    description:
      - The validated options record (C(cuda13_options)); read - C(sglang_build_*), C(cuda13_old_sglang_src),
        C(cuda13_toolkit_release).
      - Empty (a role's entry point on its own) - the task's C(sglang_build_*) and C(cuda13_*) variables.
    type: dict
    default: {}
  resolved:
    description: The preflight's resolved set; the wheel method installs its sglang wheel exactly when it holds the release's.
    type: list
    elements: dict
    default: []
  compute_capabilities:
    description: The GPUs' compute capabilities (TORCH_CUDA_ARCH_LIST); C(sglang_build_compute_capabilities) wins when non-empty; empty leaves it unset.
    type: list
    elements: str
    default: []
attributes:
  check_mode: {support: full, description: Says what it would build or install; nothing is written or checked.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Build SGLang into the new venv
  cuda13_sglang:
    options: "{{ cuda13_options }}"
    resolved: "{{ nvidia_driver_check_preflight.resolved }}"
    compute_capabilities: "{{ nvidia_driver_check_preflight.compute_capabilities }}"
  register: __cuda13_sglang
"""

RETURN = r"""
method: {description: C(source) or C(wheel)., type: str, returned: always}
version: {description: C(sglang_build_version)., type: str, returned: always}
src: {description: The tree of a source build; null for the wheel., type: str, returned: always}
venv: {description: The venv., type: str, returned: always}
requirement: {description: The PEP 508 requirement of the release., type: str, returned: always}
built: {description: Whether this run built or installed sglang., type: bool, returned: always}
needed: {description: Whether it had to., type: bool, returned: always}
plan: {description: "The wheel method's plan C({needed, remove_first, reason}), else null.", type: dict, returned: always}
wheel_from: {description: "Where the wheel came from - C(resolved) (the preflight's resolution) or C(indexes); null when none was installed.", type: str, returned: always}
record: {description: What was written to C(sglang_build_record) (null in check mode)., type: dict, returned: always}
imported: {description: "C({version, file, dist}) of the venv's sglang (null in check mode).", type: dict, returned: always}
freeze_difference: {description: "C({removed, added}) of pip freeze around the install; null when nothing was installed.", type: dict, returned: always}
changed: {description: Whether the host changed., type: bool, returned: always}
"""
