#!/usr/bin/python
"""Module cuda13_apt_read: The host's side of the action cuda13_toolkit - read what apt and dpkg have, read-only"""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_apt_read
short_description: The host's side of the action cuda13_toolkit - read what apt and dpkg have, read-only
description:
  - Answers, in one run, what the toolkit step asks - the installed version and status of a package
    (C(dpkg-query --showformat '${Version} ${db:Status-Abbrev}' --show PKG)), the text of every apt
    source file (C(sources.list), C(*.list) and C(*.sources) in C(/etc/apt) and
    C(/etc/apt/sources.list.d)), the installed packages
    (C(dpkg-query -W -f '${binary:Package}\t${Version}\t${db:Status-Abbrev}\n')),
    C(update-alternatives --get-selections) and C(--query) of given groups, whether paths exist,
    and the text of records.
  - Changes nothing; runs the same in check mode.
  - The logic is C(src/cuda13_upgrade/hostscripts/aptstate.py).
options:
  package: {description: The package whose installed version and status to read., type: str}
  sources: {description: Read the apt source files., type: bool, default: false}
  apt_dir: {description: The apt configuration directory whose source files are read., type: path, default: /etc/apt}
  packages: {description: Read the installed packages' listing., type: bool, default: false}
  selections: {description: Read C(update-alternatives --get-selections)., type: bool, default: false}
  query: {description: Alternatives groups to query (C(update-alternatives --query GROUP))., type: list, elements: str, default: []}
  exists: {description: Paths to test for existence., type: list, elements: path, default: []}
  read: {description: Files whose text to read (records)., type: list, elements: path, default: []}
attributes:
  check_mode: {support: full, description: Read-only; the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read the toolkit package's state and the apt sources
  cuda13_apt_read:
    package: cuda-toolkit-13-0
    sources: true
"""

RETURN = r"""
installed: {description: "C(VERSION STATUS) of O(package) (C(13.0.2-1 ii)), null when dpkg does not know it.", type: str, returned: with package}
sources: {description: "C([{path, content}]) of the apt source files, sorted by path.", type: list, elements: dict, returned: with sources}
packages: {description: The installed packages' listing (package TAB version TAB status)., type: str, returned: with packages}
selections: {description: The output of C(update-alternatives --get-selections)., type: str, returned: with selections}
queries: {description: "C({group: output of update-alternatives --query GROUP}).", type: dict, returned: always}
exists: {description: "C({path: bool}).", type: dict, returned: always}
read: {description: "C({path: {exists, content}}).", type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.aptstate import APT_READ_SPEC, apt_read_module


def main() -> None:
    module = AnsibleModule(argument_spec=APT_READ_SPEC, supports_check_mode=True)
    result = apt_read_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
