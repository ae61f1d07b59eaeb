#!/usr/bin/python
"""Module cuda13_resolve: pip's resolver in report mode in a throwaway venv on the host (the preflight's resolution)"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_resolve
short_description: Resolve the whole target stack with pip's resolver in a throwaway venv, changing nothing
description:
  - Read-only, for the preflight (C(cuda13_upgrade.steps.resolve.resolve) calls it on the first host of each
    distinct target of the run). Makes a throwaway directory C(.cuda13-resolve-XXXXXXXX) in the nearest
    existing parent of O(pip_tmpdir), a venv in it with O(python) C(-m venv), and runs
    C(pip --isolated install --dry-run --ignore-installed --disable-pip-version-check --report <file>)
    there with the sources, O(pip_extra_args), O(requirements) and O(sglang), C(TMPDIR) the throwaway
    directory, and O(environment). Returns pip's exit status, output and report; the directory is always
    removed.
  - The throwaway venv and pip's downloads go on the filesystem of pip's temporary directory, never the
    system's /tmp (often a small tmpfs, pypa/pip#12868).
  - The logic is C(src/cuda13_upgrade/hostscripts/pip_resolve.py).
options:
  python: {description: The interpreter that makes the venv (C(cu130_wheels_python))., type: str, required: true}
  pip_tmpdir: {description: pip's temporary directory (C(cu130_wheels_pip_tmpdir)); its nearest existing parent holds the throwaway directory., type: path, required: true}
  index_url: {description: The index passed as C(--index-url) (C(cu130_wheels_index_url))., type: str, default: ""}
  extra_index_urls: {description: Further indexes passed as C(--extra-index-url) in order., type: list, elements: str, default: []}
  find_links: {description: A directory holding every wheel; when set pip reads it alone (C(--no-index --find-links)) instead of the indexes., type: str, default: ""}
  pip_extra_args: {description: Further pip arguments (C(cu130_wheels_pip_extra_args))., type: list, elements: str, default: []}
  requirements: {description: The cu130 wheels' pins (C(cu130_wheels_requirements))., type: list, elements: str, required: true}
  sglang: {description: The SGLang release as a PEP 508 requirement, resolved with the pins; empty for none., type: str, default: ""}
  environment: {description: Environment variables for pip (C(cu130_wheels_pip_environment)); never returned., type: dict, default: {}}
attributes:
  check_mode: {support: full, description: Runs in check mode too; it keeps nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Resolve the target stack (the preflight's step does this once per distinct target)
  cuda13_resolve:
    python: /usr/bin/python3
    pip_tmpdir: /opt/ml-env-cu130/.pip-tmp
    index_url: https://download.pytorch.org/whl/cu130
    extra_index_urls: [https://docs.sglang.ai/whl/cu130, https://flashinfer.ai/whl/cu130, https://pypi.org/simple]
    requirements: [torch==2.9.1+cu130, sgl-kernel==0.3.21+cu130, flashinfer-python==0.6.3]
    sglang: sglang @ git+https://github.com/sgl-project/sglang.git@v0.5.9#subdirectory=python
  check_mode: false
"""

RETURN = r"""
rc: {description: pip's exit status (0 when the target resolves)., type: int, returned: always}
stdout: {description: pip's standard output (its cause lines of a conflict)., type: str, returned: always}
stderr: {description: pip's standard error (its C(ERROR:) lines)., type: str, returned: always}
report: {description: pip's installation report (format version 1), or null when pip wrote none., type: dict, returned: always}
directory: {description: The throwaway directory the resolution ran in (removed)., type: str, returned: always}
argv: {description: pip's command line., type: list, returned: when pip ran}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.pip_resolve import RESOLVE_SPEC, resolve_module


def main() -> None:
    module = AnsibleModule(argument_spec=RESOLVE_SPEC, supports_check_mode=True)
    result = resolve_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
