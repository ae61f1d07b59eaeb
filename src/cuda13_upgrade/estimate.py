"""How long the rollout takes: each host's time, each batch's start and end, the window's fit.

Each host's time (seconds, the upgrade's steps without the soak between batches, which is
added per batch) comes from the first of these that applies, and says which
(:func:`host_estimates`):

1. ``history``: the same host's newest upgrade in an earlier run under the reports directory
   (``<reports>/<run id>/<host>/result.json`` with status ``kept``, not ``already_kept``, not in
   check mode): the sum of its ``steps``' ``duration_s`` (:mod:`cuda13_upgrade.timeline`),
   ``batch_soak`` left out;
2. ``similar``: the longest such upgrade of another host with the same GPU model and the same
   number of profiles (each known), as this plan or that run's ``plan.json`` records them;
3. ``stage``: the host's newest stage run (a result with status ``staged``): its steps are the
   preparation (toolkit, wheels, build); a host staged for this target skips them. The steps
   in the window (restarts, trials, soak) are the default's;
4. ``default``: :func:`default_seconds`, a rough figure from the profiles, trials and restarts.

The default formula (seconds), a rough one: no step time of a real host is recorded in this
project, so its constants are round figures, each with where it comes from::

    PREPARE_S (full path only; 0 when staged)
    + restarts * RESTART_S
    + profiles * 2 phases * trials * TRIAL_S
    + profiles * GATE_SOAK_S

A batch runs its hosts in parallel: it takes its slowest host, plus ``cuda13_soak_seconds``
after every batch but the last (:mod:`cuda13_upgrade.batch_soak`). Batches run one after
another from ``now`` (or the window's next opening); a batch starts only while the window
(:func:`cuda13_upgrade.window.decide`) is open, so the first batch whose estimated start is
past the window's close and every later one are expected to be left for the next window
(:func:`schedule`); past ``cuda13_until`` (or when it comes before the window's next opening)
no later batch is expected to start in this run. During the rollout the batches that finished count with
the time they really took (``done``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cuda13_upgrade import window
from cuda13_upgrade.numbers import finite_number

#: Preparation before the drain (toolkit apt install, pip install of the cu130 stack, SGLang
#: build): 15 min. Assumed, not measured: the wheels are gigabytes (stack-space.yml records
#: their size, not the time to fetch and install them).
PREPARE_S = 900.0
#: One restart of the service with its model load and readiness wait: 2 min. Assumed: a large
#: model takes minutes to load (cuda13_health_timeout, docs/options.md); the sandbox's
#: simulated server loads for 20 s (benchmarks/sandbox_timings.py --load-s).
RESTART_S = 120.0
#: One trial: verify_throughput_output_len (256 tokens) at concurrency 1 at about 100 tok/s
#: (the trial rate progress.py's example line shows, 96.1 tok/s): about 3 s.
TRIAL_S = 3.0
#: Trials per profile and phase: verify_throughput_min_trials (7; the new stack may get more,
#: up to verify_throughput_max_trials, 21, when they are noisy).
TRIALS = 7
#: The gate's soak of the new stack per profile: verify_throughput_soak_requests (64 of 256
#: tokens, 8 at once) "take about a minute on a real host" (roles/verify_throughput/defaults).
GATE_SOAK_S = 60.0
#: cuda13_soak_seconds' default (roles/cuda13/defaults/main.yml).
SOAK_S = 300
#: The steps of a result that count: the soak between batches is added per batch.
LEFT_OUT_STEPS = ("batch_soak",)

HISTORY = "history"
SIMILAR = "similar"
STAGE = "stage"
DEFAULT = "default"
SOURCES = (HISTORY, SIMILAR, STAGE, DEFAULT)

_STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _time(text: Any) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _iso(stamp: datetime) -> str:
    return stamp.astimezone(UTC).strftime(_STAMP)


#: The longest a recorded step may take (seconds; 7 days): a result with a longer one, or a
#: negative, non-numeric or non-finite ``duration_s``, is corrupt and skipped (:func:`history`).
MAX_STEP_S = 7 * 24 * 3600.0


def _duration(value: Any) -> float | None:
    """A step's ``duration_s`` in seconds (missing or null: 0), or None when it is not a finite
    number from 0 to :data:`MAX_STEP_S` (a string, a list, a bool, ``1e999``, ``-1000``)."""
    if value is None:
        return 0.0
    seconds = _seconds(value)
    return seconds if seconds is not None and seconds <= MAX_STEP_S else None


def _corrupt(result: Mapping[str, Any]) -> str:
    """Why a result cannot be used for an estimate (a bad step duration, a ``finished_at`` that
    is not ISO 8601), or ``""``."""
    for step in result.get("steps") or []:
        if isinstance(step, Mapping) and _duration(step.get("duration_s")) is None:
            value = step.get("duration_s")
            return (
                f"step {str(step.get('step') or '?')!r} has duration_s {value!r}, not a number of"
                f" seconds from 0 to {MAX_STEP_S:.0f}"
            )
    if _time(result.get("finished_at")) is None:
        return f"finished_at {result.get('finished_at')!r} is not an ISO 8601 time"
    return ""


def work_seconds(result: Mapping[str, Any]) -> float | None:
    """The seconds a result's ``steps`` took (``[{step, started_at, duration_s}]``, as
    :func:`cuda13_upgrade.hostresult.host_result` writes them), :data:`LEFT_OUT_STEPS` left out;
    None without steps, or when a step's ``duration_s`` is not a number of seconds from 0 to
    :data:`MAX_STEP_S`."""
    steps = [s for s in result.get("steps") or [] if isinstance(s, Mapping)]
    durations = [_duration(s.get("duration_s")) for s in steps if s.get("step") not in LEFT_OUT_STEPS]
    if any(d is None for d in durations):
        return None
    total = sum(d for d in durations if d is not None)
    return round(total, 1) if steps and total > 0 else None


def history(
    reports_dir: str | Path, exclude_run: str = "", skipped: list[dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """The upgrades and stage runs recorded under ``reports_dir``, newest first (by
    ``finished_at``).

    Reads ``<reports_dir>/<run id>/<host>/result.json`` (``exclude_run`` left out) and each run's
    ``plan.json`` for its hosts' GPU model and profile count. Returns ``[{"run_id", "host",
    "status": "kept" | "staged", "finished_at", "seconds", "gpu_model", "profiles"}]``
    (``gpu_model`` "" and ``profiles`` None where that run's plan did not record them). Results
    in check mode, already kept, or without steps are left out. A corrupt result (not a JSON
    object, or a kept or staged one with a step's ``duration_s`` that is not a number of seconds
    from 0 to :data:`MAX_STEP_S`, or a ``finished_at`` that is not ISO 8601) is skipped and, when
    ``skipped`` is a list, appended to it as ``{"path", "why"}``. Raises nothing for what the
    files hold: an estimate never stops a plan."""
    root = Path(reports_dir)
    records: list[dict[str, Any]] = []
    if not root.is_dir():
        return records
    found: list[tuple[datetime, dict[str, Any]]] = []
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name != exclude_run):
        known: dict[str, Mapping[str, Any]] = {}
        try:
            planned = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
            known = {str(h.get("host")): h for h in planned.get("hosts") or [] if isinstance(h, Mapping)}
        except (OSError, ValueError, AttributeError, TypeError):
            pass
        for path in sorted(run_dir.glob("*/result.json")):
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except OSError:
                continue
            except ValueError as exc:
                if skipped is not None:
                    skipped.append({"path": str(path), "why": f"not JSON ({exc})"})
                continue
            if not isinstance(result, Mapping):
                if skipped is not None:
                    skipped.append({"path": str(path), "why": "not a JSON object"})
                continue
            status = str(result.get("status") or "")
            if status not in ("kept", "staged") or result.get("already_kept") or result.get("check_mode"):
                continue
            why = _corrupt(result)
            if why:
                if skipped is not None:
                    skipped.append({"path": str(path), "why": why})
                continue
            seconds = work_seconds(result)
            if seconds is None:
                continue
            host = str(result.get("host") or path.parent.name)
            mine = known.get(host) or {}
            finished = _time(result.get("finished_at")) or datetime.min.replace(tzinfo=UTC)
            record = {
                "run_id": str(result.get("run_id") or run_dir.name),
                "host": host,
                "status": status,
                "finished_at": str(result.get("finished_at")),
                "seconds": seconds,
                "gpu_model": str(mine.get("gpu_model") or ""),
                "profiles": mine.get("profile_count"),
            }
            found.append((finished, record))
    found.sort(key=lambda item: (item[0], item[1]["run_id"]), reverse=True)
    return [record for _, record in found]


def skipped_line(skipped: Sequence[Mapping[str, str]]) -> str:
    """The plan's line for :func:`history`'s corrupt results, ``""`` for none: ``"estimate:
    skipped 2 earlier results that cannot be used (<path>: <why>)"``."""
    if not skipped:
        return ""
    first = skipped[0]
    count = len(skipped)
    noun = "result that cannot be used" if count == 1 else "results that cannot be used"
    more = "" if count == 1 else f"; {count - 1} more"
    return f"estimate: skipped {count} earlier {noun} ({first['path']}: {first['why']}{more})"


def default_seconds(
    *, profiles: int, restarts: int | None = None, staged: bool = False, trials: int = TRIALS
) -> float:
    """The rough default (the module's formula): ``restarts`` None counts one restart per
    profile and phase (baseline, candidate), ``2 * profiles``."""
    profiles = max(1, int(profiles))
    restarts = 2 * profiles if restarts is None else int(restarts)
    prepare = 0.0 if staged else PREPARE_S
    return prepare + restarts * RESTART_S + profiles * 2 * trials * TRIAL_S + profiles * GATE_SOAK_S


def _seconds(value: Any) -> float | None:
    """``value`` as a number of seconds (a finite int or float from 0, not a bool), else None."""
    seconds = finite_number(value, strings=False)
    return seconds if seconds is not None and seconds >= 0 else None


def minutes(seconds: float) -> str:
    """``1290`` -> ``"22 min"``, ``4500`` -> ``"1 h 15 min"`` (rounded up to the minute). Raises
    ValueError for a value that is not a finite number (``inf``: a ``1e999`` read from JSON)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ValueError(f"{seconds!r} is not a number of seconds")
    total = max(1, math.ceil(seconds / 60.0))
    hours, rest = divmod(total, 60)
    return f"{hours} h {rest:02d} min" if hours else f"{total} min"


def host_estimates(
    hosts: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each host's time and its source (the module's order).

    ``hosts``: ``[{"host", "gpu_model": str ("" unknown), "profiles": int | None,
    "restarts": int | None, "staged": bool}]``; ``records``: :func:`history`'s. Returns
    ``{host: {"seconds", "source", "text", "run_id"}}``: ``text`` says where the figure comes
    from, e.g. ``"gpu-node-02 run R 21 min"`` or ``"gpu-node-03: same GPU model and profiles as
    gpu-node-02 (run R)"``."""
    by_name = {str(h["host"]): h for h in hosts}
    out: dict[str, dict[str, Any]] = {}
    for info in hosts:
        name = str(info["host"])
        profiles = info.get("profiles")
        count = int(profiles) if isinstance(profiles, int) and profiles > 0 else 1
        kept = [r for r in records if r["host"] == name and r["status"] == "kept"]
        if kept:
            r = kept[0]
            out[name] = {
                "seconds": r["seconds"],
                "source": HISTORY,
                "run_id": r["run_id"],
                "text": f"{name} run {r['run_id']} {minutes(r['seconds'])}",
            }
            continue
        model = str(info.get("gpu_model") or "")
        if model and isinstance(profiles, int):
            alike = []
            for r in records:
                if r["host"] == name or r["status"] != "kept":
                    continue
                other = by_name.get(r["host"]) or {}
                other_model = str(other.get("gpu_model") or r.get("gpu_model") or "")
                other_profiles = other.get("profiles") if other.get("profiles") is not None else r["profiles"]
                if other_model == model and other_profiles == profiles:
                    alike.append(r)
            newest: dict[str, Mapping[str, Any]] = {}
            for r in alike:
                newest.setdefault(r["host"], r)
            if newest:
                r = max(newest.values(), key=lambda r: r["seconds"])
                out[name] = {
                    "seconds": r["seconds"],
                    "source": SIMILAR,
                    "run_id": r["run_id"],
                    "text": f"{name}: same GPU model and profiles as {r['host']} (run {r['run_id']})",
                }
                continue
        window_part = default_seconds(profiles=count, restarts=info.get("restarts"), staged=True)
        staged_runs = [r for r in records if r["host"] == name and r["status"] == "staged"]
        if staged_runs:
            r = staged_runs[0]
            prepared = 0.0 if info.get("staged") else r["seconds"]
            how = "staged: no preparation" if info.get("staged") else f"preparation {minutes(r['seconds'])}"
            out[name] = {
                "seconds": round(prepared + window_part, 1),
                "source": STAGE,
                "run_id": r["run_id"],
                "text": f"{name}: its stage run {r['run_id']} ({how}), the rough default for the rest",
            }
            continue
        seconds = default_seconds(
            profiles=count, restarts=info.get("restarts"), staged=bool(info.get("staged"))
        )
        shown = (
            f"{profiles} profile{'s' if profiles != 1 else ''}"
            if isinstance(profiles, int)
            else "profiles unknown"
        )
        restarts = info.get("restarts")
        out[name] = {
            "seconds": seconds,
            "source": DEFAULT,
            "run_id": "",
            "text": f"{name} {minutes(seconds)} ({shown}, "
            f"{2 * count if restarts is None else restarts} restarts, {TRIALS} trials"
            + (", staged" if info.get("staged") else "")
            + ")",
        }
    return out


_LABELS = {HISTORY: "from earlier runs", SIMILAR: "from earlier runs", STAGE: "", DEFAULT: "rough default"}


def _sources_text(texts: Sequence[tuple[str, str]]) -> str:
    groups: dict[str, list[str]] = {}
    for source, text in texts:
        groups.setdefault(_LABELS[source], []).append(text)
    parts = [f"{label}: {'; '.join(items)}" if label else "; ".join(items) for label, items in groups.items()]
    return "; ".join(parts)


def _clock(at: datetime, now: datetime) -> str:
    stamp = at.astimezone(UTC)
    day = "" if stamp.date() == now.astimezone(UTC).date() else stamp.strftime("%a ")
    return f"{day}{stamp:%H:%M} UTC"


def _between(start: datetime, end: datetime, now: datetime) -> str:
    """``"01:14-01:36 UTC"`` (each with its weekday when not ``now``'s day)."""
    first = _clock(start, now).removesuffix(" UTC")
    return f"{first}-{_clock(end, now)}"


def schedule(
    batches: Sequence[Sequence[str]],
    per_host: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
    soak_s: float = SOAK_S,
    window_value: Any = None,
    until: datetime | None = None,
    done: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Each batch's estimated start and end, and whether the rollout fits the window.

    Args:
        batches: the batch plan's hosts per batch (:func:`cuda13_upgrade.batches.plan`).
        per_host: :func:`host_estimates`' record per host (a host without one counts 0 s).
        now: the clock (aware); the next batch starts then, or at the window's next opening.
        soak_s: ``cuda13_soak_seconds``, after every batch but the last.
        window_value: ``cuda13_window`` as given (None: no window); until: ``cuda13_until``.
        done: the batches that finished, in order (``{"started_at", "ended_at"}`` ISO 8601):
            their measured time replaces their estimate (one whose times cannot be read, or that
            ended before it started, keeps its estimate).

    Returns ``{"batches": [{"number", "hosts", "seconds", "estimated_s", "measured_s",
    "start", "end", "sources", "left"}], "estimated_end", "closes_at", "fits", "left_hosts",
    "left_batches", "lines"}`` (times ISO 8601 UTC; ``closes_at`` the earlier of the window's
    close and ``until`` when the first batch to come starts, None without either). Raises
    ValueError for a bad ``window_value`` (:func:`cuda13_upgrade.window.parse_window`), a host's
    record that is not a mapping or whose ``seconds`` is not a finite number from 0, a ``soak_s``
    that is not one, or times past the calendar's end (an ``estimate.json`` edited or damaged:
    a number of ``1e999``, a string): never another exception."""
    parsed = window.parse_window(window_value or None)
    for host in {h for hosts in batches for h in hosts}:
        known = per_host.get(host)
        if known is not None and (
            not isinstance(known, Mapping)
            or (known.get("seconds") is not None and _seconds(known.get("seconds")) is None)
        ):
            raise ValueError(f"the estimate of host {host} is {known!r}, not a number of seconds from 0")
    if soak_s is not None and _seconds(soak_s) is None:
        raise ValueError(f"soak_s {soak_s!r} is not a number of seconds from 0")
    try:
        return _schedule(batches, per_host, now=now, soak_s=soak_s, parsed=parsed, until=until, done=done)
    except OverflowError as exc:  # a measured batch that ended in the year 9999, a huge estimate
        raise ValueError(f"the estimate runs past the calendar's end ({exc})") from exc


def _schedule(
    batches: Sequence[Sequence[str]],
    per_host: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
    soak_s: float,
    parsed: window.Window | None,
    until: datetime | None,
    done: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    at = now.astimezone(UTC)
    last = len(batches) - 1
    for k, hosts in enumerate(batches):
        estimated = max((float((per_host.get(h) or {}).get("seconds") or 0.0) for h in hosts), default=0.0)
        if k < last and soak_s:
            estimated += float(soak_s)
        row: dict[str, Any] = {
            "number": k + 1,
            "hosts": list(hosts),
            "estimated_s": round(estimated, 1),
            "measured_s": None,
            "sources": [
                {"host": h, **{k2: v for k2, v in (per_host.get(h) or {}).items() if k2 != "seconds"}}
                for h in hosts
            ],
            "left": False,
        }
        if k < len(done) and isinstance(done[k], Mapping):
            began, ended = _time(done[k].get("started_at")), _time(done[k].get("ended_at"))
            if began and ended and began <= ended:
                row.update(
                    measured_s=round((ended - began).total_seconds(), 1), start=_iso(began), end=_iso(ended)
                )
                row["seconds"] = row["measured_s"]
                rows.append(row)
                at = max(at, ended)
                continue
        row["seconds"] = row["estimated_s"]
        rows.append(row)
    closes_at: datetime | None = None
    first_open = True
    blocked = False
    left_why: str | None = None
    for row in rows:
        if row["measured_s"] is not None:
            continue
        if blocked:
            row.update(start=None, end=None, left=True)
            continue
        start = at
        if parsed is not None and not window.is_open(parsed, start):
            opened = window.opens_at(parsed, start)
            if first_open and opened is not None and (until is None or opened < until):
                start = opened
        decision = window.decide(parsed, until, start)
        if not decision["open"]:
            blocked = True
            row.update(start=None, end=None, left=True)
            left_why = _left_why(parsed, until, start)
            continue
        if first_open and decision["closes_at"]:
            closes_at = _time(decision["closes_at"])
        first_open = False
        end = start + timedelta(seconds=row["seconds"])
        row.update(start=_iso(start), end=_iso(end))
        at = end
    ran = [r for r in rows if r.get("end")]
    left = [r for r in rows if r["left"]]
    result = {
        "batches": rows,
        "now": _iso(now),
        "soak_s": soak_s,
        "estimated_end": ran[-1]["end"] if ran else None,
        "closes_at": _iso(closes_at) if closes_at else None,
        "fits": not left,
        "left_batches": [r["number"] for r in left],
        "left_hosts": [h for r in left for h in r["hosts"]],
        "left_why": left_why,
        "until": _iso(until) if until else None,
    }
    result["lines"] = lines(result, now)
    return result


def _left_why(parsed: window.Window | None, until: datetime | None, start: datetime) -> str:
    """Why no batch starts at ``start``: ``"until"`` when ``cuda13_until`` has passed by then or
    comes before the window's next opening (no later window is used), else ``"window"``."""
    if until is None:
        return "window"
    if start >= until:
        return "until"
    if parsed is not None and not window.is_open(parsed, start):
        opened = window.opens_at(parsed, start)
        if opened is None or opened >= until:
            return "until"
    return "window"


def _span(numbers: Sequence[int]) -> str:
    if len(numbers) == 1:
        return f"batch {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"batches {numbers[0]}-{numbers[-1]}"
    return "batches " + ", ".join(str(n) for n in numbers)


def lines(the_schedule: Mapping[str, Any], now: datetime) -> list[str]:
    """The plan's lines: one per batch, then the total (the module's docstring)."""
    out: list[str] = []
    for row in the_schedule["batches"]:
        hosts = ", ".join(row["hosts"])
        head = f"batch {row['number']} ({hosts})"
        soak = the_schedule.get("soak_s") or 0
        with_soak = (
            f" with the {minutes(soak)} soak" if soak and row["number"] < len(the_schedule["batches"]) else ""
        )
        if row["measured_s"] is not None:
            out.append(
                f"{head}: took {minutes(row['measured_s'])}, "
                f"{_between(_time(row['start']), _time(row['end']), now)} "
                f"(measured; estimated ~{minutes(row['estimated_s'])})"
            )
            continue
        sources = _sources_text(
            [(s.get("source") or DEFAULT, s.get("text") or s["host"]) for s in row["sources"]]
        )
        if row["left"]:
            where = (
                "not expected to start (no batch starts after cuda13_until)"
                if the_schedule.get("left_why") == "until"
                else "left for the next window"
            )
            out.append(f"{head}: ~{minutes(row['seconds'])}{with_soak}, {where} ({sources})")
            continue
        out.append(
            f"{head}: ~{minutes(row['seconds'])}{with_soak}, "
            f"{_between(_time(row['start']), _time(row['end']), now)} ({sources})"
        )
    end = _time(the_schedule.get("estimated_end"))
    closes = _time(the_schedule.get("closes_at"))
    until = _time(the_schedule.get("until")) if the_schedule.get("until") else None
    end_text = f"estimated end {_clock(end, now)}" if end else "no batch is expected to start"
    if the_schedule["left_hosts"]:
        left = f"{_span(the_schedule['left_batches'])} (hosts {', '.join(the_schedule['left_hosts'])})"
        verb = "is" if len(the_schedule["left_batches"]) == 1 else "are"
        if the_schedule.get("left_why") == "until" and until is not None:
            if not end and until <= now:
                out.append(
                    f"cuda13_until ({_iso(until)}) has passed: no batch is expected to start; {left}"
                    f" {verb} not upgraded in this run"
                )
            elif not end:
                out.append(
                    f"cuda13_until ({_iso(until)}) comes before the window opens: no batch is expected"
                    f" to start; {left} {verb} not upgraded in this run"
                )
            else:
                out.append(
                    f"{end_text}; no batch starts after cuda13_until ({_clock(until, now)}): {left}"
                    f" {verb} not expected to start in this run"
                )
        else:
            why = (
                f"the window closes {_clock(closes, now)}"
                if closes
                else "the window or cuda13_until closes first"
            )
            out.append(f"{end_text}; {why}: {left} {verb} expected to be left for the next window")
    elif closes:
        out.append(f"{end_text}; fits the window (closes {_clock(closes, now)})")
    else:
        out.append(f"{end_text} (no cuda13_window or cuda13_until)")
    return out


def save(run_dir: str | Path, record: Mapping[str, Any]) -> None:
    """Write ``<run_dir>/estimate.json`` (indented, keys sorted). Raises OSError."""
    path = Path(run_dir) / "estimate.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".json.tmp")
    scratch.write_text(json.dumps(record, indent=4, sort_keys=True) + "\n", encoding="utf-8")
    scratch.replace(path)


def load(run_dir: str | Path) -> dict[str, Any]:
    """``<run_dir>/estimate.json``, or ``{}`` when missing or unreadable."""
    try:
        record = json.loads((Path(run_dir) / "estimate.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _error_pct(estimated_s: float, measured_s: float) -> float | None:
    """The estimate's error in percent of the measured time (``+50.0``: estimated 1.5 times as
    long), None when nothing was measured."""
    if measured_s <= 0:
        return None
    return round((estimated_s - measured_s) / measured_s * 100.0, 1)


def _seconds_text(seconds: float) -> str:
    """``75`` -> ``"1 min 15 s"``, ``42`` -> ``"42 s"``, ``3900`` -> ``"1 h 05 min"``: a measured
    time, to the second under an hour."""
    whole = int(round(seconds))
    if whole >= 3600:
        return minutes(whole)
    mins, secs = divmod(whole, 60)
    return f"{mins} min {secs:02d} s" if mins else f"{secs} s"


def close(record: Mapping[str, Any], ended_at: datetime) -> dict[str, Any]:
    """``estimate.json``'s record at the run's end (the report play): the batch still running
    (``current``) ended at ``ended_at`` (aware), and each batch that ran gets its estimate from
    the run's start against what it took.

    Adds ``"ended_at"`` (ISO 8601) and ``"measured"``: ``[{"number", "hosts", "estimated_s",
    "measured_s", "error_pct", "sources"}]`` per batch that ran, in order (``error_pct``:
    estimated minus measured, in percent of measured; ``estimated_s`` with the soak between
    batches, as :func:`schedule` counts it), and ``"run"``: ``{"estimated_s", "measured_s",
    "error_pct", "estimated_end", "ended_at"}`` from the start's estimated end (None without
    one). A record already closed, or one whose times cannot be read, is returned as it is; a
    batch whose record cannot be read (hosts not a list, an ``estimated_s`` that is not a finite
    number from 0) is left out: a damaged ``estimate.json`` never stops the report."""
    out = dict(record)
    if out.get("ended_at"):
        return out
    done = [d for d in _list(out.get("done")) if isinstance(d, Mapping)]
    current = out.get("current")
    if isinstance(current, Mapping) and current.get("started_at"):
        done.append({**current, "ended_at": _iso(ended_at)})
    rows = [
        r for r in _list(out.get("batches")) if isinstance(r, Mapping) and isinstance(r.get("hosts"), list)
    ]
    measured: list[dict[str, Any]] = []
    for took in done:
        row = next((r for r in rows if r["hosts"] == _list(took.get("hosts"))), None)
        began, ended = _time(took.get("started_at")), _time(took.get("ended_at"))
        estimated = _seconds(row.get("estimated_s") or 0.0) if row is not None else None
        if row is None or began is None or ended is None or estimated is None:
            continue
        seconds = max(0.0, (ended - began).total_seconds())
        measured.append(
            {
                "number": row.get("number"),
                "hosts": list(row.get("hosts") or []),
                "estimated_s": estimated,
                "measured_s": round(seconds, 1),
                "error_pct": _error_pct(estimated, seconds),
                "sources": [dict(s) for s in _list(row.get("sources")) if isinstance(s, Mapping)],
            }
        )
    run: dict[str, Any] | None = None
    started, planned_end = _time(out.get("started_at")), _time(out.get("start_estimated_end"))
    first = _time(done[0].get("started_at")) if done else None
    try:
        _iso(planned_end) if planned_end else None
    except OverflowError:  # 9999-12-31T23:59:59-12:00: past the calendar's end in UTC
        planned_end = None
    if started and planned_end and first:
        estimated_s = (planned_end - started).total_seconds()
        measured_s = max(0.0, (ended_at - started).total_seconds())
        run = {
            "estimated_s": round(estimated_s, 1),
            "measured_s": round(measured_s, 1),
            "error_pct": _error_pct(estimated_s, measured_s),
            "estimated_end": _iso(planned_end),
            "ended_at": _iso(ended_at),
        }
    out.update(done=done, current=None, ended_at=_iso(ended_at), measured=measured, run=run)
    return out


_MEASURED_LABELS = {
    HISTORY: "from earlier runs",
    SIMILAR: "from a like host's earlier run",
    STAGE: "from the stage run",
    DEFAULT: "rough default",
}


def _list(value: Any) -> list[Any]:
    """``value`` when a list, else ``[]`` (a record edited by hand: a string, a number, a mapping)."""
    return value if isinstance(value, list) else []


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.0f} %"


def _readable_row(row: Any) -> bool:
    """Whether a ``measured`` row of :func:`close` can be said: its hosts a list of strings, its
    times finite numbers of seconds, its error a finite number or None, its sources mappings."""
    return (
        isinstance(row, Mapping)
        and isinstance(row.get("hosts"), list)
        and all(isinstance(h, str) for h in row["hosts"])
        and _seconds(row.get("estimated_s")) is not None
        and _seconds(row.get("measured_s")) is not None
        and (row.get("error_pct") is None or _finite(row.get("error_pct")))
        and isinstance(row.get("sources", []), list)
        and all(isinstance(s, Mapping) for s in row.get("sources", []))
    )


def _finite(value: Any) -> bool:
    return finite_number(value, strings=False) is not None


def measured_lines(record: Mapping[str, Any]) -> list[str]:
    """The summary's section ``## How long the run took`` from a :func:`close`\\ d record: the
    run's estimated against measured time, then one line per batch that ran (``batch 2
    (gpu-node-02, gpu-node-03): estimated ~25 min (from earlier runs), took 21 min 40 s
    (estimate +15 %)``, the sources of its hosts' figures named once each); ``[]`` when no
    batch's time was measured. A row or run record that cannot be read (a number that is not a
    finite one, hosts that are not a list: an ``estimate.json`` edited or damaged) is left out;
    never raises for what the record holds."""
    if not isinstance(record, Mapping):
        return []
    rows = [r for r in _list(record.get("measured")) if _readable_row(r)]
    if not rows:
        return []
    out = ["", "## How long the run took", ""]
    run = record.get("run")
    if (
        isinstance(run, Mapping)
        and _seconds(run.get("estimated_s")) is not None
        and _seconds(run.get("measured_s")) is not None
        and (run.get("error_pct") is None or _finite(run.get("error_pct")))
    ):
        now = _time(run.get("ended_at")) or datetime.now(UTC)
        planned, ended = _time(run.get("estimated_end")), _time(run.get("ended_at"))
        out.append(
            f"- the run: estimated at its start ~{minutes(run['estimated_s'])} (end"
            f" {_clock(planned, now) if planned else '?'}), took {_seconds_text(run['measured_s'])}"
            f" (ended {_clock(ended, now) if ended else '?'}; estimate {_pct(run.get('error_pct'))})"
        )
    for row in rows:
        kinds = [s.get("source") if s.get("source") in SOURCES else DEFAULT for s in row.get("sources", [])]
        sources = ", ".join(_MEASURED_LABELS[k] for k in SOURCES if k in kinds) or _MEASURED_LABELS[DEFAULT]
        out.append(
            f"- batch {row['number']} ({', '.join(row['hosts'])}): estimated ~{minutes(row['estimated_s'])}"
            f" ({sources}), took {_seconds_text(row['measured_s'])} (estimate {_pct(row['error_pct'])})"
        )
    return out
