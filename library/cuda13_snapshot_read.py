#!/usr/bin/python
"""Module cuda13_snapshot_read: the running stack as the host shows it, and the snapshot written once."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_snapshot_read
short_description: Read the running stack for the pre-upgrade snapshot, and write the snapshot once
description:
  - C(collect) reads in one run what the snapshot records - the serving venv's C(pip freeze --all),
    the CUDA alternatives groups and their C(--query), where C(/usr/local/cuda) resolves and its
    C(nvcc --version), the installed C(cuda-*) packages, the SGLang tree's commit, state and
    description, the unit with its drop-ins and state, and who it runs as (its C(User=), the
    user's passwd entry, the server's environment). When the snapshot file exists it returns that
    instead (the pre-upgrade record is written once).
  - C(store) writes the manifest the control node built (0600) unless the file exists, after
    recording which of O(cache_dirs) exist.
  - The host's side of the action C(cuda13_snapshot); the logic is
    C(src/cuda13_upgrade/hostscripts/snapshot.py).
options:
  action: {description: What to do., type: str, choices: [collect, store], required: true}
  snapshot_file: {description: The snapshot's path on the host., type: path, required: true}
  venv: {description: The serving venv (C(collect))., type: path}
  sglang_src: {description: The serving SGLang tree (C(collect))., type: path}
  service: {description: The serving unit (C(collect))., type: str}
  alternatives: {description: The alternatives groups recorded even when absent (C(collect))., type: list, elements: str, default: []}
  manifest: {description: The manifest to write (C(store))., type: dict}
  cache_dirs: {description: The cache directories to record when they exist (C(store))., type: list, elements: path, default: []}
attributes:
  check_mode: {support: full, description: C(collect) reads the same; C(store) writes nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read the running stack
  cuda13_snapshot_read:
    action: collect
    snapshot_file: /var/lib/cuda13-upgrade/snapshots/pre-upgrade.json
    venv: /opt/ml-env
    sglang_src: /opt/sglang
    service: sglang.service
    alternatives: [cuda, cuda-12, cuda-13]
"""

RETURN = r"""
existing: {description: The snapshot already on the host, or null (C(collect))., type: dict, returned: always}
raw: {description: The texts read (C(collect) without an existing snapshot)., type: dict, returned: always}
manifest: {description: The manifest on the host now (C(store))., type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.snapshot import SNAPSHOT_SPEC, snapshot_module


def main() -> None:
    module = AnsibleModule(argument_spec=SNAPSHOT_SPEC, supports_check_mode=True)
    result = snapshot_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
