#!/usr/bin/python
"""Module cuda13_apt_simulate: The host's side of the action cuda13_toolkit - simulate the toolkit's apt transaction in a scratch apt state"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_apt_simulate
short_description: The host's side of the action cuda13_toolkit - simulate the toolkit's apt transaction in a scratch apt state
description:
  - Runs C(apt-get -q update) and C(apt-get -s install --no-install-recommends PKG=VER) (C(LANG=C)) in a
    scratch apt state - a temporary directory with its own lists, no package cache written - whose
    sources are copies of the host's, plus NVIDIA's repository when O(add_repository) (the host has no
    entry for it).
  - The entry is signed with O(keyring); when that file is missing and O(install_keyring_package),
    NVIDIA's cuda-keyring package is downloaded and unpacked (C(dpkg-deb -x)) into the scratch state,
    not installed.
  - The host's apt state and sources are not touched; the scratch directory is removed in every case.
  - The logic is C(src/cuda13_upgrade/hostscripts/aptstate.py).
options:
  package: {description: The package to install (with O(version); or give O(requests))., type: str}
  version: {description: Its version., type: str}
  requests:
    description: The packages to install together, each C(name=version) or C(name) (the driver window's move); used instead of O(package) and O(version).
    type: list
    elements: str
    default: []
  release_holds:
    description: Packages simulated as not held (a copy of dpkg's status with their hold released), as the driver window releases the driver's holds before it installs.
    type: list
    elements: str
    default: []
  dpkg_status: {description: dpkg's status file, copied for O(release_holds)., type: path, default: /var/lib/dpkg/status}
  apt_dir: {description: The apt configuration directory whose source files are copied., type: path, default: /etc/apt}
  add_repository: {description: Add NVIDIA's repository to the scratch sources., type: bool, default: false}
  repo_url: {description: The repository's URL (a flat repository)., type: str}
  keyring: {description: The keyring the repository is signed with., type: path}
  install_keyring_package: {description: Unpack cuda-keyring when O(keyring) is missing., type: bool, default: true}
  keyring_package_url: {description: The URL of NVIDIA's cuda-keyring package., type: str}
attributes:
  check_mode: {support: full, description: Read-only; the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Simulate the toolkit's installation
  cuda13_apt_simulate:
    package: cuda-toolkit-13-0
    version: 13.0.2-1
    add_repository: true
    repo_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    keyring: /usr/share/keyrings/cuda-archive-keyring.gpg
    keyring_package_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
"""

RETURN = r"""
sources: {description: The host's source files copied into the scratch state., type: list, elements: str, returned: success}
signed_by: {description: The keyring NVIDIA's added entry names (null when not added)., type: str, returned: success}
keyring_unpacked: {description: Whether cuda-keyring was unpacked into the scratch state., type: bool, returned: success}
update_rc: {description: The exit status of C(apt-get -q update)., type: int, returned: success}
update_stderr: {description: Its stderr (apt's W and E lines)., type: str, returned: success}
rc: {description: The exit status of C(apt-get -s install)., type: int, returned: success}
stdout: {description: Its stdout (the Inst, Remv and Conf lines)., type: str, returned: success}
stderr: {description: Its stderr., type: str, returned: success}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.aptstate import APT_SIMULATE_SPEC, apt_simulate_module


def main() -> None:
    module = AnsibleModule(argument_spec=APT_SIMULATE_SPEC, supports_check_mode=True)
    result = apt_simulate_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
