"""Filter for the re-run of a kept host (a thin wrapper over cuda13_upgrade.rerun)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from cuda13_upgrade import rerun
except ImportError:  # the package is not installed: use the checkout's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cuda13_upgrade import rerun

DOCUMENTATION = r"""
  - name: cuda13_kept_rerun
    short_description: Whether a host is already kept for this target, its stack unchanged.
    positional: _input, target, digest, reverify
    options:
      _input: {description: the host's result.json, type: dict, required: true}
      target: {description: this run's target, type: dict, required: true}
      digest: {description: the stack digest read now (stack_digest.py), type: dict}
      reverify: {description: measure again anyway (cuda13_reverify), type: bool, default: false}
  - name: cuda13_same_target
    short_description: Whether a recorded target (result.json, staged.json) is this run's.
    positional: _input, target
    options:
      _input: {description: the recorded target, or none, type: raw, required: true}
      target: {description: this run's target, type: dict, required: true}
"""

EXAMPLES = r"""
verdict: "{{ previous | cuda13_kept_rerun(__cuda13_target, digest, false) }}"
staged: "{{ staged.target | default(none) | cuda13_same_target(__cuda13_target) }}"
"""

RETURN = r"""
  _value:
    description: >-
      {already_kept: bool, differs: [part], reason: str} (cuda13_upgrade.rerun.kept_rerun);
      a bool (cuda13_upgrade.rerun.same_target).
"""


def cuda13_kept_rerun(previous, target, digest=None, reverify=False):
    if not isinstance(previous, Mapping):
        raise AnsibleFilterError(
            f"cuda13_kept_rerun expects the host's result.json as a dict, got {previous!r}"
        )
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(f"cuda13_kept_rerun expects the run's target as a dict, got {target!r}")
    return rerun.kept_rerun(
        dict(previous),
        dict(target),
        dict(digest) if isinstance(digest, Mapping) else None,
        reverify=bool(reverify),
    )


def cuda13_same_target(recorded, target):
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(f"cuda13_same_target expects the run's target as a dict, got {target!r}")
    return rerun.same_target(dict(recorded) if isinstance(recorded, Mapping) else None, dict(target))


class FilterModule:
    def filters(self):
        return {"cuda13_kept_rerun": cuda13_kept_rerun, "cuda13_same_target": cuda13_same_target}
