#!/usr/bin/python
"""Module cuda13_venv_read: read a venv on the host with its own tools (pip freeze, pip show, nvcc, torch, sglang)"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_venv_read
short_description: Read what a venv on the host holds - pip freeze, pip show, the toolkit's nvcc, torch's CUDA, the sglang import
description:
  - Read-only; each read runs when its option asks for it and is answered under the same name (null otherwise).
  - O(python) - C(platform.python_version()) of an interpreter; O(freeze) - C(<venv>/bin/python -m pip freeze
    --all --isolated [--exclude-editable]); O(show) - C(pip show [--files] --isolated <name>); O(realpath) -
    C(os.path.realpath) of each path; O(nvcc) - C(<cuda home>/bin/nvcc --version); O(torch_cuda) -
    C(torch.version.cuda) with the venv's python; O(sglang_import) - C(import sglang) with the venv's python,
    its version, file and distribution version.
  - A command that cannot start answers rc 127 with the error; the steps decide what a result means.
  - The logic is C(src/cuda13_upgrade/hostscripts/venv_read.py).
options:
  venv: {description: The venv whose python runs O(freeze), O(show), O(torch_cuda) and O(sglang_import)., type: path}
  python: {description: An interpreter whose version to read (C(python_version))., type: str}
  freeze: {description: Read C(pip freeze --all --isolated)., type: bool, default: false}
  exclude_editable: {description: With O(freeze), leave editable installs out (C(--exclude-editable))., type: bool, default: true}
  show: {description: A distribution to read with C(pip show --isolated)., type: str}
  show_files: {description: With O(show), list its files (C(--files))., type: bool, default: false}
  realpath: {description: Paths whose canonical path to return., type: list, elements: str, default: []}
  nvcc: {description: A CUDA home whose C(bin/nvcc --version) to read., type: path}
  torch_cuda: {description: Read C(torch.version.cuda) with the venv's python., type: bool, default: false}
  sglang_import: {description: Import sglang with the venv's python (from C(/)) and read its version and file., type: bool, default: false}
attributes:
  check_mode: {support: full, description: It only reads, in check mode too.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read the new venv's freeze and its sglang
  cuda13_venv_read:
    venv: /opt/ml-env-cu130
    freeze: true
    show: sglang
    show_files: true
"""

RETURN = r"""
python_version: {description: The version of O(python)., type: str, returned: always}
freeze: {description: "C({rc, lines, stderr}) of pip freeze; C(lines) as C(stdout_lines).", type: dict, returned: always}
show: {description: "C({rc, stdout, stderr}) of pip show (rc 1 when the distribution is not installed).", type: dict, returned: always}
realpath: {description: Each path of O(realpath) to its canonical path., type: dict, returned: always}
nvcc: {description: "C({rc, stdout, stderr, msg}) of nvcc --version; C(msg) the error when it does not run.", type: dict, returned: always}
torch_cuda: {description: "C({rc, stdout, stderr}); C(stdout) torch.version.cuda, empty for a CPU build.", type: dict, returned: always}
sglang_import: {description: "C({rc, record, stderr}); C(record) is C({version, file, dist}) when sglang imports.", type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.venv_read import VENV_READ_SPEC, venv_read_module


def main() -> None:
    module = AnsibleModule(argument_spec=VENV_READ_SPEC, supports_check_mode=True)
    result = venv_read_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
