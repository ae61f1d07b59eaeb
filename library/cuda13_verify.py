#!/usr/bin/python
"""Action cuda13_verify (action_plugins/cuda13_verify.py): the new stack measured and decided."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_verify
short_description: Measure the new stack per profile and decide - throughput, output, load, soak, the kernel log
description:
  - Measures every profile on the new stack in the restart plan's order - the correctness probe, the decode
    trials (C(verify_throughput_min_trials), then one more at a time until the gate's verdict is final or
    C(verify_throughput_max_trials)), the load metrics and the soak when on.
  - Reads the kernel log since the switch and decides in one call of the gate
    (cuda13_upgrade.throughput.gate_verdict - throughput within C(verify_throughput_tolerance_pct), the probe's
    output, accept length, load, soak, speculative gains, unused new-stack arguments) and of the kernel log's
    verdict (cuda13_upgrade.xid). A stack that fails either fails the task with C(The new stack fails the gate -
    <reasons>) - the upgrade's rescue rolls the host back.
  - Says whether the kept host is watched in service before the next batch (C(batch_soak), from O(batches)).
  - Begins the step C(verify) of the host's run record.
options:
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  run_id: {description: This run's identifier (the trials' series)., type: str, required: true}
  snapshot: {description: The snapshot step's record., type: dict, required: true}
  baseline: {description: The baseline step's record (the old stack's figures, the restart plan)., type: dict, required: true}
  switch: {description: The switch step's record (the new command, the kernel log's mark)., type: dict, required: true}
  batches: {description: The rollout's batches (the soak between batches' plan)., type: list, elements: list, default: []}
attributes:
  check_mode: {support: full, description: Measures nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Measure the new stack and decide
  cuda13_verify:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
    snapshot: "{{ snapshot }}"
    baseline: "{{ baseline }}"
    switch: "{{ switch }}"
"""

RETURN = r"""
measured: {description: The candidate phase's record., type: dict, returned: always}
verdict: {description: The gate's verdict (cuda13_upgrade.throughput.gate_verdict)., type: dict, returned: always}
kernel_log: {description: The kernel log's verdict since the switch, or null., type: dict, returned: always}
regressed: {description: The gate refused the new stack., type: bool, returned: always}
reason: {description: The gate's reason., type: str, returned: always}
batch_soak: {description: "C({watch, seconds, why}) - whether the kept host is watched before the next batch.", type: dict, returned: always}
"""
