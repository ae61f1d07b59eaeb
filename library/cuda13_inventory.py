#!/usr/bin/python
"""Action cuda13_inventory (action_plugins/cuda13_inventory.py): the inventory's own consistency."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_inventory
short_description: Refuse an inventory that drops its own values, before any host is touched
description:
  - Refuses a C(group_vars/<name>) (directory or file) beside the inventory that names no group of it
    (Ansible loads none of its values), and target hosts that receive none of the values a fleet must set
    (docs/options.md, "Must set for a fleet") from the inventory or C(-e); each named
    (C(cuda13_upgrade.inventorycheck)).
  - Sets C(cuda13_must_set_sources), per host where each must-set value came from (an inventory file and
    line, C(-e), or C(role default)); C(cuda13-upgrade plan) prints it.
  - Runs on the control node; the play runs it once, delegated to localhost with C(delegate_facts).
options:
  hosts: {description: The target hosts (default the play's hosts)., type: list, elements: str, default: []}
attributes:
  check_mode: {support: full, description: The same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Check that the inventory's values reach its hosts
  cuda13_inventory: {}
  delegate_to: localhost
  delegate_facts: true
  run_once: true
"""

RETURN = r"""
sources: {description: "Per host, per must-set value, where it came from.", type: dict, returned: success}
"""
