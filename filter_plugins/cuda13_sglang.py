"""Filters of the SGLang step: from source or the release wheel (cuda13_upgrade.sglang_build)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import sglang_build
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_sglang_requirement
    short_description: The requirement naming the SGLang release (git ref for source, sglang==X for wheel).
    positional: _input, repo, ref
    options:
      _input: {description: sglang_build_method (source or wheel), type: str, required: true}
      repo: {description: sglang_build_repo, type: str, required: true}
      ref: {description: sglang_build_version, type: str, required: true}
  - name: cuda13_pip_show
    short_description: Name, version, location and editable location from C(pip show sglang).
    positional: _input
    options:
      _input: {description: pip show's output (empty when nothing is installed), type: str, required: true}
  - name: cuda13_sglang_wheel_plan
    short_description: Whether the release wheel is installed, and whether another sglang goes first.
    positional: _input, ref
    options:
      _input: {description: cuda13_pip_show of the venv's sglang, type: dict, required: true}
      ref: {description: sglang_build_version, type: str, required: true}
  - name: cuda13_sglang_resolved_wheel
    short_description: The release's wheel in the preflight's resolved set (a one-entry set), else [].
    positional: _input, ref
    options:
      _input: {description: cu130_wheels_resolved_target, or none, type: raw, required: true}
      ref: {description: sglang_build_version, type: str, required: true}
  - name: cuda13_sglang_import_problems
    short_description: What is wrong with the SGLang the venv imports (location, version), for either method.
    positional: _input, method, ref, src, venv
    options:
      _input: {description: "{version, file, dist} read with the venv's python", type: dict, required: true}
      method: {description: sglang_build_method, type: str, required: true}
      ref: {description: sglang_build_version, type: str, required: true}
      src: {description: sglang_build_src, type: str, required: true}
      venv: {description: sglang_build_venv, type: str, required: true}
  - name: cuda13_sglang_record
    short_description: The host's record of the step (what it installs, the paths a rollback removes).
    positional: _input, method, ref, repo, src, venv
    options:
      _input: {description: the record earlier runs left, or none, type: raw, required: true}
      method: {description: sglang_build_method, type: str, required: true}
      ref: {description: sglang_build_version, type: str, required: true}
      repo: {description: sglang_build_repo, type: str, required: true}
      src: {description: sglang_build_src, type: str, required: true}
      venv: {description: sglang_build_venv, type: str, required: true}
"""

EXAMPLES = r"""
requirement: "{{ sglang_build_method | cuda13_sglang_requirement(sglang_build_repo, sglang_build_version) }}"
plan: "{{ show.stdout | cuda13_pip_show | cuda13_sglang_wheel_plan(sglang_build_version) }}"
problems: "{{ imported | cuda13_sglang_import_problems(method, version, src, venv) }}"
"""

RETURN = r"""
  _value:
    description: >-
      The requirement or version (str, none), the parsed pip show or plan or record (dict),
      or the problems (list of str).
"""


def cuda13_sglang_requirement(method, repo, ref):
    return sglang_build.requirement(method, str(repo), str(ref))


def cuda13_pip_show(text):
    return sglang_build.parse_pip_show(str(text or ""))


def cuda13_sglang_wheel_plan(show, ref):
    if not isinstance(show, Mapping):
        raise AnsibleFilterError(f"cuda13_sglang_wheel_plan expects cuda13_pip_show's dict, got {show!r}")
    return sglang_build.wheel_plan(dict(show), str(ref))


def cuda13_sglang_resolved_wheel(resolved, ref):
    return sglang_build.resolved_wheel(resolved if isinstance(resolved, list) else None, str(ref))


def cuda13_sglang_import_problems(imported, method, ref, src, venv):
    if not isinstance(imported, Mapping):
        raise AnsibleFilterError(
            f"cuda13_sglang_import_problems expects the import's {{version, file, dist}}, got {imported!r}"
        )
    return sglang_build.import_problems(dict(imported), method, str(ref), str(src), str(venv))


def cuda13_sglang_record(previous, method, ref, repo, src, venv):
    previous = dict(previous) if isinstance(previous, Mapping) else None
    return sglang_build.install_record(previous, method, str(ref), str(repo), str(src), str(venv))


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                f.__name__: f
                for f in (
                    cuda13_sglang_requirement,
                    cuda13_pip_show,
                    cuda13_sglang_wheel_plan,
                    cuda13_sglang_resolved_wheel,
                    cuda13_sglang_import_problems,
                    cuda13_sglang_record,
                )
            }
        )
