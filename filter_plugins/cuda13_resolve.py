"""Filters over pip's resolver in report mode (the preflight's target resolution)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from cuda13_upgrade import resolve
except ImportError:  # the package is not installed: use the checkout's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cuda13_upgrade import resolve

DOCUMENTATION = r"""
  - name: cuda13_resolution_refusal
    short_description: Why pip refused the target (conflicting requirements, options to change).
    positional: _input
    options:
      _input: {description: pip's stderr, type: str, required: true}
  - name: cuda13_resolved_set
    short_description: The distributions of a pip installation report (name, version, url, sha256).
    positional: _input
    options:
      _input: {description: the parsed JSON of pip's --report, type: dict, required: true}
"""

EXAMPLES = r"""
msg: "{{ resolve.stderr | cuda13_resolution_refusal }}"
target: "{{ resolve.stdout | from_json | cuda13_resolved_set }}"
"""

RETURN = r"""
  _value:
    description: The message (str) or the resolved set (list of dicts).
"""


def _typed(func, kind):
    def filter_(value):
        if not isinstance(value, kind):
            raise AnsibleFilterError(
                f"{func.__name__} expects a {kind.__name__}, got {type(value).__name__}: {value!r}"
            )
        try:
            return func(value)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    filter_.__name__ = func.__name__
    return filter_


class FilterModule:
    def filters(self):
        return {
            "cuda13_resolution_refusal": _typed(resolve.refusal_message, str),
            "cuda13_resolved_set": _typed(resolve.resolved_set, dict),
        }
