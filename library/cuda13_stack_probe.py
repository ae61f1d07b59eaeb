#!/usr/bin/python
"""Module cuda13_stack_probe: what a venv's Python reads of its CUDA stack."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_stack_probe
short_description: Read what a venv's Python imports of its CUDA stack
description:
  - Run by the venv's own Python (the task's C(ansible_python_interpreter) set to
    C(<venv>/bin/python)) - imports each module of O(modules) and reports, from that
    interpreter, every distribution on C(sys.path) with its version, later copies
    shadowed by it, the CUDA libraries each shared object of the stack's wheels needs
    (read from the ELF headers) and where the loader finds them, torch's version, CUDA
    release and arch list, each import's whole error text, the driver library the
    process maps, C(pip check), every file that two distributions' RECORD files claim with
    different hashes (the one installed last won), and every C(libcuda.so*) the service's
    loader could take instead of the driver's - in the venv, in the directories of
    C(LD_LIBRARY_PATH) (this process's, O(service)'s, O(library_path)) and in those that
    C(/etc/ld.so.conf) and C(/etc/ld.so.conf.d/*.conf) name (a C(cuda-compat) library in
    C(/usr/local/cuda-X.Y/compat) among them), each with its version.
  - The verdict on what it reads is the control node's (cuda13_upgrade.stack.stack_verdict,
    the action plugins cuda13_wheels and cuda13_result).
  - Read-only. What the imported libraries print goes to stderr, so the result stays one
    JSON object.
  - The logic is C(src/cuda13_upgrade/hostscripts/stack_probe.py), standard library only;
    C(scripts/gpu-check.sh) runs the same file as a script on a machine with a real GPU.
options:
  modules:
    description: The modules to import.
    type: list
    elements: str
    default: [torch, sgl_kernel, flashinfer, sglang]
  service:
    description:
      - The systemd unit the new stack will serve as; the C(LD_LIBRARY_PATH) its main process runs
        with (or, stopped, its C(Environment=)) is searched for a C(libcuda.so*). Empty - not read.
    type: str
    default: ""
  library_path:
    description: More directories on the new stack's C(LD_LIBRARY_PATH) (a switch drop-in's), searched the same way.
    type: list
    elements: str
    default: []
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Probe the new venv's stack
  cuda13_stack_probe:
    modules: [torch, sgl_kernel, flashinfer]
    service: sglang.service
  vars:
    ansible_python_interpreter: /opt/ml-env-cu130/bin/python
"""

RETURN = r"""
probe:
  description: >-
    What the interpreter read: python, prefix, dists {name: version}, shadowed, requires,
    needed, objects, libraries, marker_environment, torch {version, cuda, arch_list, ...}
    or null, imports {module: null or the error text}, driver_library, pip_check {rc, output},
    overlaps [{path, owners [{name, version, hash}], on_disk}], libcuda [{path, target,
    version, where, owner}].
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.stack_probe import PROBE_SPEC, probe_module


def main() -> None:
    module = AnsibleModule(argument_spec=PROBE_SPEC, supports_check_mode=True)
    result = probe_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
