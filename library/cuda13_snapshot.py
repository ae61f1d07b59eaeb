#!/usr/bin/python
"""Action cuda13_snapshot (action_plugins/cuda13_snapshot.py): the pre-upgrade snapshot of the running stack."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_snapshot
short_description: Record the running CUDA, Python and SGLang stack of a host as a JSON manifest, once
description:
  - A manifest of the stack the host serves - the venv and its C(pip freeze), the C(/usr/local/cuda)
    target and every CUDA alternatives group, C(nvcc --version), the C(cuda-*) packages, the SGLang
    tree's commit, the unit with its drop-ins, who it runs as and its caches
    (cuda13_upgrade.stack.build_manifest) - kept on the host as
    C(<stack_snapshot_dir>/pre-upgrade.json) and copied to the run's report on the control node
    (C(<run dir>/<host>/snapshot.json)).
  - Written once - a re-run after the switch keeps the record of the old stack, which is what a
    rollback restores.
  - Begins the step C(snapshot) of the host's run record (C(cuda13_host_run)) when there is one.
  - An action plugin; the host's side is the module C(cuda13_snapshot_read).
options:
  options:
    description: The validated options (C(cuda13_options)); without them the task's C(stack_snapshot_*) and C(cuda13_*) variables.
    type: dict
    default: {}
  run_id: {description: This run's identifier., type: str, required: true}
attributes:
  check_mode: {support: full, description: Reads the stack; writes nothing on the host or the control node.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Snapshot the running stack
  cuda13_snapshot:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
  register: snapshot
"""

RETURN = r"""
manifest: {description: The pre-upgrade manifest (cuda13_upgrade.stack.SNAPSHOT_SCHEMA)., type: dict, returned: always}
taken: {description: This run took the snapshot (false - an earlier run's was read back)., type: bool, returned: always}
"""
