"""Filters over the hosts' upgrade lock (thin wrappers over cuda13_upgrade.runlock)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import runlock
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_lock_verdict
    short_description: Whether the run that holds a host's lock is dead.
    positional: _input, control_node, result
    options:
      _input: {description: the lock's owner.json, type: dict, required: true}
      control_node: {description: this run's control node (hostname), type: str, required: true}
      result: {description: the host's result.json, type: dict}
"""

EXAMPLES = r"""
verdict: "{{ owner | cuda13_lock_verdict(lookup('ansible.builtin.pipe', 'hostname'), result) }}"
"""

RETURN = r"""
  _value:
    description: >-
      {dead: bool, run_id: str, reason: str} (cuda13_upgrade.runlock.lock_verdict).
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


class FilterModule:
    def filters(self):
        return ansible_filters({"cuda13_lock_verdict": cuda13_lock_verdict})
