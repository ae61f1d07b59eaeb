"""The steps of a host's life (cuda13_upgrade.steps), without Ansible: FakeHost runs the host
modules' own functions on tmp_path and answers the GPU's and systemd's side."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fakehost import FakeHost

from cuda13_upgrade import rerun
from cuda13_upgrade.steps import drain, fleet, host_state, lock, options, planning, result, rollback
from cuda13_upgrade.steps.host import StepFailed, begin_step, current_step, new_run

REPO = Path(__file__).resolve().parents[1]


def _options(tmp_path: Path, **given) -> dict:
    """Every option's value as cuda13_options holds it, the state directory under tmp_path."""
    specs = options.read_specs(REPO / "roles")
    defaults = {k: v for k, v in options.read_defaults(REPO / "roles").items() if "{{" not in str(v)}
    defaults.update(
        cuda13_state_dir=str(tmp_path / "state"),
        cuda13_reports_dir=str(tmp_path / "reports"),
        cuda_toolkit_package="cuda-toolkit-13-0",
        cuda_toolkit_release="13.0",
        nvidia_driver_check_toolkit_release="13.0.2",
    )
    return options.check("gpu-node-01", given, specs, defaults)["values"]


# --- the run record ------------------------------------------------------------------------------


def test_a_step_begins_in_the_run_record_and_in_the_hosts_step_json(tmp_path):
    host = FakeHost()
    run = new_run(
        run_id="r1", host="gpu-node-01", target={"t": 1}, state_dir=str(tmp_path), serving="/opt/ml-env"
    )
    run = begin_step(host, run, "snapshot")
    run = begin_step(host, run, "toolkit")
    assert current_step(run) == "toolkit"
    recorded = json.loads((tmp_path / "step.json").read_text())
    assert recorded["step"] == "toolkit" and recorded["run_id"] == "r1"
    assert recorded["steps"] == ["snapshot", "toolkit"] and recorded["serving"] == "/opt/ml-env"
    assert oct((tmp_path / "step.json").stat().st_mode & 0o777) == "0o600"


def test_check_mode_writes_no_step_boundary(tmp_path):
    run = new_run(run_id="r1", host="h", target={}, state_dir=str(tmp_path), serving="/v")
    assert current_step(begin_step(FakeHost(check_mode=True), run, "snapshot")) == "snapshot"
    assert not (tmp_path / "step.json").exists()


# --- lock ----------------------------------------------------------------------------------------


def test_a_live_runs_lock_is_refused_and_a_dead_ones_taken_over(tmp_path):
    host = FakeHost()
    mine = lock.owner_record(run_id="r2", control_node="cn", pid=4242, playbook="p", lease_hours=24)
    (tmp_path / "run.lock").mkdir(parents=True)
    (tmp_path / "run.lock" / "owner.json").write_text(
        json.dumps({"run_id": "r1", "control_node": "cn", "pid": 77})
    )
    with pytest.raises(StepFailed) as refused:
        lock.acquire(host, state_dir=str(tmp_path), owner=mine, pid_alive=lambda pid: True)
    assert "Another cuda13-upgrade run holds the lock" in refused.value.msg
    assert "-e cuda13_break_lock=true" in refused.value.msg
    taken = lock.acquire(host, state_dir=str(tmp_path), owner=mine, pid_alive=lambda pid: False)
    assert taken["held"] and taken["taken_over"]["run_id"] == "r1"
    assert "is no longer running" in taken["notice"]
    assert json.loads((tmp_path / "run.lock" / "owner.json").read_text())["run_id"] == "r2"
    assert lock.release(host, state_dir=str(tmp_path), lock=taken) == {"held": True, "released": True}
    assert not (tmp_path / "run.lock").exists()


# --- options -------------------------------------------------------------------------------------


def test_bad_option_values_refuse_the_host_listing_each(tmp_path):
    with pytest.raises(StepFailed) as refused:
        _options(tmp_path, verify_throughput_tolerance_pct=-5, verify_throughput_min_trials=1)
    assert refused.value.msg.startswith(
        "gpu-node-01: invalid option values; nothing on the host was changed."
    )
    assert "verify_throughput_tolerance_pct is out of range: -5." in refused.value.msg
    assert "verify_throughput_min_trials" in refused.value.msg


def test_given_values_are_converted_and_defaults_kept(tmp_path):
    values = _options(tmp_path, verify_throughput_tolerance_pct="5")
    assert values["verify_throughput_tolerance_pct"] == 5.0
    assert values["cuda13_old_venv"] == "/opt/ml-env"


# --- drain ---------------------------------------------------------------------------------------


def test_the_drain_bracket_runs_the_undrain_hook_once_per_drain(tmp_path):
    opts = {
        "cuda13_drain_tasks": "d.yml",
        "cuda13_undrain_tasks": "u.yml",
        "cuda13_service_name": "s.service",
    }
    run = new_run(run_id="r", host="h", target={}, state_dir=str(tmp_path), serving="/v")
    drained = drain.side(FakeHost("h"), run, opts, step="drain")
    assert drained["hook"] == "d.yml" and drained["run"]["drained"]
    undrained = drain.side(FakeHost("h"), drained["run"], opts, step="undrain")
    assert undrained["hook"] == "u.yml" and not undrained["run"]["drained"]
    again = drain.side(FakeHost("h"), undrained["run"], opts, step="undrain")
    assert again["hook"] == "" and current_step(again["run"]) == "undrain"


def test_on_demand_commands_refuse_a_host_without_a_drain_hook(tmp_path):
    opts = {"cuda13_service_name": "sglang.service", "cuda13_drain_tasks": ""}
    with pytest.raises(StepFailed) as refused:
        drain.side(FakeHost("gpu-node-03"), {}, opts, step="drain", command="rollback")
    assert refused.value.msg.startswith("gpu-node-03: rollback restarts sglang.service on the old stack")
    allowed = drain.side(
        FakeHost("h"), {}, {**opts, "cuda13_allow_undrained": True}, step="drain", command="verify"
    )
    assert allowed["hook"] == ""


# --- host state ----------------------------------------------------------------------------------


def _digest_of(venv: Path, unit: str) -> dict:
    from cuda13_upgrade.hostscripts import stack_digest

    return stack_digest.digest(str(venv), unit, str(REPO / "sandbox" / "host" / "nvidia-smi"))


def test_a_kept_host_with_its_stack_unchanged_is_already_kept(tmp_path):
    opts = _options(
        tmp_path, cuda13_new_venv=str(tmp_path / "venv"), cuda13_service_name="nonexistent.service"
    )
    opts["nvidia_driver_check_nvidia_smi"] = str(REPO / "sandbox" / "host" / "nvidia-smi")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(
        subprocess.check_output(["which", "python3"], text=True).strip()
    )
    digest = _digest_of(tmp_path / "venv", "nonexistent.service")
    state = tmp_path / "state"
    state.mkdir()
    target = rerun.target(opts)
    (state / "result.json").write_text(
        json.dumps(
            {
                "run_id": "r0",
                "status": "kept",
                "measured": True,
                "verified_in_run": "r0",
                "target": target,
                "stack_digest": digest,
            }
        )
    )
    (state / "step.json").write_text(json.dumps({"run_id": "r0", "step": "result"}))
    host = FakeHost()
    verdict = host_state.read(host, opts, run_id="r1", locked=False)
    assert verdict["already_kept"] and not verdict["measure"]
    assert "already kept: run r0 verified this target" in verdict["notice"]
    assert verdict["run"]["run_id"] == "r1" and verdict["run"]["already_kept"]


def test_a_stopped_run_is_resolved_under_the_lock_with_a_notice(tmp_path):
    opts = _options(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "step.json").write_text(
        json.dumps({"run_id": "r0", "step": "switch", "started_at": "t", "serving": "/opt/ml-env"})
    )
    verdict = host_state.read(FakeHost(), opts, run_id="r1", locked=True)
    assert verdict["measure"] and verdict["stopped"]["step"] == "switch"
    assert "run r0 stopped at step switch" in verdict["notice"]


def test_a_staged_host_is_staged_only_for_the_same_target_resolved_set_and_freeze():
    target = {"toolkit_release": "13.0"}
    resolved = [{"name": "torch", "version": "2.9.1"}]
    staged = {"target": target, "resolved_target": ["torch==2.9.1"], "freeze": ["torch==2.9.1"]}
    assert host_state.staged_verdict(staged, target, resolved, {"rc": 0, "lines": ["torch==2.9.1"]})
    assert not host_state.staged_verdict(staged, target, resolved, {"rc": 0, "lines": ["torch==2.9.0"]})
    assert not host_state.staged_verdict(staged, target, [{"name": "torch", "version": "2.9.0"}], {"rc": 0})
    assert not host_state.staged_verdict({}, target, resolved, {"rc": 0, "lines": []})


# --- fleet gates ---------------------------------------------------------------------------------


def test_a_play_wide_option_set_differently_on_two_hosts_is_refused():
    checked = fleet.fleet_options(["a", "b"], {"a": {"cuda13_serial": 1}, "b": {"cuda13_serial": 2}})
    assert (
        checked["failures"]
        and "cuda13_serial differs between the hosts of the rollout" in checked["failures"][0]
    )


def test_the_batch_gate_stops_once_the_budget_is_spent(tmp_path):
    plan = fleet.plan(["a", "b", "c"], {"cuda13_serial": 1, "cuda13_max_failed_hosts": 0})
    gate = fleet.batch_gate(
        plan,
        hosts=["a", "b", "c"],
        batch=["b"],
        active=["a", "b", "c"],
        statuses={"a": "rolled_back"},
        run_id="r1",
        reports_dir=tmp_path,
        run_hosts=["a", "b", "c"],
    )
    assert not gate["start"]
    assert (
        gate["not_started"]["hosts"] == ["b", "c"] and "failure budget spent" in gate["not_started"]["reason"]
    )
    assert (tmp_path / "r1" / "not_started.json").exists()


def test_the_batch_gate_holds_a_batch_outside_the_window(tmp_path):
    plan = fleet.plan(
        ["a", "b"],
        {"cuda13_window": {"start": "01:00", "end": "02:00", "timezone": "UTC"}},
        "2026-12-01T00:00:00Z",
    )
    gate = fleet.batch_gate(
        plan,
        hosts=["a", "b"],
        batch=["a"],
        active=["a", "b"],
        statuses={},
        run_id="r1",
        reports_dir=tmp_path,
        run_hosts=["a", "b"],
        now="2026-12-01T03:00:00Z",
    )
    assert not gate["start"] and gate["not_started"]["said"] == "not started"
    assert gate["not_started"]["hosts"] == ["a", "b"]


# --- result --------------------------------------------------------------------------------------


def test_how_a_host_ends_follows_its_rescue():
    assert result.status_of({}, "upgrade") == "kept"
    assert result.status_of({}, "stage") == "staged"
    assert result.status_of({"rollback": {"status": "rolled_back"}}, "upgrade") == "rolled_back"
    assert result.status_of({"rollback": {"failed": True, "msg": "boom"}}, "upgrade") == "failed"
    assert result.status_of({"rollback": {"skipped": True}}, "upgrade") == "kept"


def test_an_interrupted_runs_host_is_recorded_and_its_lock_released(tmp_path):
    state = tmp_path / "state"
    (state / "run.lock").mkdir(parents=True)
    (state / "run.lock" / "owner.json").write_text(json.dumps({"run_id": "r1"}))
    written = []
    done = result.interrupted(
        FakeHost(), {"cuda13_state_dir": str(state)}, run_id="r1", step="wheels", write_report=written.append
    )
    assert done["held"] and done["recorded"]
    recorded = json.loads((state / "result.json").read_text())
    assert recorded["status"] == "interrupted" and recorded["failed_step"] == "wheels"
    assert "interrupted (Ctrl-C) during step 'wheels'" in recorded["error"]
    assert written == [recorded] and not (state / "run.lock").exists()


def test_an_interrupted_run_leaves_another_runs_lock(tmp_path):
    state = tmp_path / "state"
    (state / "run.lock").mkdir(parents=True)
    (state / "run.lock" / "owner.json").write_text(json.dumps({"run_id": "other"}))
    done = result.interrupted(FakeHost(), {"cuda13_state_dir": str(state)}, run_id="r1", step="wheels")
    assert not done["held"] and (state / "run.lock").exists() and not (state / "result.json").exists()


# --- rollback ------------------------------------------------------------------------------------


def test_a_failure_before_any_change_is_told_and_nothing_undone(tmp_path):
    opts = _options(tmp_path)
    run = new_run(run_id="r1", host="gpu-node-01", target={}, state_dir=str(tmp_path / "state"), serving="/v")
    run = begin_step(FakeHost(check_mode=True), run, "snapshot")
    host = FakeHost(handlers={"ansible.builtin.command": lambda args: {"rc": 1, "stdout": ""}})
    out = rollback.after_failure(
        host,
        opts,
        run=run,
        failed={"msg": "cannot read the serving venv's pip freeze"},
        failed_task="Snapshot the running stack",
        records={},
    )
    assert out["status"] == "failed" and out["failed_step"] == "snapshot"
    assert any("Nothing on the host was changed." in line for line in host.told)
    assert not host.called("cuda13_service")


def test_the_stage_records_a_failure_and_undoes_nothing(tmp_path):
    opts = _options(tmp_path)
    run = {**new_run(run_id="r1", host="h", target={}, state_dir="", serving="/v"), "changed": True}
    run = begin_step(FakeHost(), run, "wheels")
    host = FakeHost("h", handlers={"ansible.builtin.command": lambda args: {"rc": 1, "stdout": ""}})
    out = rollback.after_failure(
        host, opts, run=run, failed={"msg": "pip failed"}, failed_task="Install", records={}, undo=False
    )
    assert out["status"] == "failed"
    assert (
        "staging failed at step 'wheels' (Install): pip failed The service was not touched" in host.told[-1]
    )
    assert not host.called("cuda13_record")


# --- plan ----------------------------------------------------------------------------------------


def test_a_refused_host_is_planned_as_refused_with_the_message():
    record = planning.host(
        "gpu-node-02",
        options_check={
            "failed": True,
            "msg": "gpu-node-02: invalid option values; nothing on the host was changed.",
        },
        options={},
        state={},
        preflight={},
        figures=None,
    )
    assert record["refusals"] == ["gpu-node-02: invalid option values; nothing on the host was changed."]
