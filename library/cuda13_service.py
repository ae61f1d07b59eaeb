#!/usr/bin/python
"""Module cuda13_service: The host's side of the action cuda13_serve - the profile drop-in, the planned restart and the wait"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_service
short_description: The host's side of the action cuda13_serve - the profile drop-in, the planned restart and the wait
description:
  - Writes (or removes) the profile drop-in, restarts the unit as O(restart) says, waits until its processes
    are gone and free their GPU memory, starts it, waits until it generates and reads what its main
    process runs, C(/get_server_info) and its start-up log.
  - A server started with SGLang's C(--api-key) gets that key, read from the command line of the unit's
    processes, as C(Authorization - Bearer <key>) on the wait's and C(/get_server_info)'s requests; the key
    is in nothing the module returns (C(/get_server_info)'s C(api_key) and C(admin_api_key) are left out).
  - The logic is C(src/cuda13_upgrade/hostscripts/service_cycle.py).
options:
  unit: {description: The systemd unit., type: str, required: true}
  dropin_path: {description: The profile drop-in's path., type: path}
  dropin_content: {description: Its text, or null to remove it., type: str}
  restart: {description: When to restart., type: str, choices: [always, never, when-changed], default: always}
  changed: {description: Another drop-in changed (C(when-changed))., type: bool, default: false}
  exec_start: {description: The own command., type: str, default: ""}
  venv: {description: The venv whose Python must serve., type: str, default: ""}
  args: {description: The profile's arguments., type: list, elements: str, default: []}
  leftover_timeout: {description: Seconds before leftovers are signalled., type: float, default: 30}
  nvidia_smi: {description: The nvidia-smi command., type: str, default: nvidia-smi}
  url: {description: The base URL to wait at (empty - no wait)., type: str, default: ""}
  ready_timeout: {description: Seconds to wait., type: float, default: 900}
  server_info: {description: Read the effective configuration once it generates., type: bool, default: true}
  journal: {description: Return the unit's last journal lines even when every step succeeded., type: bool, default: false}
attributes:
  check_mode: {support: full, description: Read-only in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read what the service runs (no restart, no wait)
  cuda13_service:
    unit: sglang.service
    restart: never
"""

RETURN = r"""
cycle: {description: What service_cycle.py records (restarted, release, start_error, ready, journal, main_pid, cmdline_b64, server_info, startup_log), null in check mode., type: dict, returned: always}
ok: {description: Every step that ran succeeded., type: bool, returned: always}
dropin_changed: {description: The profile drop-in changed., type: bool, returned: always}
diff: {description: "The profile drop-in's text before and after (before, after, before_header, after_header), shown by --diff.", type: dict, returned: when the drop-in changed or would change}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.service_cycle import SERVICE_SPEC, service_module


def main() -> None:
    module = AnsibleModule(argument_spec=SERVICE_SPEC, supports_check_mode=True)
    result = service_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
