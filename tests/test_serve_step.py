"""Putting the service into a profile (cuda13_upgrade.steps.serve, action cuda13_serve), without
Ansible: the profile drop-in written by the real function under tmp_path, the start and the main
process answered by tests/stepdoubles.py's server."""

from __future__ import annotations

from pathlib import Path

import pytest
from stepdoubles import OLD_EXEC, OLD_VENV, Server

from cuda13_upgrade.hostscripts.service_cycle import profile_dropin
from cuda13_upgrade.steps.host import StepFailed
from cuda13_upgrade.steps.serve import MANAGED, running, serve, serve_options

REPO = Path(__file__).resolve().parents[1]
DROPIN = "/etc/systemd/system/sglang.service.d/60-cuda13-profile.conf"
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
WHAT = "profile eagle3, baseline phase, /opt/ml-env"


def _serve(host, **given):
    kwargs = {
        "service": "sglang.service",
        "exec_start": OLD_EXEC,
        "venv": OLD_VENV,
        "args": EAGLE3,
        "what": WHAT,
        "about": 'the "eagle3" profile',
        "timeout": 900,
        **given,
    }
    return serve(host, **kwargs)


def _server(tmp_path: Path, **given) -> Server:
    return Server(tmp_path, {"plain": {"args": []}, "eagle3": {"args": EAGLE3}}, **{"running": [], **given})


def test_a_restart_into_a_profile_writes_its_drop_in_and_the_server_runs_it(tmp_path):
    server = _server(tmp_path)
    served = _serve(server.fake())
    written = server.unit_file(DROPIN)
    assert written.read_text() == profile_dropin(
        OLD_EXEC, EAGLE3, unit="sglang.service", about='the "eagle3" profile', managed=MANAGED
    )
    assert oct(written.stat().st_mode & 0o777) == "0o644"
    assert f"ExecStart={OLD_EXEC} --speculative-algorithm EAGLE3 --speculative-num-steps 3\n" in (
        written.read_text()
    )
    assert server.restarts() == [EAGLE3] and server.serving() == "eagle3"
    assert served["restarted"] is True and served["dropin_changed"] is True
    assert served["running_args"] == EAGLE3 and served["running_venv"] == OLD_VENV
    assert served["report"] == [f"sglang.service serves {WHAT} after a restart."]
    assert served["cycle"]["ready"]["generated"] is True and "diff" not in served
    # The process command lines (which may hold --api-key) are read, not recorded.
    assert not [key for key in served["cycle"] if key.endswith("_b64")], served["cycle"]


def test_never_leaves_the_drop_in_and_the_server_as_they_are(tmp_path):
    server = _server(tmp_path, running=EAGLE3)
    served = _serve(server.fake(), restart="never")
    assert not server.unit_file(DROPIN).exists()
    assert server.restarts() == [] and served["restarted"] is False
    assert served["report"] == [f"sglang.service serves {WHAT}, not restarted."]


def test_when_changed_restarts_only_a_server_that_does_not_run_the_profile(tmp_path):
    server = _server(tmp_path)
    first = _serve(server.fake(), restart="when-changed")
    again = _serve(server.fake(), restart="when-changed")
    assert first["restarted"] is True and again["restarted"] is False
    assert again["dropin_changed"] is False and server.restarts() == [EAGLE3]


def test_check_mode_writes_no_drop_in_and_says_what_would_restart(tmp_path):
    server = _server(tmp_path)
    served = _serve(server.fake(check_mode=True), restart="when-changed")
    assert not server.unit_file(DROPIN).exists() and server.log == []
    assert served["cycle"] is None and served["would_restart"] is True
    assert served["report"] == [f"Would restart sglang.service ({WHAT})."]
    # The drop-in in place, nothing else changed: no restart would follow.
    _serve(server.fake(), restart="when-changed")
    unchanged = _serve(server.fake(check_mode=True), restart="when-changed")
    assert unchanged["would_restart"] is False
    assert unchanged["report"] == ["sglang.service would not restart."]


def test_the_processes_the_old_server_left_are_named_with_their_memory(tmp_path):
    left = [{"pid": 4242, "command": "python -m sglang.launch_server", "gpu_memory_mib": 1024}]
    server = _server(tmp_path, leftovers=left)
    served = _serve(server.fake())
    assert served["leftovers"] == left
    assert served["report"][1] == (
        "sglang.service left 1 process(es) after it stopped: pid 4242 (python -m sglang.launch_server,"
        " 1024 MiB of GPU memory); they ended within 0.4 s."
    )


def test_a_server_that_does_not_start_fails_with_the_cause_from_its_journal(tmp_path):
    journal = (REPO / "tests" / "fixtures" / "failures" / "systemd-exec-venv-python-denied.txt").read_text()
    server = _server(
        tmp_path, start_error="systemctl start sglang.service: exit status 1", journal=journal.splitlines()
    )
    with pytest.raises(StepFailed) as failed:
        _serve(server.fake(), service_user="sglang")
    lines = failed.value.msg.splitlines()
    assert (
        lines[0] == f"sglang.service ({WHAT}) did not start: systemctl start sglang.service: exit status 1."
    )
    assert lines[1].startswith(
        "Cause: systemd could not execute /opt/tinypilot/venv/bin/python for tinypilot.service"
        " (status=203/EXEC, Permission denied): its User= (sglang) may not execute that file"
    )
    assert lines[2:] == ["Last lines of its journal:", *journal.splitlines()]
    assert failed.value.record == {"restarted": True, "leftovers": [], "running_command": ""}


def test_a_server_that_does_not_generate_in_time_names_the_url_and_the_wait(tmp_path):
    server = _server(tmp_path, generated=False)
    with pytest.raises(StepFailed) as failed:
        _serve(server.fake(), timeout=45, url="http://127.0.0.1:30000")
    assert failed.value.msg == (
        f"sglang.service ({WHAT}) did not generate a token at http://127.0.0.1:30000 within 45 s"
        " (last answer: 200).\n"
        "Check that the service starts and loads its model; raise the wait with cuda13_health_timeout"
        " when loading takes longer."
    )


def test_a_server_that_runs_other_arguments_is_not_measured(tmp_path):
    server = _server(tmp_path)  # it runs the plain profile
    with pytest.raises(StepFailed) as failed:
        _serve(server.fake(), restart="never")
    assert failed.value.msg == (
        f"sglang.service does not run {WHAT}: its main process runs {OLD_EXEC}, where that needs"
        f" {OLD_EXEC} --speculative-algorithm EAGLE3 --speculative-num-steps 3 (the Python of {OLD_VENV})."
        " Nothing was measured on it. Check the drop-ins in /etc/systemd/system/sglang.service.d/"
        " (systemctl cat sglang.service)."
    )
    assert failed.value.record["restarted"] is False and failed.value.record["running_command"] == OLD_EXEC
    # Without the check the same server serves.
    assert _serve(server.fake(), restart="never", check=False)["running_args"] == []


def test_what_the_service_runs_is_read_in_check_mode_too(tmp_path):
    server = _server(tmp_path, running=EAGLE3)
    host = server.fake(check_mode=True)
    now = running(host, service="sglang.service", exec_start=OLD_EXEC)
    assert now == {
        "running_args": EAGLE3,
        "running_venv": OLD_VENV,
        "running_command": f"{OLD_EXEC} {' '.join(EAGLE3)}",
    }
    assert host.called("cuda13_service") == [{"unit": "sglang.service", "restart": "never", "url": ""}]
    stopped = Server(tmp_path, running=None)
    assert running(stopped.fake(), service="sglang.service", exec_start=OLD_EXEC)["running_args"] is None


def test_a_roles_own_options_fall_back_to_the_upgrades():
    options = {
        "cuda13_service_name": "sglang.service",
        "cuda13_profile_dropin": "60-cuda13-profile.conf",
        "cuda13_server_url": "http://127.0.0.1:30000",
        "cuda13_health_timeout": 900,
        "stack_switch_health_timeout": 1200,
        "nvidia_driver_check_nvidia_smi": "/usr/bin/nvidia-smi",
    }
    assert serve_options(options, "stack_switch") == {
        "service": "sglang.service",
        "dropin": "60-cuda13-profile.conf",
        "url": "http://127.0.0.1:30000",
        "timeout": 1200.0,
        "leftover_timeout": 30.0,
        "nvidia_smi": "/usr/bin/nvidia-smi",
    }
    assert serve_options({**options, "cuda13_leftover_timeout": 5}, "rollback")["leftover_timeout"] == 5.0
