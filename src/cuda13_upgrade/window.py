"""The maintenance window: when a batch of the rollout may start.

Two limits, either or both (Rancher's system-upgrade-controller
``Plan.spec.window``: "Jobs will not be generated outside this time window, but
may continue executing into the window once started"):

- ``cuda13_window``: ``{start: "HH:MM", end: "HH:MM", timezone: <IANA name>,
  days: [mon, ...]}``, repeating on the listed days (every day when ``days`` is
  left out or empty). The times are wall-clock times in ``timezone`` (the
  system's IANA database through :mod:`zoneinfo`); quote them in YAML, where
  an unquoted ``22:00`` is the number 1320 (YAML 1.1 sexagesimal).
- ``cuda13_until`` (``--until``): the moment after which no batch starts,
  ``HH:MM`` (the first such time on the control node's clock after the run
  started) or an ISO 8601 date and time (``2026-12-01T06:00+01:00``; without
  an offset, the control node's local time).

Exact rules of :func:`is_open` and :func:`closes_at`:

- The window that starts on day D opens at ``start`` on D and closes at ``end``
  on D when ``end`` is later than ``start``, else at ``end`` on D + 1 (it runs
  across midnight). It belongs to D, the day it starts: ``days`` name start
  days, so ``{start: "22:00", end: "06:00", days: [fri]}`` is open from Friday
  22:00 to Saturday 06:00, and not on Friday at 03:00.
- Open is ``opens <= now < closes``, compared as instants (UTC), so a window
  on a day the clocks change lasts its real length: 01:00-05:00 in
  Europe/Berlin on the last Sunday of March is three hours.
- A wall time the clocks skip that day (02:30 when they jump from 02:00 to
  03:00) is taken with the offset before the change, i.e. one hour later on
  the new clock (03:30); a wall time that happens twice (02:30 when they go
  back from 03:00 to 02:00) is its first occurrence. This is ``fold=0`` of
  PEP 495, what :mod:`zoneinfo` does with a wall time.
- ``start`` equal to ``end`` is refused (an empty or a whole-day window is not
  guessed: leave ``cuda13_window`` out for no limit).

Errors are ValueError with the package's message shape
(:func:`cuda13_upgrade.errors.format_message`), naming the option and value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cuda13_upgrade.errors import Cuda13Error

__all__ = ["DAYS", "Window", "closes_at", "decide", "is_open", "opens_at", "parse_until", "parse_window"]

#: Day names as ``days`` takes them, Monday first (``date.weekday()``).
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TIME_RE = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_KEYS = ("start", "end", "timezone", "days")


@dataclass(frozen=True)
class Window:
    """A parsed ``cuda13_window``: wall times in ``zone``, start days (0 = Monday)."""

    start: time
    end: time
    zone: ZoneInfo
    days: frozenset[int]

    def describe(self) -> str:
        """``22:00-06:00 Europe/Berlin, fri sat`` (``every day`` without days)."""
        days = " ".join(DAYS[d] for d in sorted(self.days)) if len(self.days) < 7 else "every day"
        return f"{self.start:%H:%M}-{self.end:%H:%M} {self.zone.key}, {days}"


def _error(option: str, problem: str, value: Any, remedy: str) -> ValueError:
    """Cuda13Error (a ValueError) whose problem begins with the option's name."""
    return Cuda13Error(f"{option} {problem}", value, option=option, remedy=remedy)


def _time(value: Any, option: str, key: str) -> time:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
        hint = f" (YAML read an unquoted {value // 60}:{value % 60:02d} as the number {value})"
        raise _error(
            option,
            f"{key} is not a time{hint}",
            value,
            f'quote it: {key}: "{value // 60:02d}:{value % 60:02d}"',
        )
    if not isinstance(value, str) or not _TIME_RE.match(value.strip()):
        raise _error(option, f"{key} is not a time", value, f'give {key} as "HH:MM", 00:00 to 23:59, quoted')
    hours, minutes = value.strip().split(":")
    return time(int(hours), int(minutes))


def _zone(value: Any, option: str) -> ZoneInfo:
    if not isinstance(value, str) or not value.strip():
        raise _error(
            option, "timezone is missing or empty", value, "give an IANA time zone such as 'Europe/Berlin'"
        )
    try:
        return ZoneInfo(value.strip())
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise _error(
            option,
            "timezone is not a time zone of the IANA database",
            value,
            "give a name such as 'Europe/Berlin' or 'UTC' (the control node needs the tzdata package)",
        ) from exc


def _days(value: Any, option: str) -> frozenset[int]:
    if value in (None, []):
        return frozenset(range(7))
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise _error(option, "days is not a list of days", value, f"give a list of {', '.join(DAYS)}")
    days = set()
    for day in value:
        name = str(day).strip().lower() if isinstance(day, str) else None
        if name in DAYS:
            days.add(DAYS.index(name))
        elif name in _FULL_DAYS:
            days.add(_FULL_DAYS.index(name))
        else:
            raise _error(
                option,
                f"days holds {day!r}, which is not a day",
                value,
                f"give start days as {', '.join(DAYS)} (or their full English names)",
            )
    return frozenset(days)


def parse_window(value: Any, option: str = "cuda13_window") -> Window | None:
    """``cuda13_window`` as a :class:`Window`, or None for no window.

    Args:
        value: ``{start, end, timezone, days}`` (see the module's rules);
            None or ``{}``: no window.
        option: the option named in an error.

    Raises:
        ValueError: not a mapping, an unknown key, a missing or bad time, a
        time zone the IANA database lacks, a bad day, start equal to end.
    """
    if value in (None, {}, ""):
        return None
    expected = '{start: "HH:MM", end: "HH:MM", timezone: "Europe/Berlin", days: [mon, ...]}'
    if not isinstance(value, Mapping):
        raise _error(option, "is not a mapping", value, f"give {expected}, or {{}} for no window")
    unknown = sorted(str(k) for k in value if k not in _KEYS)
    if unknown:
        raise _error(option, f"has unknown keys {unknown}", value, f"give only {', '.join(_KEYS)}")
    for key in ("start", "end"):
        if key not in value:
            raise _error(option, f"has no {key}", value, f"give {expected}")
    start = _time(value["start"], option, "start")
    end = _time(value["end"], option, "end")
    if start == end:
        raise _error(
            option,
            "starts when it ends",
            value,
            "give different start and end times (a window across midnight ends the next day); "
            "for no limit leave cuda13_window out",
        )
    return Window(start, end, _zone(value.get("timezone"), option), _days(value.get("days"), option))


def _aware(now: datetime) -> datetime:
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be a datetime with a time zone, got {now!r}")
    return now.astimezone(UTC)


def _occurrence(window: Window, day: date) -> tuple[datetime, datetime]:
    """The window that starts on ``day`` (wall date in its zone): (opens, closes) in UTC."""
    end_day = day if window.end > window.start else day + timedelta(days=1)
    opens = datetime.combine(day, window.start, tzinfo=window.zone)
    closes = datetime.combine(end_day, window.end, tzinfo=window.zone)
    return opens.astimezone(UTC), closes.astimezone(UTC)


def _current(window: Window, now: datetime) -> tuple[datetime, datetime] | None:
    now = _aware(now)
    today = now.astimezone(window.zone).date()
    for day in (today - timedelta(days=1), today):  # one lasts less than two days
        if day.weekday() in window.days:
            opens, closes = _occurrence(window, day)
            if opens <= now < closes:
                return opens, closes
    return None


def is_open(window: Window | None, now: datetime) -> bool:
    """Whether a batch may start at ``now`` (an aware datetime) under ``window``.

    None (no window): always. Otherwise ``opens <= now < closes`` for the
    window of a listed start day (the module's rules). Raises ValueError for a
    naive ``now``.
    """
    if window is None:
        _aware(now)
        return True
    return _current(window, now) is not None


def closes_at(window: Window | None, now: datetime) -> datetime | None:
    """When the window open at ``now`` closes (aware, UTC); None when none is open or no window."""
    if window is None:
        _aware(now)
        return None
    current = _current(window, now)
    return current[1] if current else None


def opens_at(window: Window | None, now: datetime) -> datetime | None:
    """The next opening at or after ``now`` (aware, UTC); ``now`` itself when open; None without a window."""
    if window is None:
        return _aware(now)
    now = _aware(now)
    if _current(window, now):
        return now
    today = now.astimezone(window.zone).date()
    for offset in range(8):
        day = today + timedelta(days=offset)
        if day.weekday() in window.days:
            opens, _ = _occurrence(window, day)
            if opens >= now:
                return opens
    return None  # not reached: every listed day has one opening a week


def parse_until(
    value: Any, started: datetime, zone: ZoneInfo | None = None, option: str = "cuda13_until"
) -> datetime:
    """``cuda13_until`` (``--until``) as an instant (aware, UTC).

    Args:
        value: ``"HH:MM"``, the first such wall time after ``started``; or an
            ISO 8601 date and time, with an offset or in ``zone``.
        started: when the run started (aware).
        zone: the wall clock's zone; None: the control node's local time (the
            system's rules, DST included).
        option: the option named in an error.

    Raises:
        ValueError: neither form, or a date and time not after ``started``.
    """
    started = _aware(started)
    remedy = "give HH:MM (the next such time) or an ISO 8601 date and time such as 2026-12-01T06:00+01:00"

    def wall(naive: datetime) -> datetime:
        if zone is None:
            return naive.astimezone(UTC)  # a naive datetime's astimezone: local time (mktime)
        return naive.replace(tzinfo=zone).astimezone(UTC)

    if isinstance(value, int) and not isinstance(value, bool):
        raise _error(
            option, "is not a time (an unquoted HH:MM in YAML is a number)", value, "quote it; " + remedy
        )
    text = str(value).strip() if isinstance(value, str) else ""
    if _TIME_RE.match(text):
        at = time(int(text[:2]), int(text[3:]))
        local_start = started.astimezone(zone) if zone else started.astimezone()
        for offset in range(3):  # today, or tomorrow; a skipped wall time may need one more day
            candidate = wall(datetime.combine(local_start.date() + timedelta(days=offset), at))
            if candidate > started:
                return candidate
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00")) if "T" in text or " " in text else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise _error(option, "is not a time", value, remedy)
    until = parsed.astimezone(UTC) if parsed.tzinfo else wall(parsed)
    if until <= started:
        raise _error(
            option, f"is not after the run's start ({started:%Y-%m-%dT%H:%M:%SZ})", value, "give a later time"
        )
    return until


def decide(window: Window | None, until: datetime | None, now: datetime) -> dict[str, Any]:
    """Whether a batch may start at ``now``, and why not.

    Returns:
        ``{"open": bool, "reason": str, "closes_at": iso|None, "opens_at": iso|None}``:
        ``reason`` is ``""`` when open, else ``outside the window ...`` or
        ``past cuda13_until ...`` with the next opening; ``closes_at`` the
        earlier of the window's close and ``until`` (ISO 8601, UTC).
    """
    now = _aware(now)
    iso = "%Y-%m-%dT%H:%M:%SZ"
    if until is not None and now >= until:
        return {
            "open": False,
            "reason": f"past cuda13_until ({until:{iso}})",
            "closes_at": None,
            "opens_at": None,
        }
    if window is not None and not is_open(window, now):
        nxt = opens_at(window, now)
        return {
            "open": False,
            "reason": f"outside the window cuda13_window ({window.describe()}); it opens next at {nxt:{iso}}",
            "closes_at": None,
            "opens_at": nxt.strftime(iso) if nxt else None,
        }
    ends = [t for t in (closes_at(window, now), until) if t is not None]
    return {
        "open": True,
        "reason": "",
        "closes_at": min(ends).strftime(iso) if ends else None,
        "opens_at": None,
    }
