#!/usr/bin/python
"""Action cuda13_batch_soak (action_plugins/cuda13_batch_soak.py): a kept host watched in service before the next batch."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_batch_soak
short_description: Watch a kept host in service before the next batch starts; fail one that degrades
description:
  - For C(cuda13_soak_seconds), a greedy C(/generate) of the probe's first prompt every
    C(cuda13_soak_interval_seconds) (each must answer within C(verify_throughput_soak_deadline_s) and agree
    with the gate's answers), the unit's main process (it must stay the one that served at the start), and
    the kernel log since the switch (cuda13_upgrade.batch_soak.verdict).
  - A host that degrades fails the task with when and what - the rescue drains it again and rolls it back,
    and the failure budget counts it.
  - Begins the step C(batch_soak) of the host's run record.
options:
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  verify: {description: The verify step's record (its C(batch_soak) plan, the new stack's answers)., type: dict, required: true}
  baseline: {description: The baseline step's record (the old stack's answers)., type: dict, default: {}}
  switch: {description: The switch step's record (the kernel log's mark)., type: dict, default: {}}
attributes:
  check_mode: {support: full, description: Watches nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Watch the kept host in service before the next batch
  cuda13_batch_soak:
    options: "{{ cuda13_options }}"
    verify: "{{ verify }}"
  when: verify.batch_soak.watch
"""

RETURN = r"""
batch_soak: {description: The watch's verdict (healthy, outcome, checks, served, reason, journal_tail)., type: dict, returned: always}
"""
