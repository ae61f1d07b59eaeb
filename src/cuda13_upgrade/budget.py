"""The rollout's failure budget: how many hosts may fail or roll back before no
new batch starts.

``cuda13_max_failed_hosts`` counts over the whole fleet (the hosts the upgrade
play takes), not per batch, and the project decides it itself before each
batch (``playbooks/upgrade.yml``'s pre_tasks), whatever Ansible's
``max_fail_percentage`` counts: under ansible-core 2.19 a host failed again by
a ``rescue`` is not always counted there (ansible/ansible#86574), and
the keyword is per batch (ansible/ansible#65881). The rule follows AWS Systems
Manager's ``MaxErrors``: once more hosts have failed than the budget allows, no
new batch starts; the hosts already in flight finish (a batch ends before the
next starts).

Exact rules:

- The budget is a host count (an int >= 0, or its digits as ``-e`` gives them)
  or a percentage of the fleet, ``"N%"`` with N from 0 to 100, rounded down
  (``"10%"`` of 8 hosts is 0: a percentage never allows more than it says).
  Default 0: the first failed or rolled-back host stops the rollout.
- A host counts against it when its ``cuda13_result.status`` is
  ``rolled_back``, ``failed`` or ``unreachable`` (Ansible lost it part way:
  :mod:`cuda13_upgrade.steps.lost`), or when it has no ``cuda13_result`` and
  Ansible removed it from the play (``ansible_play_hosts`` no longer holds it:
  unreachable, or failed before its result was written).
- Only hosts of earlier batches count: the hosts before the first host of the
  batch about to start, in play order.
- The budget is spent when the hosts counted exceed it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade.errors import format_message

__all__ = ["COUNTED", "DEFAULT", "allowed", "decide", "failed_hosts"]

#: ``cuda13_max_failed_hosts`` when not given.
DEFAULT = 0

#: The ``cuda13_result`` statuses that count against the budget.
COUNTED = ("rolled_back", "failed", "unreachable")

_OPTION = "cuda13_max_failed_hosts"
_BUDGET_RE = re.compile(r"^(?:0|[1-9]\d*)$|^(?:\d|[1-9]\d|100)%$")
_EXPECTED = "a host count (an int >= 0) or a percentage of the fleet from '0%' to '100%', such as '10%'"


def allowed(value: Any, n_hosts: int, option: str = _OPTION) -> int:
    """The most hosts of a fleet of ``n_hosts`` that may fail or roll back.

    Args:
        value: ``cuda13_max_failed_hosts``: an int >= 0, its digits (``"2"``),
            ``"N%"`` (0-100) of the fleet, or None/``""`` for :data:`DEFAULT`.
        n_hosts: hosts the upgrade play takes (>= 0).
        option: the option named in an error.

    Returns:
        A host count >= 0: the count as given, or ``int(N / 100 * n_hosts)``
        (rounded down).

    Raises:
        ValueError: a value that is neither, naming ``option`` and the value.
    """
    if value in (None, ""):
        return DEFAULT
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, int | str) or not _BUDGET_RE.match(text):
        raise ValueError(
            format_message(
                f"{option} is not a failure budget", value, option=option, remedy=f"give {_EXPECTED}"
            )
        )
    if text.endswith("%"):
        return int(text[:-1]) * n_hosts // 100
    return int(text)


def failed_hosts(
    hosts: Sequence[str],
    batch: Sequence[str],
    active: Sequence[str],
    statuses: Mapping[str, Any],
) -> list[tuple[str, str]]:
    """The hosts of earlier batches that count against the budget.

    Args:
        hosts: the play's hosts in play order (``ansible_play_hosts_all``).
        batch: the batch about to start (``ansible_play_batch``); empty: every
            host of ``hosts`` is of an earlier batch.
        active: the play's hosts Ansible has not removed (``ansible_play_hosts``).
        statuses: ``{host: cuda13_result.status}`` of the hosts that have a
            result (a host missing or None has none).

    Returns:
        ``[(host, why)]`` in play order, ``why`` the status (``"rolled_back"``,
        ``"failed"``, ``"unreachable"``) or ``"failed without a result"``.
    """
    hosts = list(hosts)
    earlier = hosts[: hosts.index(batch[0])] if batch and batch[0] in hosts else hosts
    counted = []
    for host in earlier:
        status = statuses.get(host)
        if status in COUNTED:
            counted.append((host, str(status)))
        elif status in (None, "") and host not in active:
            counted.append((host, "failed without a result"))
    return counted


def decide(
    hosts: Sequence[str],
    batch: Sequence[str],
    active: Sequence[str],
    statuses: Mapping[str, Any],
    budget: Any = None,
) -> dict[str, Any]:
    """Whether the batch about to start may start under the failure budget.

    Args:
        hosts, batch, active, statuses: as :func:`failed_hosts`.
        budget: ``cuda13_max_failed_hosts`` as given (:func:`allowed`), the
            fleet being ``hosts``.

    Returns:
        ``{"spent": bool, "allowed": int, "failed": [{"host", "why"}],
        "reason": str, "hosts": [host]}``: ``hosts`` the hosts that do not
        start when spent (this batch and every later one, in play order), else
        ``[]``; ``reason`` ``"failure budget spent (hosts a rolled back, b
        failed; cuda13_max_failed_hosts 0)"`` when spent, else ``""``.

    Raises:
        ValueError: a bad budget, as :func:`allowed`.
    """
    hosts = list(hosts)
    limit = allowed(budget, len(hosts))
    counted = failed_hosts(hosts, batch, active, statuses)
    spent = len(counted) > limit
    rest = hosts[hosts.index(batch[0]) :] if batch and batch[0] in hosts else []
    reason = ""
    if spent:
        named = ", ".join(f"{host} {why.replace('_', ' ')}" for host, why in counted)
        shown = DEFAULT if budget in (None, "") else budget
        reason = f"failure budget spent (hosts {named}; {_OPTION} {shown})"
    return {
        "spent": spent,
        "allowed": limit,
        "failed": [{"host": host, "why": why} for host, why in counted],
        "reason": reason,
        "hosts": rest if spent else [],
    }
