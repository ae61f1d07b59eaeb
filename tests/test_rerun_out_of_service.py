"""What a re-run's report says of the time out of service and of a rollback.

* A run cut off between its drain and its undrain (interrupted, killed, its host lost) leaves
  the host drained; the re-run that resolves it counted only its own drain. The host's
  ``step.json`` now records when the drain it is in began (``drained_at``,
  cuda13_upgrade.steps.host.drained_at), the re-run reads it (cuda13_upgrade.runlock.stopped_run)
  and its ``out_of_service_s`` starts there (cuda13_upgrade.timeline.out_of_service_s).
* A rollback that restored files and links only (a failure before the switch,
  cuda13_upgrade.steps.rollback) carries its ``service_restarted`` and ``serving_touched`` into
  result.json and the summary's rollback cell.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from fakehost import FakeHost

from cuda13_upgrade import hostresult, runlock, summary, timeline
from cuda13_upgrade.steps import drain, result
from cuda13_upgrade.steps.host import begin_step, new_run

HOOKS = {
    "cuda13_drain_tasks": "d.yml",
    "cuda13_undrain_tasks": "u.yml",
    "cuda13_service_name": "sglang.service",
}


def _records(*steps: tuple[str, str]) -> list[dict[str, str]]:
    return [{"step": name, "started_at": f"2025-01-01T{at}+00:00"} for name, at in steps]


RERUN = _records(
    ("artifact_cache", "12:00:00"),
    ("snapshot", "12:01:00"),
    ("drain", "12:25:00"),
    ("baseline", "12:26:00"),
    ("switch", "12:35:00"),
    ("verify", "12:36:00"),
    ("undrain", "12:42:00"),
    ("result", "12:42:10"),
)


def test_the_period_starts_at_the_drain_the_interrupted_run_left():
    steps = timeline.step_durations(RERUN, "2025-01-01T12:43:00+00:00")
    own = timeline.out_of_service_s(steps)
    assert own == 1030.0  # 12:25:00 drain .. 12:42:10 undrain done
    # Drained at 10:00 by the run this one resolves: 2 h 25 min more before this run's own drain.
    assert timeline.out_of_service_s(steps, "2025-01-01T10:00:00+00:00") == 1030.0 + 8700.0
    # Without an offset: UTC, as Ansible writes it.
    assert timeline.out_of_service_s(steps, "2025-01-01T10:00:00") == 9730.0


def test_a_rerun_that_never_reached_its_own_drain_was_out_of_service_from_the_earlier_drain():
    steps = timeline.step_durations(
        _records(
            ("snapshot", "12:00:00"), ("toolkit", "12:01:00"), ("wheels", "12:05:00"), ("result", "12:10:00")
        ),
        "2025-01-01T12:10:05+00:00",
    )
    assert timeline.out_of_service_s(steps) is None
    assert timeline.out_of_service_s(steps, "2025-01-01T10:00:00+00:00") == 7800.0  # 10:00 .. 12:10


def _interrupted_run(tmp_path, *, hooks: dict, undrained: bool = False) -> dict:
    """Run r1's steps through the switch (its drain by the drain step), as an interrupted run
    leaves them; returns the run record. ``step.json`` is in ``tmp_path``."""
    host = FakeHost("gpu-node-02")
    run = new_run(run_id="r1", host="gpu-node-02", target={}, state_dir=str(tmp_path), serving="/opt/ml-env")
    for step in ("artifact_cache", "snapshot", "toolkit", "wheels", "sglang_build"):
        run = begin_step(host, run, step)
    run = drain.side(host, run, hooks, step="drain")["run"]
    run = begin_step(host, run, "baseline")
    if undrained:
        run = drain.side(host, run, hooks, step="undrain")["run"]
        run = begin_step(host, run, "batch_soak")
    return begin_step(host, run, "switch")


def test_step_json_records_when_the_drain_the_host_is_in_began(tmp_path):
    run = _interrupted_run(tmp_path, hooks=HOOKS)
    drained = next(s["started_at"] for s in run["steps"] if s["step"] == "drain")
    recorded = json.loads((tmp_path / "step.json").read_text())
    assert (recorded["step"], recorded["drained_at"]) == ("switch", drained)
    stopped = runlock.stopped_run(recorded, {"run_id": "r1", "status": "interrupted"}, "r2")
    assert stopped is not None and stopped["drained_at"] == drained and stopped["recorded"] == "interrupted"


def test_a_host_undrained_or_never_drained_by_a_hook_is_not_left_drained(tmp_path):
    _interrupted_run(tmp_path / "a", hooks=HOOKS, undrained=True)
    assert json.loads((tmp_path / "a" / "step.json").read_text())["drained_at"] is None
    no_hooks = {**HOOKS, "cuda13_drain_tasks": "", "cuda13_undrain_tasks": "", "cuda13_allow_undrained": True}
    _interrupted_run(tmp_path / "b", hooks=no_hooks)
    recorded = json.loads((tmp_path / "b" / "step.json").read_text())
    assert recorded["drained_at"] is None
    assert runlock.stopped_run(recorded, None, "r2")["drained_at"] is None


def _rerun_steps(after: datetime) -> list[dict[str, str]]:
    at = [after + timedelta(minutes=m) for m in (0, 10, 11, 20, 21, 30, 31)]
    names = ("artifact_cache", "drain", "baseline", "switch", "verify", "undrain", "result")
    return [{"step": n, "started_at": t.isoformat()} for n, t in zip(names, at, strict=True)]


def test_the_rerun_s_result_counts_from_the_interrupted_run_s_drain_and_the_summary_says_so(tmp_path):
    run = _interrupted_run(tmp_path, hooks=HOOKS)
    stopped = runlock.stopped_run(json.loads((tmp_path / "step.json").read_text()), None, "r2")
    drained = datetime.fromisoformat(stopped["drained_at"])
    began = drained + timedelta(hours=3)  # the operator re-ran three hours later
    steps = _rerun_steps(began)
    finished = (began + timedelta(minutes=32)).isoformat()
    facts = {
        "host": "gpu-node-02",
        "run_id": "r2",
        "status": "kept",
        "measure": True,
        "finished_at": finished,
    }
    record = hostresult.host_result({**facts, "steps": steps, "stopped_run": stopped})
    own = hostresult.host_result({**facts, "steps": steps})["out_of_service_s"]
    assert own == 21 * 60.0  # its own drain (10 min) .. the end of its undrain (31 min)
    assert record["out_of_service_s"] == round(own + 3 * 3600 + 10 * 60, 1)
    assert record["out_of_service_since"] == stopped["drained_at"]
    assert record["recovered"]["drained_at"] == stopped["drained_at"]
    rows = summary.summary_rows([record])
    assert rows[0]["out_of_service_s"] == record["out_of_service_s"]
    markdown = summary.render_markdown("r2", rows)
    durations = markdown[markdown.index("## Step durations") :].split("\n## ")[0]
    assert record["out_of_service_s"] == 12660.0 and "| 3 h 31 min |" in durations
    assert (
        f"- gpu-node-02: out of service since {stopped['drained_at']}, the drain of run r1, "
        "which stopped at step switch and left the host drained"
    ) in durations
    assert run["drained"] is True


def test_a_rerun_that_failed_before_its_own_drain_reports_the_time_out_of_service_it_inherited():
    stopped = {"run_id": "r1", "step": "switch", "drained_at": "2025-01-01T09:00:00+00:00"}
    failed = hostresult.host_result(
        {
            "host": "h",
            "run_id": "r2",
            "status": "failed",
            "finished_at": "2025-01-01T12:10:05+00:00",
            "steps": _records(("snapshot", "12:00:00"), ("wheels", "12:05:00"), ("result", "12:10:00")),
            "stopped_run": stopped,
        }
    )
    assert failed["out_of_service_s"] == 11400.0  # 09:00 .. 12:10
    plain = hostresult.host_result(
        {"host": "h", "run_id": "r2", "status": "failed", "finished_at": "2025-01-01T12:10:05+00:00"}
    )
    assert plain["out_of_service_s"] == 0.0 and plain["out_of_service_since"] is None


# --- the rollback's record ---------------------------------------------------------------------


def _rescue(restarted: bool) -> dict:
    """cuda13_upgrade.steps.rollback.after_failure's record (the keys result.facts reads)."""
    return {
        "status": "rolled_back",
        "failed_step": "wheels" if not restarted else "verify",
        "failed_task": "Install the new stack's wheels",
        "error": "a +cu130 wheel holds a CUDA 12 object."
        + (" The server was not restarted: it never left the old stack." if not restarted else ""),
        "diagnosis": {},
        "seconds": 3.2,
        "alternatives_manual": [],
        "checks": {},
        "service_restarted": restarted,
        "serving_touched": "the step 'switch' began: the service left its old stack" if restarted else "",
    }


def _result_of(rescue: dict) -> dict:
    run = new_run(run_id="r", host="gpu-node-03", target={}, state_dir="/nonexistent", serving="/opt/ml-env")
    run["steps"] = _records(("snapshot", "12:00:00"), ("wheels", "12:01:00"), ("rollback", "12:02:00"))
    facts = result.facts(
        "gpu-node-03",
        {"cuda13_old_venv": "/opt/ml-env", "cuda13_new_venv": "/opt/ml-env-cu130"},
        run,
        {"rollback": rescue},
        status="rolled_back",
        check_mode=False,
        kept_digest=None,
        after_probe=None,
    )
    return hostresult.host_result({**facts, "finished_at": "2025-01-01T12:03:00+00:00"})


def test_a_rollback_before_the_switch_says_in_the_result_and_summary_that_the_server_was_not_restarted():
    record = _result_of(_rescue(restarted=False))
    assert record["rollback"]["service_restarted"] is False and record["rollback"]["serving_touched"] == ""
    row = summary.summary_rows([record])[0]
    assert row["rollback"]["service_restarted"] is False
    markdown = summary.render_markdown("r", [row])
    assert "| yes, 3.2 s, server not restarted: it never left the old stack |" in markdown


def test_a_rollback_after_the_switch_and_an_on_demand_one_say_nothing_of_it():
    record = _result_of(_rescue(restarted=True))
    assert record["rollback"]["service_restarted"] is True
    assert record["rollback"]["serving_touched"] == "the step 'switch' began: the service left its old stack"
    assert "not restarted" not in summary.render_markdown("r", summary.summary_rows([record]))
    # playbooks/rollback.yml's record (cuda13_upgrade.ondemand.rolled_back) has neither key.
    from cuda13_upgrade import ondemand

    on_demand = ondemand.rolled_back("gpu-node-03", "r", 41.0, [], datetime.now(UTC).isoformat())
    assert "not restarted" not in summary.render_markdown("r", summary.summary_rows([on_demand]))


def test_the_plan_estimates_from_the_resolving_run_s_own_drain_not_the_stop_between_runs():
    from cuda13_upgrade import plan

    steps = timeline.step_durations(RERUN, "2025-01-01T12:43:00+00:00")
    previous = {
        "status": "rolled_back",
        "run_id": "r2",
        "steps": steps,
        "out_of_service_s": timeline.out_of_service_s(steps, "2025-01-01T10:00:00+00:00"),
        "out_of_service_since": "2025-01-01T10:00:00+00:00",
    }
    verdict = {"already_kept": False, "reason": "", "previous": previous, "notice": ""}
    record = plan.host_plan(
        "gpu-node-02",
        verdict=verdict,
        state=None,
        target={},
        preflight=None,
        toolkit=None,
        resolved=None,
        wheels_bytes=None,
        wheels_record="",
        profiles=[],
        drain_tasks="d.yml",
        undrain_tasks="u.yml",
    )
    assert previous["out_of_service_s"] == 9730.0
    assert (record["out_of_service_s"], record["estimate_from"]) == (1030.0, "gpu-node-02's run r2")
