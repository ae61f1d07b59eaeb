#!/usr/bin/python
"""Module cuda13_lock_dir: The host's side of the action cuda13_lock - create, own or remove the lock directory"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_lock_dir
short_description: The host's side of the action cuda13_lock - create, own or remove the lock directory
description:
  - C(acquire) creates the state directory (0700) and C(run.lock) in it; when the lock exists, it reads its
    C(owner.json), the host's C(result.json) and C(step.json) for the action's verdict.
  - C(own) writes the lock's C(owner.json) (0600); C(release) removes the lock directory.
  - The logic is C(src/cuda13_upgrade/hostscripts/statedir.py).
options:
  action: {description: The operation., type: str, choices: [acquire, own, release], required: true}
  state_dir: {description: The host's state directory., type: path, required: true}
  owner: {description: The owner record for C(own)., type: dict}
attributes:
  check_mode: {support: full, description: Read-only in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Take the lock directory (the action cuda13_lock judges a lock found)
  cuda13_lock_dir:
    action: acquire
    state_dir: /var/lib/cuda13-upgrade
"""

RETURN = r"""
acquired: {description: C(acquire) created the lock directory now., type: bool, returned: always}
held_by: {description: The owner record of the lock found, or null., type: dict, returned: always}
result: {description: With a lock found, the host's C(result.json)., type: dict, returned: always}
step: {description: With a lock found, the host's C(step.json)., type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.statedir import LOCK_SPEC, lock_module


def main() -> None:
    module = AnsibleModule(argument_spec=LOCK_SPEC, supports_check_mode=True)
    result = lock_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
