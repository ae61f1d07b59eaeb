"""Filters over what a host has: its filesystems' space and its service's user
(thin wrappers over cuda13_upgrade.space and cuda13_upgrade.service)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import service, space
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_space_plan
    short_description: Group the places the run writes to by filesystem; need against free space.
    positional: _input, places, figures_file, stack
    options:
      _input: {description: space_probe.py's output (parsed JSON), type: dict, required: true}
      places:
        description: "{place: path} (cuda13_upgrade.space.PLACES; empty path: not written)"
        type: dict
        required: true
      figures_file: {description: the parsed stack-space.yml, type: dict, required: true}
      stack:
        description: the stack whose figures apply (nvidia_driver_check_space_stack)
        type: str
        required: true
  - name: cuda13_service_identity
    short_description: The serving unit's user, group, environment and cache directories.
    positional: _input, passwd, environ
    options:
      _input: {description: systemctl show -p User -p Group -p Environment -p MainPID output, type: str}
      passwd: {description: getent passwd <user> output, type: str}
      environ: {description: "/proc/<MainPID>/environ, '' when the unit does not run", type: str}
"""

EXAMPLES = r"""
plan: >-
  {{ probe.stdout | from_json
     | cuda13_space_plan(places, lookup('file', 'stack-space.yml') | from_yaml, 'pypi-sglang-0.5.23') }}
identity: "{{ show.stdout | cuda13_service_identity(passwd.stdout, environ) }}"
"""

RETURN = r"""
  _value:
    description: >-
      list of {dev, mount, fstype, free_bytes, need_bytes, ok, places, message} per filesystem
      (cuda13_upgrade.space.plan); cuda13_service_identity - dict
      (cuda13_upgrade.service.service_identity).
"""


def cuda13_space_plan(probe, places, figures_file, stack):
    name = "cuda13_space_plan"
    for label, value in (
        ("input (space_probe.py output)", probe),
        ("places", places),
        ("figures_file", figures_file),
    ):
        if not isinstance(value, Mapping):
            raise AnsibleFilterError(f"{name} expects {label} as a dict, got {value!r}")
    if not isinstance(stack, str):
        raise AnsibleFilterError(f"{name} expects the stack's name as a string, got {stack!r}")
    return space.plan(probe, dict(places), space.stack_figures(figures_file, stack))


def cuda13_service_identity(show, passwd="", environ=""):
    name = "cuda13_service_identity"
    for label, value in (("input (systemctl show output)", show), ("passwd", passwd), ("environ", environ)):
        if not isinstance(value, str):
            raise AnsibleFilterError(f"{name} expects {label} as text, got {value!r}")
    return service.service_identity(show, passwd, environ)


class FilterModule:
    def filters(self):
        return ansible_filters(
            {"cuda13_space_plan": cuda13_space_plan, "cuda13_service_identity": cuda13_service_identity}
        )
