"""The rollout's circuit breaker (a thin wrapper over cuda13_upgrade.breaker)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import cuda13_upgrade  # noqa: F401
except ImportError:  # not installed (an execution environment): the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda13_upgrade import breaker
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_breaker_decide
    short_description: Whether a rollout may start under the breaker, from the reports of earlier runs.
    positional: _input, reports_dir, run_id, now
    options:
      _input:
        description: >-
          the options as cuda13_fleet_options gives them (cuda13_breaker_rollbacks,
          cuda13_breaker_days, cuda13_breaker_ack, those given)
        type: dict
        required: true
      reports_dir: {description: the reports directory on the control node, type: path, required: true}
      run_id: {description: the run being started (not counted), type: str, required: true}
      now: {description: the time to look back from, ISO 8601 with an offset (default now), type: str}
"""

EXAMPLES = r"""
breaker: "{{ hostvars['localhost'].cuda13_fleet.options | cuda13_breaker_decide(reports, cuda13_run_id) }}"
"""

RETURN = r"""
  _value:
    description: >
      cuda13_upgrade.breaker.decide's {"tripped", "threshold", "days", "ack", "ack_matched",
      "rollbacks", "acknowledged", "newest_run", "reason", "message"}, and "failures": [message]
      (bad option values, a report file the breaker cannot read; then "tripped" is false and the
      play refuses for the failures).
"""


def _now(text: Any) -> datetime:
    if text in (None, ""):
        return datetime.now(UTC)
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError as exc:
        raise AnsibleFilterError(f"cuda13_breaker_decide's now must be ISO 8601, got {text!r}") from exc
    if stamp.tzinfo is None:
        raise AnsibleFilterError(f"cuda13_breaker_decide's now must have an offset (e.g. Z), got {text!r}")
    return stamp


def cuda13_breaker_decide(options: Any, reports_dir: Any, run_id: Any, now: Any = None) -> dict[str, Any]:
    """Filter: cuda13_upgrade.breaker.decide over cuda13_upgrade.breaker.history.

    Bad values and unreadable report files are failures (messages naming the
    option and value, or the file), not errors: the play prints them with the
    batch plan's and stops before any change.
    """
    if not isinstance(options, Mapping) or not isinstance(reports_dir, str):
        raise AnsibleFilterError("cuda13_breaker_decide takes a dict of options and the reports directory")
    failures: list[str] = []
    for name, check in (
        ("cuda13_breaker_rollbacks", breaker.threshold_of),
        ("cuda13_breaker_days", breaker.days_of),
        ("cuda13_breaker_ack", breaker.ack_of),
    ):
        try:
            check(options.get(name))
        except ValueError as exc:
            failures.append(str(exc))
    off = {
        "tripped": False,
        "rollbacks": [],
        "acknowledged": [],
        "newest_run": None,
        "reason": "",
        "message": "",
        "failures": failures,
    }
    if failures:
        return off
    threshold = options.get("cuda13_breaker_rollbacks")
    if breaker.threshold_of(threshold) == 0:
        return {**breaker.decide({"records": []}, 0), "failures": []}
    try:
        the_history = breaker.history(
            reports_dir, _now(now), options.get("cuda13_breaker_days"), exclude_run=str(run_id)
        )
    except (OSError, ValueError) as exc:
        return {**off, "failures": [f"the breaker cannot read the reports: {exc}"]}
    return {**breaker.decide(the_history, threshold, options.get("cuda13_breaker_ack")), "failures": []}


class FilterModule:
    """The breaker's filter."""

    def filters(self) -> dict[str, Any]:
        return ansible_filters({"cuda13_breaker_decide": cuda13_breaker_decide})
