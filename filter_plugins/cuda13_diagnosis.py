"""Filters over failure texts and the fleet host facts (diagnosis, compute apps, WSL)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import diagnosis, nvidia_smi
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_diagnose
    short_description: Kind, cause and remedy of a failure text (cuda13_upgrade.diagnosis.diagnose).
    positional: _input, source, context
    options:
      _input:
        description: The failure output, a string or a list of lines.
        type: raw
        required: true
      source:
        description: Where the text came from (import, journal, pip, apt, git).
        type: str
        default: ""
      context:
        description: Facts that sharpen the remedy, e.g. C({"torch_version": "2.10.0+cu130"}).
        type: dict
        default: {}
  - name: cuda13_parse_compute_apps
    short_description: Rows of C(nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory).
    positional: _input, rc
  - name: cuda13_parse_proc_driver_version
    short_description: The loaded kernel module's version from C(/proc/driver/nvidia/version).
"""

EXAMPLES = r"""
diagnosis: "{{ (probe.stdout_lines + probe.stderr_lines) | cuda13_diagnose('import') }}"
apps: "{{ query.stdout | cuda13_parse_compute_apps(query.rc) }}"
"""

RETURN = r"""
  _value:
    description: >-
      cuda13_diagnose - dict (kind, cause, remedy, evidence, source, known);
      cuda13_parse_compute_apps - list of dicts; cuda13_parse_proc_driver_version - dict.
"""


def cuda13_diagnose(text: Any, source: Any = "", context: Any = None) -> dict[str, Any]:
    """Filter: :func:`cuda13_upgrade.diagnosis.diagnose` as a dict."""
    if text is not None and not isinstance(text, str | list):
        raise AnsibleFilterError(f"cuda13_diagnose: input must be text or a list of lines, got {text!r}")
    if not isinstance(source, str):
        raise AnsibleFilterError(f"cuda13_diagnose: source must be a string, got {source!r}")
    if context is not None and not isinstance(context, Mapping):
        raise AnsibleFilterError(f"cuda13_diagnose: context must be a mapping, got {context!r}")
    return diagnosis.diagnose(text, source=source, context=context).to_dict()


def cuda13_parse_compute_apps(text: Any, rc: Any = None) -> list[dict[str, Any]]:
    """Filter: :func:`cuda13_upgrade.nvidia_smi.parse_compute_apps`."""
    if not isinstance(text, str):
        raise AnsibleFilterError(f"cuda13_parse_compute_apps: input must be text, got {text!r}")
    return nvidia_smi.parse_compute_apps(text, rc=int(rc) if rc is not None else None)


def cuda13_parse_proc_driver_version(text: Any) -> dict[str, Any]:
    """Filter: :func:`cuda13_upgrade.nvidia_smi.parse_proc_driver_version`."""
    if not isinstance(text, str):
        raise AnsibleFilterError(f"cuda13_parse_proc_driver_version: input must be text, got {text!r}")
    return nvidia_smi.parse_proc_driver_version(text)


class FilterModule:
    """Diagnosis and fleet host filters."""

    def filters(self) -> dict[str, Any]:
        return ansible_filters(
            {
                "cuda13_diagnose": cuda13_diagnose,
                "cuda13_parse_compute_apps": cuda13_parse_compute_apps,
                "cuda13_parse_proc_driver_version": cuda13_parse_proc_driver_version,
            }
        )
