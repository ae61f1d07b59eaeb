"""Ansible filters over the CUDA rules and tool parsers of the cuda13_upgrade package.

Thin wrappers: each checks the types of its arguments, calls the package and turns
its ``ValueError`` into an ``AnsibleFilterError`` that keeps the package's message
(value, option and remedy) and chains the cause.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from cuda13_upgrade import nvcc, nvidia_smi, preflight, versions, wheels
except ImportError:  # the package is not installed: use the checkout's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from cuda13_upgrade import nvcc, nvidia_smi, preflight, versions, wheels

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
  - name: cuda13_gpu_inventory
    short_description: GPU inventory (driver, count, GPUs) from an nvidia-smi query.
    positional: _input, fields, fmt
    options:
      _input:
        description: >-
          Stdout of C(nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_cap,
          memory.total,pci.bus_id).
        type: str
        required: true
      fields:
        description: The queried fields (must include the seven above).
        type: raw
      fmt:
        description: The --format value used.
        type: str
        default: "csv,noheader,nounits"
  - name: cuda13_nvidia_smi_failure
    short_description: What a failed nvidia-smi run means (code and remedy).
    positional: _input
    options:
      _input:
        description: The registered result of the command (rc, stdout, stderr).
        type: dict
        required: true
  - name: cuda13_parse_nvcc_version
    short_description: Parse C(nvcc --version) into release and version.
    positional: _input
    options:
      _input:
        description: Stdout of nvcc --version.
        type: str
        required: true
  - name: cuda13_driver_supports
    short_description: Whether a driver version supports a CUDA toolkit release.
    positional: _input, toolkit_release, jit, min_driver_version
    options:
      _input:
        description: The driver version, e.g. 590.48.01.
        type: str
        required: true
      toolkit_release:
        description: Target release, "13.0" or "13.0.2" (13.0 Update 2).
        type: str
        required: true
      jit:
        description: The stack JIT-compiles PTX, so minor version compatibility does not apply.
        type: bool
        default: true
      min_driver_version:
        description: Explicit minimum overriding the release notes table.
        type: str
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
  - name: cuda13_local_label
    short_description: The PEP 440 local version label of a wheel version (cu128), or none.
    positional: _input
    options:
      _input:
        description: A version such as 2.10.0+cu128.
        type: str
        required: true
  - name: cuda13_parse_pip_freeze
    short_description: Parse pip freeze into a dict of normalised name to version or none.
    positional: _input
    options:
      _input:
        description: Stdout of pip freeze.
        type: str
        required: true
  - name: cuda13_stack_problems
    short_description: Inconsistencies of the torch, sgl-kernel and flashinfer wheels.
    positional: _input, default_labels
    options:
      _input:
        description: Distribution name to version, e.g. from cuda13_parse_pip_freeze.
        type: dict
        required: true
      default_labels:
        description: Labels to assume for wheels without one, e.g. sgl-kernel = cu128.
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
inventory: "{{ smi.stdout | cuda13_gpu_inventory }}"
why: "{{ smi | cuda13_nvidia_smi_failure }}"
nvcc: "{{ nvcc_out.stdout | cuda13_parse_nvcc_version }}"
driver_ok: "{{ (inventory.driver_version | cuda13_driver_supports(cuda13_toolkit_release)).ok }}"
report: "{{ facts | cuda13_preflight({'expected_gpu_count': 8}) }}"
label: "{{ '2.10.0+cu128' | cuda13_local_label }}"
dists: "{{ freeze.stdout | cuda13_parse_pip_freeze }}"
problems: "{{ dists | cuda13_stack_problems }}"
arch_list: "{{ inventory.compute_capabilities | cuda13_torch_cuda_arch_list }}"
"""

RETURN = r"""
  _value:
    description: >
      cuda13_parse_query_gpu - list of dicts keyed by field; cuda13_gpu_inventory - dict
      (driver_version, count, compute_capabilities, gpus); cuda13_nvidia_smi_failure - dict
      (code, remedy, detail, rc); cuda13_parse_nvcc_version - dict (release, version,
      built_on, build); cuda13_driver_supports - dict (ok, required, rule, message,
      driver_version, toolkit_release); cuda13_preflight - dict (ok, failures, passed);
      cuda13_local_label - str or none; cuda13_parse_pip_freeze - dict; cuda13_stack_problems -
      list of str; cuda13_torch_cuda_arch_list - str.
"""


def _type_error(name: str, what: str, expected: str, value: Any) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {what} must be {expected}, got {type(value).__name__}: {value!r}")


def _fail(name: str, exc: ValueError) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {exc}")


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
    try:
        return nvidia_smi.parse_query_gpu(text, fields, fmt)
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_gpu_inventory(
    text: Any, fields: Any = nvidia_smi.INVENTORY_FIELDS, fmt: Any = "csv,noheader,nounits"
) -> dict[str, Any]:
    """Filter: GPU inventory dict (see nvidia_smi.GpuInventory.from_query)."""
    name = "cuda13_gpu_inventory"
    if not isinstance(text, str):
        raise _type_error(name, "input", "the stdout text of nvidia-smi --query-gpu", text)
    if not (isinstance(fields, str) or _is_str_list(fields)):
        raise _type_error(name, "fields", "a list of field names or a comma-separated string", fields)
    if not isinstance(fmt, str):
        raise _type_error(name, "fmt", "a --format string such as 'csv,noheader'", fmt)
    try:
        return nvidia_smi.GpuInventory.from_query(text, fields, fmt).to_dict()
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_nvidia_smi_failure(result: Any) -> dict[str, Any]:
    """Filter: classify a registered nvidia-smi result (see nvidia_smi.classify_failure)."""
    name = "cuda13_nvidia_smi_failure"
    if not isinstance(result, Mapping) or not isinstance(result.get("rc"), int):
        raise _type_error(name, "input", "a registered command result with an integer rc", result)
    return nvidia_smi.classify_failure(
        result["rc"], str(result.get("stdout") or ""), str(result.get("stderr") or "")
    ).to_dict()


def cuda13_parse_nvcc_version(text: Any) -> dict[str, Any]:
    """Filter: ``{"release", "version", "built_on", "build"}`` of ``nvcc --version``."""
    name = "cuda13_parse_nvcc_version"
    if not isinstance(text, str):
        raise _type_error(name, "input", "the stdout text of nvcc --version", text)
    try:
        return nvcc.parse_nvcc_version(text)
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_driver_supports(
    driver_version: Any,
    toolkit_release: Any,
    jit: Any = True,
    min_driver_version: Any = None,
) -> dict[str, Any]:
    """Filter: CompatResult as a dict (see versions.driver_supports)."""
    name = "cuda13_driver_supports"
    if not isinstance(driver_version, str):
        raise _type_error(name, "input (driver version)", "a string such as '590.48.01'", driver_version)
    if not isinstance(toolkit_release, str):
        raise _type_error(name, "toolkit_release", "a quoted string such as '13.0'", toolkit_release)
    if not isinstance(jit, bool):
        raise _type_error(name, "jit", "true or false", jit)
    if min_driver_version is not None and not isinstance(min_driver_version, str):
        raise _type_error(
            name, "min_driver_version", "a string such as '580.95.05' or none", min_driver_version
        )
    try:
        return versions.driver_supports(
            driver_version,
            toolkit_release,
            jit=jit,
            min_driver_version=min_driver_version,
        ).to_dict()
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_preflight(facts: Any, settings: Any = None) -> dict[str, Any]:
    """Filter: the preflight report dict (see preflight.evaluate)."""
    name = "cuda13_preflight"
    if not isinstance(facts, Mapping):
        raise _type_error(name, "input (facts)", "a dict of host facts", facts)
    if settings is not None and not isinstance(settings, Mapping):
        raise _type_error(name, "settings", "a dict of preflight settings", settings)
    try:
        return preflight.evaluate(facts, settings).to_dict()
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_local_label(version: Any) -> str | None:
    """Filter: ``"cu128"`` for ``"2.10.0+cu128"``, none when the version has no label."""
    name = "cuda13_local_label"
    if not isinstance(version, str):
        raise _type_error(name, "input", "a version string such as '2.10.0+cu128'", version)
    try:
        return wheels.local_label(version)
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_parse_pip_freeze(text: Any) -> dict[str, str | None]:
    """Filter: ``{normalised name: version or none}`` from pip freeze output."""
    name = "cuda13_parse_pip_freeze"
    if not isinstance(text, str):
        raise _type_error(name, "input", "the stdout text of pip freeze", text)
    try:
        return wheels.parse_pip_freeze(text)
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_stack_problems(dists: Any, default_labels: Any = None) -> list[str]:
    """Filter: problems of a wheel stack, [] when consistent (wheels.check_stack_consistency)."""
    name = "cuda13_stack_problems"
    if not isinstance(dists, Mapping):
        raise _type_error(name, "input", "a dict of distribution name to version", dists)
    if default_labels is not None and not (
        isinstance(default_labels, Mapping) and all(isinstance(v, str) for v in default_labels.values())
    ):
        raise _type_error(
            name,
            "default_labels",
            "a dict of distribution name to label such as 'cu128'",
            default_labels,
        )
    try:
        return wheels.check_stack_consistency(dists, default_labels=default_labels)
    except ValueError as exc:
        raise _fail(name, exc) from exc


def cuda13_torch_cuda_arch_list(capabilities: Any) -> str:
    """Filter: ``"9.0;12.0"`` from ``["12.0", "9.0"]`` (see versions.torch_cuda_arch_list)."""
    name = "cuda13_torch_cuda_arch_list"
    if not _is_str_list(capabilities):
        raise _type_error(name, "input", "a list of compute capabilities such as ['12.0']", capabilities)
    try:
        return versions.torch_cuda_arch_list(capabilities)
    except ValueError as exc:
        raise _fail(name, exc) from exc


class FilterModule:
    """The cuda13_* filters of this module."""

    def filters(self) -> dict[str, Any]:
        return {
            "cuda13_parse_query_gpu": cuda13_parse_query_gpu,
            "cuda13_gpu_inventory": cuda13_gpu_inventory,
            "cuda13_nvidia_smi_failure": cuda13_nvidia_smi_failure,
            "cuda13_parse_nvcc_version": cuda13_parse_nvcc_version,
            "cuda13_driver_supports": cuda13_driver_supports,
            "cuda13_preflight": cuda13_preflight,
            "cuda13_local_label": cuda13_local_label,
            "cuda13_parse_pip_freeze": cuda13_parse_pip_freeze,
            "cuda13_stack_problems": cuda13_stack_problems,
            "cuda13_torch_cuda_arch_list": cuda13_torch_cuda_arch_list,
        }
