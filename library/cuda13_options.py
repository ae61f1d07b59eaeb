#!/usr/bin/python
"""Action cuda13_options (action_plugins/cuda13_options.py): every option checked once per host and run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_options
short_description: Check every option of the upgrade once, before any change, and keep them as one record
description:
  - The options are the roles' public variables (each role's C(defaults/main.yml) and
    C(meta/argument_specs.yml)) and the playbooks' own (C(cuda13_serial), C(cuda13_window), ...).
  - For the task's host, the options the inventory or C(-e) set are checked - their types (the
    roles' argument specs), ranges and formats, and the values against each other
    (cuda13_upgrade.options.validate) - and converted (C("0.005") from C(-e key=value) becomes
    0.005). Every other option gets its role's default, templated by Ansible for this host.
  - The result is the fact C(cuda13_options), the one record every later step reads.
  - Fails before any change, listing each bad value with its option and the remedy.
  - An action plugin; it runs on the control node and reads nothing on the host.
options:
  roles:
    description: The roles whose variables are options (C(nvidia_driver_check) is always one).
    type: list
    elements: str
    default: [cuda13, stack_snapshot, cuda_toolkit, cu130_wheels, sglang_build, stack_switch, verify_throughput, rollback, artifact_cache, nvidia_driver_check]
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Check every option's value
  cuda13_options: {}

- name: Use one
  ansible.builtin.debug:
    msg: "{{ cuda13_options.verify_throughput_tolerance_pct }}"
"""

RETURN = r"""
given: {description: The options the inventory or -e set for the host., type: list, elements: str, returned: always}
ansible_facts:
  description: C(cuda13_options) - every option's checked value.
  type: dict
  returned: success
"""
