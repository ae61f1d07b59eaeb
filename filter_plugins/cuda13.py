"""Ansible filters over the CUDA rules and tool parsers of the cuda13_upgrade package.

Thin wrappers: each checks the types of its arguments and calls the package;
:func:`cuda13_upgrade.filtering.ansible_filters` turns the package's ``ValueError``
into an ``AnsibleFilterError`` that keeps its message (value, option and remedy)
and chains the cause.
"""

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

from cuda13_upgrade import nvcc, nvidia_smi, preflight, versions
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_parse_query_gpu
    short_description: Parse C(nvidia-smi --query-gpu=FIELDS --format=FMT) output.
    positional: _input, fields, fmt
    options:
      _input:
        description: Stdout of the command.
        type: str
        required: true
      fields:
        description: The queried fields, a list or the comma-separated string.
        type: raw
        required: true
      fmt:
        description: The --format value used.
        type: str
        default: "csv,noheader,nounits"
  - name: cuda13_nvidia_smi_failure
    short_description: What a failed nvidia-smi run means (code and remedy).
    positional: _input, timeout
    options:
      _input:
        description: >-
          The registered result of the command (rc, stdout, stderr; msg without rc when the
          command did not run; timedout when the task's own timeout ended it).
        type: dict
        required: true
      timeout:
        description: >-
          Seconds nvidia-smi ran under coreutils timeout for; its exit status 124 or 137 is then
          a hang (code timeout). Omitted when it ran without.
        type: int
  - name: cuda13_parse_nvcc_version
    short_description: Parse C(nvcc --version) into release and version.
    positional: _input
    options:
      _input:
        description: Stdout of nvcc --version.
        type: str
        required: true
  - name: cuda13_preflight
    short_description: Run every preflight check of a host (see cuda13_upgrade.preflight).
    positional: _input, settings
    options:
      _input:
        description: Host facts (driver_version, gpus, disk_free_bytes, python_version, ...).
        type: dict
        required: true
      settings:
        description: Preflight settings; missing keys take the defaults.
        type: dict
  - name: cuda13_stack_driver
    short_description: The driver against the floor of every CUDA component of the resolved target.
    positional: _input, driver_version, settings
    options:
      _input:
        description: The resolved target (cu130_wheels_resolved_target, a list of name, version, url, sha256).
        type: list
        required: true
      driver_version:
        description: The driver version nvidia-smi reports, e.g. 590.48.01.
        type: str
        required: true
      settings:
        description: Preflight settings (toolkit_release, jit, min_driver_version, option_names).
        type: dict
  - name: cuda13_torch_cuda_arch_list
    short_description: TORCH_CUDA_ARCH_LIST value from compute capabilities ("9.0;12.0").
    positional: _input
    options:
      _input:
        description: Compute capabilities, e.g. the inventory's compute_capabilities.
        type: list
        required: true
"""

EXAMPLES = r"""
rows: "{{ smi.stdout | cuda13_parse_query_gpu('index,name,compute_cap', 'csv,noheader') }}"
why: "{{ smi | cuda13_nvidia_smi_failure(60) }}"
nvcc: "{{ nvcc_out.stdout | cuda13_parse_nvcc_version }}"
report: "{{ facts | cuda13_preflight({'expected_gpu_count': 8}) }}"
floor: "{{ cu130_wheels_resolved_target | cuda13_stack_driver('590.48.01', {'toolkit_release': '13.0.2'}) }}"
arch_list: "{{ ['12.0', '9.0'] | cuda13_torch_cuda_arch_list }}"
"""

RETURN = r"""
  _value:
    description: >
      cuda13_parse_query_gpu - list of dicts keyed by field; cuda13_nvidia_smi_failure - dict
      (code, remedy, detail, rc, timeout_s, summary); cuda13_parse_nvcc_version - dict (release, version,
      built_on, build); cuda13_preflight, cuda13_stack_driver - dict (ok, failures, passed);
      cuda13_torch_cuda_arch_list - str.
"""


def _type_error(name: str, what: str, expected: str, value: Any) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {what} must be {expected}, got {type(value).__name__}: {value!r}")


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def cuda13_parse_query_gpu(text: Any, fields: Any, fmt: Any = "csv,noheader,nounits") -> list[dict[str, Any]]:
    """Filter: rows of ``nvidia-smi --query-gpu`` output (see nvidia_smi.parse_query_gpu)."""
    name = "cuda13_parse_query_gpu"
    if not isinstance(text, str):
        raise _type_error(name, "input", "the stdout text of nvidia-smi --query-gpu", text)
    if not (isinstance(fields, str) or _is_str_list(fields)):
        raise _type_error(name, "fields", "a list of field names or a comma-separated string", fields)
    if not isinstance(fmt, str):
        raise _type_error(name, "fmt", "a --format string such as 'csv,noheader'", fmt)
    return nvidia_smi.parse_query_gpu(text, fields, fmt)


def cuda13_nvidia_smi_failure(result: Any, timeout: Any = None) -> dict[str, Any]:
    """Filter: classify a registered nvidia-smi result (see nvidia_smi.classify_failure)."""
    name = "cuda13_nvidia_smi_failure"
    ran = isinstance(result, Mapping) and (
        isinstance(result.get("rc"), int) or "msg" in result or result.get("timedout")
    )
    if not ran:
        raise _type_error(
            name, "input", "a registered command result with an integer rc (or msg, or timedout)", result
        )
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise _type_error(name, "timeout", "the seconds nvidia-smi was given, a number", timeout)
    rc = result.get("rc")
    return nvidia_smi.classify_failure(
        rc if isinstance(rc, int) else None,
        str(result.get("stdout") or ""),
        str(result.get("stderr") or result.get("msg") or ""),
        timeout_s=timeout,
        timed_out=bool(result.get("timedout")),
    ).to_dict()


def cuda13_parse_nvcc_version(text: Any) -> dict[str, Any]:
    """Filter: ``{"release", "version", "built_on", "build"}`` of ``nvcc --version``."""
    name = "cuda13_parse_nvcc_version"
    if not isinstance(text, str):
        raise _type_error(name, "input", "the stdout text of nvcc --version", text)
    return nvcc.parse_nvcc_version(text)


def cuda13_preflight(facts: Any, settings: Any = None) -> dict[str, Any]:
    """Filter: the preflight report dict (see preflight.evaluate)."""
    name = "cuda13_preflight"
    if not isinstance(facts, Mapping):
        raise _type_error(name, "input (facts)", "a dict of host facts", facts)
    if settings is not None and not isinstance(settings, Mapping):
        raise _type_error(name, "settings", "a dict of preflight settings", settings)
    return preflight.evaluate(facts, settings).to_dict()


def cuda13_stack_driver(resolved: Any, driver_version: Any, settings: Any = None) -> dict[str, Any]:
    """Filter: the stack_driver check of a resolved target (see preflight.check_stack_driver)."""
    name = "cuda13_stack_driver"
    if not isinstance(resolved, list):
        raise _type_error(name, "input", "the resolved target, a list of {name, version} dicts", resolved)
    if not isinstance(driver_version, str):
        raise _type_error(name, "driver_version", "the driver version nvidia-smi reports", driver_version)
    if settings is not None and not isinstance(settings, Mapping):
        raise _type_error(name, "settings", "a dict of preflight settings", settings)
    return preflight.check_stack_driver(resolved, driver_version, settings).to_dict()


def cuda13_torch_cuda_arch_list(capabilities: Any) -> str:
    """Filter: ``"9.0;12.0"`` from ``["12.0", "9.0"]`` (see versions.torch_cuda_arch_list)."""
    name = "cuda13_torch_cuda_arch_list"
    if not _is_str_list(capabilities):
        raise _type_error(name, "input", "a list of compute capabilities such as ['12.0']", capabilities)
    return versions.torch_cuda_arch_list(capabilities)


class FilterModule:
    """The cuda13_* filters of this module."""

    def filters(self) -> dict[str, Any]:
        return ansible_filters(
            {
                "cuda13_parse_query_gpu": cuda13_parse_query_gpu,
                "cuda13_nvidia_smi_failure": cuda13_nvidia_smi_failure,
                "cuda13_parse_nvcc_version": cuda13_parse_nvcc_version,
                "cuda13_preflight": cuda13_preflight,
                "cuda13_stack_driver": cuda13_stack_driver,
                "cuda13_torch_cuda_arch_list": cuda13_torch_cuda_arch_list,
            }
        )
