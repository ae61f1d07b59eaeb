"""Filters of the rollout's shape: the batch plan, the maintenance window and the
failure budget (thin wrappers over cuda13_upgrade.batches, cuda13_upgrade.window
and cuda13_upgrade.budget)."""

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

from cuda13_upgrade import batches, budget, window
from cuda13_upgrade.filtering import ansible_filters

DOCUMENTATION = r"""
  - name: cuda13_fleet_options
    short_description: The one value of each rollout option the play's hosts share.
    positional: _input, hostvars, names
    options:
      _input: {description: the play's hosts in play order, type: list, required: true}
      hostvars: {description: Ansible's hostvars, type: dict, required: true}
      names: {description: the options to read, type: list, required: true}
  - name: cuda13_fleet_plan
    short_description: The batch plan, the window and cuda13_until of a rollout, checked.
    positional: _input, options, started
    options:
      _input: {description: the hosts the upgrade play takes, in play order, type: list, required: true}
      options:
        description: >-
          cuda13_serial, cuda13_max_parallel, cuda13_window, cuda13_until,
          cuda13_max_failed_hosts (those given)
        type: dict
        required: true
      started: {description: the run's start, ISO 8601 with an offset (default now), type: str}
  - name: cuda13_window_decide
    short_description: Whether a batch may start now under the plan's window and cuda13_until.
    positional: _input, now
    options:
      _input: {description: cuda13_fleet_plan's result, type: dict, required: true}
      now: {description: the time to decide for, ISO 8601 with an offset (default now), type: str}
  - name: cuda13_budget_decide
    short_description: Whether the next batch may start under the fleet's failure budget.
    positional: _input, hostvars, hosts, batch, active
    options:
      _input: {description: cuda13_fleet_plan's result, type: dict, required: true}
      hostvars: {description: Ansible's hostvars (each host's cuda13_result), type: dict, required: true}
      hosts: {description: the play's hosts in order (ansible_play_hosts_all), type: list, required: true}
      batch: {description: the batch about to start (ansible_play_batch), type: list, required: true}
      active: {description: the hosts not removed (ansible_play_hosts), type: list, required: true}
"""

EXAMPLES = r"""
options: "{{ ansible_play_hosts_all | cuda13_fleet_options(hostvars, names) }}"
fleet: "{{ ansible_play_hosts_all | cuda13_fleet_plan(options['values']) }}"
gate: "{{ hostvars['localhost'].cuda13_fleet | cuda13_window_decide }}"
budget: >-
  {{ hostvars['localhost'].cuda13_fleet
     | cuda13_budget_decide(hostvars, ansible_play_hosts_all, ansible_play_batch, ansible_play_hosts) }}
"""

RETURN = r"""
  _value:
    description: >
      cuda13_fleet_options - {"values": {option: value}, "failures": [message]} (hosts that disagree);
      cuda13_fleet_plan - {"ok", "failures": [message], "sizes": [int], "batches": [[host]],
      "source", "lines": [str], "options" (as given), "started" (ISO 8601 UTC),
      "window": the option as given or {}, "window_text",
      "until_at": ISO 8601 UTC or "", "gated": a window or until is set,
      "max_failed_hosts": the budget in hosts};
      cuda13_window_decide - {"open", "reason", "closes_at", "opens_at"} (cuda13_upgrade.window.decide);
      cuda13_budget_decide - {"spent", "allowed", "failed", "reason", "hosts"} (cuda13_upgrade.budget.decide).
"""

#: The options the plan reads.
FLEET_OPTIONS = (
    "cuda13_serial",
    "cuda13_max_parallel",
    "cuda13_window",
    "cuda13_until",
    "cuda13_max_failed_hosts",
)


def _instant(text: Any, what: str) -> datetime:
    if text in (None, ""):
        return datetime.now(UTC)
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError as exc:
        raise AnsibleFilterError(f"{what} must be an ISO 8601 date and time, got {text!r}") from exc
    if stamp.tzinfo is None:
        raise AnsibleFilterError(f"{what} must have an offset (e.g. Z), got {text!r}")
    return stamp


def cuda13_fleet_options(hosts: Any, hostvars: Any, names: Any) -> dict[str, Any]:
    """Filter: ``{"values": {option: value}, "failures": [message]}`` over ``hosts``.

    An option given on none of the hosts is left out; one given with different
    values on different hosts is a failure naming the hosts and values (the
    plan is one for the whole play: set it for the group, or with -e).
    """
    if not isinstance(hosts, list) or not isinstance(names, list):
        raise AnsibleFilterError(
            "cuda13_fleet_options takes the host list, hostvars and a list of option names"
        )
    values: dict[str, Any] = {}
    failures: list[str] = []
    for name in names:
        seen: list[tuple[str, Any]] = []
        for host in hosts:
            try:
                host_vars = hostvars[host]
            except KeyError as exc:
                raise AnsibleFilterError(f"cuda13_fleet_options: no hostvars for {host!r}") from exc
            if name in host_vars:
                seen.append((host, host_vars[name]))
        if not seen:
            continue
        distinct = []
        for _, value in seen:
            if value not in distinct:
                distinct.append(value)
        if len(distinct) > 1 or len(seen) < len(hosts):
            by_value = "; ".join(
                f"{value!r} on {', '.join(h for h, v in seen if v == value)}" for value in distinct
            )
            unset = [h for h in hosts if h not in {h for h, _ in seen}]
            if unset:
                by_value += f"; not set on {', '.join(unset)}"
            failures.append(
                f"{name} differs between the hosts of the rollout ({by_value}). Option: {name}. "
                "Fix: give one value for the whole group (group_vars of the target group, or -e)."
            )
        else:
            values[name] = distinct[0]
    return {"values": values, "failures": failures}


def cuda13_fleet_plan(hosts: Any, options: Any, started: Any = None) -> dict[str, Any]:
    """Filter: the plan of ``hosts`` (cuda13_upgrade.batches.plan), the window, until and the
    failure budget (cuda13_upgrade.budget.allowed over ``hosts``), checked.

    Bad values are failures (messages naming the option and value), not errors:
    the play prints them all and stops before any change.
    """
    if not isinstance(hosts, list) or not isinstance(options, Mapping):
        raise AnsibleFilterError("cuda13_fleet_plan takes the host list and a dict of options")
    started_at = _instant(started, "cuda13_fleet_plan's started")
    failures: list[str] = []
    result: dict[str, Any] = {"sizes": [], "batches": [], "source": "", "lines": []}
    try:
        the_plan = batches.plan(hosts, options.get("cuda13_serial"), options.get("cuda13_max_parallel"))
        result = {**the_plan, "lines": batches.format_plan(the_plan)}
    except ValueError as exc:
        failures.append(str(exc))
    window_text = ""
    try:
        parsed = window.parse_window(options.get("cuda13_window"))
        window_text = parsed.describe() if parsed else ""
    except ValueError as exc:
        failures.append(str(exc))
    until_at = ""
    if options.get("cuda13_until") not in (None, ""):
        try:
            until_at = window.parse_until(options["cuda13_until"], started_at).strftime("%Y-%m-%dT%H:%M:%SZ")
        except ValueError as exc:
            failures.append(str(exc))
    max_failed = budget.DEFAULT
    try:
        max_failed = budget.allowed(options.get("cuda13_max_failed_hosts"), len(hosts))
    except ValueError as exc:
        failures.append(str(exc))
    return {
        **result,
        "ok": not failures,
        "failures": failures,
        "options": dict(options),
        "started": started_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "window": options.get("cuda13_window") or {},
        "window_text": window_text,
        "until_at": until_at,
        "gated": bool(window_text or until_at),
        "max_failed_hosts": max_failed,
    }


def cuda13_window_decide(fleet: Any, now: Any = None) -> dict[str, Any]:
    """Filter: cuda13_upgrade.window.decide for the plan's window and until at ``now``."""
    if not isinstance(fleet, Mapping):
        raise AnsibleFilterError(f"cuda13_window_decide takes cuda13_fleet_plan's result, got {fleet!r}")
    parsed = window.parse_window(fleet.get("window") or None)
    until = _instant(fleet["until_at"], "until_at") if fleet.get("until_at") else None
    return window.decide(parsed, until, _instant(now, "cuda13_window_decide's now"))


def cuda13_budget_decide(fleet: Any, hostvars: Any, hosts: Any, batch: Any, active: Any) -> dict[str, Any]:
    """Filter: cuda13_upgrade.budget.decide for the batch about to start, each host's
    ``cuda13_result.status`` read from ``hostvars`` (a host without one has none)."""
    if not isinstance(fleet, Mapping):
        raise AnsibleFilterError(f"cuda13_budget_decide takes cuda13_fleet_plan's result, got {fleet!r}")
    if not all(isinstance(v, list) for v in (hosts, batch, active)):
        raise AnsibleFilterError(
            "cuda13_budget_decide takes the play's hosts, the batch and the active hosts as lists"
        )
    statuses: dict[str, Any] = {}
    for host in hosts:
        try:
            host_vars = hostvars[host]
        except KeyError as exc:
            raise AnsibleFilterError(f"cuda13_budget_decide: no hostvars for {host!r}") from exc
        result = host_vars["cuda13_result"] if "cuda13_result" in host_vars else None
        statuses[host] = result.get("status") if isinstance(result, Mapping) else None
    options = fleet.get("options") or {}
    return budget.decide(hosts, batch, active, statuses, options.get("cuda13_max_failed_hosts"))


class FilterModule:
    """The rollout shape's filters."""

    def filters(self) -> dict[str, Any]:
        return ansible_filters(
            {
                "cuda13_fleet_options": cuda13_fleet_options,
                "cuda13_fleet_plan": cuda13_fleet_plan,
                "cuda13_window_decide": cuda13_window_decide,
                "cuda13_budget_decide": cuda13_budget_decide,
            }
        )
