"""What earlier runs left on a host (cuda13_upgrade.steps.host_state, action cuda13_host_state),
without Ansible: the host module cuda13_state_read runs for real on the state directory under
tmp_path (and, for a staged host, on a venv of this Python: its real ``pip freeze``). The kept host
whose stack is unchanged and the stopped run are tests/test_steps.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakehost import FakeHost
from stepdoubles import OLD_VENV, StepHost, options

from cuda13_upgrade import rerun
from cuda13_upgrade.hostscripts import stack_digest
from cuda13_upgrade.steps import host_state
from cuda13_upgrade.steps.host import StepFailed

RESOLVED = [{"name": "torch", "version": "2.9.1+cu130"}, {"name": "sglang", "version": "0.5.9"}]
FREEZE = ["sglang==0.5.9", "torch==2.9.1+cu130"]


def _host(*, check_mode: bool = False) -> StepHost:
    """A host whose state is read by the real module, each read's check mode kept in ``reads``."""

    def state_read(args: dict) -> dict:
        host.reads.append(host.effective_check)
        return FakeHost().module(
            "cuda13_state_read", args, check_mode=host.effective_check, allow_failure=True
        )

    host = StepHost(check_mode=check_mode, handlers={"cuda13_state_read": state_read})
    host.reads = []
    return host


def _venv(tmp_path: Path) -> Path:
    """A new venv whose Python answers ``-m pip --isolated freeze --all`` with the staged stack."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        '#!/bin/sh\ntest "$*" = "-m pip --isolated freeze --all" || exit 2\nprintf "%s\\n" '
        + " ".join(FREEZE)
        + "\n"
    )
    python.chmod(0o755)
    return venv


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_host_no_run_has_touched_is_upgraded_in_full_and_its_run_record_starts(tmp_path, check_mode):
    opts = options(tmp_path)
    host = _host(check_mode=check_mode)
    found = host_state.read(host, opts, run_id="r1", locked=False)
    assert (found["already_kept"], found["measure"], found["staged"]) == (False, True, False)
    assert found["target"] == rerun.target(opts) and found["previous"] == {}
    run = found["run"]
    assert (run["run_id"], run["host"], run["serving"], run["state_dir"]) == (
        "r1",
        "gpu-node-01",
        OLD_VENV,
        str(tmp_path / "state"),
    )
    assert (run["measure"], run["already_kept"], run["steps"], run["changed"]) == (True, False, [], False)
    # The state is read even in check mode; nothing is written.
    assert host.reads == [False] and host.called("cuda13_state_read")[0]["freeze"] is False
    assert host.told == [] and not (tmp_path / "state").exists()


def test_a_host_staged_for_this_target_goes_straight_to_the_window(tmp_path):
    venv = _venv(tmp_path)
    opts = options(tmp_path, cuda13_new_venv=str(venv))
    assert stack_digest.freeze_lines(str(venv)) == {"rc": 0, "lines": FREEZE, "error": ""}
    staged = {
        "run_id": "r0",
        "staged_at": "2026-12-02T22:00:00+00:00",
        "target": rerun.target(opts),
        "resolved_target": host_state.resolved_pins(RESOLVED),
        "freeze": FREEZE,
    }
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "staged.json").write_text(json.dumps(staged))
    host = _host()
    found = host_state.read(host, opts, run_id="r1", locked=True, resolved=RESOLVED)
    assert found["staged"] is True and found["staged_state"] == staged
    assert host.told == [
        "staged by run r0 at 2026-12-02T22:00:00+00:00, its new stack unchanged since: straight to the window."
    ]
    assert host.called("cuda13_state_read")[0]["freeze"] is True
    # Another resolved set, or a venv changed since: not staged (the stage's work is done again).
    other = [{"name": "torch", "version": "2.9.0+cu130"}, RESOLVED[1]]
    assert host_state.read(_host(), opts, run_id="r1", locked=True, resolved=other)["staged"] is False
    (tmp_path / "state" / "staged.json").write_text(json.dumps({**staged, "freeze": ["torch==2.9.0"]}))
    assert host_state.read(_host(), opts, run_id="r1", locked=True, resolved=RESOLVED)["staged"] is False
    # Before the lock the staged record is not compared.
    (tmp_path / "state" / "staged.json").write_text(json.dumps(staged))
    assert host_state.read(_host(), opts, run_id="r1", locked=False, resolved=RESOLVED)["staged"] is False


def test_a_step_record_that_cannot_be_read_fails_the_host_under_the_lock_only(tmp_path):
    opts = options(tmp_path)
    (tmp_path / "state").mkdir()
    step = tmp_path / "state" / "step.json"
    step.write_text("{cut off by a power cut")
    early = host_state.read(_host(), opts, run_id="r1", locked=False)
    assert early["measure"] is True and early["already_kept"] is False
    assert early["reason"].startswith(f"its step.json cannot be read ({step}: ")
    with pytest.raises(StepFailed) as failed:
        host_state.read(_host(), opts, run_id="r1", locked=True)
    assert failed.value.msg == (
        f"gpu-node-01: its step.json cannot be read ({step}: Expecting property name enclosed in double"
        " quotes: line 1 column 2 (char 1)); nothing of the upgrade has run."
    )


def test_a_kept_host_asked_to_reverify_runs_in_full_saying_why(tmp_path):
    opts = options(tmp_path, cuda13_reverify=True)
    (tmp_path / "state").mkdir()
    previous = {
        "run_id": "r0",
        "status": "kept",
        "measured": True,
        "verified_in_run": "r0",
        "target": rerun.target(opts),
    }
    (tmp_path / "state" / "result.json").write_text(json.dumps(previous))
    (tmp_path / "state" / "step.json").write_text(json.dumps({"run_id": "r0", "step": "result"}))
    host = _host()
    found = host_state.read(host, opts, run_id="r1", locked=True)
    assert found["already_kept"] is False and found["measure"] is True and found["previous"] == previous
    assert found["notice"] == f"gpu-node-01: not already kept: {found['reason']}; the full run follows."
    assert host.told == [f"not already kept: {found['reason']}; the full run follows."]
    assert "cuda13_reverify" in found["reason"]
