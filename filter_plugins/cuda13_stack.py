"""Filters over the running stack of a host (snapshot, service command)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import components, nospace, nvidia_smi, stack
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_snapshot_manifest
    short_description: Build the snapshot manifest from raw tool outputs.
    positional: _input
    options:
      _input:
        description: Mapping of raw outputs (see cuda13_upgrade.stack.build_manifest).
        type: dict
        required: true
  - name: cuda13_parse_alternatives
    short_description: Parse C(update-alternatives --query NAME).
  - name: cuda13_cuda_alternatives_groups
    short_description: The CUDA link groups (cuda, cuda-<release>) in C(update-alternatives --get-selections).
    options:
      named: {description: more groups to include where they exist, type: list, elements: str}
  - name: cuda13_parse_df_avail
    short_description: Free bytes per path from C(df --output=avail --block-size=1 PATH...).
    options:
      paths: {description: the paths given to df, in order, type: list, elements: str, required: true}
  - name: cuda13_diagnose_no_space
    short_description: Cause and remedy when a failed step ran out of disk space (else none).
    options:
      free_bytes: {description: free bytes per written path after the failure, type: dict}
  - name: cuda13_service_exec_start
    short_description: The effective ExecStart of C(systemctl cat UNIT).
  - name: cuda13_rewrite_exec_start
    short_description: Point a service command from the old venv at the new one.
    options:
      old_venv: {description: the serving venv of the old stack, type: str, required: true}
      new_venv: {description: the venv of the new stack, type: str, required: true}
  - name: cuda13_freeze_difference
    short_description: Lines removed from and added to a pip freeze.
  - name: cuda13_parse_dpkg_query
    short_description: Installed packages from dpkg-query output.
  - name: cuda13_stack_verdict
    short_description: A venv's verdict (problems, remaining conditions, notes) from stack_probe.py's JSON.
    options:
      expected_cuda_major: {description: CUDA major torch.version.cuda must report, type: int, required: true}
      driver_library_optional: {description: a host without libcuda.so.1 may pass, type: bool, default: false}
      compute_capabilities: {description: capabilities the arch list must cover, type: list, default: []}
      driver_version: {description: "the driver nvidia-smi reports, named on failure", type: str}
  - name: cuda13_toolkit_skew
    short_description: Skew between C(nvcc --version) of a toolkit and torch.version.cuda.
    options:
      torch_cuda: {description: torch.version.cuda of the venv, type: str, required: true}
  - name: cuda13_parse_table_header
    short_description: Driver version and CUDA Version from nvidia-smi's table header.
"""

EXAMPLES = r"""
manifest: "{{ raw | cuda13_snapshot_manifest }}"
exec_start: >-
  {{ unit.stdout | cuda13_service_exec_start
     | cuda13_rewrite_exec_start('/opt/ml-env', '/opt/ml-env-cu130') }}
"""

RETURN = r"""
  _value:
    description: The manifest dict, parsed mapping, command line or difference.
"""


def _wrap(func, kind):
    def filter_(value, *args):
        if not isinstance(value, kind):
            raise AnsibleFilterError(
                f"{func.__name__} expects a {kind.__name__}, got {type(value).__name__}: {value!r}"
            )
        return func(value, *args)

    filter_.__name__ = func.__name__
    return filter_


def cuda13_freeze_difference(before, after):
    if not isinstance(before, list) or not isinstance(after, list):
        raise AnsibleFilterError(
            f"cuda13_freeze_difference expects two lists, got {type(before).__name__} "
            f"and {type(after).__name__}"
        )
    return stack.freeze_difference(before, after)


def cuda13_stack_verdict(
    probe,
    expected_cuda_major,
    driver_library_optional=False,
    compute_capabilities=None,
    driver_version=None,
):
    if not isinstance(probe, dict):
        raise AnsibleFilterError(f"cuda13_stack_verdict expects the probe's mapping, got {probe!r}")
    if not isinstance(driver_library_optional, bool):
        raise AnsibleFilterError(
            "cuda13_stack_verdict: driver_library_optional must be a boolean, "
            f"got {driver_library_optional!r}"
        )
    if compute_capabilities is not None and not isinstance(compute_capabilities, list):
        raise AnsibleFilterError(
            f"cuda13_stack_verdict: compute_capabilities must be a list, got {compute_capabilities!r}"
        )
    return stack.stack_verdict(
        probe,
        int(expected_cuda_major),
        driver_library_optional=driver_library_optional,
        compute_capabilities=compute_capabilities,
        driver_version=str(driver_version) if driver_version else None,
    )


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_snapshot_manifest": _wrap(stack.build_manifest, dict),
                "cuda13_parse_alternatives": _wrap(stack.parse_alternatives_query, str),
                "cuda13_cuda_alternatives_groups": _wrap(stack.cuda_alternatives_groups, str),
                "cuda13_parse_df_avail": _wrap(nospace.parse_df_avail, str),
                "cuda13_diagnose_no_space": _wrap(nospace.diagnose_no_space, str),
                "cuda13_service_exec_start": _wrap(stack.service_exec_start, str),
                "cuda13_rewrite_exec_start": _wrap(stack.rewrite_exec_start, str),
                "cuda13_freeze_difference": cuda13_freeze_difference,
                "cuda13_parse_dpkg_query": _wrap(stack.parse_dpkg_query, str),
                "cuda13_pip_freeze_lines": _wrap(stack.parse_pip_freeze_lines, str),
                "cuda13_stack_verdict": cuda13_stack_verdict,
                "cuda13_toolkit_skew": _wrap(components.toolkit_skew, str),
                "cuda13_parse_table_header": _wrap(nvidia_smi.parse_table_header, str),
            }
        )
