#!/usr/bin/python
"""Module cuda13_kernel_log: mark the kernel log, or read the driver's lines since the mark."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_kernel_log
short_description: Mark the kernel log, or read the NVIDIA driver's lines logged since the mark
description:
  - C(mark) records where the kernel log ends now (journalctl's cursor, else its last line);
    C(read) returns the driver's lines (C(NVRM:)) logged since that mark. The upgrade marks the
    log before the switch and reads it before the decision and after the soak; the Xid lines
    among them are judged on the control node (cuda13_upgrade.xid).
  - Read-only. The logic is C(src/cuda13_upgrade/hostscripts/kernel_log.py).
options:
  action: {description: C(mark) or C(read)., type: str, choices: [mark, read], required: true}
  command:
    description: The command that prints the kernel log (C(cuda13_kernel_log_command)).
    type: str
    default: journalctl -k -o short-iso --no-pager
  marker: {description: With C(read), what C(mark) returned., type: dict, default: {}}
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Mark the kernel log before the switch
  cuda13_kernel_log:
    action: mark
  register: mark

- name: Read the driver's lines since
  cuda13_kernel_log:
    action: read
    marker: "{{ mark.log }}"
"""

RETURN = r"""
log:
  description: >-
    mark - {cursor, last_line, error}; read - {lines: the NVRM lines since the mark, since,
    marker_found, error}.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.kernel_log import KERNEL_LOG_SPEC, kernel_log_module


def main() -> None:
    module = AnsibleModule(argument_spec=KERNEL_LOG_SPEC, supports_check_mode=True)
    result = kernel_log_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
