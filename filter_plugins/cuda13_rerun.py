"""Filter for the re-run of a kept host (a thin wrapper over cuda13_upgrade.rerun)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import rerun, scriptout
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_same_target
    short_description: Whether a recorded target (result.json, staged.json) is this run's.
    positional: _input, target
    options:
      _input: {description: the recorded target, or none, type: raw, required: true}
      target: {description: this run's target, type: dict, required: true}
  - name: cuda13_target
    short_description: The run's target from the validated options (nvidia_driver_check_options).
    positional: _input
    options:
      _input: {description: the validated options, type: dict, required: true}
  - name: cuda13_host_verdict
    short_description: What the run does with a host, from stack_digest.py --state, before or under the lock.
    positional: _input, target, run_id, reverify, locked, host
    options:
      _input: {description: the script task's result (stack_digest.py --state), type: raw, required: true}
      target: {description: this run's target, type: dict, required: true}
      run_id: {description: this run's identifier, type: str, required: true}
      reverify: {description: measure again anyway (cuda13_reverify), type: bool, default: false}
      locked: {description: this run holds the host's lock, type: bool, default: false}
      host: {description: the host's name, which begins each line of the notice, type: str, default: ""}
"""

EXAMPLES = r"""
staged: "{{ staged.target | default(none) | cuda13_same_target(__cuda13_target) }}"
target: "{{ nvidia_driver_check_options | cuda13_target }}"
host: "{{ script_task | cuda13_host_verdict(__cuda13_target, cuda13_run_id, false, true) }}"
"""

RETURN = r"""
  _value:
    description: >-
      A bool (cuda13_upgrade.rerun.same_target); the target (cuda13_upgrade.rerun.target);
      {already_kept, differs, reason, measure, previous, stopped} (cuda13_upgrade.rerun.host_verdict).
"""


def cuda13_same_target(recorded, target):
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(f"cuda13_same_target expects the run's target as a dict, got {target!r}")
    return rerun.same_target(dict(recorded) if isinstance(recorded, Mapping) else None, dict(target))


def cuda13_target(options):
    if not isinstance(options, Mapping):
        raise AnsibleFilterError(f"cuda13_target expects the validated options as a dict, got {options!r}")
    try:
        return rerun.target(options)
    except KeyError as exc:
        raise AnsibleFilterError(
            f"cuda13_target: {exc.args[0]} (run nvidia_driver_check's options.yml first)"
        ) from exc


def _found(name, state, target):
    """stack_digest.py --state's output as rerun's ``state`` (its digest inside), or None."""
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(f"{name} expects the run's target as a dict, got {target!r}")
    if state is not None and not isinstance(state, Mapping):
        raise AnsibleFilterError(f"{name} expects the host's state as a dict, got {state!r}")
    found = dict(state["state"]) if state is not None and isinstance(state.get("state"), Mapping) else None
    if found is not None:
        found["digest"] = (
            {"digest": state.get("digest"), "parts": state.get("parts")} if state.get("parts") else None
        )
    return found


def cuda13_host_verdict(result, target, run_id, reverify=False, locked=False, host=""):
    if not isinstance(result, Mapping):
        raise AnsibleFilterError(f"cuda13_host_verdict expects the script task's result, got {result!r}")
    state = None
    if result.get("rc", 1) == 0:
        try:
            state = scriptout.result_document(result.get("stdout") or "")
        except scriptout.NoResultError:
            state = None
    found = _found("cuda13_host_verdict", state, target)
    return rerun.host_verdict(
        found, dict(target), str(run_id), reverify=bool(reverify), locked=bool(locked), host=str(host)
    )


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_same_target": cuda13_same_target,
                "cuda13_target": cuda13_target,
                "cuda13_host_verdict": cuda13_host_verdict,
            }
        )
