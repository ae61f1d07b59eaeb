"""The switch (cuda13_upgrade.steps.switch, action cuda13_switch), without Ansible: the kernel log
marked by the real module (a file printed by ``cat``, as dmesg prints the ring buffer), the drop-in
written by cuda13_record's own function under tmp_path, the service started by tests/stepdoubles.py's
server into the first profile the verify measures."""

from __future__ import annotations

from pathlib import Path

import pytest
from stepdoubles import NEW_EXEC, NEW_VENV, OLD_EXEC, Server, options
from test_xid import LOADING, XID79

from cuda13_upgrade.steps import switch
from cuda13_upgrade.steps.host import StepFailed

DROPIN = "/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf"
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
MANIFEST = {"service": {"exec_start": OLD_EXEC, "user": "sglang", "group": "sglang"}}


def _setup(tmp_path: Path, **given):
    log = tmp_path / "kern.log"
    log.write_text(f"{LOADING}\n")
    opts = options(tmp_path, cuda13_kernel_log_command=f"cat {log}", **given)
    server = Server(tmp_path, {"plain": {"args": []}, "eagle3": {"args": EAGLE3}}, running=[])
    return opts, server


def test_the_switch_marks_the_log_writes_its_drop_in_and_starts_the_first_profile(tmp_path):
    opts, server = _setup(tmp_path)
    host = server.fake()
    done = switch.switch(host, opts, manifest=MANIFEST, profile_args=EAGLE3)
    assert done["exec_start"] == NEW_EXEC
    assert done["kernel_log_mark"] == {"cursor": None, "last_line": LOADING, "error": None}
    written = server.unit_file(DROPIN)
    assert written.read_text() == switch.dropin(opts, NEW_EXEC)
    assert oct(written.stat().st_mode & 0o777) == "0o644"
    text = written.read_text()
    assert f"Environment=TRITON_CACHE_DIR={tmp_path}/cache/cu130/triton\n" in text
    assert text.endswith(f"ExecStart=\nExecStart={NEW_EXEC}\n")
    # The caches, owned by the unit's user; the toolkit's alternative; the start into eagle3.
    caches = [d for d in server.directories if d["path"].startswith(str(tmp_path))]
    assert [d["path"] for d in caches] == [f"{tmp_path}/cache/cu130/{n}" for n in switch.CACHES]
    assert all((d["owner"], d["group"], d["mode"]) == ("sglang", "sglang", "0755") for d in caches)
    assert all(Path(d["path"]).is_dir() for d in caches)
    assert server.alternatives == [
        {"name": "cuda", "path": "/usr/local/cuda-13.0", "link": "/usr/local/cuda", "state": "selected"}
    ]
    assert server.restarts() == [EAGLE3] and server.exec_start == NEW_EXEC
    (start,) = host.called("cuda13_service")
    assert (start["restart"], start["changed"], start["venv"]) == ("when-changed", True, NEW_VENV)
    assert done["dropin_changed"] is True and done["restarts"] == 1 and done["leftovers"] == []
    assert done["served"]["running_venv"] == NEW_VENV and done["served"]["running_args"] == EAGLE3


def test_a_second_switch_changes_no_drop_in_and_restarts_nothing(tmp_path):
    opts, server = _setup(tmp_path)
    switch.switch(server.fake(), opts, manifest=MANIFEST, profile_args=EAGLE3)
    again = switch.switch(server.fake(), opts, manifest=MANIFEST, profile_args=EAGLE3)
    assert again["dropin_changed"] is False and again["restarts"] == 0
    assert server.restarts() == [EAGLE3]


def test_check_mode_writes_nothing_and_says_what_it_would_do(tmp_path):
    opts, server = _setup(tmp_path)
    host = server.fake(check_mode=True)
    done = switch.switch(host, opts, manifest=MANIFEST, profile_args=EAGLE3)
    assert done["kernel_log_mark"] is None and not host.called("cuda13_kernel_log")
    assert not server.unit_file(DROPIN).exists() and not (tmp_path / "cache").exists()
    assert server.alternatives == [] and server.log == []
    assert done["dropin_changed"] is True and done["served"]["would_restart"] is True
    assert host.told == [
        "Would point /usr/local/cuda at /usr/local/cuda-13.0 (alternatives group cuda, manual mode)."
    ]
    assert done["served"]["report"] == [f"Would restart sglang.service (the new stack in {NEW_VENV})."]


def test_without_the_alternative_option_usr_local_cuda_is_left_alone(tmp_path):
    opts, server = _setup(tmp_path, stack_switch_set_cuda_alternative=False)
    switch.switch(server.fake(), opts, manifest=MANIFEST, profile_args=[], mark_kernel_log=False)
    assert server.alternatives == []
    assert server.restarts() == [[]] and server.exec_start == NEW_EXEC


def test_extra_environment_is_quoted_for_systemd(tmp_path):
    opts, _ = _setup(tmp_path, stack_switch_environment={"NCCL_DEBUG": "WARN", "SGLANG_ARGS": "a b"})
    text = switch.dropin(opts, NEW_EXEC)
    assert "Environment=NCCL_DEBUG=WARN\n" in text and "Environment='SGLANG_ARGS=a b'\n" in text


def test_a_new_stack_that_does_not_start_fails_with_the_mark_for_the_rescue(tmp_path):
    opts, server = _setup(tmp_path)
    server.start_error = "systemctl start sglang.service: exit status 1"
    (tmp_path / "kern.log").write_text(f"{LOADING}\n{XID79}\n")
    with pytest.raises(StepFailed) as failed:
        switch.switch(server.fake(), opts, manifest=MANIFEST, profile_args=EAGLE3)
    assert failed.value.msg.splitlines()[0] == (
        f"sglang.service (the new stack in {NEW_VENV}) did not start: systemctl start sglang.service: exit status 1."
    )
    # The rescue reads the kernel log from the mark taken before the drop-in was written.
    assert failed.value.record["kernel_log_mark"]["last_line"] == XID79
    assert failed.value.record["exec_start"] == NEW_EXEC and failed.value.record["restarted"] is True


def test_a_service_not_run_from_the_old_venv_is_refused_before_any_change(tmp_path):
    # A wrapper passes the preflight's check (the old venv's Python is in the command) but the
    # switch cannot point it at the new venv: the step fails with the operator's message (it was
    # a ValueError out of the action plugin, a traceback in ansible-playbook's output).
    opts, server = _setup(tmp_path)
    wrapped = {"service": {**MANIFEST["service"], "exec_start": f"/usr/bin/env {OLD_EXEC}"}}
    host = server.fake()
    with pytest.raises(StepFailed) as failed:
        switch.switch(host, opts, manifest=wrapped, profile_args=EAGLE3)
    assert failed.value.msg == (
        "gpu-node-01: the service runs '/usr/bin/env', not a program of cuda13_old_venv='/opt/ml-env':"
        f" set cuda13_old_venv to the serving venv (ExecStart='/usr/bin/env {OLD_EXEC}')."
        " The switch changed nothing on the host."
    )
    assert host.calls == [] and not server.unit_file(DROPIN).exists()
