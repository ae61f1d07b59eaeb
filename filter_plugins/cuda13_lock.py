"""Filters over the hosts' upgrade lock (thin wrappers over cuda13_upgrade.runlock)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from cuda13_upgrade import runlock
except ImportError:  # the package is not installed: use the checkout's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cuda13_upgrade import runlock

DOCUMENTATION = r"""
  - name: cuda13_lock_verdict
    short_description: Whether the run that holds a host's lock is dead.
    positional: _input, control_node, result
    options:
      _input: {description: the lock's owner.json, type: dict, required: true}
      control_node: {description: this run's control node (hostname), type: str, required: true}
      result: {description: the host's result.json, type: dict}
  - name: cuda13_stopped_run
    short_description: The earlier run that stopped on a host part way (its last step boundary), or None.
    positional: _input, result, run_id
    options:
      _input: {description: the host's step.json, type: dict, required: true}
      result: {description: the host's result.json, type: dict}
      run_id: {description: this run's identifier, type: str, required: true}
"""

EXAMPLES = r"""
verdict: "{{ owner | cuda13_lock_verdict(lookup('ansible.builtin.pipe', 'hostname'), result) }}"
stopped: "{{ step_record | cuda13_stopped_run(result, cuda13_run_id) }}"
"""

RETURN = r"""
  _value:
    description: >-
      cuda13_lock_verdict: {dead: bool, run_id: str, reason: str} (cuda13_upgrade.runlock.lock_verdict);
      cuda13_stopped_run: {run_id, step, started_at, serving, recorded} or None
      (cuda13_upgrade.runlock.stopped_run).
"""


def cuda13_lock_verdict(owner, control_node, result=None):
    if not isinstance(owner, Mapping):
        raise AnsibleFilterError(
            f"cuda13_lock_verdict expects the lock's owner.json as a dict, got {owner!r}"
        )
    if not isinstance(control_node, str):
        raise AnsibleFilterError(f"cuda13_lock_verdict expects the control node's name, got {control_node!r}")
    return runlock.lock_verdict(
        dict(owner), control_node=control_node, result=dict(result) if isinstance(result, Mapping) else None
    )


def cuda13_stopped_run(step_record, result, run_id):
    if not isinstance(step_record, Mapping):
        raise AnsibleFilterError(
            f"cuda13_stopped_run expects the host's step.json as a dict, got {step_record!r}"
        )
    if not isinstance(run_id, str) or not run_id:
        raise AnsibleFilterError(f"cuda13_stopped_run expects this run's identifier, got {run_id!r}")
    return runlock.stopped_run(
        dict(step_record), dict(result) if isinstance(result, Mapping) else None, run_id
    )


class FilterModule:
    def filters(self):
        return {"cuda13_lock_verdict": cuda13_lock_verdict, "cuda13_stopped_run": cuda13_stopped_run}
