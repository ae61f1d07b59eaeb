#!/usr/bin/python
"""Module cuda13_host_facts: what the preflight reads on a host, in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_host_facts
short_description: Read what the preflight judges on a host - GPUs, driver, processes, disk, Python, the unit
description:
  - Read-only. Every nvidia-smi run goes under C(timeout --foreground --kill-after=10 SECONDS); one that
    outlives even that (a process stuck in the kernel) is given up 40 s later and recorded as timed out.
  - Reads the GPUs (index, name, uuid, driver version, compute capability, memory, PCI bus id), the loaded
    kernel module's version (C(/proc/driver/nvidia/version)), nvidia-smi's table header, the processes on
    the GPUs and each one's control group, the unit's main pid, control group, load state and
    C(ExecStart), the kernel release and machine, the free space where the run writes, the Python
    version, and whether the serving venv's Python exists.
  - The host's side of the action C(cuda13_preflight), which judges it
    (cuda13_upgrade.preflight.evaluate); the logic is
    C(src/cuda13_upgrade/hostscripts/preflight_facts.py).
options:
  nvidia_smi: {description: The nvidia-smi command., type: str, default: nvidia-smi}
  nvidia_smi_timeout: {description: Seconds each nvidia-smi run may take., type: int, default: 60}
  unit: {description: The serving unit., type: str, required: true}
  disk_path: {description: Where the free space is measured., type: path, required: true}
  space_places: {description: "C({name: path}) of every place the run writes (empty paths left out).", type: dict, default: {}}
  python: {description: The Python whose version is read., type: str, default: /usr/bin/python3}
  host_checks: {description: Also read the unit's load state and ExecStart and the old venv's Python., type: bool, default: true}
  old_venv: {description: The serving venv., type: path, default: /opt/ml-env}
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read what the preflight judges
  cuda13_host_facts:
    unit: sglang.service
    disk_path: /opt
"""

RETURN = r"""
facts:
  description: >-
    query, table, compute_apps, unit, uname, df, python, unit_show - each C({rc, stdout, stderr}) (C(timedout)
    when given up; table and compute_apps are C({skipped: true, msg}) when the query failed, so that a hung
    nvidia-smi is waited for once); proc_version (text or null); cgroups ({pid - text}); space (space_probe's record or
    null); old_python_exists (bool).
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.preflight_facts import FACTS_SPEC, facts_module


def main() -> None:
    module = AnsibleModule(argument_spec=FACTS_SPEC, supports_check_mode=True)
    result = facts_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
