"""The rollout's batch plan: how many hosts upgrade at once, and which.

The upgrade play's ``serial:`` takes the list of batch sizes :func:`plan` returns
(``playbooks/start.yml`` computes it on localhost from the inventory, prints it
before any change, and ``playbooks/upgrade.yml`` reads it back as
``hostvars['localhost'].cuda13_fleet.sizes``). Two ways to shape it:

- ``cuda13_serial``: the batches as Ansible's ``serial`` keyword takes them, a
  host count, a percentage (``"25%"``) or a list of them. Rules (ansible-core
  2.19 ``PlaybookExecutor._get_serialized_batches`` and
  ``ansible.utils.helpers.pct_to_int``; Ansible docs, "Controlling playbook
  execution: strategies and more", "Setting the batch size with serial"): a
  percentage is of all the play's hosts, rounded down, and at least 1; the last
  entry repeats until every host has a batch. ``cuda13_max_parallel`` is not
  used then: ``cuda13_serial`` is the plan as given.
- otherwise a ramp: the canary (1 host), then each batch twice the one before
  (1, 2, 4, 8, ...), none larger than ``cuda13_max_parallel`` hosts (a count,
  or a percentage of the fleet with ``serial``'s rounding: down, at least 1;
  default ``"25%"``), the last batch what is left. Eight hosts: 1, 2, 2, 2, 1;
  a hundred: 1, 2, 4, 8, 16, 25, 25, 19; four or fewer: one at a time.

The fleet is the hosts the upgrade play takes: the target group, after
``--limit``, less the hosts already kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from cuda13_upgrade.errors import format_message

__all__ = ["DEFAULT_MAX_PARALLEL", "batch_sizes", "format_plan", "plan", "ramp", "serial_sizes"]

#: ``cuda13_max_parallel`` when not given: a quarter of the fleet.
DEFAULT_MAX_PARALLEL = "25%"

# What serial's pct_to_int accepts and the options' rule allows: an int >= 1, or
# 1 to 100 percent (int(), so "12.5%" is refused as Ansible would fail on it).
_SIZE_RE = re.compile(r"^(?:[1-9]\d*|(?:[1-9]\d?|100)%)$")
_SIZE_EXPECTED = "a host count (an int >= 1) or a percentage of the fleet from '1%' to '100%', such as '25%'"


def _size(entry: Any, n_hosts: int, option: str, shown: Any) -> int:
    """One ``serial`` entry as a host count of a play of ``n_hosts`` hosts.

    ``pct_to_int``: ``int(pct / 100.0 * n_hosts) or 1``; a count as given.
    Raises ValueError naming ``option`` and the whole value ``shown``.
    """
    if isinstance(entry, bool) or not isinstance(entry, int | str) or not _SIZE_RE.match(str(entry).strip()):
        raise ValueError(
            format_message(
                f"{option} holds {entry!r}, which is not a batch size",
                shown,
                option=option,
                remedy=f"give {_SIZE_EXPECTED}, or a list of them",
            )
        )
    text = str(entry).strip()
    if text.endswith("%"):
        return int(int(text[:-1]) / 100.0 * n_hosts) or 1
    return int(text)


def _entries(value: Any, option: str) -> list[Any]:
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError(
                format_message(
                    f"{option} is an empty list",
                    value,
                    option=option,
                    remedy=f"give {_SIZE_EXPECTED}, or a list",
                )
            )
        return list(value)
    return [value]


def serial_sizes(n_hosts: int, serial: Any, option: str = "cuda13_serial") -> list[int]:
    """Batch sizes of a play of ``n_hosts`` hosts under ``serial`` (Ansible's rule).

    Args:
        n_hosts: hosts the play takes (>= 0).
        serial: a host count, a percentage string (``"25%"``), or a non-empty
            list of them; the strings ``-e key=value`` gives (``"3"``) count.
        option: the option named in an error.

    Returns:
        Host counts, each >= 1, summing to ``n_hosts`` (``[]`` for no hosts):
        each entry taken in turn, percentages of ``n_hosts`` rounded down and at
        least 1, the last entry repeated, the last batch what is left.

    Raises:
        ValueError: an entry that is not an int >= 1 nor 1-100 %, or an empty
        list; the message names ``option`` and the value.
    """
    sizes = [_size(entry, n_hosts, option, serial) for entry in _entries(serial, option)]
    return _fill(n_hosts, sizes)


def _fill(n_hosts: int, sizes: Sequence[int]) -> list[int]:
    batches: list[int] = []
    left, index = n_hosts, 0
    while left > 0:
        size = min(sizes[min(index, len(sizes) - 1)], left)
        batches.append(size)
        left -= size
        index += 1
    return batches


def ramp(
    n_hosts: int, max_parallel: Any = DEFAULT_MAX_PARALLEL, option: str = "cuda13_max_parallel"
) -> list[int]:
    """The ramp: 1 host, then doubling, capped at ``max_parallel`` hosts at once.

    Args:
        n_hosts: hosts the play takes (>= 0).
        max_parallel: the cap, a host count or a percentage of ``n_hosts``
            (rounded down, at least 1, as ``serial``'s percentages).
        option: the option named in an error.

    Returns:
        Host counts summing to ``n_hosts``: ``min(2**k, cap)`` for the k-th
        batch (k from 0), the last batch what is left. ``ramp(8)`` is
        ``[1, 2, 2, 2, 1]``.

    Raises:
        ValueError: a cap that is not an int >= 1 nor 1-100 %, naming the option.
    """
    if isinstance(max_parallel, list | tuple):
        raise ValueError(
            format_message(
                f"{option} is a list", max_parallel, option=option, remedy=f"give one value: {_SIZE_EXPECTED}"
            )
        )
    cap = _size(max_parallel, n_hosts, option, max_parallel)
    batches: list[int] = []
    left, size = n_hosts, 1
    while left > 0:
        batches.append(min(size, cap, left))
        left -= batches[-1]
        size *= 2
    return batches


def batch_sizes(n_hosts: int, serial: Any = None, max_parallel: Any = None) -> list[int]:
    """The plan's batch sizes: ``cuda13_serial`` when given, else the ramp.

    Args:
        n_hosts: hosts the upgrade play takes.
        serial: ``cuda13_serial`` or None (not given; ``""`` counts as not given).
        max_parallel: ``cuda13_max_parallel`` or None (:data:`DEFAULT_MAX_PARALLEL`).

    Returns:
        Host counts summing to ``n_hosts``, for the play's ``serial:``.

    Raises:
        ValueError: as :func:`serial_sizes` and :func:`ramp`. ``max_parallel``
        is checked also when ``serial`` makes it unused.
    """
    if n_hosts < 0:
        raise ValueError(f"n_hosts must be >= 0, got {n_hosts}")
    cap = DEFAULT_MAX_PARALLEL if max_parallel in (None, "") else max_parallel
    shaped = ramp(n_hosts, cap)
    if serial in (None, ""):
        return shaped
    return serial_sizes(n_hosts, serial)


def plan(hosts: Sequence[str], serial: Any = None, max_parallel: Any = None) -> dict[str, Any]:
    """The batch plan of ``hosts``, in the order the play takes them.

    Args:
        hosts: inventory host names in play order (Ansible takes each batch from
            the front of the play's host list).
        serial: ``cuda13_serial`` or None.
        max_parallel: ``cuda13_max_parallel`` or None.

    Returns:
        ``{"sizes": [int, ...], "batches": [[host, ...], ...], "source": str}``:
        ``sizes`` for ``serial:``; ``batches`` the hosts of each; ``source``
        what shaped it (``"cuda13_serial [1, '50%']"`` or
        ``"ramp capped at 2 hosts (cuda13_max_parallel '25%')"``).

    Raises:
        ValueError: as :func:`batch_sizes`.
    """
    hosts = list(hosts)
    sizes = batch_sizes(len(hosts), serial, max_parallel)
    batches, start = [], 0
    for size in sizes:
        batches.append(hosts[start : start + size])
        start += size
    if serial not in (None, ""):
        source = f"cuda13_serial {serial!r}"
    else:
        cap_value = DEFAULT_MAX_PARALLEL if max_parallel in (None, "") else max_parallel
        cap = _size(cap_value, len(hosts), "cuda13_max_parallel", cap_value)
        source = f"ramp capped at {_count(cap, 'host')} (cuda13_max_parallel {cap_value!r})"
    return {"sizes": sizes, "batches": batches, "source": source}


def format_plan(the_plan: dict[str, Any]) -> list[str]:
    """The plan as lines to print: a heading, then ``batch k of n (m hosts): a, b``."""
    batches = the_plan["batches"]
    n_hosts = sum(len(b) for b in batches)
    lines = [f"{_count(n_hosts, 'host')} in {_count(len(batches), 'batch')}, {the_plan['source']}:"]
    for number, batch in enumerate(batches, 1):
        label = "canary, " if number == 1 and len(batch) == 1 and len(batches) > 1 else ""
        lines.append(
            f"batch {number} of {len(batches)} ({label}{_count(len(batch), 'host')}): " + ", ".join(batch)
        )
    return lines


def _count(number: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"{number} {noun if number == 1 else plural}"
