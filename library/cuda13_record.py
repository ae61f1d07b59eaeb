#!/usr/bin/python
"""Module cuda13_record: write the upgrade's records on the host atomically, or remove them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_record
short_description: Write the upgrade's records on the host atomically, or remove them
description:
  - Writes each file to a temporary file in its directory and renames it over the old one,
    so a reader (or the next run after a power cut) never sees half a record.
  - A file whose content and mode are already the ones given is left alone.
  - Parent directories are created, C(0700) for a private file (one whose mode gives the
    group and others nothing), else C(0755).
  - It reads files too (O(read)), so a step reads and writes its records in one run.
  - The steps of the upgrade write C(step.json), C(result.json), C(baseline.json),
    C(staged.json) and the other records of the state directory with it
    (C(/var/lib/cuda13-upgrade) by default, C(cuda13_state_dir)).
options:
  files:
    description: The files to write.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The file's absolute path., type: path, required: true}
      content: {description: The text to write., type: str, required: true}
      mode: {description: "The file's mode, an octal string such as C('0600').", type: str, default: "0644"}
  absent:
    description: Paths to remove (a file, or a directory with what it holds).
    type: list
    elements: path
    default: []
  read:
    description: Files to read first (their text), before anything is written or removed.
    type: list
    elements: path
    default: []
attributes:
  check_mode: {support: full, description: Says what would change; writes and removes nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Record the step boundary on the host
  cuda13_record:
    files:
      - path: /var/lib/cuda13-upgrade/step.json
        content: "{{ {'run_id': cuda13_run_id, 'step': 'drain'} | to_nice_json }}"
        mode: "0600"

- name: Remove the upgrade's drop-ins
  cuda13_record:
    absent:
      - /etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf
"""

RETURN = r"""
written: {description: The files whose content or mode changed., type: list, elements: str, returned: always}
removed: {description: The paths that existed and were removed., type: list, elements: str, returned: always}
read:
  description: "Each path of O(read) - C({exists: bool, content: text or null})."
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.statedir import RECORD_SPEC, record_module


def main() -> None:
    module = AnsibleModule(argument_spec=RECORD_SPEC, supports_check_mode=True)
    result = record_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
