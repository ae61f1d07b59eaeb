"""Filters over pip's resolver in report mode (the preflight's target resolution)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import resolve
from cuda13_upgrade.filtering import ansible_filters

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
  - name: cuda13_resolved_requirements
    short_description: The requirements file of a resolved set (name==version, --hash=sha256).
    positional: _input, exclude
    options:
      _input: {description: the resolved set (cuda13_resolved_set), type: list, required: true}
      exclude: {description: names to leave out, type: list, default: []}
  - name: cuda13_resolution_leaders
    short_description: Host -> the host whose resolution it installs (first host of each key).
    positional: _input, hosts
    options:
      _input: {description: host -> key of what its resolution reads, type: dict, required: true}
      hosts: {description: the run's hosts in order, type: list, required: true}
"""

EXAMPLES = r"""
msg: "{{ resolve.stderr | cuda13_resolution_refusal }}"
target: "{{ resolve.stdout | from_json | cuda13_resolved_set }}"
content: "{{ cu130_wheels_resolved_target | cuda13_resolved_requirements(['sglang']) }}"
leader: "{{ (keys | cuda13_resolution_leaders(ansible_play_hosts))[inventory_hostname] }}"
"""

RETURN = r"""
  _value:
    description: >-
      The message (str), the resolved set (list of dicts), the requirements file (str)
      or host -> host (dict).
"""


def _typed(func, kind):
    def filter_(value, *args):
        if not isinstance(value, kind):
            raise AnsibleFilterError(
                f"{func.__name__} expects a {kind.__name__}, got {type(value).__name__}: {value!r}"
            )
        return func(value, *args)

    filter_.__name__ = func.__name__
    return filter_


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_resolution_refusal": _typed(resolve.refusal_message, str),
                "cuda13_resolved_set": _typed(resolve.resolved_set, dict),
                "cuda13_resolved_requirements": _typed(resolve.resolved_requirements, list),
                "cuda13_resolution_leaders": _typed(resolve.resolution_leaders, dict),
            }
        )
