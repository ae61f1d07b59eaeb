"""How long the night takes (cuda13_upgrade.estimate): each host's time from its own earlier run,
a host of the same GPU model and profiles, its stage run or the rough default; batches of hosts
in parallel with the soak between them; the window's fit and the hosts left; the re-estimate
after a measured batch; the plan (steps.planning) and the gates (steps.fleet) that use it. The
result files are built by cuda13_upgrade.hostresult.host_result, the shape a run writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cuda13_upgrade import estimate, hostresult
from cuda13_upgrade.cli.commands import running_estimate
from cuda13_upgrade.steps import fleet, planning
from tests.test_planning_step import PREFLIGHT, _host

NOW = datetime(2026, 12, 6, 0, 52, tzinfo=UTC)
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
OTHER_GPU = "NVIDIA B200"
STEPS = ("artifact_cache", "snapshot", "toolkit", "wheels", "drain", "baseline", "switch", "verify")


def _write_result(reports: Path, run_id: str, host: str, minutes: dict[str, float], status: str = "kept"):
    """``<reports>/<run_id>/<host>/result.json`` as host_result writes it, each step lasting its minutes."""
    at = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    steps = []
    for step, length in minutes.items():
        steps.append({"step": step, "started_at": at.isoformat()})
        at += timedelta(minutes=length)
    result = hostresult.host_result(
        {
            "host": host,
            "run_id": run_id,
            "status": status,
            "measure": status == "kept",
            "steps": steps,
            "finished_at": at.isoformat(),
            "started_at": steps[0]["started_at"],
        }
    )
    path = reports / run_id / host / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=4))
    return result


def _info(host, gpu=GPU, profiles=1, restarts=None, staged=False):
    return {"host": host, "gpu_model": gpu, "profiles": profiles, "restarts": restarts, "staged": staged}


def test_the_default_formula_and_its_constants():
    # 900 preparation + 2 restarts * 120 + 1 profile * 2 phases * 7 trials * 3 + 1 * 60 (seconds)
    assert estimate.default_seconds(profiles=1) == 900 + 240 + 42 + 60 == 1242
    assert estimate.default_seconds(profiles=2, restarts=3) == 900 + 360 + 84 + 120
    assert estimate.default_seconds(profiles=1, staged=True) == 342
    assert estimate.minutes(1242) == "21 min" and estimate.minutes(4500) == "1 h 15 min"


def test_each_source_in_its_order(tmp_path):
    _write_result(tmp_path, "20261201T010000Z", "gpu-node-01", {"toolkit": 5, "wheels": 8, "verify": 8})
    _write_result(tmp_path, "20261201T010000Z", "gpu-node-02", {"toolkit": 5, "verify": 20, "batch_soak": 5})
    _write_result(tmp_path, "20261202T010000Z", "gpu-node-05", {"toolkit": 4, "wheels": 5}, status="staged")
    records = estimate.history(tmp_path)
    assert {(r["host"], r["status"], r["seconds"]) for r in records} == {
        ("gpu-node-01", "kept", 1260.0),
        ("gpu-node-02", "kept", 1500.0),  # batch_soak left out: the soak is added per batch
        ("gpu-node-05", "staged", 540.0),
    }
    hosts = [
        _info("gpu-node-01"),
        _info("gpu-node-03"),  # same GPU and profiles as gpu-node-01 and -02: the longer
        _info("gpu-node-04", gpu=OTHER_GPU),
        _info("gpu-node-05", gpu=OTHER_GPU),
        _info("gpu-node-06", gpu=OTHER_GPU, profiles=2, restarts=5),
        _info("gpu-node-02", profiles=2),
    ]
    got = estimate.host_estimates(hosts, records)
    assert got["gpu-node-01"] == {
        "seconds": 1260.0,
        "source": "history",
        "run_id": "20261201T010000Z",
        "text": "gpu-node-01 run 20261201T010000Z 21 min",
    }
    # gpu-node-02 has 2 profiles now: not alike; gpu-node-01 is
    assert got["gpu-node-03"]["source"] == "similar" and got["gpu-node-03"]["seconds"] == 1260.0
    assert got["gpu-node-03"]["text"] == (
        "gpu-node-03: same GPU model and profiles as gpu-node-01 (run 20261201T010000Z)"
    )
    assert got["gpu-node-04"]["source"] == "default" and got["gpu-node-04"]["seconds"] == 1242
    assert got["gpu-node-04"]["text"] == "gpu-node-04 21 min (1 profile, 2 restarts, 7 trials)"
    assert got["gpu-node-05"]["source"] == "stage" and got["gpu-node-05"]["seconds"] == 540 + 342
    assert got["gpu-node-05"]["text"] == (
        "gpu-node-05: its stage run 20261202T010000Z (preparation 9 min), the rough default for the rest"
    )
    assert got["gpu-node-06"]["seconds"] == 900 + 600 + 84 + 120
    staged = estimate.host_estimates([_info("gpu-node-05", gpu="", staged=True)], records)["gpu-node-05"]
    assert staged["seconds"] == 342 and "staged: no preparation" in staged["text"]


def test_batches_take_their_slowest_host_plus_the_soak_and_fit_the_window():
    per_host = {
        "gpu-node-01": {"seconds": 1260.0, "source": "history", "text": "gpu-node-01 run R 21 min"},
        "gpu-node-02": {"seconds": 1260.0, "source": "history", "text": "gpu-node-02 run R 21 min"},
        "gpu-node-03": {"seconds": 600.0, "source": "similar", "text": "gpu-node-03: same GPU model and ..."},
        "gpu-node-04": {"seconds": 1242.0, "source": "default", "text": "gpu-node-04 21 min (...)"},
    }
    win = {"start": "00:00", "end": "04:00", "timezone": "UTC"}
    got = estimate.schedule(
        [["gpu-node-01"], ["gpu-node-02", "gpu-node-03"], ["gpu-node-04"]],
        per_host,
        now=NOW,
        soak_s=60,
        window_value=win,
    )
    assert [(b["start"], b["end"], b["seconds"]) for b in got["batches"]] == [
        ("2026-12-06T00:52:00Z", "2026-12-06T01:14:00Z", 1320.0),
        ("2026-12-06T01:14:00Z", "2026-12-06T01:36:00Z", 1320.0),  # the slower host, plus the soak
        ("2026-12-06T01:36:00Z", "2026-12-06T01:56:42Z", 1242.0),  # the last batch: no soak
    ]
    assert got["fits"] and got["closes_at"] == "2026-12-06T04:00:00Z" and got["left_hosts"] == []
    assert got["lines"] == [
        "batch 1 (gpu-node-01): ~22 min with the 1 min soak, 00:52-01:14 UTC "
        "(from earlier runs: gpu-node-01 run R 21 min)",
        "batch 2 (gpu-node-02, gpu-node-03): ~22 min with the 1 min soak, 01:14-01:36 UTC "
        "(from earlier runs: gpu-node-02 run R 21 min; gpu-node-03: same GPU model and ...)",
        "batch 3 (gpu-node-04): ~21 min, 01:36-01:56 UTC (rough default: gpu-node-04 21 min (...))",
        "estimated end 01:56 UTC; fits the window (closes 04:00 UTC)",
    ]


def test_the_hosts_left_for_the_next_window_and_a_closed_window_waits_for_its_opening():
    per_host = {f"h{k}": {"seconds": 1800.0, "source": "default", "text": f"h{k}"} for k in range(1, 6)}
    batches = [["h1"], ["h2"], ["h3"], ["h4", "h5"]]
    got = estimate.schedule(
        batches,
        per_host,
        now=NOW,
        soak_s=0,
        window_value={"start": "00:00", "end": "02:00", "timezone": "UTC"},
    )
    assert got["estimated_end"] == "2026-12-06T02:22:00Z" and not got["fits"]
    assert got["left_batches"] == [4] and got["left_hosts"] == ["h4", "h5"]
    assert got["lines"][-1] == (
        "estimated end 02:22 UTC; the window closes 02:00 UTC: batch 4 (hosts h4, h5) is expected to be"
        " left for the next window"
    )
    assert got["lines"][3] == "batch 4 (h4, h5): ~30 min, left for the next window (rough default: h4; h5)"
    later = estimate.schedule(
        batches[:1],
        per_host,
        now=NOW,
        soak_s=0,
        window_value={"start": "03:00", "end": "05:00", "timezone": "UTC"},
    )
    assert later["batches"][0]["start"] == "2026-12-06T03:00:00Z" and later["fits"]
    until = estimate.schedule(batches, per_host, now=NOW, soak_s=0, until=NOW + timedelta(minutes=45))
    assert until["left_batches"] == [3, 4] and until["closes_at"] == "2026-12-06T01:37:00Z"


def test_a_measured_batch_replaces_its_estimate():
    per_host = {h: {"seconds": 600.0, "source": "default", "text": h} for h in ("a", "b", "c")}
    done = [{"hosts": ["a"], "started_at": "2026-12-06T00:00:00Z", "ended_at": "2026-12-06T00:25:00Z"}]
    got = estimate.schedule([["a"], ["b"], ["c"]], per_host, now=NOW, soak_s=0, done=done)
    assert got["batches"][0]["measured_s"] == 1500.0 and got["batches"][0]["estimated_s"] == 600.0
    assert got["batches"][1]["start"] == "2026-12-06T00:52:00Z"
    assert got["estimated_end"] == "2026-12-06T01:12:00Z"
    assert got["lines"][0] == "batch 1 (a): took 25 min, 00:00-00:25 UTC (measured; estimated ~10 min)"


def test_a_second_plan_uses_the_first_runs_durations(tmp_path):
    reports = tmp_path / "reports"
    fleet_record = fleet.plan(
        ["gpu-node-01", "gpu-node-02"], {"cuda13_serial": [1, 1]}, "2026-12-06T00:52:00Z"
    )
    gpus = {"gpus": [{"index": 0, "name": GPU}]}
    hosts = [_host(h, preflight={**PREFLIGHT, **gpus}) for h in ("gpu-node-01", "gpu-node-02")]
    first = planning.rollout(hosts, fleet_record, "20261205T220000Z", reports_dir=reports, now=NOW)
    assert [b["sources"][0]["source"] for b in first["estimate"]["batches"]] == ["default", "default"]
    assert (
        "rough default: gpu-node-01 21 min (1 profile, 2 restarts, 7 trials)" in first["summary"]["lines"][-3]
    )
    (reports / "20261205T220000Z").mkdir(parents=True)
    (reports / "20261205T220000Z" / "plan.json").write_text(json.dumps(first))
    _write_result(reports, "20261205T220000Z", "gpu-node-01", {s: 3 for s in STEPS})  # 24 min
    second = planning.rollout(hosts, fleet_record, "20261206T220000Z", reports_dir=reports, now=NOW)
    est = second["estimate"]
    assert (
        est["hosts"]["gpu-node-01"]["source"] == "history" and est["hosts"]["gpu-node-01"]["seconds"] == 1440
    )
    assert est["hosts"]["gpu-node-02"]["source"] == "similar"
    assert second["summary"]["lines"][-3:] == [
        "batch 1 (gpu-node-01): ~29 min with the 5 min soak, 00:52-01:21 UTC "
        "(from earlier runs: gpu-node-01 run 20261205T220000Z 24 min)",
        "batch 2 (gpu-node-02): ~24 min, 01:21-01:45 UTC (from earlier runs: gpu-node-02: same GPU model and"
        " profiles as gpu-node-01 (run 20261205T220000Z))",
        "estimated end 01:45 UTC (no cuda13_window or cuda13_until)",
    ]


def test_the_rollout_tells_and_updates_the_estimated_end(tmp_path):
    run_id = "20261206T005200Z"
    run_dir = tmp_path / run_id
    run_dir.mkdir()
    hosts = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    given = {h: {"cuda13_serial": [1, 2]} for h in hosts}
    gate = fleet.start(
        hosts, given, run_id=run_id, reports_dir=tmp_path, use_breaker=True, started="2026-12-06T00:52:00Z"
    )
    assert gate["estimate"]["estimated_end"] == "2026-12-06T01:38:24Z"  # 1242 + 300 + 1242 s
    assert gate["lines"][-2] == "estimated end 01:38 UTC (no cuda13_window or cuda13_until)"
    assert json.loads((run_dir / "estimate.json").read_text())["estimated_end"] == "2026-12-06T01:38:24Z"

    def batch_gate(batch, now):
        return fleet.batch_gate(
            gate["fleet"],
            hosts=hosts,
            batch=batch,
            active=hosts,
            statuses={},
            run_id=run_id,
            reports_dir=tmp_path,
            run_hosts=hosts,
            now=now,
        )

    first = batch_gate(["gpu-node-01"], "2026-12-06T00:52:30Z")
    assert first["start"] and first["estimate"]["estimated_end"] == "2026-12-06T01:38:54Z"
    second = batch_gate(["gpu-node-02", "gpu-node-03"], "2026-12-06T01:32:30Z")  # batch 1 took 40 min
    assert second["estimate"] == {
        "estimated_end": "2026-12-06T01:53:12Z",
        "line": "estimated end 01:53 UTC (no cuda13_window or cuda13_until) after batch 1 took 40 min"
        " (estimated ~26 min)",
        "batch": 2,
        "of": 2,
    }
    saved = json.loads((run_dir / "estimate.json").read_text())
    assert saved["done"] == [
        {"hosts": ["gpu-node-01"], "started_at": "2026-12-06T00:52:30Z", "ended_at": "2026-12-06T01:32:30Z"}
    ]
    assert running_estimate(tmp_path)["line"] == (
        f"run {run_id}: estimated end 01:53 UTC (updated 01:32 UTC, after 1 of 2 batches)"
    )
    (run_dir / "run.json").write_text("{}")
    assert running_estimate(tmp_path) is None  # the run ended

    # The report play closes the estimate: batch 2 ended at 01:54:30 (22 min; estimated 1242 s).
    closed = fleet.close_estimate(run_dir, "2026-12-06T01:54:30Z")
    assert closed["ended_at"] == "2026-12-06T01:54:30Z"
    assert [(r["number"], r["estimated_s"], r["measured_s"], r["error_pct"]) for r in closed["measured"]] == [
        (1, 1542.0, 2400.0, -35.8),  # 1242 s + the 300 s soak, against 40 min
        (2, 1242.0, 1320.0, -5.9),
    ]
    assert closed["run"] == {
        "estimated_s": 2784.0,  # 00:52:00 to 01:38:24
        "measured_s": 3750.0,
        "error_pct": -25.8,
        "estimated_end": "2026-12-06T01:38:24Z",
        "ended_at": "2026-12-06T01:54:30Z",
    }
    assert json.loads((run_dir / "estimate.json").read_text())["measured"] == closed["measured"]
    assert fleet.close_estimate(run_dir, "2026-12-06T03:00:00Z") == closed  # closed once
    assert estimate.measured_lines(closed) == [
        "",
        "## How long the run took",
        "",
        "- the run: estimated at its start ~47 min (end 01:38 UTC), took 1 h 03 min (ended 01:54 UTC;"
        " estimate -26 %)",
        "- batch 1 (gpu-node-01): estimated ~26 min (rough default), took 40 min 00 s (estimate -36 %)",
        "- batch 2 (gpu-node-02, gpu-node-03): estimated ~21 min (rough default), took 22 min 00 s"
        " (estimate -6 %)",
    ]


def test_the_summary_says_how_long_the_run_took_and_survives_a_damaged_estimate(tmp_path):
    from cuda13_upgrade.summary import fleet_summary

    run_dir = tmp_path / "20261206T005200Z"
    _write_result(tmp_path, run_dir.name, "gpu-node-01", {"toolkit": 10, "verify": 10})
    estimate.save(
        run_dir,
        {
            "batches": [
                {"number": 1, "hosts": ["gpu-node-01"], "estimated_s": 600.0, "sources": [{"host": "x"}]}
            ],
            "started_at": "2026-12-06T00:52:00Z",
            "start_estimated_end": "2026-12-06T01:02:00Z",
            "current": {"hosts": ["gpu-node-01"], "started_at": "2026-12-06T00:52:10Z"},
        },
    )
    fleet.close_estimate(run_dir, "2026-12-06T01:12:10Z")
    markdown = fleet_summary(run_dir, ["gpu-node-01"])["markdown"]
    assert "## How long the run took" in markdown
    assert (
        "- batch 1 (gpu-node-01): estimated ~10 min (rough default), took 20 min 00 s (estimate -50 %)"
        in (markdown)
    )
    # A record edited by hand or cut short: the summary is still written, without the section.
    for damaged in ('{"measured": [{"number": 1}]}', '{"measured": "x"}', "[1, 2]", "{"):
        (run_dir / "estimate.json").write_text(damaged)
        assert "## How long the run took" not in fleet_summary(run_dir, ["gpu-node-01"])["markdown"]
        fleet.close_estimate(run_dir, "2026-12-06T01:12:10Z")


def _corrupt(reports: Path, run_id: str, host: str, **changes):
    """A good result of ``host`` in ``run_id`` with ``changes`` applied (``steps_0``: the first
    step's ``duration_s``)."""
    result = _write_result(reports, run_id, host, {"toolkit": 10, "verify": 10})
    if "steps_0" in changes:
        result["steps"][0]["duration_s"] = changes.pop("steps_0")
    result.update(changes)
    path = reports / run_id / host / "result.json"
    path.write_text(json.dumps(result))
    return path


def test_a_corrupt_earlier_result_is_skipped_and_counted_never_raised(tmp_path):
    reports = tmp_path / "reports"
    good = _write_result(reports, "20261201T010000Z", "gpu-node-01", {"toolkit": 5, "verify": 5})
    bad = {
        "gpu-node-02": {"steps_0": "abc"},  # ValueError before
        "gpu-node-03": {"steps_0": [1]},  # TypeError
        "gpu-node-04": {"steps_0": 1e15},  # OverflowError in minutes()
        "gpu-node-05": {"steps_0": -1000},  # with a 1200 s step: 200 s
        "gpu-node-06": {"finished_at": "yesterday"},  # sorted as the newest
    }
    paths = [_corrupt(reports, "20261202T010000Z", host, **change) for host, change in bad.items()]
    huge = reports / "20261202T010000Z" / "gpu-node-07" / "result.json"
    huge.parent.mkdir()
    text = paths[0].read_text().replace('"abc"', "1e999")  # json.loads: inf
    huge.write_text(text.replace("gpu-node-02", "gpu-node-07"))
    # gpu-node-01's own newer record, its finished_at not ISO 8601: the older good one counts
    _corrupt(reports, "20261203T010000Z", "gpu-node-01", finished_at="yesterday")
    skipped = []
    records = estimate.history(reports, skipped=skipped)
    assert [(r["host"], r["seconds"], r["finished_at"]) for r in records] == [
        ("gpu-node-01", 600.0, good["finished_at"])
    ]
    assert len(skipped) == 7
    assert skipped[0] == {
        "path": str(paths[0]),
        "why": "step 'toolkit' has duration_s 'abc', not a number of seconds from 0 to 604800",
    }
    assert {s["why"] for s in skipped} >= {
        "step 'toolkit' has duration_s [1], not a number of seconds from 0 to 604800",
        "step 'toolkit' has duration_s 1000000000000000.0, not a number of seconds from 0 to 604800",
        "step 'toolkit' has duration_s -1000, not a number of seconds from 0 to 604800",
        "step 'toolkit' has duration_s inf, not a number of seconds from 0 to 604800",
        "finished_at 'yesterday' is not an ISO 8601 time",
    }
    fleet_record = fleet.plan(
        ["gpu-node-01", "gpu-node-02"], {"cuda13_serial": [1, 1]}, "2026-12-06T00:52:00Z"
    )
    hosts = [_host(h, preflight=PREFLIGHT) for h in ("gpu-node-01", "gpu-node-02")]
    planned = planning.rollout(hosts, fleet_record, "20261206T220000Z", reports_dir=reports, now=NOW)
    lines = planned["estimate"]["lines"]
    assert lines[0] == (
        f"estimate: skipped 7 earlier results that cannot be used ({paths[0]}: step 'toolkit' has duration_s"
        " 'abc', not a number of seconds from 0 to 604800; 6 more)"
    )
    assert planned["estimate"]["hosts"]["gpu-node-01"]["seconds"] == 600.0
    # 00:52 + 600 s (gpu-node-01's good record) + the 300 s soak + 1242 s (gpu-node-02: the rough default)
    assert planned["summary"]["lines"][-1] == "estimated end 01:27 UTC (no cuda13_window or cuda13_until)"


def test_an_unexpected_error_in_the_estimate_does_not_stop_the_plan(tmp_path, monkeypatch):
    def broken(hosts, records):
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(estimate, "host_estimates", broken)
    fleet_record = fleet.plan(["gpu-node-01"], {"cuda13_serial": [1]}, "2026-12-06T00:52:00Z")
    planned = planning.rollout(
        [_host("gpu-node-01", preflight=PREFLIGHT)], fleet_record, "R", reports_dir=tmp_path, now=NOW
    )
    assert planned["estimate"] == {
        "error": "OverflowError: cannot convert float infinity to integer",
        "lines": ["no estimate: OverflowError: cannot convert float infinity to integer"],
    }
    assert (
        planned["summary"]["lines"][-1]
        == "no estimate: OverflowError: cannot convert float infinity to integer"
    )


def test_a_past_cuda13_until_says_no_batch_starts_not_the_next_window():
    per_host = {h: {"seconds": 600.0, "source": "default", "text": h} for h in ("h1", "h2")}
    got = estimate.schedule([["h1"], ["h2"]], per_host, now=NOW, soak_s=0, until=NOW - timedelta(hours=1))
    assert got["left_batches"] == [1, 2] and got["left_why"] == "until" and got["estimated_end"] is None
    assert got["lines"] == [
        "batch 1 (h1): ~10 min, not expected to start (no batch starts after cuda13_until) (rough default: h1)",
        "batch 2 (h2): ~10 min, not expected to start (no batch starts after cuda13_until) (rough default: h2)",
        "cuda13_until (2026-12-05T23:52:00Z) has passed: no batch is expected to start; batches 1-2 (hosts"
        " h1, h2) are not upgraded in this run",
    ]
    later = estimate.schedule([["h1"], ["h2"]], per_host, now=NOW, soak_s=0, until=NOW + timedelta(minutes=5))
    assert later["lines"][-1] == (
        "estimated end 01:02 UTC; no batch starts after cuda13_until (00:57 UTC): batch 2 (hosts h2) is not"
        " expected to start in this run"
    )
    before_window = estimate.schedule(
        [["h1"]],
        per_host,
        now=NOW,
        soak_s=0,
        window_value={"start": "03:00", "end": "05:00", "timezone": "UTC"},
        until=NOW + timedelta(hours=1),
    )
    assert before_window["lines"][-1] == (
        "cuda13_until (2026-12-06T01:52:00Z) comes before the window opens: no batch is expected to start;"
        " batch 1 (hosts h1) is not upgraded in this run"
    )


def test_a_rollout_without_a_plan_takes_profiles_and_soak_from_the_inventory(tmp_path):
    run_id = "20261206T005200Z"
    (tmp_path / run_id).mkdir()
    hosts = ["gpu-node-01", "gpu-node-02"]
    gate = fleet.start(
        hosts,
        {h: {"cuda13_serial": [1, 1]} for h in hosts},
        run_id=run_id,
        reports_dir=tmp_path,
        use_breaker=True,
        started="2026-12-06T00:52:00Z",
        # A value the preflight refuses is unknown here.
        inventory={"gpu-node-01": {"profiles": 2, "soak_s": 10}, "gpu-node-02": {"profiles": "two"}},
    )
    per_host = gate["estimate"]["hosts"]
    assert per_host["gpu-node-01"]["seconds"] == estimate.default_seconds(profiles=2) == 1584.0
    assert "2 profiles" in per_host["gpu-node-01"]["text"]
    assert per_host["gpu-node-02"]["seconds"] == estimate.default_seconds(profiles=1)
    assert "profiles unknown" in per_host["gpu-node-02"]["text"]
    # The soak between batches is the inventory's cuda13_soak_seconds, not the role's default.
    assert gate["estimate"]["soak_s"] == 10
    assert gate["estimate"]["batches"][0]["estimated_s"] == 1584.0 + 10


# --- an estimate.json edited or damaged during the night -----------------------------------------

# JSON numbers Python's json reads as inf or nan (json.loads accepts 1e999, Infinity and NaN).
DAMAGED_NUMBERS = ["1e999", "-1e999", "Infinity", "NaN", '"abc"', "[1]", "-600"]


def _started_run(tmp_path):
    run_id = "20261206T005200Z"
    (tmp_path / run_id).mkdir()
    hosts = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    gate = fleet.start(
        hosts,
        {h: {"cuda13_serial": [1, 2]} for h in hosts},
        run_id=run_id,
        reports_dir=tmp_path,
        use_breaker=True,
        started="2026-12-06T00:52:00Z",
    )
    return tmp_path / run_id, hosts, gate


def _damage(run_dir: Path, number: str, *keys) -> None:
    """``estimate.json`` with the value at ``keys`` replaced by the JSON text ``number``."""
    path = run_dir / "estimate.json"
    record = json.loads(path.read_text())
    inner = record
    for key in keys[:-1]:
        inner = inner[key]
    inner[keys[-1]] = "DAMAGED"
    path.write_text(json.dumps(record).replace('"DAMAGED"', number))


def _first_batch(reports, run_dir, hosts, gate):
    """The batch gate of the started run's first batch (gpu-node-01) at 00:52:30."""
    return fleet.batch_gate(
        gate["fleet"],
        hosts=hosts,
        batch=["gpu-node-01"],
        active=hosts,
        statuses={},
        run_id=run_dir.name,
        reports_dir=reports,
        run_hosts=hosts,
        now="2026-12-06T00:52:30Z",
    )


@pytest.mark.parametrize("number", DAMAGED_NUMBERS)
def test_a_damaged_host_time_in_estimate_json_never_stops_a_batch(tmp_path, number):
    run_dir, hosts, gate = _started_run(tmp_path)
    _damage(run_dir, number, "hosts", "gpu-node-01", "seconds")
    decided = _first_batch(tmp_path, run_dir, hosts, gate)
    assert decided["start"] is True and "estimate" not in decided


@pytest.mark.parametrize(
    ("field", "number"),
    [(f, n) for f in ("estimated_s", "measured_s", "error_pct") for n in DAMAGED_NUMBERS if n != "-600"],
)
def test_a_damaged_closed_estimate_leaves_the_summary_without_its_section(tmp_path, field, number):
    from cuda13_upgrade.summary import fleet_summary

    run_dir, hosts, gate = _started_run(tmp_path)
    fleet.close_estimate(run_dir, "2026-12-06T01:54:30Z")
    good = fleet_summary(run_dir, hosts)["markdown"]
    assert "## How long the run took" not in good  # no batch ran: nothing measured
    record = json.loads((run_dir / "estimate.json").read_text())
    row = {
        "number": 1,
        "hosts": ["gpu-node-01"],
        "estimated_s": 600.0,
        "measured_s": 700.0,
        "error_pct": -14.3,
    }
    record["measured"] = [{**row, "sources": [], field: "DAMAGED"}]
    record["run"] = {**row, "estimated_end": record["estimated_end"], "ended_at": "2026-12-06T01:54:30Z"}
    record["run"][field] = "DAMAGED"
    (run_dir / "estimate.json").write_text(json.dumps(record).replace('"DAMAGED"', number))
    markdown = fleet_summary(run_dir, hosts)["markdown"]
    assert "took 11 min 40 s" not in markdown


@pytest.mark.parametrize("number", DAMAGED_NUMBERS)
def test_closing_a_damaged_estimate_never_raises(tmp_path, number):
    run_dir, hosts, gate = _started_run(tmp_path)
    _first_batch(tmp_path, run_dir, hosts, gate)
    _damage(run_dir, number, "batches", 0, "estimated_s")
    closed = fleet.close_estimate(run_dir, "2026-12-06T01:54:30Z")
    assert closed is not None and closed["measured"] == []
    for broken in ('"done": 5', '"batches": 5', '"done": ["x"]'):
        record = json.loads((run_dir / "estimate.json").read_text())
        record.pop("ended_at")
        key, value = broken.split(": ")
        record[key.strip('"')] = json.loads(value)
        assert estimate.close(record, NOW)["measured"] == []


@pytest.mark.parametrize(
    ("per_host", "soak_s", "message"),
    [
        ({"a": {"seconds": float("inf")}}, 0, "the estimate of host a is {'seconds': inf}, not a number of"),
        ({"a": {"seconds": -600}}, 0, "the estimate of host a is {'seconds': -600}, not a number of seconds"),
        ({"a": "1242"}, 0, "the estimate of host a is '1242', not a number of seconds from 0"),
        ({"a": {"seconds": 1e15}}, 0, "the estimate runs past the calendar's end"),
        ({"a": {"seconds": 600}}, "300", "soak_s '300' is not a number of seconds from 0"),
    ],
)
def test_schedule_refuses_what_is_not_a_time_with_a_value_error(per_host, soak_s, message):
    """schedule's one error is ValueError, which the gates catch: never OverflowError or
    AttributeError from a damaged record."""
    with pytest.raises(ValueError) as caught:
        estimate.schedule([["a"], ["a"]], per_host, now=NOW, soak_s=soak_s)
    assert str(caught.value).startswith(message)


def test_a_measured_batch_that_ended_before_it_began_keeps_its_estimate_and_0_s_counts():
    per_host = {h: {"seconds": 600.0, "source": "default", "text": h} for h in ("a", "b")}
    backwards = [{"started_at": "2026-12-06T00:40:00Z", "ended_at": "2026-12-06T00:30:00Z"}]
    got = estimate.schedule([["a"], ["b"]], per_host, now=NOW, soak_s=0, done=backwards)
    assert got["batches"][0]["measured_s"] is None and got["batches"][0]["start"] == "2026-12-06T00:52:00Z"
    zero = [{"started_at": "2026-12-06T00:40:00Z", "ended_at": "2026-12-06T00:40:00Z"}]
    got = estimate.schedule([["a"], ["b"]], per_host, now=NOW, soak_s=0, done=zero)
    assert got["batches"][0]["measured_s"] == 0.0 and got["estimated_end"] == "2026-12-06T01:02:00Z"
