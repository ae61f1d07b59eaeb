"""The rollout's gates on the control node (action ``cuda13_fleet``): the batch plan, the breaker,
the hosts that upgrade, and before each batch the failure budget and the window.

``start`` (before any change, ``playbooks/start.yml``): the batch plan over the
hosts the play takes (:func:`cuda13_upgrade.batches.plan`: ``cuda13_serial``, or
the ramp capped at ``cuda13_max_parallel``), the window (``cuda13_window``,
``cuda13_until``), the failure budget (``cuda13_max_failed_hosts``) and the
breaker across runs (:mod:`cuda13_upgrade.breaker`, from the reports on the
control node). The play-wide options must have one value for every host. Bad
values refuse the run before any change, listing each; a tripped breaker writes
the refused run's report (every host "not started", and why) and refuses.

``kept`` (after the early pass): the hosts already kept leave the run; the
plan is made again over the hosts that upgrade, so the canary is a host that
upgrades.

``batch`` (before each batch of the serial upgrade play, the canary's first): the
batch starts only while no more hosts of earlier batches failed or rolled back
than the budget allows (:func:`cuda13_upgrade.budget.decide`), inside the window
(:func:`cuda13_upgrade.window.decide`, on the control node's clock) and, with
``cuda13_block_on_alerts``, once Prometheus has no matching active alert
(:mod:`cuda13_upgrade.alerts`): while it has, the gate asks again every
``interval_s`` and says so each time, until the alerts clear (the batch starts)
or the window closes, ``cuda13_until`` passes or ``max_wait_s`` is over (the batch
does not start, the alerts that held it named). A Prometheus that does not answer
starts no batch, naming its URL and the error, unless ``on_unreachable`` is
``proceed``. Otherwise this batch and every later one do not start: the hosts not
started and why are written into the run's report at once (``not_started.json``,
``summary.md``), since a ``--limit`` that leaves localhost out skips the report play.

With ``cuda13_notify`` (:mod:`cuda13_upgrade.notify`) the gates tell webhooks what happened:
``start`` the run's start (or the breaker's refusal); ``batch`` the end of the batches before
this one (their hosts' outcomes, and each host that rolled back, failed or was lost with its
reason, from its ``result.json``), then, when this batch does not start, why (failure budget
spent, window closed, alerts held, Prometheus unreachable); :func:`end` (the report play) the
last batch's end and the run's end, once per run. Each send waits at most the option's
``timeout_s``; what was sent, and what could not be, is kept in ``notifications.json`` in the
run's report directory. The gates read the option itself (its URLs are secrets) from the
inventory, not from the plan, whose record holds it masked; so does the batch gate
``cuda13_block_on_alerts`` (a ``user:password@`` in its URL).

The estimate of the night (:mod:`cuda13_upgrade.estimate`): a rollout's ``start`` (the one that
reads the breaker, ``playbooks/upgrade.yml``) takes the per-host times of the plan this run made
before it asked (``plan.json`` in the run's report directory; without one, from the earlier runs
and the rough default), schedules the batches from the run's start, prints the lines, tells the
estimated end with the run's start and writes ``estimate.json`` in the run's report directory.
Each ``batch`` gate then counts the batch before it as it really took (from its gate to this one)
and estimates the rest from now: ``estimate.json`` and the gate's ``"estimate"`` (read by the
progress line and ``cuda13-upgrade status``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cuda13_upgrade import alerts, batches, breaker, budget, estimate, hostresult, notify, summary, window
from cuda13_upgrade.redact import redact

#: The play-wide options: one value for every host of the rollout.
FLEET_OPTIONS = (
    "cuda13_serial",
    "cuda13_max_parallel",
    "cuda13_window",
    "cuda13_until",
    "cuda13_max_failed_hosts",
    "cuda13_breaker_rollbacks",
    "cuda13_breaker_days",
    "cuda13_breaker_ack",
    "cuda13_block_on_alerts",
    "cuda13_notify",
)

_STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _instant(text: Any, what: str) -> datetime:
    if text in (None, ""):
        return datetime.now(UTC)
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{what}: {text!r} is not an ISO 8601 time") from exc
    if stamp.tzinfo is None:
        raise ValueError(f"{what} must have an offset (e.g. Z), got {text!r}")
    return stamp


def fleet_options(hosts: Sequence[str], given: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``{"values": {option: value}, "failures": [message]}`` of the play-wide options over ``hosts``.

    ``given``: per host, the options its inventory or ``-e`` set. An option set on none of the hosts
    is left out; one with different values on different hosts (or set on some only) is a failure
    naming the hosts and values: the plan is one for the whole play.
    """
    values: dict[str, Any] = {}
    failures: list[str] = []
    for name in FLEET_OPTIONS:
        seen = [(host, given[host][name]) for host in hosts if name in given.get(host, {})]
        if not seen:
            continue
        distinct: list[Any] = []
        for _, value in seen:
            if value not in distinct:
                distinct.append(value)
        if len(distinct) > 1 or len(seen) < len(hosts):
            by_value = "; ".join(
                f"{redact({name: value})[name]!r} on {', '.join(h for h, v in seen if v == value)}"
                for value in distinct
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


def plan(hosts: Sequence[str], options: Mapping[str, Any], started: Any = None) -> dict[str, Any]:
    """The plan of ``hosts``: batches, window, until, failure budget and alert gate, checked (bad
    values are ``failures``, not errors). Returns ``{"sizes", "batches", "source", "lines", "ok",
    "failures", "options", "started", "window", "window_text", "until_at", "gated",
    "max_failed_hosts", "alerts", "alerts_text", "notify", "notify_text"}``: ``alerts`` is
    ``cuda13_block_on_alerts`` with its defaults (credentials masked; ``{}`` without the gate),
    ``alerts_text`` the plan's line for it (:func:`cuda13_upgrade.alerts.describe`, ``""``
    without); ``notify`` is ``cuda13_notify`` with its default, the URLs masked (``{}`` without),
    ``notify_text`` its line (:func:`cuda13_upgrade.notify.describe`). ``options`` holds the
    options given, ``cuda13_notify``'s URLs and ``cuda13_block_on_alerts``'s credentials masked
    (the batch gate takes the option itself from the inventory: ``alerts_value``)."""
    hosts = list(hosts)
    started_at = _instant(started, "the run's start")
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
            until_at = window.parse_until(options["cuda13_until"], started_at).strftime(_STAMP)
        except ValueError as exc:
            failures.append(str(exc))
    max_failed = budget.DEFAULT
    try:
        max_failed = budget.allowed(options.get("cuda13_max_failed_hosts"), len(hosts))
    except ValueError as exc:
        failures.append(str(exc))
    alert_gate = None
    try:
        alert_gate = alerts.parse(options.get(alerts.OPTION))
    except ValueError as exc:
        failures.append(str(exc))
    told = None
    try:
        told = notify.parse(options.get(notify.OPTION))
    except ValueError as exc:
        failures.append(str(exc))
    shown = dict(options)
    for secret in (notify.OPTION, alerts.OPTION):  # webhook URLs; Prometheus's user:password@
        if secret in shown:
            shown[secret] = redact({secret: shown[secret]})[secret]
    return {
        **result,
        "ok": not failures,
        "failures": failures,
        "options": shown,
        "started": started_at.astimezone(UTC).strftime(_STAMP),
        "window": options.get("cuda13_window") or {},
        "window_text": window_text,
        "until_at": until_at,
        "gated": bool(window_text or until_at),
        "max_failed_hosts": max_failed,
        "alerts": alert_gate.as_record() if alert_gate else {},
        "alerts_text": alerts.describe(alert_gate, bool(window_text or until_at)) if alert_gate else "",
        "notify": told.as_record() if told else {},
        "notify_text": notify.describe(told) if told else "",
    }


def breaker_verdict(
    options: Mapping[str, Any], reports_dir: str | Path, run_id: str, now: Any = None
) -> dict:
    """The breaker across runs (:func:`cuda13_upgrade.breaker.decide` over the reports), with its
    bad values and unreadable reports as ``failures``."""
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
        history = breaker.history(
            str(reports_dir),
            _instant(now, "now"),
            options.get("cuda13_breaker_days"),
            exclude_run=str(run_id),
        )
    except (OSError, ValueError) as exc:
        return {**off, "failures": [f"the breaker cannot read the reports: {exc}"]}
    return {**breaker.decide(history, threshold, options.get("cuda13_breaker_ack")), "failures": []}


def _told(value: Any) -> notify.Notify | None:
    """``cuda13_notify`` parsed, or None (unset; a bad value is refused by ``start`` before any
    change, so a gate after it sees none)."""
    try:
        return notify.parse(value)
    except ValueError:
        return None


def _tell(
    run_dir: Path,
    setting: notify.Notify | None,
    events: Sequence[Mapping[str, Any]],
    state: Mapping[str, Any],
    post: notify.Post | None,
) -> list[dict[str, Any]]:
    """Send ``events`` (:func:`cuda13_upgrade.notify.send_all`, at most ``timeout_s``) and write
    ``state`` with them recorded into ``notifications.json``. Never raises: a record that cannot be
    written is lost, not the rollout. Returns send_all's records."""
    records = notify.send_all(setting.targets, events, setting.timeout_s, post) if setting and events else []
    try:
        notify.save_state(run_dir, notify.record_sends(state, events, records) if records else state)
    except OSError:
        pass  # the report directory could not be written: the gate says so when it writes its own
    return records


def start(
    hosts: Sequence[str],
    given: Mapping[str, Mapping[str, Any]],
    *,
    run_id: str,
    reports_dir: str | Path,
    use_breaker: bool,
    started: Any = None,
    tell: bool = False,
    post: notify.Post | None = None,
    inventory: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``start`` gate (see the module docstring). ``inventory``: per host, what the estimate
    takes from the inventory when the run has no plan (``rollout --yes``): ``{"profiles": the
    number of cuda13_profiles, "soak_s": cuda13_soak_seconds}``; a value that is not an int >= 0
    (profiles: > 0) is unknown (the preflight refuses it). ``tell``: send the run's start (or the
    breaker's refusal) to ``cuda13_notify``'s webhooks (the rollout; not the plan); ``post``:
    :func:`cuda13_upgrade.notify.send_all`'s. Returns ``{"fleet": plan, "breaker": verdict or
    None, "failures": [message], "not_started": record or None, "lines": [line to print],
    "notified": [send_all's record], "estimate": :func:`_start_estimate`'s record or None (not
    a rollout's start, refused, or no estimate could be made: a line says why)}``."""
    options = fleet_options(hosts, given)
    the_plan = plan(hosts, options["values"], started)
    the_breaker = breaker_verdict(the_plan["options"], reports_dir, run_id) if use_breaker else None
    failures = options["failures"] + the_plan["failures"] + ((the_breaker or {}).get("failures") or [])
    not_started = None
    if not failures and the_breaker and the_breaker["tripped"]:
        not_started = {
            "said": "not started",
            "reason": the_breaker["reason"],
            "hosts": list(hosts),
            "before_any_change": True,
        }
    the_estimate, no_estimate = (
        _start_estimate(the_plan, Path(reports_dir) / run_id, run_id, inventory)
        if use_breaker and not failures and not_started is None
        else (None, "")
    )
    notified: list[dict[str, Any]] = []
    setting = _told(options["values"].get(notify.OPTION)) if tell and not failures else None
    if setting is not None:
        run_dir = Path(reports_dir) / run_id
        old = notify.load_state(run_dir)
        state = {
            "run_id": run_id,
            **setting.as_record(),
            "started": True,
            "ended": not_started is not None,
            "planned": [],
            "announced": [],
            "batches_announced": 0,
            "sent": list(old.get("sent") or []),
        }
        event = (
            notify.breaker_event(run_id, not_started, at=the_plan["started"])
            if not_started is not None
            else notify.start_event(
                run_id,
                the_plan,
                at=the_plan["started"],
                estimated_end=(the_estimate or {}).get("estimated_end") or None,
            )
        )
        notified = _tell(run_dir, setting, [event], state, post)
    if not_started is not None:
        summary.fleet_summary(Path(reports_dir) / run_id, list(hosts), not_started)
    lines = list(the_plan["lines"])
    if the_plan["window_text"]:
        lines.append(f"batches start only inside the window cuda13_window: {the_plan['window_text']}")
    if the_plan["until_at"]:
        lines.append(f"no batch starts after cuda13_until: {the_plan['until_at']}")
    lines.append(
        f"no batch starts once more than {the_plan['max_failed_hosts']} host(s) of the fleet failed or rolled"
        " back (cuda13_max_failed_hosts)"
    )
    if the_plan["alerts_text"]:
        lines.append(the_plan["alerts_text"])
    if the_plan["notify_text"]:
        lines.append(the_plan["notify_text"])
    if no_estimate:
        lines.append(no_estimate)
    if the_estimate is not None:
        lines += the_estimate["lines"]
        the_plan = {**the_plan, "estimate": the_estimate}  # the batch gates' start (cuda13_fleet)
    if the_breaker is not None:
        lines.append(the_breaker["message"])
    return {
        "estimate": the_estimate,
        "fleet": the_plan,
        "breaker": the_breaker,
        "failures": failures,
        "not_started": not_started,
        "lines": lines,
        "notified": notified,
    }


def _until(fleet: Mapping[str, Any]) -> datetime | None:
    return _instant(fleet["until_at"], "until_at") if fleet.get("until_at") else None


def _count(value: Any, least: int) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= least else None


def _start_estimate(
    fleet: Mapping[str, Any],
    run_dir: Path,
    run_id: str,
    inventory: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """The rollout's estimate at its start (the module's docstring), written to ``estimate.json``
    when the run's report directory exists (else the first batch gate writes it), and ``""``:
    :func:`cuda13_upgrade.estimate.schedule`'s record with ``"hosts"`` (the per-host times),
    ``"window"``, ``"until_at"``, ``"done": []``, ``"current": None`` and ``"updated_at"``. When
    it cannot be made (e.g. an earlier run's ``result.json`` with a duration of ``1e999``):
    None and the line that says why; an estimate never stops a rollout."""
    try:
        planned = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
        made = planned.get("estimate") if isinstance(planned, dict) else None
    except (OSError, ValueError):
        made = None
    try:
        if isinstance(made, dict) and isinstance(made.get("hosts"), dict):
            per_host = made["hosts"]
            soak_s = made.get("soak_s", estimate.SOAK_S)
        else:
            given = {h: v for h, v in (inventory or {}).items() if isinstance(v, Mapping)}
            hosts = [
                {"host": h, "gpu_model": "", "profiles": _count((given.get(h) or {}).get("profiles"), 1)}
                for b in fleet["batches"]
                for h in b
            ]
            per_host = estimate.host_estimates(hosts, estimate.history(run_dir.parent, run_id))
            soaks = [_count(v.get("soak_s"), 0) for v in given.values()]
            soaks = [n for n in soaks if n is not None]
            soak_s = max(soaks) if soaks else estimate.SOAK_S
        started = _instant(fleet.get("started"), "the run's start")
        scheduled = estimate.schedule(
            fleet["batches"],
            per_host,
            now=started,
            soak_s=soak_s,
            window_value=fleet.get("window") or None,
            until=_until(fleet),
        )
        record = {
            **scheduled,
            "hosts": per_host,
            "window": fleet.get("window") or {},
            "until_at": fleet.get("until_at") or "",
            "done": [],
            "current": None,
            "updated_at": _iso(started),
            # What the start said, kept for the run's end (estimate.close).
            "started_at": _iso(started),
            "start_estimated_end": scheduled["estimated_end"],
        }
    except (ValueError, KeyError, TypeError, OverflowError, ArithmeticError) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return None, f"the run's end cannot be estimated ({why}); the rollout starts without an estimate"
    if run_dir.is_dir():  # the rollout's plan made it; a start gate creates no report directory
        try:
            estimate.save(run_dir, record)
        except OSError:
            pass
    return record, ""


def _batch_estimate(
    run_dir: Path,
    fleet: Mapping[str, Any],
    batch: Sequence[str],
    starts: bool,
    at: datetime,
    ended: datetime | None = None,
) -> dict[str, Any] | None:
    """The estimate after a batch gate at ``at``: the batch that was running ended at ``ended``
    (the gate's start, before any wait for alerts; None: ``at``; its measured time replaces its
    estimate), ``batch`` starts at ``at`` (``starts``) or none does; the rest from ``at``. Reads
    ``estimate.json``, else the start's estimate in ``fleet`` (``"estimate"``), and
    writes ``estimate.json``; returns ``{"estimated_end", "line", "batch", "of"}``, or
    None without an estimate of this run (or when it cannot be read or written)."""
    record = estimate.load(run_dir) or dict(fleet.get("estimate") or {})
    if not record or not isinstance(record.get("hosts"), dict):
        return None
    try:
        the_batches = [list(b) for b in fleet.get("batches") or []]
        done = list(record.get("done") or [])
        current = record.get("current")
        if isinstance(current, dict) and current.get("hosts") != list(batch):
            done.append({**current, "ended_at": _iso(ended or at)})
        number = next((k for k, b in enumerate(the_batches) if batch and batch[0] in b), len(done))
        done = done[-number:] if number else []
        planned = the_batches if starts else the_batches[:number]
        scheduled = estimate.schedule(
            planned,
            record["hosts"],
            now=at,
            soak_s=record.get("soak_s", estimate.SOAK_S),
            window_value=record.get("window") or None,
            until=_until(record),
            done=done,
        )
        if not starts:
            left = [h for b in the_batches[number:] for h in b]
            scheduled["left_hosts"] = left
            scheduled["fits"] = not left
            scheduled["lines"] = [
                *scheduled["lines"][:-1],
                f"no batch starts from batch {number + 1} on: the run ends"
                + (f" {_hhmm(scheduled['estimated_end'], at)}" if scheduled["estimated_end"] else "")
                + f" (hosts {', '.join(left)} left)",
            ]
        closed = ("ended_at", "measured", "run")  # estimate.close's, at the run's end only
        updated = {
            **{k: v for k, v in record.items() if k not in closed},
            **scheduled,
            "done": done,
            "current": {"hosts": list(batch), "started_at": _iso(at)} if starts else None,
            "updated_at": _iso(at),
        }
        estimate.save(run_dir, updated)
    except (OSError, ValueError, TypeError):
        return None
    took = [r for r in scheduled["batches"] if r["measured_s"] is not None]
    after = ""
    if took:
        last = took[-1]
        after = (
            f" after batch {last['number']} took {estimate.minutes(last['measured_s'])}"
            f" (estimated ~{estimate.minutes(last['estimated_s'])})"
        )
    line = scheduled["lines"][-1] + after
    return {
        "estimated_end": scheduled["estimated_end"],
        "line": line,
        "batch": number + 1,
        "of": len(the_batches),
    }


def _hhmm(stamp: str, now: datetime) -> str:
    """An ISO 8601 time as the estimate's lines say it: ``HH:MM UTC``, with the weekday when not
    ``now``'s day (``Tue 01:36 UTC``; :func:`cuda13_upgrade.estimate.lines`)."""
    at = _instant(stamp, "the estimated end").astimezone(UTC)
    day = "" if at.date() == now.astimezone(UTC).date() else at.strftime("%a ")
    return f"{day}{at:%H:%M} UTC"


def _result_file(run_dir: Path, host: str) -> dict[str, Any]:
    """``<run dir>/<host>/result.json``, or ``{}`` when missing or unreadable."""
    try:
        return hostresult.load_results(run_dir, [host])[0]
    except ValueError:
        return {}


def _batch_events(
    run_id: str,
    state: Mapping[str, Any],
    done: Mapping[str, Mapping[str, Any]],
    statuses: Mapping[str, Any],
    at: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The end of the batch whose hosts' results are ``done`` (``{host: result}``, in play order),
    then one ``rollback`` per host of it that did not keep the upgrade; and ``state`` with them
    announced. No hosts: no events, ``state`` as it is."""
    if not done:
        return [], dict(state)
    number = int(state.get("batches_announced") or 0) + 1
    outcomes = {h: str(r.get("status") or "unknown") for h, r in done.items()}
    events = [notify.batch_end_event(run_id, number, state.get("batches") or None, outcomes, statuses, at=at)]
    events += [
        notify.rollback_event(run_id, {**r, "host": h}, statuses, at=at)
        for h, r in done.items()
        if outcomes[h] in notify.NOT_KEPT
    ]
    changed = {
        **state,
        "announced": [*(state.get("announced") or []), *done],
        "batches_announced": number,
    }
    return events, changed


def end(
    run_dir: str | Path,
    *,
    run_id: str,
    statuses: Mapping[str, Any],
    report: str,
    notify_value: Any,
    now: Any = None,
    post: notify.Post | None = None,
) -> list[dict[str, Any]]:
    """The run's end (the report play), told once per run whose start was told: the last batch's
    end (its hosts' results, none of them told by a gate), each of its hosts that did not keep the
    upgrade, then ``end`` with ``statuses`` (every host of the run's, the summary's rows) and
    ``report`` (the summary's path). ``notify_value``: ``cuda13_notify`` as the inventory gives it.
    Returns :func:`cuda13_upgrade.notify.send_all`'s records (``[]`` when nothing was told)."""
    run_dir = Path(run_dir)
    setting = _told(notify_value)
    state = notify.load_state(run_dir)
    if setting is None or not state.get("started") or state.get("ended"):
        return []
    at = _iso(_clock(now)())
    announced = set(state.get("announced") or [])
    left = [h for h in state.get("planned") or [] if h not in announced]
    done = {
        r["host"]: r
        for r in hostresult.load_results(run_dir, left)
        if r.get("status") != hostresult.NOT_REACHED and not r.get("already_kept")
    }
    events, state = _batch_events(run_id, state, done, statuses, at)
    events.append(notify.end_event(run_id, statuses, report, at=at))
    return _tell(run_dir, setting, events, {**state, "ended": True}, post)


def close_estimate(run_dir: str | Path, now: Any = None) -> dict[str, Any] | None:
    """The run's end (the report play) in its ``estimate.json``: the batch still running ended
    ``now`` (None: the control node's clock), each batch that ran measured against its estimate
    (:func:`cuda13_upgrade.estimate.close`). Returns the closed record, or None when the run has
    no estimate (not a rollout, or none could be made) or it cannot be written; never raises for
    a damaged record."""
    record = estimate.load(run_dir)
    if not record or record.get("ended_at"):
        return record or None
    try:
        closed = estimate.close(record, _clock(now)())
        estimate.save(run_dir, closed)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return closed


def _clock(now: Any) -> Callable[[], datetime]:
    """``now`` as a clock: a callable as it is, None the control node's, a value that fixed time."""
    if callable(now):
        return lambda: _instant(now(), "now")
    if now in (None, ""):
        return lambda: datetime.now(UTC)
    fixed = _instant(now, "now")
    return lambda: fixed


def _iso(stamp: datetime) -> str:
    return stamp.astimezone(UTC).strftime(_STAMP)


def _hold_for_alerts(
    fleet: Mapping[str, Any],
    batch: Sequence[str],
    clock: Callable[[], datetime],
    sleep: Callable[[float], Any],
    fetch: alerts.Fetch | None,
    say: Callable[[str], Any],
    alerts_value: Any = None,
) -> dict[str, Any] | None:
    """The alert gate of one batch (the module's docstring): None when the batch may start, else
    ``{"reason", "alerts"}`` (the alerts that held it, :func:`cuda13_upgrade.alerts.ask`'s).
    The gate is on when the plan has ``cuda13_block_on_alerts``; ``alerts_value`` is the option
    as the inventory gives it (with the URL's credentials; None: the plan's, masked)."""
    planned = (fleet.get("options") or {}).get(alerts.OPTION)
    if planned in (None, "", {}):
        return None
    gate = alerts.parse(planned if alerts_value in (None, "", {}) else alerts_value)
    if gate is None:
        return None
    parsed = window.parse_window(fleet.get("window") or None) if fleet.get("gated") else None
    until = _instant(fleet["until_at"], "until_at") if fleet.get("until_at") else None
    began = clock()
    max_wait = gate.max_wait_s
    if max_wait is None and parsed is None and until is None:
        max_wait = alerts.UNBOUNDED_WAIT_S
    wait_ends = began + timedelta(seconds=max_wait) if max_wait is not None else None
    held: list[dict[str, Any]] = []
    where = f"Prometheus {gate.display_url}, {alerts.OPTION}"
    batch_text = ", ".join(batch)
    while True:
        at = clock()
        if held:
            decision = window.decide(parsed, until, at)
            if not decision["open"]:
                why = (
                    f"until cuda13_until passed ({fleet['until_at']})"
                    if until is not None and at >= until
                    else f"until the window closed (cuda13_window {fleet.get('window_text') or ''})"
                )
                return {
                    "reason": f"held by active alerts {why}: {alerts.describe_alerts(held)} ({where})",
                    "alerts": held,
                }
            if wait_ends is not None and at >= wait_ends:
                limit = "max_wait_s" if gate.max_wait_s is not None else "without a window or cuda13_until"
                return {
                    "reason": f"held by active alerts for {max_wait:g} s ({limit}): "
                    f"{alerts.describe_alerts(held)} ({where})",
                    "alerts": held,
                }
        answer = alerts.ask(gate, fetch)
        if not answer["reachable"]:
            problem = f"Prometheus cannot be asked for its alerts (GET {answer['url']}: {answer['error']})"
            if gate.on_unreachable == "proceed":
                say(f"{problem}; {alerts.OPTION} on_unreachable is proceed: the batch {batch_text} starts")
                return None
            return {
                "reason": f"{problem}; {alerts.OPTION} on_unreachable is refuse",
                "alerts": held,
                "error": answer["error"],
            }
        if not answer["blocking"]:
            if held:
                waited = (clock() - began).total_seconds()
                say(f"the alerts cleared after {waited:.0f} s: the batch {batch_text} starts ({where})")
            return None
        held = answer["blocking"]
        decision = window.decide(parsed, until, at)
        ends = [
            t
            for t in (
                _instant(decision["closes_at"], "closes_at") if decision.get("closes_at") else None,
                wait_ends,
            )
            if t is not None
        ]
        end = min(ends) if ends else None
        pause = gate.interval_s if end is None else max(0.0, min(gate.interval_s, (end - at).total_seconds()))
        count = f"{len(held)} active alert{'s' if len(held) != 1 else ''}"
        say(
            f"the batch {batch_text} waits: {count} ({where}): {alerts.describe_alerts(held)}; asking again"
            f" in {pause:.0f} s" + (f", waiting until {_iso(end)} at most" if end is not None else "")
        )
        sleep(pause)


def batch_gate(
    fleet: Mapping[str, Any],
    *,
    hosts: Sequence[str],
    batch: Sequence[str],
    active: Sequence[str],
    statuses: Mapping[str, Any],
    run_id: str,
    reports_dir: str | Path,
    run_hosts: Sequence[str],
    now: Any = None,
    sleep: Callable[[float], Any] = time.sleep,
    fetch: alerts.Fetch | None = None,
    say: Callable[[str], Any] | None = None,
    notify_value: Any = None,
    post: notify.Post | None = None,
    alerts_value: Any = None,
) -> dict[str, Any]:
    """The ``batch`` gate (see the module docstring). ``hosts``: the play's hosts; ``batch``: this
    batch's; ``active``: those Ansible has not removed; ``statuses``: each host's result status (None
    without one). ``now``: the time (None: the control node's clock; a value: that time; a callable:
    a clock); ``sleep``, ``fetch`` (:func:`cuda13_upgrade.alerts.ask`'s) and ``say`` (a line for
    the operator, each time a batch waits for alerts) are for the alert gate. ``notify_value``:
    ``cuda13_notify`` as the inventory gives it (its URLs; None: nothing is told), ``post``:
    :func:`cuda13_upgrade.notify.send_all`'s. ``alerts_value``: ``cuda13_block_on_alerts`` as the
    inventory gives it (the plan holds its URL's credentials masked; None: the plan's). The
    batch before this one ended when this gate began: a wait for alerts counts as this batch's
    (the estimate). Returns ``{"start": bool, "not_started": record or
    None}`` and, when the run's start was told, ``"notified": [send_all's record]``; a record is
    ``{"said", "reason", "hosts"}`` and, from the window, ``opens_at``, from the budget ``failed``,
    from the alert gate ``alerts`` (each :func:`cuda13_upgrade.alerts.active_alerts` record that
    held the batch) and, when Prometheus did not answer, ``error``."""
    spent = budget.decide(
        hosts, batch, active, statuses, (fleet.get("options") or {}).get("cuda13_max_failed_hosts")
    )
    clock = _clock(now)
    ended = clock()  # the batch before this one ended here, before any wait for alerts
    first = list(hosts).index(batch[0]) if batch and batch[0] in hosts else 0
    run_dir = Path(reports_dir) / run_id
    setting = _told(notify_value)
    state = notify.load_state(run_dir) if setting is not None else {}
    events: list[dict[str, Any]] = []
    notified: list[dict[str, Any]] = []
    if setting is not None and state.get("started") and not state.get("ended"):
        if not state.get("planned"):
            state = {**state, "planned": list(hosts), "batches": len(fleet.get("batches") or [])}
        done = {}
        for host in list(hosts)[:first]:
            if host in (state.get("announced") or []):
                continue
            result = _result_file(run_dir, host)
            status = statuses.get(host) or (
                result.get("status") if result.get("status") != hostresult.NOT_REACHED else None
            )
            done[host] = {**result, "status": status or ("failed" if host not in active else "unknown")}
        events, state = _batch_events(run_id, state, done, statuses, _iso(clock()))
    else:
        setting = None
    not_started = None
    kind = ""
    if spent["spent"]:
        kind = "budget_spent"
        not_started = {
            "said": "not reached",
            "reason": spent["reason"],
            "failed": spent["failed"],
            "hosts": spent["hosts"],
        }
    elif fleet.get("gated"):
        parsed = window.parse_window(fleet.get("window") or None)
        until = _instant(fleet["until_at"], "until_at") if fleet.get("until_at") else None
        gate = window.decide(parsed, until, clock())
        if not gate["open"]:
            kind = "window_closed"
            not_started = {
                "said": "not started",
                "reason": gate["reason"],
                "opens_at": gate["opens_at"],
                "hosts": list(hosts)[first:],
            }
    if not_started is None and not spent["spent"]:
        if events:  # the batches before it are told before a wait for alerts
            notified += _tell(run_dir, setting, events, state, post)
            state, events = notify.load_state(run_dir) or state, []
        held = _hold_for_alerts(fleet, batch, clock, sleep, fetch, say or (lambda line: None), alerts_value)
        if held is not None:
            kind = "prometheus_unreachable" if held.get("error") else "alerts_held"
            not_started = {"said": "not started", **held, "hosts": list(hosts)[first:]}
    if not_started is not None and setting is not None:
        events.append(notify.stop_event(run_id, kind, not_started, statuses, at=_iso(clock())))
    if events:
        notified += _tell(run_dir, setting, events, state, post)
    elif setting is not None and state != notify.load_state(run_dir):
        _tell(run_dir, setting, [], state, post)  # the planned hosts, kept for the run's end
    if not_started is not None:
        summary.fleet_summary(run_dir, list(run_hosts), not_started)
    decided: dict[str, Any] = {"start": not_started is None, "not_started": not_started}
    the_estimate = _batch_estimate(run_dir, fleet, list(batch), not_started is None, clock(), ended)
    if the_estimate is not None:
        decided["estimate"] = the_estimate
    if setting is not None:
        decided["notified"] = notified
    return decided
