"""The rollout's circuit breaker: cuda13_upgrade.breaker, and the verdict of the fleet's step."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from cuda13_upgrade import breaker, ondemand
from cuda13_upgrade.steps.fleet import breaker_verdict

NOW = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)


def _result(reports: Path, run: str, host: str, status: str, finished_at, **extra) -> Path:
    path = reports / run / host / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"host": host, "run_id": run, "status": status, "finished_at": finished_at, **extra}
    path.write_text(json.dumps(record))
    return path


def _run_record(reports: Path, run: str, command: str, check: bool = False) -> None:
    (reports / run).mkdir(parents=True, exist_ok=True)
    (reports / run / "run.json").write_text(json.dumps({"command": command, "check": check}))


def _hosts(the_history):
    return [(r["host"], r["run_id"]) for r in the_history["records"]]


# --- the period ---------------------------------------------------------------------


def test_the_period_keeps_a_record_exactly_days_old_and_drops_an_older_one(tmp_path):
    edge = NOW - timedelta(days=7)
    _result(tmp_path, "A", "n1", "rolled_back", edge.isoformat())
    _result(tmp_path, "A", "n2", "rolled_back", (edge - timedelta(seconds=1)).isoformat())
    _result(tmp_path, "B", "n3", "failed", (NOW + timedelta(minutes=5)).isoformat())  # after now: counts
    the_history = breaker.history(tmp_path, NOW, 7)
    assert _hosts(the_history) == [("n1", "A"), ("n3", "B")]
    assert the_history["since"] == "2026-12-01T12:00:00Z"
    assert the_history["now"] == "2026-12-08T12:00:00Z"


def test_offsets_are_compared_as_instants(tmp_path):
    # 2026-12-01T13:30+02:00 is 11:30Z, before the period's start at 12:00Z;
    # 2026-12-01T06:30-06:00 is 12:30Z, inside it.
    _result(tmp_path, "A", "n1", "rolled_back", "2026-12-01T13:30:00+02:00")
    _result(tmp_path, "A", "n2", "rolled_back", "2026-12-01T06:30:00-06:00")
    _result(tmp_path, "A", "n3", "rolled_back", "2026-12-01T12:00:00Z")  # Z, exactly at the start
    the_history = breaker.history(tmp_path, NOW.astimezone(timezone(timedelta(hours=9))), 7)
    assert _hosts(the_history) == [("n3", "A"), ("n2", "A")]
    assert [r["finished_at"] for r in the_history["records"]] == [
        "2026-12-01T12:00:00Z",
        "2026-12-01T12:30:00Z",
    ]


def test_a_time_without_an_offset_is_utc(tmp_path):
    _result(tmp_path, "A", "n1", "rolled_back", "2026-12-01T11:59:59")
    _result(tmp_path, "A", "n2", "rolled_back", "2026-12-01T12:00:00")
    assert _hosts(breaker.history(tmp_path, NOW, 7)) == [("n2", "A")]


def test_one_day_period(tmp_path):
    _result(tmp_path, "A", "n1", "rolled_back", "2026-12-07T11:00:00Z")
    _result(tmp_path, "B", "n1", "rolled_back", "2026-12-07T13:00:00Z")
    assert _hosts(breaker.history(tmp_path, NOW, "1")) == [("n1", "B")]


def test_now_must_be_aware(tmp_path):
    with pytest.raises(ValueError, match="time zone"):
        breaker.history(tmp_path, datetime(2026, 12, 8, 12, 0), 7)


# --- what counts ---------------------------------------------------------------------


def test_only_rollbacks_and_failures_of_rollouts_count(tmp_path):
    at = "2026-12-07T02:00:00+00:00"
    _result(tmp_path, "kept", "n1", "kept", at)
    _result(tmp_path, "stage", "n1", "failed", at)
    _run_record(tmp_path, "stage", "stage")
    _result(tmp_path, "check", "n1", "rolled_back", at)
    _run_record(tmp_path, "check", "rollout", check=True)
    _result(tmp_path, "checkmode", "n1", "rolled_back", at, check_mode=True)
    _result(tmp_path, "ondemand", "n1", "rolled_back", at, reason=ondemand.ON_DEMAND_REASON)
    _result(tmp_path, "nothing", "n1", ondemand.NOTHING_TO_ROLL_BACK, at)
    _result(tmp_path, "interrupted", "n1", "interrupted", at)
    _result(tmp_path, "cli", "n1", "rolled_back", at, reason="slower by 4.1 %", failed_step="verify")
    _run_record(tmp_path, "cli", "rollout")
    # cuda13-upgrade driver: a driver window rolled back counts as a rollout's rollback.
    _result(tmp_path, "drv", "n4", "rolled_back", at, reason="slower on 580.142", failed_step="driver")
    _run_record(tmp_path, "drv", "driver")
    _result(tmp_path, "drvcheck", "n4", "rolled_back", at)
    _run_record(tmp_path, "drvcheck", "driver", check=True)
    _result(tmp_path, "awx", "n2", "failed", at, error="apt failed")
    _result(tmp_path, "current", "n3", "rolled_back", at)
    the_history = breaker.history(tmp_path, NOW, 7, exclude_run="current")
    assert _hosts(the_history) == [("n2", "awx"), ("n1", "cli"), ("n4", "drv")]
    assert the_history["records"][2]["decision"] == "rolled back at driver"
    cli = the_history["records"][1]
    assert cli["decision"] == "rolled back at verify"
    assert cli["reason"] == "slower by 4.1 %"
    assert cli["source"] == str(tmp_path / "cli" / "n1" / "result.json")
    assert the_history["records"][0]["reason"] == "apt failed"


def test_no_reports_directory_is_no_history(tmp_path):
    assert breaker.history(tmp_path / "none", NOW)["records"] == []


# --- malformed files ---------------------------------------------------------------


def test_a_result_that_is_not_json_names_the_file(tmp_path):
    path = tmp_path / "A" / "n1" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"^{path} is not a JSON result"):
        breaker.history(tmp_path, NOW)


def test_a_result_that_is_not_an_object_names_the_file(tmp_path):
    path = tmp_path / "A" / "n1" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"^{path} is not a JSON result: not an object"):
        breaker.history(tmp_path, NOW)


@pytest.mark.parametrize("finished_at", [None, "", "yesterday", 1733000000])
def test_a_counted_result_without_a_time_names_the_file_and_the_field(tmp_path, finished_at):
    path = _result(tmp_path, "A", "n1", "rolled_back", finished_at)
    with pytest.raises(ValueError) as caught:
        breaker.history(tmp_path, NOW)
    assert str(caught.value).startswith(
        f"{path}: finished_at is not an ISO 8601 date and time: {finished_at!r}"
    )
    assert "cuda13_breaker_rollbacks=0" in str(caught.value)


def test_a_result_not_counted_needs_no_time(tmp_path):
    _result(tmp_path, "A", "n1", "kept", None)
    assert breaker.history(tmp_path, NOW)["records"] == []


def test_a_run_record_that_is_not_an_object_names_the_file(tmp_path):
    (tmp_path / "A").mkdir()
    (tmp_path / "A" / "run.json").write_text('"rollout"')
    with pytest.raises(ValueError, match=f"^{tmp_path / 'A' / 'run.json'} is not a JSON object"):
        breaker.history(tmp_path, NOW)


# --- options -----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [(None, 2), ("", 2), (0, 0), ("0", 0), (3, 3), (" 4 ", 4)])
def test_threshold(value, expected):
    assert breaker.threshold_of(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(None, 7), ("", 7), (1, 1), ("30", 30)])
def test_days(value, expected):
    assert breaker.days_of(value) == expected


@pytest.mark.parametrize(
    ("function", "option", "value", "problem"),
    [
        (breaker.threshold_of, "cuda13_breaker_rollbacks", -1, "is not a whole number"),
        (breaker.threshold_of, "cuda13_breaker_rollbacks", "two", "is not a whole number"),
        (breaker.threshold_of, "cuda13_breaker_rollbacks", True, "is not a whole number"),
        (breaker.threshold_of, "cuda13_breaker_rollbacks", 1.5, "is not a whole number"),
        (breaker.days_of, "cuda13_breaker_days", 0, "is out of range"),
        (breaker.days_of, "cuda13_breaker_days", "0", "is out of range"),
        (breaker.days_of, "cuda13_breaker_days", "7d", "is not a whole number"),
        (breaker.days_of, "cuda13_breaker_days", [7], "is not a whole number"),
        (breaker.ack_of, "cuda13_breaker_ack", "../A", "is not a run id"),
        (breaker.ack_of, "cuda13_breaker_ack", ["A"], "is not a run id"),
        (breaker.ack_of, "cuda13_breaker_ack", True, "is not a run id"),
    ],
)
def test_bad_values_name_the_option_and_the_value(function, option, value, problem):
    with pytest.raises(ValueError) as caught:
        function(value)
    assert str(caught.value).startswith(f"{option} {problem}: {value!r}. Option: {option}. Fix: ")


def test_ack_values():
    assert breaker.ack_of(None) is None
    assert breaker.ack_of("") is None
    assert breaker.ack_of(" 20261202T020000Z ") == "20261202T020000Z"
    assert breaker.ack_of(20261202) == "20261202"


# --- the decision ------------------------------------------------------------------


def _record(host, run, at, reason="slower"):
    return {
        "host": host,
        "run_id": run,
        "status": "rolled_back",
        "decision": "rolled back at verify",
        "finished_at": at,
        "reason": reason,
        "source": f"/r/{run}/{host}/result.json",
    }


HISTORY = {
    "reports_dir": "/r",
    "days": 7,
    "since": "2026-12-01T12:00:00Z",
    "now": "2026-12-08T12:00:00Z",
    "records": [
        _record("n1", "A", "2026-12-06T02:30:00Z", "slower by 4.1 % (decode)"),
        _record("n2", "B", "2026-12-07T02:30:00Z"),
    ],
}


def test_two_rollbacks_trip_the_default_threshold():
    decision = breaker.decide(HISTORY)
    assert decision["tripped"] and decision["threshold"] == 2
    assert decision["newest_run"] == "B"
    assert [r["host"] for r in decision["rollbacks"]] == ["n1", "n2"]
    message = decision["message"]
    assert message.startswith(
        "The breaker is tripped: 2 rollbacks or failures of rollouts within the last 7 days "
        "(since 2026-12-01T12:00:00Z) reach cuda13_breaker_rollbacks 2. The rollout is refused; no host was changed."
    )
    assert "- n1 rolled back at verify in run A at 2026-12-06T02:30:00Z: slower by 4.1 % (decode)" in message
    assert "- n2 rolled back at verify in run B at 2026-12-07T02:30:00Z: slower" in message
    assert "cuda13-upgrade rollout --ack-breaker B (or -e cuda13_breaker_ack=B)" in message
    assert decision["reason"] == (
        "breaker tripped (2 rollbacks or failures of rollouts within the last 7 days (since 2026-12-01T12:00:00Z): "
        "n1 in run A, n2 in run B; cuda13_breaker_rollbacks 2; acknowledge with --ack-breaker B)"
    )


def test_below_the_threshold_runs():
    decision = breaker.decide(HISTORY, "3")
    assert not decision["tripped"] and decision["reason"] == ""
    assert decision["message"].startswith(
        "breaker: 2 rollbacks or failures of rollouts within the last 7 days"
    )
    assert decision["message"].endswith("below cuda13_breaker_rollbacks 3")


def test_zero_turns_the_breaker_off():
    decision = breaker.decide(HISTORY, 0)
    assert not decision["tripped"] and decision["rollbacks"] == []
    assert decision["message"] == "the breaker is off (cuda13_breaker_rollbacks 0)"


def test_an_ack_of_the_newest_run_covers_every_rollback_up_to_it():
    decision = breaker.decide(HISTORY, 2, "B")
    assert not decision["tripped"] and decision["ack_matched"]
    assert [r["run_id"] for r in decision["acknowledged"]] == ["A", "B"]
    assert decision["rollbacks"] == []
    assert "2 acknowledged by cuda13_breaker_ack B" in decision["message"]


def test_an_ack_of_an_older_run_leaves_the_later_ones_counted():
    decision = breaker.decide(HISTORY, 1, "A")
    assert decision["tripped"]
    assert [r["run_id"] for r in decision["rollbacks"]] == ["B"]
    assert "; 1 acknowledged by cuda13_breaker_ack A." in decision["message"]


def test_a_rollback_after_the_acked_run_counts_again():
    later = {**HISTORY, "records": [*HISTORY["records"], _record("n1", "C", "2026-12-08T02:30:00Z")]}
    decision = breaker.decide(later, 1, "B")
    assert decision["tripped"] and decision["newest_run"] == "C"
    assert [r["run_id"] for r in decision["rollbacks"]] == ["C"]
    assert "--ack-breaker C" in decision["message"]
    assert not breaker.decide(later, 2, "B")["tripped"]


def test_an_ack_that_names_no_run_acknowledges_nothing_and_says_so():
    decision = breaker.decide(HISTORY, 2, "Z")
    assert decision["tripped"] and not decision["ack_matched"]
    assert "cuda13_breaker_ack Z names no run with a rollback within the last 7 days" in decision["message"]


def test_a_long_reason_is_one_short_line(tmp_path):
    _result(tmp_path, "A", "n1", "rolled_back", "2026-12-07T02:00:00Z", reason="x\n" * 200)
    reason = breaker.history(tmp_path, NOW)["records"][0]["reason"]
    assert "\n" not in reason and len(reason) == 160 and reason.endswith("...")


# --- the verdict of the fleet's step (steps.fleet.breaker_verdict) --------------


def test_the_verdict_reads_the_reports(tmp_path):
    _result(tmp_path, "A", "n1", "rolled_back", "2026-12-06T02:00:00Z")
    _result(tmp_path, "B", "n2", "failed", "2026-12-07T02:00:00Z")
    _result(tmp_path, "NOW", "n3", "failed", "2026-12-08T02:00:00Z")  # the run being started
    decision = breaker_verdict({}, str(tmp_path), "NOW", "2026-12-08T12:00:00Z")
    assert decision["tripped"] and decision["failures"] == []
    assert decision["newest_run"] == "B"
    assert not breaker_verdict({"cuda13_breaker_ack": "B"}, str(tmp_path), "NOW", "2026-12-08T12:00:00Z")[
        "tripped"
    ]
    assert not breaker_verdict({"cuda13_breaker_days": "1"}, str(tmp_path), "NOW", "2026-12-08T12:00:00Z")[
        "tripped"
    ]


def test_the_verdict_gives_bad_values_as_failures(tmp_path):
    decision = breaker_verdict(
        {"cuda13_breaker_rollbacks": "-1", "cuda13_breaker_days": "0"},
        str(tmp_path),
        "NOW",
        "2026-12-08T12:00:00Z",
    )
    assert not decision["tripped"]
    assert [f.split(":")[0] for f in decision["failures"]] == [
        "cuda13_breaker_rollbacks is not a whole number",
        "cuda13_breaker_days is out of range",
    ]


def test_the_verdict_gives_an_unreadable_file_as_a_failure(tmp_path):
    path = tmp_path / "A" / "n1" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    decision = breaker_verdict({}, str(tmp_path), "NOW")
    assert decision["failures"][0].startswith(
        f"the breaker cannot read the reports: {path} is not a JSON result"
    )


def test_the_verdict_reads_nothing_when_the_breaker_is_off(tmp_path):
    path = tmp_path / "A" / "n1" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    decision = breaker_verdict({"cuda13_breaker_rollbacks": 0}, str(tmp_path), "NOW")
    assert not decision["tripped"] and decision["failures"] == []
