"""The rollout's circuit breaker: rollbacks remembered across runs.

The failure budget (:mod:`cuda13_upgrade.budget`) stops one run; a rollout
scheduled every night would still start fresh each night and roll hosts back
again. The breaker counts the rollbacks of earlier rollouts, read from the
control node's reports, and refuses a new rollout before any change once they
reach a threshold, until an operator acknowledges them. The idea is NVIDIA
NVSentinel's circuit breaker (its "Circuit Breaker" design document: once it
trips, remediation stops and "requires manual human intervention to reset").

Exact rules:

- The history is the reports directory (``$CUDA13_REPORTS_DIR`` or
  ``<checkout>/reports``): ``<run id>/<host>/result.json`` per host of a run
  (:mod:`cuda13_upgrade.hostresult`), ``<run id>/run.json`` when the
  ``cuda13-upgrade`` command ran it.
- A record counts when its ``status`` is ``rolled_back`` or ``failed``
  (:data:`COUNTED`: the gate or a failure put the host back, or the host was
  left failed) and it comes from a rollout: a run whose ``run.json`` names
  another command (``stage``, ``rollback``, ``verify`` ...) or check mode
  does not count; a run without ``run.json`` (``ansible-playbook`` or AWX)
  counts, except an on-demand rollback's record
  (:data:`cuda13_upgrade.ondemand.ON_DEMAND_REASON`) and a check-mode result.
  The run being started is never counted.
- Within the period: ``now - days <= finished_at`` (a record exactly
  ``days`` old still counts; a record stamped after ``now`` counts).
  ``finished_at`` is ISO 8601; one without an offset is taken as UTC, as
  :mod:`cuda13_upgrade.fleetstate` does.
- Tripped when the records counted reach ``cuda13_breaker_rollbacks``
  (:data:`DEFAULT_ROLLBACKS`); 0 turns the breaker off (no history is read).
- ``cuda13_breaker_ack`` names a run (the newest one counted, as the
  refusal says): the records of that run, and every record that finished no
  later than its newest one, are acknowledged and no longer count; records
  that finished after it count again. An ack that names no run of the period
  acknowledges nothing, and the refusal says so.
- A result file that is not a JSON object, a ``run.json`` that is not one,
  or a counted record without a readable ``finished_at`` is an error naming
  the file: the breaker cannot decide without it.

Errors are ValueError in the package's message shape
(:func:`cuda13_upgrade.errors.format_message`), naming the option and value,
or the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cuda13_upgrade import hostresult, ondemand, summary
from cuda13_upgrade.errors import Cuda13Error

__all__ = [
    "COUNTED",
    "DEFAULT_DAYS",
    "DEFAULT_ROLLBACKS",
    "ack_of",
    "days_of",
    "decide",
    "history",
    "threshold_of",
]

#: ``cuda13_breaker_rollbacks`` when not given. One rollback can be the host's
#: own trouble, and the gate already put it back; a second within the period
#: says the target is slower on this fleet, and a third night would only
#: restart serving hosts again.
DEFAULT_ROLLBACKS = 2

#: ``cuda13_breaker_days`` when not given: a week of nightly runs, or one
#: weekly window.
DEFAULT_DAYS = 7

#: The ``result.json`` statuses the breaker counts.
COUNTED = ("rolled_back", "failed")

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ISO = "%Y-%m-%dT%H:%M:%SZ"
_REASON_CHARS = 160


def _count(value: Any, option: str, default: int, low: int, expected: str) -> int:
    if value in (None, ""):
        return default
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, int | str) or not re.fullmatch(r"\d+", text):
        raise Cuda13Error(f"{option} is not a whole number", value, option=option, remedy=f"give {expected}")
    number = int(text)
    if number < low:
        raise Cuda13Error(f"{option} is out of range", value, option=option, remedy=f"give {expected}")
    return number


def threshold_of(value: Any) -> int:
    """``cuda13_breaker_rollbacks``: an int >= 0 (or its digits, as ``-e``
    gives them); None or ``""``: :data:`DEFAULT_ROLLBACKS`. Raises ValueError
    naming the option and the value."""
    return _count(
        value,
        "cuda13_breaker_rollbacks",
        DEFAULT_ROLLBACKS,
        0,
        "a count of rollbacks, an int >= 0 (0 turns the breaker off)",
    )


def days_of(value: Any) -> int:
    """``cuda13_breaker_days``: an int >= 1 (or its digits); None or ``""``:
    :data:`DEFAULT_DAYS`. Raises ValueError naming the option and the value."""
    return _count(value, "cuda13_breaker_days", DEFAULT_DAYS, 1, "a number of days, an int >= 1")


def ack_of(value: Any) -> str | None:
    """``cuda13_breaker_ack``: a run id (letters, digits, ``.``, ``_``, ``-``,
    as ``--run-id`` takes it), or None for none (None or ``""``). An int (a
    YAML inventory's unquoted digits) is taken as its digits. Raises
    ValueError naming the option and the value."""
    if value in (None, ""):
        return None
    text = str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else None
    if not text or not _RUN_ID_RE.match(text):
        raise Cuda13Error(
            "cuda13_breaker_ack is not a run id",
            value,
            option="cuda13_breaker_ack",
            remedy="give the run id the refusal names, e.g. 20261202T020000Z (a directory under the reports)",
        )
    return text


def _aware(now: datetime) -> datetime:
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be a datetime with a time zone, got {now!r}")
    return now.astimezone(UTC)


def _finished(result: Mapping[str, Any], path: Path) -> datetime:
    text = result.get("finished_at")
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None
    except ValueError:
        when = None
    if when is None:
        raise ValueError(
            f"{path}: finished_at is not an ISO 8601 date and time: {text!r}; the breaker "
            "(cuda13_breaker_rollbacks) cannot place this result in time. Fix or remove the file, "
            "or turn the breaker off with -e cuda13_breaker_rollbacks=0"
        )
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)


def _counted_run(run: Path) -> bool:
    """Whether a run directory's results may count: a rollout or a driver window (``cuda13-upgrade
    driver``), not in check mode."""
    record = hostresult.load_run_record(run)  # ValueError naming run.json
    if not record:
        return True
    return record.get("command") in ("rollout", "driver") and not record.get("check")


def _one_line(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."


def history(
    reports_dir: str | Path, now: datetime, days: Any = None, exclude_run: str | None = None
) -> dict[str, Any]:
    """The rollbacks and failures of rollouts within the period, from the reports.

    Args:
        reports_dir: the reports directory (may not exist yet: no history).
        now: the time to look back from (aware).
        days: ``cuda13_breaker_days`` as given (:func:`days_of`).
        exclude_run: the run being started (its directory is not read).

    Returns:
        ``{"reports_dir": str, "days": int, "since": ISO UTC, "now": ISO UTC,
        "records": [{"host", "run_id", "status", "decision", "finished_at"
        (ISO UTC), "reason", "source"}]}``, records oldest first (then by run
        id and host); ``decision`` is the report's phrase
        (``"rolled back at verify"``), ``reason`` one line of the result's reason.

    Raises:
        ValueError: a bad ``days`` (naming the option), a file that is not a
        JSON object or a counted result without a readable ``finished_at``
        (naming the file).
    """
    period = days_of(days)
    now = _aware(now)
    since = now - timedelta(days=period)
    root = Path(reports_dir)
    records: list[tuple[datetime, dict[str, Any]]] = []
    runs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for run in runs:
        if run.name == exclude_run or not _counted_run(run):
            continue
        hosts = sorted(p.parent.name for p in run.glob("*/result.json"))
        for host, result in zip(hosts, hostresult.load_results(run, hosts), strict=True):
            path = run / host / "result.json"
            if not isinstance(result, dict):
                raise ValueError(f"{path} is not a JSON result: not an object")
            if result.get("status") not in COUNTED or result.get("check_mode"):
                continue
            if str(result.get("reason") or "").startswith(ondemand.ON_DEMAND_REASON):
                continue
            when = _finished(result, path)
            if when < since:
                continue
            row = summary.summary_rows([{**result, "host": host}])[0]
            records.append(
                (
                    when,
                    {
                        "host": host,
                        "run_id": run.name,
                        "status": result["status"],
                        "decision": row["decision"],
                        "finished_at": when.strftime(_ISO),
                        "reason": _one_line(row.get("reason")),
                        "source": str(path),
                    },
                )
            )
    records.sort(key=lambda item: (item[0], item[1]["run_id"], item[1]["host"]))
    return {
        "reports_dir": str(root),
        "days": period,
        "since": since.strftime(_ISO),
        "now": now.strftime(_ISO),
        "records": [record for _, record in records],
    }


def _plural(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def decide(the_history: Mapping[str, Any], threshold: Any = None, ack: Any = None) -> dict[str, Any]:
    """Whether a new rollout may start, given :func:`history`.

    Args:
        the_history: :func:`history`'s result.
        threshold: ``cuda13_breaker_rollbacks`` as given (:func:`threshold_of`).
        ack: ``cuda13_breaker_ack`` as given (:func:`ack_of`).

    Returns:
        ``{"tripped": bool, "threshold": int, "days": int, "ack": str | None,
        "ack_matched": bool, "rollbacks": [record], "acknowledged": [record],
        "newest_run": str | None, "reason": str, "message": str}``:
        ``rollbacks`` the records that count (oldest first), ``acknowledged``
        those the ack covers; ``newest_run`` the run of the newest record that
        counts (the one to acknowledge); ``reason`` one line for the report
        when tripped (``"breaker tripped (...)"``), else ``""``; ``message``
        what to print: when tripped, each rollback (host, run id, when,
        reason) and how to acknowledge; else one line of the count.

    Raises:
        ValueError: a bad threshold or ack, naming the option and value.
    """
    limit = threshold_of(threshold)
    ack_id = ack_of(ack)
    days = int(the_history.get("days") or DEFAULT_DAYS)
    records = list(the_history.get("records") or [])
    result: dict[str, Any] = {
        "tripped": False,
        "threshold": limit,
        "days": days,
        "ack": ack_id,
        "ack_matched": False,
        "rollbacks": [],
        "acknowledged": [],
        "newest_run": None,
        "reason": "",
    }
    if limit == 0:
        return {**result, "message": "the breaker is off (cuda13_breaker_rollbacks 0)"}
    acked = [r for r in records if ack_id is not None and r["run_id"] == ack_id]
    if acked:
        cutoff = max(r["finished_at"] for r in acked)  # ISO UTC strings of one format order as times
        acknowledged = [r for r in records if r["finished_at"] <= cutoff]
        counted = [r for r in records if r["finished_at"] > cutoff]
    else:
        acknowledged, counted = [], records
    tripped = len(counted) >= limit
    newest = counted[-1]["run_id"] if counted else None
    period = f"within the last {_plural(days, 'day')} (since {the_history.get('since')})"
    ack_note = ""
    if ack_id is not None and acked:
        ack_note = f"; {len(acknowledged)} acknowledged by cuda13_breaker_ack {ack_id}"
    elif ack_id is not None:
        ack_note = (
            f"; cuda13_breaker_ack {ack_id} names no run with a rollback {period}, so it acknowledges none"
        )
    result.update(
        ack_matched=bool(acked),
        rollbacks=counted,
        acknowledged=acknowledged,
        newest_run=newest,
        tripped=tripped,
    )
    failures = "failure" if len(counted) == 1 else "failures"
    counted_text = f"{_plural(len(counted), 'rollback')} or {failures} of rollouts"
    if not tripped:
        result["message"] = (
            f"breaker: {counted_text} {period}, below cuda13_breaker_rollbacks {limit}{ack_note}"
        )
        return result
    named = ", ".join(f"{r['host']} in run {r['run_id']}" for r in counted)
    result["reason"] = (
        f"breaker tripped ({counted_text} {period}: {named}; cuda13_breaker_rollbacks {limit}; "
        f"acknowledge with --ack-breaker {newest})"
    )
    lines = [
        f"The breaker is tripped: {counted_text} {period} reach cuda13_breaker_rollbacks {limit}"
        f"{ack_note}. The rollout is refused; no host was changed.",
    ]
    lines += [
        f"- {r['host']} {r['decision']} in run {r['run_id']} at {r['finished_at']}: "
        + (r["reason"] or "no reason recorded")
        for r in counted
    ]
    lines.append(
        f"Look at these runs' reports under {the_history.get('reports_dir')}, then acknowledge them: "
        f"cuda13-upgrade rollout --ack-breaker {newest} (or -e cuda13_breaker_ack={newest}). "
        "Rollbacks of runs after it count again. -e cuda13_breaker_rollbacks=0 turns the breaker off."
    )
    result["message"] = "\n".join(lines)
    return result
