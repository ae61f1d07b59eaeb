#!/usr/bin/python
"""Action cuda13_baseline (action_plugins/cuda13_baseline.py): the old stack measured or its recorded baseline reused, and the restart plan."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_baseline
short_description: Measure the old stack's decode throughput per profile, or reuse the baseline recorded on the host, and plan the restarts
description:
  - A baseline recorded on the host (C(<cuda13_state_dir>/baseline.json)) stands for this run's when it is younger
    than C(cuda13_baseline_max_age_hours), measured every profile with the same server arguments and holds each
    profile's probe (cuda13_upgrade.restarts.recorded_baseline); otherwise every profile is measured on the old
    stack (the probe, the trials, the load metrics when on) and the record written there.
  - The restart plan (cuda13_upgrade.restarts.plan_upgrade) orders every phase's profiles so that the service
    restarts as few times as they need (at most 2P - 1 per upgrade and P per rollback with P profiles); it is
    printed before it runs and kept in the host's result.
  - A host that already runs the new stack (the switch drop-in is there) without a usable baseline is refused
    - the rescue puts the old stack back; the next run measures both.
  - Begins the step C(baseline) of the host's run record. An action plugin; the host's side is the modules
    C(cuda13_record), C(cuda13_service) and C(cuda13_bench).
options:
  options: {description: The validated options (C(cuda13_options))., type: dict, required: true}
  run_id: {description: This run's identifier (the trials' series)., type: str, required: true}
  snapshot: {description: The snapshot step's record (the service's own command)., type: dict, required: true}
attributes:
  check_mode: {support: full, description: Plans and reads; measures and records nothing.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Measure the old stack, or reuse its recorded baseline
  cuda13_baseline:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
    snapshot: "{{ snapshot }}"
  register: baseline
"""

RETURN = r"""
baseline: {description: "C({run_id, profiles: {profile: measured record}}) - the trials, probe, load per profile.", type: dict, returned: always}
recorded: {description: A recorded baseline was reused., type: bool, returned: always}
restart_plan: {description: The upgrade's restart plan., type: dict, returned: always}
measured: {description: The phase's record (cuda13_upgrade.steps.measure.phase), or null., type: dict, returned: always}
"""
