"""The rollout's gates on the control node (cuda13_upgrade.steps.fleet, action cuda13_fleet): the
``start`` gate (the batch plan, the play-wide options, the breaker over the reports under tmp_path),
the plan made again over the hosts that upgrade (``kept``) and the ``batch`` gate. The budget's and
the breaker's own rules are tests/test_budget.py's and tests/test_breaker.py's."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cuda13_upgrade.steps import fleet

HOSTS = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]


def _rolled_back(reports: Path, run: str, host: str, days_ago: float) -> None:
    finished = (datetime.now(UTC) - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = reports / run / host / "result.json"
    path.parent.mkdir(parents=True)
    record = {
        "host": host,
        "run_id": run,
        "status": "rolled_back",
        "finished_at": finished,
        "reason": "slower",
    }
    path.write_text(json.dumps(record))


def test_the_start_gate_plans_the_batches_and_says_each_limit(tmp_path):
    given = {h: {"cuda13_serial": [1, 2], "cuda13_max_failed_hosts": 1} for h in HOSTS}
    gate = fleet.start(
        HOSTS, given, run_id="r1", reports_dir=tmp_path, use_breaker=True, started="2026-12-01T00:00:00Z"
    )
    assert gate["failures"] == [] and gate["not_started"] is None
    assert gate["fleet"]["batches"] == [["gpu-node-01"], ["gpu-node-02", "gpu-node-03"]]
    assert gate["fleet"]["options"] == {"cuda13_serial": [1, 2], "cuda13_max_failed_hosts": 1}
    assert gate["fleet"]["started"] == "2026-12-01T00:00:00Z" and gate["fleet"]["gated"] is False
    assert gate["lines"][: len(gate["fleet"]["lines"])] == gate["fleet"]["lines"]
    assert (
        "no batch starts once more than 1 host(s) of the fleet failed or rolled back (cuda13_max_failed_hosts)"
        in gate["lines"]
    )
    assert gate["breaker"]["tripped"] is False and gate["lines"][-1] == gate["breaker"]["message"]
    assert not (tmp_path / "r1").exists()


def test_bad_play_wide_values_are_each_listed_before_any_change(tmp_path):
    given = {
        "gpu-node-01": {"cuda13_serial": "two", "cuda13_window": {"start": "25:00", "end": "02:00"}},
        "gpu-node-02": {"cuda13_serial": "two", "cuda13_window": {"start": "25:00", "end": "02:00"}},
        "gpu-node-03": {
            "cuda13_serial": "two",
            "cuda13_window": {"start": "25:00", "end": "02:00"},
            "cuda13_until": "soon",
        },
    }
    gate = fleet.start(HOSTS, given, run_id="r1", reports_dir=tmp_path, use_breaker=False)
    failures = gate["failures"]
    assert failures[0] == (
        "cuda13_until differs between the hosts of the rollout ('soon' on gpu-node-03; not set on"
        " gpu-node-01, gpu-node-02). Option: cuda13_until. Fix: give one value for the whole group"
        " (group_vars of the target group, or -e)."
    )
    assert any("cuda13_serial" in f for f in failures[1:]) and any("cuda13_window" in f for f in failures[1:])
    assert gate["breaker"] is None and gate["not_started"] is None


def test_a_tripped_breaker_refuses_the_run_and_writes_its_report(tmp_path):
    _rolled_back(tmp_path, "r-a", "gpu-node-01", 2)
    _rolled_back(tmp_path, "r-b", "gpu-node-02", 1)
    gate = fleet.start(HOSTS, {}, run_id="r1", reports_dir=tmp_path, use_breaker=True)
    assert gate["failures"] == [] and gate["breaker"]["tripped"] is True
    assert gate["not_started"] == {
        "said": "not started",
        "reason": gate["breaker"]["reason"],
        "hosts": HOSTS,
        "before_any_change": True,
    }
    assert json.loads((tmp_path / "r1" / "not_started.json").read_text())["hosts"] == HOSTS
    summary = (tmp_path / "r1" / "summary.md").read_text()
    assert all(f"| {h} | not started" in summary for h in HOSTS)
    # Acknowledged up to the newest, the rollout starts.
    acked = {h: {"cuda13_breaker_ack": "r-b"} for h in HOSTS}
    assert (
        fleet.start(HOSTS, acked, run_id="r2", reports_dir=tmp_path, use_breaker=True)["not_started"] is None
    )


def test_the_plan_over_the_hosts_that_upgrade_starts_with_one_of_them():
    # gpu-node-01 is already kept: the canary is the first host that upgrades.
    first = fleet.plan(HOSTS, {"cuda13_serial": [1, 2]}, "2026-12-01T00:00:00Z")
    again = fleet.plan(["gpu-node-02", "gpu-node-03"], first["options"], first["started"])
    assert first["batches"][0] == ["gpu-node-01"]
    assert again["batches"] == [["gpu-node-02"], ["gpu-node-03"]] and again["started"] == first["started"]


def test_a_batch_inside_the_window_starts_and_one_after_until_does_not(tmp_path):
    plan = fleet.plan(
        HOSTS,
        {
            "cuda13_serial": 1,
            "cuda13_window": {"start": "01:00", "end": "05:00", "timezone": "UTC"},
            "cuda13_until": "2026-12-01T06:00:00+00:00",
        },
        "2026-12-01T00:00:00Z",
    )
    assert plan["until_at"] == "2026-12-01T06:00:00Z" and plan["gated"] is True

    def gate(batch, now):
        return fleet.batch_gate(
            plan,
            hosts=HOSTS,
            batch=batch,
            active=HOSTS,
            statuses={"gpu-node-01": "kept"},
            run_id="r1",
            reports_dir=tmp_path,
            run_hosts=HOSTS,
            now=now,
        )

    assert gate(["gpu-node-02"], "2026-12-01T02:00:00Z") == {"start": True, "not_started": None}
    assert not (tmp_path / "r1").exists()
    late = gate(["gpu-node-02"], "2026-12-01T07:00:00Z")
    assert late["start"] is False and late["not_started"]["hosts"] == ["gpu-node-02", "gpu-node-03"]
    assert "cuda13_until" in late["not_started"]["reason"]
    assert json.loads((tmp_path / "r1" / "not_started.json").read_text())["hosts"] == [
        "gpu-node-02",
        "gpu-node-03",
    ]


def test_a_host_removed_without_a_result_spends_the_budget(tmp_path):
    plan = fleet.plan(HOSTS, {"cuda13_serial": 1, "cuda13_max_failed_hosts": 0}, "2026-12-01T00:00:00Z")
    gated = fleet.batch_gate(
        plan,
        hosts=HOSTS,
        batch=["gpu-node-02"],
        active=["gpu-node-02", "gpu-node-03"],
        statuses={},
        run_id="r1",
        reports_dir=tmp_path,
        run_hosts=HOSTS,
    )
    assert gated["start"] is False and gated["not_started"]["said"] == "not reached"
    assert gated["not_started"]["failed"] == [{"host": "gpu-node-01", "why": "failed without a result"}]


def _quiet_or_firing(*firing: bool):
    """A fetch of Prometheus's rules API answering, in turn, one firing alert or none."""
    answers = list(firing)

    def fetch(url, headers, timeout_s):
        fires = answers.pop(0) if len(answers) > 1 else answers[0]
        alert = {"labels": {"alertname": "GpuNodeHot"}, "state": "firing", "activeAt": "2026-12-06T01:00:00Z"}
        rule = {
            "name": "GpuNodeHot",
            "query": "x > 1",
            "type": "alerting",
            "alerts": [alert] if fires else [],
        }
        return json.dumps(
            {"status": "success", "data": {"groups": [{"name": "g", "rules": [rule]}]}}
        ).encode()

    return fetch


def _estimated_rollout(tmp_path, gate_option):
    run_id = "20261206T005200Z"
    (tmp_path / run_id).mkdir()
    given = {h: {"cuda13_serial": [1, 2], "cuda13_block_on_alerts": gate_option} for h in HOSTS}
    gate = fleet.start(
        HOSTS, given, run_id=run_id, reports_dir=tmp_path, use_breaker=True, started="2026-12-06T00:52:00Z"
    )
    assert gate["failures"] == [] and gate["estimate"] is not None
    return run_id, gate["fleet"]


class _Clock:
    def __init__(self, at: str) -> None:
        self.at = datetime.fromisoformat(at.replace("Z", "+00:00"))

    def __call__(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


def _batch(tmp_path, run_id, the_fleet, batch, clock, fetch):
    return fleet.batch_gate(
        the_fleet,
        hosts=HOSTS,
        batch=batch,
        active=HOSTS,
        statuses={},
        run_id=run_id,
        reports_dir=tmp_path,
        run_hosts=HOSTS,
        now=clock,
        sleep=clock.sleep,
        fetch=fetch,
    )


def test_a_wait_for_alerts_is_not_counted_as_the_batch_before_it(tmp_path):
    """Batch 1 took 40 min (00:52:30-01:32:30); batch 2 then waited 2 min for an alert: batch 1
    ended at 01:32:30, batch 2 started at 01:34:30."""
    run_id, the_fleet = _estimated_rollout(
        tmp_path, {"url": "http://prometheus.example:9090", "interval_s": 60}
    )
    clock = _Clock("2026-12-06T00:52:30Z")
    assert _batch(tmp_path, run_id, the_fleet, ["gpu-node-01"], clock, _quiet_or_firing(False))["start"]
    clock.at = datetime(2026, 12, 6, 1, 32, 30, tzinfo=UTC)
    second = _batch(
        tmp_path,
        run_id,
        the_fleet,
        ["gpu-node-02", "gpu-node-03"],
        clock,
        _quiet_or_firing(True, True, False),
    )
    assert second["start"] is True
    assert second["estimate"]["line"].endswith("after batch 1 took 40 min (estimated ~26 min)")
    saved = json.loads((tmp_path / run_id / "estimate.json").read_text())
    assert saved["done"] == [
        {"hosts": ["gpu-node-01"], "started_at": "2026-12-06T00:52:30Z", "ended_at": "2026-12-06T01:32:30Z"}
    ]
    assert saved["current"] == {"hosts": ["gpu-node-02", "gpu-node-03"], "started_at": "2026-12-06T01:34:30Z"}


def test_a_batch_held_by_alerts_says_the_runs_end_as_hh_mm_utc(tmp_path):
    run_id, the_fleet = _estimated_rollout(
        tmp_path, {"url": "http://prometheus.example:9090", "max_wait_s": 0}
    )
    clock = _Clock("2026-12-06T00:52:30Z")
    assert _batch(tmp_path, run_id, the_fleet, ["gpu-node-01"], clock, _quiet_or_firing(False))["start"]
    clock.at = datetime(2026, 12, 6, 1, 32, 30, tzinfo=UTC)
    held = _batch(tmp_path, run_id, the_fleet, ["gpu-node-02", "gpu-node-03"], clock, _quiet_or_firing(True))
    assert held["start"] is False
    assert held["estimate"]["line"] == (
        "no batch starts from batch 2 on: the run ends 01:32 UTC (hosts gpu-node-02, gpu-node-03 left)"
        " after batch 1 took 40 min (estimated ~21 min)"
    )


def test_a_corrupt_earlier_result_never_stops_the_rollouts_start(tmp_path, monkeypatch):
    """An earlier run's result.json with a step's duration_s of 1e999 (JSON's number too large for
    a float: Python reads it as inf) once raised OverflowError out of the start gate."""
    earlier = tmp_path / "20261205T220000Z" / "gpu-node-01" / "result.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(
        '{"host": "gpu-node-01", "run_id": "20261205T220000Z", "status": "kept", "measure": true,'
        ' "started_at": "2026-12-05T22:00:00+00:00", "finished_at": "2026-12-05T22:30:00+00:00",'
        ' "steps": [{"step": "toolkit", "started_at": "2026-12-05T22:00:00+00:00", "duration_s": 1e999}]}'
    )
    given = {h: {"cuda13_serial": 1} for h in HOSTS}
    gate = fleet.start(
        HOSTS, given, run_id="r1", reports_dir=tmp_path, use_breaker=True, started="2026-12-06T00:52:00Z"
    )
    assert gate["failures"] == [] and gate["not_started"] is None

    def overflowing(*args, **kwargs):
        return timedelta(seconds=float("inf"))  # what a duration of 1e999 made of the schedule

    monkeypatch.setattr(fleet.estimate, "schedule", overflowing)
    gate = fleet.start(
        HOSTS, given, run_id="r1", reports_dir=tmp_path, use_breaker=True, started="2026-12-06T00:52:00Z"
    )
    assert gate["failures"] == [] and gate["not_started"] is None and gate["estimate"] is None
    assert (
        "the run's end cannot be estimated (OverflowError: cannot convert float infinity to integer); the "
        "rollout starts without an estimate"
    ) in gate["lines"]
