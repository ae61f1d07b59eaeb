"""Filters of the correctness probe (cuda13_upgrade.probe)."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import load, probe
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_probe_compare
    short_description: Compare the new stack's greedy probe outputs with the old stack's.
    positional: _input, old
    options:
      _input: {description: probe outputs of the new stack, type: list, required: true}
      old: {description: probe outputs of the old stack (same prompts and order), type: list, required: true}
      min_prefix_tokens: {description: leading tokens a prompt's outputs must share, type: int, default: 4}
      min_agreeing_share: {description: share of prompts that must agree, type: float, default: 0.75}
      profile: {description: profile name for the reason, type: str, default: plain}
  - name: cuda13_accept_length_compare
    short_description: Speculative health, the new stack's accept length against the old stack's.
    positional: _input, old
    options:
      _input: {description: probe outputs of the new stack, type: list, required: true}
      old: {description: probe outputs of the old stack, type: list, required: true}
      max_drop_pct: {description: allowed drop of the accept length in percent, type: float, default: 15.0}
      profile: {description: profile name for the reason, type: str, default: eagle3}
  - name: cuda13_load_compare
    short_description: The optional prefill (long-prompt TTFT) and concurrency checks.
    positional: _input, old
    options:
      _input: {description: load metrics of the new stack, type: dict, required: true}
      old: {description: load metrics of the old stack, type: dict, required: true}
      ttft_tolerance_pct: {description: allowed TTFT growth in percent, type: float, default: 10.0}
      concurrency_tolerance_pct: {description: allowed throughput drop in percent, type: float, default: 5.0}
      profile: {description: profile name for the reasons, type: str, default: plain}
"""

EXAMPLES = r"""
probe: "{{ new_outputs | cuda13_probe_compare(old_outputs, profile='plain') }}"
"""

RETURN = r"""
  _value:
    description: >-
      passed, agreeing, prompts, share, thresholds, per_prompt (common_prefix per prompt),
      example (the prompt with the shortest common prefix and both outputs) and reason.
    type: dict
"""


def cuda13_probe_compare(
    new,
    old,
    min_prefix_tokens=probe.DEFAULT_MIN_PREFIX_TOKENS,
    min_agreeing_share=probe.DEFAULT_MIN_AGREEING_SHARE,
    profile="plain",
):
    for name, value in (("new", new), ("old", old)):
        if not isinstance(value, list):
            raise AnsibleFilterError(
                f"cuda13_probe_compare: the {name} stack's probe outputs must be a list, "
                f"got {type(value).__name__}"
            )
    return probe.compare_outputs(
        old,
        new,
        min_prefix_tokens=min_prefix_tokens,
        min_agreeing_share=min_agreeing_share,
        profile=profile,
    )


def cuda13_accept_length_compare(
    new, old, max_drop_pct=probe.DEFAULT_ACCEPT_LENGTH_DROP_PCT, profile="eagle3"
):
    for name, value in (("new", new), ("old", old)):
        if not isinstance(value, list):
            raise AnsibleFilterError(
                f"cuda13_accept_length_compare: the {name} stack's probe outputs must be a list, "
                f"got {type(value).__name__}"
            )
    return probe.compare_accept_length(old, new, max_drop_pct=max_drop_pct, profile=profile)


def cuda13_load_compare(
    new,
    old,
    ttft_tolerance_pct=load.DEFAULT_TTFT_TOLERANCE_PCT,
    concurrency_tolerance_pct=load.DEFAULT_CONCURRENCY_TOLERANCE_PCT,
    profile="plain",
):
    for name, value in (("new", new), ("old", old)):
        if not isinstance(value, dict):
            raise AnsibleFilterError(
                f"cuda13_load_compare: the {name} stack's load metrics must be a dict, "
                f"got {type(value).__name__}"
            )
    return load.compare_load(
        old,
        new,
        ttft_tolerance_pct=ttft_tolerance_pct,
        concurrency_tolerance_pct=concurrency_tolerance_pct,
        profile=profile,
    )


class FilterModule:
    def filters(self):
        return ansible_filters(
            {
                "cuda13_probe_compare": cuda13_probe_compare,
                "cuda13_accept_length_compare": cuda13_accept_length_compare,
                "cuda13_load_compare": cuda13_load_compare,
            }
        )
