#!/usr/bin/python
"""Action cuda13_rollback (action_plugins/cuda13_rollback.py): a host put back on its snapshot's stack."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_rollback
short_description: Put a host back on the stack of its pre-upgrade snapshot - in the upgrade's rescue, or on demand
description:
  - C(after_failure) (the upgrade's rescue) - notes and diagnoses what failed (cuda13_upgrade.diagnosis; a full disk
    from C(df)), reads the kernel log since the switch when the gate did not, frees the space a failed step took
    before the switch, then, when the host changed, restores the snapshot's stack and measures the old stack again
    against its baseline (C(cuda13_rollback_verify)). A rollback that itself fails is recorded (status C(failed)) with
    what it left on the host and how to go on; the task does not fail. With O(mode) C(stage) nothing is undone - the
    service was never touched.
  - C(planned) (on demand) - a host without a snapshot has nothing to roll back to; its result says so.
  - C(restored) (on demand) - the restore, its result on the host and in the run's report.
  - The restore - the upgrade's drop-ins removed, every CUDA alternatives group put back as recorded
    (cuda13_upgrade.ondemand.alternatives_restore), the toolkit step's apt changes undone, the new stack's caches
    cleared, the old stack started and waited for, and the host checked against its snapshot.
  - An action plugin; the host's side is Ansible's own modules and the package's.
options:
  state: {description: What to do., type: str, choices: [after_failure, planned, restored], default: after_failure}
  mode: {description: The play - C(upgrade) rolls back; C(stage) only records the failure., type: str, choices: [upgrade, stage], default: upgrade}
  options: {description: The validated options; without them the task's C(rollback_*) and C(cuda13_*) variables., type: dict, default: {}}
  run_id: {description: This run's identifier., type: str, default: ""}
  failed: {description: The failed task's result (C(ansible_failed_result))., type: dict, default: {}}
  failed_task: {description: The failed task's name., type: str, default: ""}
  records: {description: "The steps' records so far (C(snapshot), C(baseline), C(switch), C(verify)).", type: dict, default: {}}
attributes:
  check_mode: {support: full, description: Undoes nothing; says what failed.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Roll the host back
  cuda13_rollback:
    options: "{{ cuda13_options }}"
    run_id: "{{ cuda13_run_id }}"
    failed: "{{ ansible_failed_result }}"
    failed_task: "{{ ansible_failed_task.name }}"
    records: {snapshot: "{{ snapshot }}", baseline: "{{ baseline }}"}
"""

RETURN = r"""
status: {description: C(rolled_back) or C(failed) (C(after_failure))., type: str, returned: always}
failed_step: {description: The step that failed., type: str, returned: always}
error: {description: What failed, and what the rollback left when it failed too., type: str, returned: always}
diagnosis: {description: What the failure text means (cuda13_upgrade.diagnosis)., type: dict, returned: always}
seconds: {description: Seconds until the old stack generated again., type: float, returned: always}
checks: {description: Per profile, the old stack against its baseline., type: dict, returned: always}
nothing: {description: (C(planned)) the host has no snapshot., type: bool, returned: always}
"""
