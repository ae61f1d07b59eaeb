"""Step durations of a host's upgrade, from the step boundaries its run record holds.

Each step, as it begins, appends ``{"step": name, "started_at": ISO 8601 UTC}``
to the ``steps`` of the host's run record (the fact ``cuda13_host_run``,
:func:`cuda13_upgrade.steps.host.begin_step`): each action plugin of
``roles/upgrade_host/tasks/main.yml`` its own step
(:data:`cuda13_upgrade.steps.host.STEPS`: artifact_cache, snapshot, toolkit,
wheels, sglang_build, baseline, switch, verify, batch_soak, rollback, result),
the action ``cuda13_step`` of ``tasks/drain.yml`` the drain and the undrain.
A step lasts until the next one starts; the last until the result is written.

Time out of service: from the start of ``drain`` (the worker leaves the
router, or, without drain hooks, the first restart of the service for the
baseline follows) to the end of ``undrain`` (without hooks: to the end of
the last step before the result, the decision or the rollback's check). A run that
resolves an earlier run which left the host drained (cut off between its drain and its
undrain: interrupted, killed, its host lost) counts from that earlier drain: the host was
out of service all along (``drained_since``, :func:`out_of_service_s`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

#: Steps after which the host may be out of service, until :data:`SERVICE_BACK`.
OUT_OF_SERVICE_FROM = "drain"
SERVICE_BACK = "undrain"
#: The bookkeeping step that closes every upgrade (writing the result).
RESULT_STEP = "result"

#: The steps of an upgrade in the order they run (a rollback after verify, or after the soak
#: between batches, which a kept host's undrain precedes).
STEP_ORDER = (
    "artifact_cache",
    "snapshot",
    "toolkit",
    "wheels",
    "sglang_build",
    "drain",
    "baseline",
    "driver",
    "switch",
    "verify",
    "batch_soak",
    "rollback",
    "undrain",
    "result",
)


def _time(value: Any, what: str) -> datetime:
    try:
        stamp = datetime.fromisoformat(str(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {value!r} is not an ISO 8601 time") from exc
    if stamp.tzinfo is None:  # Ansible's now(utc=true).isoformat() has no offset
        stamp = stamp.replace(tzinfo=UTC)
    return stamp


def step_durations(records: Sequence[Mapping[str, Any]], finished_at: str) -> list[dict[str, Any]]:
    """Each step with its start and duration.

    ``records``: ``[{"step": str, "started_at": ISO 8601}]`` in the order
    the play recorded them; ``finished_at``: when the last step ended (ISO
    8601). Times without an offset are UTC (what Ansible's
    ``now(utc=true).isoformat()`` writes). Returns ``[{"step", "started_at", "duration_s"}]``,
    ``duration_s`` in seconds rounded to 0.1. A step recorded twice in a
    row (a re-run of the same boundary) counts once. Raises ``ValueError``
    for a record without a step name or with a time that is not ISO 8601,
    or when a step starts before the one before it.
    """
    steps: list[dict[str, Any]] = []
    for index, record in enumerate(records):
        if not isinstance(record, Mapping) or not record.get("step"):
            raise ValueError(f"step record {index}: {record!r} has no 'step'")
        started = _time(record.get("started_at"), f"step {record['step']!r} started_at")
        if steps and steps[-1]["step"] == record["step"]:
            continue
        if steps and started < steps[-1]["_started"]:
            raise ValueError(
                f"step {record['step']!r} starts at {record['started_at']}, before {steps[-1]['step']!r}"
            )
        steps.append(
            {"step": str(record["step"]), "started_at": str(record["started_at"]), "_started": started}
        )
    end = _time(finished_at, "finished_at")
    for current, following in zip(steps, [*steps[1:], None][: len(steps)], strict=True):
        until = following["_started"] if following else max(end, current["_started"])
        current["duration_s"] = round((until - current["_started"]).total_seconds(), 1)
    return [{k: v for k, v in step.items() if k != "_started"} for step in steps]


def out_of_service_s(steps: Sequence[Mapping[str, Any]], drained_since: Any = None) -> float | None:
    """Seconds the host was out of service: from the start of ``drain`` to the
    end of ``undrain``, or, when no undrain ran, to the start of ``result``
    (or the end of the last step). A host the soak between batches rolled back
    (``batch_soak``, then ``rollback``) was out of service a second time, drained
    again for its rollback: from the start of ``rollback`` to the end of the
    undrain after it (or, without one, to the start of ``result``), added.
    ``steps`` as :func:`step_durations` returns them. None when the host never
    reached ``drain``.

    ``drained_since``: when the host was already out of service as this run began (ISO
    8601: the drain of an earlier run that stopped before its undrain,
    :func:`cuda13_upgrade.runlock.stopped_run`'s ``drained_at``), else None. The first period
    then starts there: to this run's own drain's start, the time between is added; a run
    that never reached its own drain was out of service from then until the start of
    ``result`` (or the end of the last step). Raises ``ValueError`` for a time that is not
    ISO 8601."""
    names = [str(step.get("step")) for step in steps]
    since = _time(drained_since, "drained_since") if drained_since else None
    if since is not None and steps:
        begun = names.index(OUT_OF_SERVICE_FROM) if OUT_OF_SERVICE_FROM in names else None
        if begun is None:
            last = names.index(RESULT_STEP) if RESULT_STEP in names else None
            if last is not None:
                until = _time(steps[last].get("started_at"), f"step {RESULT_STEP!r} started_at")
            else:
                until = _time(steps[-1].get("started_at"), "started_at") + timedelta(
                    seconds=float(steps[-1].get("duration_s") or 0.0)
                )
            return round(max(0.0, (until - since).total_seconds()), 1)
        own = out_of_service_s(steps)
        drained = _time(steps[begun].get("started_at"), f"step {OUT_OF_SERVICE_FROM!r} started_at")
        return round((own or 0.0) + max(0.0, (drained - since).total_seconds()), 1)
    if OUT_OF_SERVICE_FROM not in names:
        return None

    def period(first: int) -> float:
        last = names.index(SERVICE_BACK, first) if SERVICE_BACK in names[first:] else None
        if last is None:
            last = names.index(RESULT_STEP, first) - 1 if RESULT_STEP in names[first:] else len(names) - 1
        if last < first:
            return 0.0
        return sum(float(step.get("duration_s") or 0.0) for step in steps[first : last + 1])

    total = period(names.index(OUT_OF_SERVICE_FROM))
    if "batch_soak" in names and "rollback" in names[names.index("batch_soak") :]:
        total += period(names.index("rollback", names.index("batch_soak")))
    return round(total, 1)
