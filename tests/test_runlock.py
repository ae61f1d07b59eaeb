"""cuda13_upgrade.runlock: whether a lock's run is dead."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cuda13_upgrade import runlock

ROOT = Path(__file__).resolve().parents[1]


NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _verdict(owner, result=None, alive=lambda pid: True):
    return runlock.lock_verdict(owner, control_node="ctl-1", result=result, now=NOW, pid_alive=alive)


def test_a_lock_without_an_owner_may_be_alive():
    assert _verdict({})["dead"] is False
    assert "names no run" in _verdict(None)["reason"]


def test_the_host_recording_the_runs_result_makes_it_dead():
    owner = {"run_id": "r1", "control_node": "elsewhere", "lease_expires_at": "2026-12-02T00:00:00+00:00"}
    verdict = _verdict(owner, {"run_id": "r1", "finished_at": "2026-12-01T07:00:00"})
    assert verdict == {
        "dead": True,
        "run_id": "r1",
        "reason": "run r1 recorded its result on the host at 2026-12-01T07:00:00",
    }
    # The result of an earlier run says nothing about this one.
    assert _verdict(owner, {"run_id": "r0", "finished_at": "2026-12-01T07:00:00"})["dead"] is False


def test_a_pid_on_this_control_node_decides():
    owner = {
        "run_id": "r1",
        "control_node": "ctl-1",
        "pid": 4242,
        "lease_expires_at": "2026-12-02T00:00:00+00:00",
    }
    seen = []
    dead = _verdict(owner, alive=lambda pid: seen.append(pid) or False)
    assert seen == [4242]
    assert dead["dead"] is True
    assert dead["reason"] == "the ansible-playbook of run r1 (pid 4242 on ctl-1) is no longer running"
    # A live pid holds the lock even with an expired lease (a run longer than its lease).
    expired = {**owner, "lease_expires_at": "2026-11-30T00:00:00+00:00"}
    assert _verdict(expired, alive=lambda pid: True)["dead"] is False


def test_another_control_nodes_lock_holds_until_its_lease_expires():
    lease = NOW + timedelta(hours=1)
    owner = {"run_id": "r1", "control_node": "ctl-2", "pid": 1, "lease_expires_at": lease.isoformat()}
    live = _verdict(owner, alive=lambda pid: False)  # pids of another machine are not looked at
    assert live == {
        "dead": False,
        "run_id": "r1",
        "reason": f"run r1 from ctl-2 holds a lease until {lease.isoformat()}",
    }
    owner["lease_expires_at"] = (NOW - timedelta(seconds=1)).isoformat()
    assert _verdict(owner)["dead"] is True
    assert (
        "the lease of run r1 (from ctl-2) expired at 2026-12-01T07:59:59+00:00" == _verdict(owner)["reason"]
    )


def test_a_lock_of_the_old_format_holds():
    # Written before leases existed: no pid, no lease; only its result or the break option free it.
    owner = {"run_id": "r1", "control_node": "ctl-2", "started_at": "2026-11-01T00:00:00"}
    assert _verdict(owner)["dead"] is False


def test_ansible_playbook_alive_reads_proc(tmp_path):
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "cmdline").write_bytes(b"/venv/bin/python\0/venv/bin/ansible-playbook\0site.yml\0")
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "cmdline").write_bytes(b"/usr/bin/sleep\0100\0")
    assert runlock.ansible_playbook_alive(10, proc=tmp_path) is True
    assert runlock.ansible_playbook_alive(11, proc=tmp_path) is False
    assert runlock.ansible_playbook_alive(12, proc=tmp_path) is False


# --- the step boundary a stopped run left ----------------------------------------------

STEP_SWITCH = {
    "run_id": "20261201T101500Z",
    "step": "switch",
    "started_at": "2026-12-01T10:41:07+00:00",
    "serving": "/opt/ml-env",
    "steps": ["snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline", "switch"],
}


def test_a_run_that_stopped_at_the_switch_is_found_with_where_it_stopped():
    stopped = runlock.stopped_run(STEP_SWITCH, {}, "20261201T120000Z")
    assert stopped == {
        "run_id": "20261201T101500Z",
        "step": "switch",
        "started_at": "2026-12-01T10:41:07+00:00",
        "serving": "/opt/ml-env",
        "recorded": None,
        "drained_at": None,
    }


def test_a_run_that_reached_its_result_or_this_very_run_is_no_stopped_run():
    assert runlock.stopped_run({**STEP_SWITCH, "step": "result"}, {}, "later") is None
    assert runlock.stopped_run(STEP_SWITCH, {}, "20261201T101500Z") is None
    assert runlock.stopped_run({}, {"run_id": "x", "status": "kept"}, "later") is None
    assert runlock.stopped_run(None, None, "later") is None


def test_an_interrupted_run_is_found_with_the_status_it_recorded():
    result = {"run_id": "20261201T101500Z", "status": "interrupted", "failed_step": "cu130_wheels"}
    stopped = runlock.stopped_run({**STEP_SWITCH, "step": "wheels"}, result, "later")
    assert (stopped["step"], stopped["recorded"]) == ("wheels", "interrupted")
    # A result of another run says nothing of this one.
    other = {"run_id": "20261130T090000Z", "status": "kept"}
    assert runlock.stopped_run(STEP_SWITCH, other, "later")["recorded"] is None
