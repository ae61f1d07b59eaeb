#!/usr/bin/python
"""Action cuda13_serve (action_plugins/cuda13_serve.py): put the SGLang service into a profile and wait until it generates."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_serve
short_description: Put the SGLang service into a profile, restart it as planned and wait until it generates
description:
  - The one way every step starts the server into a profile - the baseline, the switch, the verify,
    its restore and the rollback.
  - The profile drop-in (O(dropin)) sets C(ExecStart) to the service's own command plus the
    profile's arguments, each shell-quoted, or is removed when there are none.
  - Then, as O(restart) says - C(always); C(never) (the drop-in is left as it is; the running server
    is only waited for and read); C(when-changed) (a restart when a drop-in changed, or the main
    process does not run the venv's Python with these arguments - a run cut off between writing the
    drop-ins and the restart left the files in place with the old server running) - it stops the
    unit, waits until its processes are gone and hold no GPU memory (leftovers named, then ended),
    clears the unit's start limit (C(systemctl reset-failed)), starts it, and waits until the
    server generates a token (C(/health_generate)), not merely until C(/health) says 200.
  - Last it reads what the main process runs (C(/proc/<pid>/cmdline)), the server's effective
    configuration (C(/get_server_info)) and the lines it logged since its start.
  - The action, on the control node, writes the drop-in's text, judges what the start came to
    (cuda13_upgrade.restarts.serve_outcome) - the server must run the service's own command with
    these arguments on the venv's Python, or nothing is measured on it - and fails with the cause
    and the remedy, naming a known failure in the journal (cuda13_upgrade.diagnosis).
  - In check mode nothing on the host changes; the result says whether a restart would follow.
  - The host's side is C(src/cuda13_upgrade/hostscripts/service_cycle.py).
options:
  service: {description: The systemd unit (action)., type: str}
  exec_start: {description: The service's own command (its unit's ExecStart)., type: str, required: true}
  venv: {description: The venv whose Python must serve., type: str, default: ""}
  args: {description: The profile's arguments., type: list, elements: str, default: []}
  restart: {description: When to restart., type: str, choices: [always, never, when-changed], default: always}
  changed: {description: Another drop-in changed before this start (C(when-changed) restarts)., type: bool, default: false}
  check: {description: Check that the main process runs the venv's Python with these arguments., type: bool, default: true}
  report_changes: {description: Report a drop-in change and a restart as a change of the host., type: bool, default: true}
  dropin: {description: The profile drop-in's file name (C(cuda13_profile_dropin))., type: str, default: 60-cuda13-profile.conf}
  url: {description: The server's local base URL; the wait is at C(<url>/health_generate)., type: str, default: "http://127.0.0.1:30000"}
  timeout: {description: Seconds to wait until it generates (C(cuda13_health_timeout))., type: int, default: 900}
  leftover_timeout: {description: Seconds to wait for the stopped unit's processes before SIGTERM (C(cuda13_leftover_timeout))., type: float, default: 30}
  nvidia_smi: {description: The nvidia-smi command., type: str, default: nvidia-smi}
  what: {description: What is started, for the messages., type: str, default: the service}
  about: {description: The drop-in's comment, whose arguments these are., type: str, default: a profile}
  service_user: {description: The unit's C(User=), named by a diagnosis., type: str, default: ""}
attributes:
  check_mode: {support: full, description: Changes nothing; says whether a restart would follow.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Wait until the server generates, without a restart
  cuda13_serve:
    service: sglang.service
    exec_start: /opt/ml-env/bin/python -m sglang.launch_server --model-path /models/m
    venv: /opt/ml-env
    restart: never
    what: the serving stack
"""

RETURN = r"""
restarted: {description: The service was restarted., type: bool, returned: always}
would_restart: {description: In check mode, a restart would follow., type: bool, returned: always}
running_args: {description: The arguments the main process adds to the own command, or null., type: list, returned: always}
running_venv: {description: The venv whose Python the main process runs, or null., type: str, returned: always}
running_command: {description: The main process's command line., type: str, returned: always}
effective: {description: The server's effective configuration (cuda13_upgrade.effective), or null., type: dict, returned: always}
leftovers: {description: Processes the stopped unit left, each ended before the start., type: list, returned: always}
report: {description: What the operator reads., type: list, elements: str, returned: always}
cycle: {description: The module's record of the cycle (see service_cycle.py)., type: dict, returned: always}
dropin_changed: {description: The module changed the profile drop-in., type: bool, returned: always}
diff: {description: "The profile drop-in's text before and after, shown by --diff.", type: dict, returned: when the drop-in changed or would change}
"""
