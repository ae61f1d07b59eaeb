"""Filters reading what a host script printed (cuda13_upgrade.scriptout)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import scriptout
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_script_result
    short_description: >-
      The JSON object a host script printed last, whether or not SSH merged its stderr into stdout.
    positional: _input, fallback
    options:
      _input:
        description: the registered result of an ansible.builtin.script task, or its stdout
        type: raw
        required: true
      fallback:
        description: returned when the task was skipped or printed no result; without it that is an error
        type: raw
  - name: cuda13_script_said
    short_description: >-
      What a host script said besides its result (stderr, and the stdout lines a pseudo-terminal put there).
    positional: _input
    options:
      _input: {description: the registered result of an ansible.builtin.script task, type: dict,
               required: true}
"""

EXAMPLES = r"""
release: "{{ __cuda13_release | cuda13_script_result({}) }}"
said: "{{ __cuda13_release | cuda13_script_said | truncate(300) }}"
"""

RETURN = r"""
  _value:
    description: >-
      the result object (cuda13_script_result) or the script's other output lines (cuda13_script_said).
    type: raw
"""

_NO_FALLBACK = object()


def cuda13_script_result(result, fallback=_NO_FALLBACK):
    if isinstance(result, dict):
        stdout = result.get("stdout")
    elif isinstance(result, str):
        stdout = result
    else:
        raise AnsibleFilterError(
            "cuda13_script_result: expected a script task's result or its stdout, "
            f"got {type(result).__name__}"
        )
    try:
        if stdout is None:
            raise scriptout.NoResultError("the script did not run (the task was skipped or failed to start)")
        return scriptout.result_document(stdout)
    except scriptout.NoResultError as exc:
        if fallback is not _NO_FALLBACK:
            return fallback
        raise AnsibleFilterError(f"cuda13_script_result: {exc}") from exc


def cuda13_script_said(result):
    if not isinstance(result, dict):
        raise AnsibleFilterError(
            f"cuda13_script_said: expected a script task's result, got {type(result).__name__}"
        )
    return scriptout.script_said(result)


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_script_result": cuda13_script_result,
                "cuda13_script_said": cuda13_script_said,
            }
        )
