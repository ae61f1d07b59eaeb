#!/usr/bin/python
"""Action cuda13_toolkit (action_plugins/cuda13_toolkit.py): the CUDA toolkit beside the running one, through apt."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_toolkit
short_description: Plan, install or revert the CUDA toolkit step (apt) on a host
description:
  - C(planned), read-only (the preflight runs it on every host before any change) - whether the
    pinned toolkit package (C(cuda_toolkit_package) at C(cuda_toolkit_package_version)) is
    installed already; how NVIDIA's repository is a source (the host's entry is reused, or the
    role's own C(/etc/apt/sources.list.d/<cuda_toolkit_apt_source_file>.list) is to be written;
    entries that disagree on C(Signed-By) are refused, as apt refuses every command then); and
    apt's transaction, C(apt-get -s install --no-install-recommends PKG=VER) in a scratch apt
    state (module C(cuda13_apt_simulate)), refused when it would install, upgrade or remove a
    driver, kernel or dkms package, or upgrade or remove an installed package outside the
    toolkit's own C(cuda-*) family.
  - C(present), the step - holds the installed driver packages (C(cuda_toolkit_hold_driver),
    dpkg's hold), pins the CUDA alternatives groups in manual mode where they point
    (C(cuda_toolkit_pin_alternatives)), adds NVIDIA's repository where the host has no entry
    (installing C(cuda-keyring) first when the keyring is missing and
    C(cuda_toolkit_install_keyring_package)), records what it changed in apt on the host
    (C(cuda_toolkit_apt_record)), installs exactly the simulated transaction, checks that the
    pinned groups did not move and that the new nvcc reports C(cuda_toolkit_release). It reuses
    O(plan) (the preflight's), or plans first.
  - C(reverted), the rollback's apt part - reads C(rollback_apt_record), releases the holds the step
    added, removes the source file it wrote and runs C(apt-get update), removes the record; a hold
    or a source the host had before stays. No record, nothing to do.
  - An action plugin - it runs on the control node (C(cuda13_upgrade.steps.toolkit)) and reaches the
    host through the read-only modules C(cuda13_apt_read) and C(cuda13_apt_simulate), Ansible's
    C(dpkg_selections), C(command) (C(update-alternatives --set)), C(apt), C(apt_repository),
    C(file), and C(cuda13_record).
  - Refusals say what to do; those made before any change end with "Nothing on the host was changed."
options:
  state:
    description: C(planned) (read-only), C(present) (install) or C(reverted) (the rollback's apt part).
    type: str
    choices: [planned, present, reverted]
    default: present
  options:
    description:
      - The validated options record (C(cuda13_options)); the step reads its C(cuda_toolkit_*) options,
        and C(rollback_apt_record) with C(reverted).
      - When not given, the task's C(cuda_toolkit_*), C(cuda13_*) and C(rollback_*) variables (the
        roles' defaults, the inventory), templated.
    type: dict
  plan:
    description: With C(present), the record C(planned) returned earlier in the run (the preflight's); planned again when empty.
    type: dict
    default: {}
  apt_dir:
    description: The apt configuration directory whose source files are read and simulated (tests point it elsewhere).
    type: path
    default: /etc/apt
attributes:
  check_mode:
    support: full
    description: >-
      C(planned) runs the same. C(present) and C(reverted) run Ansible's modules in check mode (they report
      what they would change) and skip the pins' and nvcc's checks.
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Decide what the toolkit step will do with apt (read-only)
  cuda13_toolkit:
    state: planned
    options: "{{ cuda13_options }}"
  register: cuda_toolkit_plan

- name: Install the CUDA toolkit beside the running one
  cuda13_toolkit:
    options: "{{ cuda13_options }}"
    plan: "{{ cuda_toolkit_plan }}"

- name: Undo the toolkit step's apt changes
  cuda13_toolkit:
    state: reverted
    options: "{{ cuda13_options }}"
"""

RETURN = r"""
package: {description: "C(planned) - the toolkit package.", type: str, returned: planned}
version: {description: "C(planned) - its pinned version.", type: str, returned: planned}
toolkit_dir: {description: "C(planned) - C(/usr/local/cuda-<release>).", type: str, returned: planned}
own_source: {description: "C(planned) - the source file the step writes where the host has no entry.", type: str, returned: planned}
installed: {description: "C(planned) - C(VERSION STATUS) as dpkg has the package, or null.", type: str, returned: planned}
to_install: {description: "C(planned) - whether apt will install the package (not installed at the version).", type: bool, returned: planned}
source:
  description: "C(planned) - C({action: add|reuse, entries, signed_by, reason}) (cuda13_upgrade.aptplan.repository_sources)."
  type: dict
  returned: planned
transaction:
  description: >-
    C(planned), C(present) - C({ok, actions, install, refused, reason}) of apt's simulated transaction
    (cuda13_upgrade.aptplan.check_transaction); null when nothing is to install.
  type: dict
  returned: planned, present
plan: {description: "C(present) - the plan it followed.", type: dict, returned: present}
apt_changes:
  description: "C(present) - the apt record written on the host: C({holds_added, held, source_added, source_used})."
  type: dict
  returned: present
held: {description: "C(present) - the driver's packages held now.", type: list, elements: str, returned: present}
pinned: {description: "C(present) - the alternatives groups put in manual mode now.", type: list, elements: str, returned: present}
nvcc: {description: "C(present) - C({release, version, built_on, build}) of the new nvcc; null in check mode.", type: dict, returned: present}
record_path: {description: "C(reverted) - the apt record read.", type: str, returned: reverted}
record: {description: "C(reverted) - its content, or null when there was none.", type: dict, returned: reverted}
released: {description: "C(reverted) - the packages whose hold was released.", type: list, elements: str, returned: reverted}
source_removed: {description: "C(reverted) - the source file removed, or null.", type: str, returned: reverted}
apt_updated: {description: "C(reverted) - whether apt-get update ran.", type: bool, returned: reverted}
record_removed: {description: "C(reverted) - whether the record was removed.", type: bool, returned: reverted}
"""
