"""Filters that check every option of the upgrade once (see cuda13_upgrade.options)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import options
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_deprecated_alias
    short_description: The value as it is, with a deprecation warning that its former name was read.
    positional: _input, old, new
    options:
      _input: {description: the value (the options record), type: raw, required: true}
      old: {description: the former name, type: str, required: true}
      new: {description: the name to read instead, type: str, required: true}
  - name: cuda13_validate_options
    short_description: Check and convert every option (types, ranges, formats, values against each other).
    positional: _input, specs
    options:
      _input:
        description: The options the inventory or -e gave, option name to value.
        type: dict
        required: true
      specs:
        description: The roles' argument specs (each file's parsed content), merged in order.
        type: list
        required: true
  - name: cuda13_read_specs
    short_description: Read the roles' argument specs (meta/argument_specs.yml) on the control node.
    positional: _input
    options:
      _input:
        description: Paths of argument_specs.yml files on the control node.
        type: list
        required: true
  - name: cuda13_option_names
    short_description: Names of every option of the specs and of the playbooks.
    positional: _input
    options:
      _input:
        description: The roles' argument specs (each file's parsed content).
        type: list
        required: true
  - name: cuda13_option_host_failures
    short_description: Host-dependent rules (unit, old venv, apt repository, indexes) from read-only facts.
    positional: _input, values
    options:
      _input:
        description: Facts observed on the host (see cuda13_upgrade.options.host_failures).
        type: dict
        required: true
      values:
        description: The validated options (cuda13_validate_options' values).
        type: dict
        required: true
"""

EXAMPLES = r"""
report: "{{ given | cuda13_validate_options(spec_files | cuda13_read_specs) }}"
failures: "{{ facts | cuda13_option_host_failures(cuda13_options) }}"
"""

RETURN = r"""
  _value:
    description: >
      cuda13_validate_options - dict (ok, failures [{option, value, message}], values);
      cuda13_read_specs - list of each file's parsed content;
      cuda13_option_host_failures - list of failures.
"""


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def cuda13_read_specs(paths: Any) -> list[dict[str, Any]]:
    """Filter: each argument_specs.yml parsed with PyYAML's safe loader (libyaml's where built).

    What ``query('file', ...) | map('from_yaml')`` gives, without Ansible's
    origin-tracking loader: the options check reads ten spec files for every
    host, and that loader took most of its time (0.35 s of 0.55 s per host).
    Raises AnsibleFilterError naming a file that cannot be read or parsed.
    """
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise AnsibleFilterError(f"cuda13_read_specs expects a list of paths, got {paths!r}")
    specs = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                specs.append(yaml.load(handle, Loader=_LOADER))  # noqa: S506 - a safe loader
        except (OSError, yaml.YAMLError) as exc:
            raise AnsibleFilterError(
                f"cuda13_read_specs: cannot read the argument spec {path}: {exc}"
            ) from exc
    return specs


def cuda13_validate_options(given: Any, specs: Any) -> dict[str, Any]:
    """Filter: :func:`cuda13_upgrade.options.validate` over the merged specs."""
    if not isinstance(given, Mapping):
        raise AnsibleFilterError(f"cuda13_validate_options: input must be a dict of options, got {given!r}")
    if not isinstance(specs, list) or not all(isinstance(s, Mapping) for s in specs):
        raise AnsibleFilterError(
            "cuda13_validate_options: specs must be a list of argument_specs.yml contents"
        )
    merged: dict[str, Any] = {}
    for spec in specs:
        try:
            merged.update(spec["argument_specs"]["main"]["options"])
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"cuda13_validate_options: not an argument spec: {spec!r}") from exc
    return options.validate(dict(given), merged)


def cuda13_option_host_failures(facts: Any, values: Any) -> list[dict[str, Any]]:
    """Filter: :func:`cuda13_upgrade.options.host_failures`."""
    if not isinstance(facts, Mapping) or not isinstance(values, Mapping):
        raise AnsibleFilterError(
            "cuda13_option_host_failures: takes two dicts (host facts, validated options)"
        )
    return options.host_failures(facts, values)


def cuda13_deprecated_alias(value: Any, old: Any, new: Any) -> Any:
    """Filter: ``value`` as it is, with a deprecation warning that ``old`` is read (use ``new``).

    The options record was named ``nvidia_driver_check_options`` before it was
    ``cuda13_options``; the old name keeps working for one release
    (roles/upgrade_host/vars/main.yml) and says so when something reads it.
    """
    from ansible.utils.display import Display

    Display().deprecated(
        msg=f"the variable {old} is the options record's former name",
        version="0.3.0",
        collection_name="cuda13-upgrade",
        help_text=f"Read {new} instead; {old} goes in cuda13-upgrade 0.3.0.",
    )
    return value


def cuda13_option_names(specs: Any) -> list[str]:
    """Filter: the names of every option in the specs and of the playbooks' own options."""
    if not isinstance(specs, list) or not all(isinstance(s, Mapping) for s in specs):
        raise AnsibleFilterError("cuda13_option_names: specs must be a list of argument_specs.yml contents")
    names = list(options.PLAY_OPTIONS)
    for spec in specs:
        names.extend(spec["argument_specs"]["main"]["options"])
    return sorted(set(names))


class FilterModule:
    """The option filters."""

    def filters(self) -> dict[str, Any]:
        return ansible_filters(
            {
                "cuda13_validate_options": cuda13_validate_options,
                "cuda13_read_specs": cuda13_read_specs,
                "cuda13_option_host_failures": cuda13_option_host_failures,
                "cuda13_option_names": cuda13_option_names,
                "cuda13_deprecated_alias": cuda13_deprecated_alias,
            }
        )
