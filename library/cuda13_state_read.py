#!/usr/bin/python
"""Module cuda13_state_read: The host's side of the action cuda13_host_state - read the state directory and digest the kept stack"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_state_read
short_description: The host's side of the action cuda13_host_state - read the state directory and digest the kept stack
description:
  - Reads C(result.json), C(step.json), the lock's C(owner.json) and C(staged.json) of the state directory;
    where the last result is C(kept), digests the stack the host serves; with O(freeze), reads the new
    venv's C(pip freeze --all).
  - The logic is C(src/cuda13_upgrade/hostscripts/stack_digest.py).
options:
  state_dir: {description: The host's state directory., type: path, required: true}
  venv: {description: The new venv., type: path, required: true}
  unit: {description: The serving unit., type: str, required: true}
  nvidia_smi: {description: The nvidia-smi command., type: str, default: nvidia-smi}
  freeze: {description: Also read the new venv's pip freeze., type: bool, default: false}
attributes:
  check_mode: {support: full, description: Read-only in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read the state directory
  cuda13_state_read:
    state_dir: /var/lib/cuda13-upgrade
    venv: /opt/ml-env-cu130
    unit: sglang.service
"""

RETURN = r"""
state: {description: The state directory's records., type: dict, returned: always}
digest: {description: The digest of the kept stack, or null., type: str, returned: always}
parts: {description: The digest's parts, or null., type: dict, returned: always}
freeze: {description: "With O(freeze), C({rc, lines, error}).", type: dict, returned: when asked}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.stack_digest import STATE_SPEC, state_module


def main() -> None:
    module = AnsibleModule(argument_spec=STATE_SPEC, supports_check_mode=True)
    result = state_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
