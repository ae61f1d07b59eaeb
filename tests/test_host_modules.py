"""The host modules' own functions (``*_module(params, check_mode)`` of src/cuda13_upgrade/hostscripts,
behind library/cuda13_record.py, cuda13_state_read, cuda13_host_facts, cuda13_snapshot_read,
cuda13_venv_read and cuda13_apt_read), each with its argument spec checked and completed as
AnsibleModule does: the normal result, check mode, and a bad input's clear result.

They run on this machine against tmp_path; the GPUs are the sandbox's nvidia-smi double, a venv's
Python a script that answers as pip would."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from playbook import NVIDIA_SMI_DOUBLE

from cuda13_upgrade.hostscripts import aptstate, preflight_facts, snapshot, stack_digest, statedir, venv_read

FREEZE = ["sglang==0.5.9", "torch==2.9.1+cu130"]


def _run(spec: dict, function, args: dict, check_mode: bool = False) -> dict:
    validated = ArgumentSpecValidator(spec).validate(args)
    assert not validated.error_messages, validated.error_messages
    return function(validated.validated_parameters, check_mode)


def _errors(spec: dict, args: dict) -> list[str]:
    return ArgumentSpecValidator(spec).validate(args).error_messages


def _venv(tmp_path: Path) -> Path:
    """A venv whose Python prints the stack's ``pip freeze`` for any arguments."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(FREEZE) + "\n")
    python.chmod(0o755)
    return venv


# --- cuda13_record -------------------------------------------------------------------------------


def test_record_writes_reads_and_removes(tmp_path):
    (tmp_path / "old").write_text("x")
    (tmp_path / "kept.json").write_text("{}\n")
    args = {
        "files": [{"path": str(tmp_path / "state" / "result.json"), "content": "{}\n", "mode": "0600"}],
        "absent": [str(tmp_path / "old"), str(tmp_path / "never")],
        "read": [str(tmp_path / "kept.json"), str(tmp_path / "missing.json")],
    }
    done = _run(statedir.RECORD_SPEC, statedir.record_module, args)
    assert done["changed"] is True and done["written"] == [str(tmp_path / "state" / "result.json")]
    assert done["removed"] == [str(tmp_path / "old")] and not (tmp_path / "old").exists()
    assert done["read"] == {
        str(tmp_path / "kept.json"): {"exists": True, "content": "{}\n"},
        str(tmp_path / "missing.json"): {"exists": False, "content": None},
    }
    written = tmp_path / "state" / "result.json"
    assert written.read_text() == "{}\n" and oct(written.stat().st_mode & 0o777) == "0o600"
    assert oct(written.parent.stat().st_mode & 0o777) == "0o700"  # a private file's directory
    again = _run(statedir.RECORD_SPEC, statedir.record_module, {"files": args["files"]})
    assert again["changed"] is False and again["written"] == []


def test_record_in_check_mode_says_what_would_change_and_changes_nothing(tmp_path):
    (tmp_path / "old").write_text("x")
    args = {
        "files": [{"path": str(tmp_path / "new.json"), "content": "{}\n"}],
        "absent": [str(tmp_path / "old")],
    }
    done = _run(statedir.RECORD_SPEC, statedir.record_module, args, check_mode=True)
    assert done["changed"] is True and done["written"] == [str(tmp_path / "new.json")]
    assert done["removed"] == [str(tmp_path / "old")]
    assert not (tmp_path / "new.json").exists() and (tmp_path / "old").exists()


def test_record_names_the_file_it_cannot_write_after_writing_the_others(tmp_path):
    (tmp_path / "a-file").write_text("")
    args = {
        "files": [
            {"path": str(tmp_path / "a-file" / "result.json"), "content": "{}"},
            {"path": str(tmp_path / "ok.json"), "content": "{}"},
        ]
    }
    done = _run(statedir.RECORD_SPEC, statedir.record_module, args)
    assert done["failed"] is True
    assert (
        done["msg"]
        == f"cannot write {tmp_path}/a-file/result.json: [Errno 17] File exists: '{tmp_path}/a-file'"
    )
    assert done["written"] == [str(tmp_path / "ok.json")] and (tmp_path / "ok.json").exists()
    assert _errors(statedir.RECORD_SPEC, {"files": [{"path": "/x"}]}) == [
        "missing required arguments: content found in files"
    ]


# --- cuda13_state_read ---------------------------------------------------------------------------


def test_state_read_reads_what_earlier_runs_left_and_digests_a_kept_stack(tmp_path):
    state = tmp_path / "state"
    (state / "run.lock").mkdir(parents=True)
    (state / "run.lock" / "owner.json").write_text(json.dumps({"run_id": "r0"}))
    (state / "step.json").write_text(json.dumps({"run_id": "r0", "step": "switch"}))
    args = {"state_dir": str(state), "venv": str(_venv(tmp_path)), "unit": "nosuch-cuda13-test.service"}
    found = _run(
        stack_digest.STATE_SPEC, stack_digest.state_module, {**args, "nvidia_smi": str(NVIDIA_SMI_DOUBLE)}
    )
    assert found["changed"] is False and found["digest"] is None  # no result: nothing kept to digest
    assert found["state"] == {
        "result": None,
        "step": {"run_id": "r0", "step": "switch"},
        "lock": {"run_id": "r0"},
        "staged": None,
        "errors": {},
    }
    (state / "result.json").write_text(json.dumps({"run_id": "r0", "status": "kept"}))
    kept = _run(
        stack_digest.STATE_SPEC, stack_digest.state_module, {**args, "nvidia_smi": str(NVIDIA_SMI_DOUBLE)}
    )
    assert sorted(kept["parts"]) == ["alternatives", "driver", "dropins", "freeze", "toolkit"]
    assert len(kept["digest"]) == 64 and "freeze" not in kept["errors"] and "driver" not in kept["errors"]
    # The same venv and GPUs read again: the same digest.
    again = _run(
        stack_digest.STATE_SPEC, stack_digest.state_module, {**args, "nvidia_smi": str(NVIDIA_SMI_DOUBLE)}
    )
    assert again["digest"] == kept["digest"]


def test_state_read_in_check_mode_reads_the_same_and_the_freeze_when_asked(tmp_path):
    args = {
        "state_dir": str(tmp_path / "none"),
        "venv": str(_venv(tmp_path)),
        "unit": "u.service",
        "freeze": True,
    }
    found = _run(stack_digest.STATE_SPEC, stack_digest.state_module, args, check_mode=True)
    assert found["freeze"] == {"rc": 0, "lines": FREEZE, "error": ""}
    assert found["state"]["result"] is None and found["state"]["lock"] is None
    assert not (tmp_path / "none").exists()


def test_state_read_names_a_record_it_cannot_read_and_a_venv_that_does_not_run(tmp_path):
    (tmp_path / "result.json").write_text("[1, 2]")
    (tmp_path / "step.json").write_text("{cut")
    args = {
        "state_dir": str(tmp_path),
        "venv": str(tmp_path / "no-venv"),
        "unit": "u.service",
        "freeze": True,
    }
    found = _run(stack_digest.STATE_SPEC, stack_digest.state_module, args)
    assert found["state"]["result"] is None and found["state"]["step"] is None
    assert found["state"]["errors"]["result"] == f"{tmp_path}/result.json: not a JSON object"
    assert found["state"]["errors"]["step"].startswith(f"{tmp_path}/step.json: Expecting property name")
    assert found["freeze"]["rc"] == 127 and found["freeze"]["lines"] == []
    assert _errors(stack_digest.STATE_SPEC, {"state_dir": "/x", "venv": "/v"}) == [
        "missing required arguments: unit"
    ]


# --- cuda13_host_facts ---------------------------------------------------------------------------


def _facts_args(tmp_path: Path, **changes) -> dict:
    args = {
        "nvidia_smi": str(NVIDIA_SMI_DOUBLE),
        "nvidia_smi_timeout": 20,
        "unit": "nosuch-cuda13-test.service",
        "disk_path": str(tmp_path),
        "python": sys.executable,
        "host_checks": True,
        "old_venv": str(_venv(tmp_path)),
    }
    return {**args, **changes}


@pytest.mark.parametrize("check_mode", [False, True])
def test_host_facts_reads_the_gpus_disk_and_python_in_one_run_in_check_mode_too(tmp_path, check_mode):
    done = _run(preflight_facts.FACTS_SPEC, preflight_facts.facts_module, _facts_args(tmp_path), check_mode)
    facts = done["facts"]
    assert done["changed"] is False
    assert facts["query"]["rc"] == 0 and len(facts["query"]["stdout"].splitlines()) == 8
    assert facts["table"]["rc"] == 0 and facts["compute_apps"]["rc"] == 0
    assert facts["python"]["stdout"].strip() == ".".join(map(str, sys.version_info[:3]))
    assert facts["df"]["rc"] == 0 and int(facts["df"]["stdout"].split()[-1]) > 0
    assert facts["old_python_exists"] is True and "unit_show" in facts and facts["space"] is None


def test_host_facts_gives_a_missing_nvidia_smi_as_the_querys_failure_and_runs_it_once(tmp_path):
    args = _facts_args(tmp_path, nvidia_smi=str(tmp_path / "nvidia-smi"), host_checks=False)
    facts = _run(preflight_facts.FACTS_SPEC, preflight_facts.facts_module, args)["facts"]
    assert facts["query"]["rc"] == 127
    # coreutils timeout's words (their quotes follow the locale).
    assert facts["query"]["stderr"].startswith("timeout: failed to run command ")
    assert (
        f"{tmp_path}/nvidia-smi" in facts["query"]["stderr"]
        and "No such file or directory" in facts["query"]["stderr"]
    )
    assert (
        facts["table"]
        == facts["compute_apps"]
        == {"skipped": True, "msg": "not run: the query of the GPUs failed"}
    )
    assert "unit_show" not in facts and "old_python_exists" not in facts
    assert _errors(
        preflight_facts.FACTS_SPEC, {"unit": "u", "disk_path": "/", "nvidia_smi_timeout": "soon"}
    ) == [
        "argument 'nvidia_smi_timeout' is of type str and we were unable to convert to int:"
        " \"'soon'\" cannot be converted to an int"
    ]


# --- cuda13_snapshot_read ------------------------------------------------------------------------


def test_snapshot_store_writes_the_manifest_once_with_the_caches_that_exist(tmp_path):
    path = tmp_path / "snapshots" / "pre-upgrade.json"
    (tmp_path / "triton").mkdir()
    args = {
        "action": "store",
        "snapshot_file": str(path),
        "manifest": {"host": "gpu-node-01", "run_id": "r1"},
        "cache_dirs": [str(tmp_path / "triton"), str(tmp_path / "absent"), str(tmp_path / "triton")],
    }
    stored = _run(snapshot.SNAPSHOT_SPEC, snapshot.snapshot_module, args)
    assert stored["changed"] is True
    assert stored["manifest"] == {
        "host": "gpu-node-01",
        "run_id": "r1",
        "cache_dirs": [str(tmp_path / "triton")],
    }
    assert json.loads(path.read_text()) == stored["manifest"]
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    again = _run(snapshot.SNAPSHOT_SPEC, snapshot.snapshot_module, {**args, "manifest": {"run_id": "r2"}})
    assert again == {"changed": False, "manifest": stored["manifest"]}
    collected = _run(
        snapshot.SNAPSHOT_SPEC, snapshot.snapshot_module, {"action": "collect", "snapshot_file": str(path)}
    )
    assert collected == {"changed": False, "existing": stored["manifest"], "raw": None}


def test_snapshot_store_in_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "snapshots" / "pre-upgrade.json"
    args = {"action": "store", "snapshot_file": str(path), "manifest": {"run_id": "r1"}}
    stored = _run(snapshot.SNAPSHOT_SPEC, snapshot.snapshot_module, args, check_mode=True)
    assert stored["changed"] is True and not path.parent.exists()


def test_snapshot_read_fails_naming_the_file_it_cannot_read_or_write(tmp_path):
    (tmp_path / "a-file").write_text("")
    args = {"action": "store", "snapshot_file": str(tmp_path / "a-file" / "pre-upgrade.json"), "manifest": {}}
    stored = _run(snapshot.SNAPSHOT_SPEC, snapshot.snapshot_module, args)
    assert stored == {
        "failed": True,
        "msg": f"cannot write the snapshot {tmp_path}/a-file/pre-upgrade.json: [Errno 17] File exists:"
        f" '{tmp_path}/a-file'",
    }
    (tmp_path / "bad.json").write_text("{")
    collected = _run(
        snapshot.SNAPSHOT_SPEC,
        snapshot.snapshot_module,
        {"action": "collect", "snapshot_file": str(tmp_path / "bad.json")},
    )
    assert collected["failed"] is True and collected["msg"].startswith(
        f"cannot read the snapshot {tmp_path}/bad.json: "
    )
    assert _errors(snapshot.SNAPSHOT_SPEC, {"action": "take", "snapshot_file": "/x"}) == [
        "value of action must be one of: collect, store, got: take"
    ]


# --- cuda13_venv_read ----------------------------------------------------------------------------


@pytest.mark.parametrize("check_mode", [False, True])
def test_venv_read_answers_each_read_asked_for_in_check_mode_too(tmp_path, check_mode):
    venv = _venv(tmp_path)
    os.symlink(venv, tmp_path / "current")
    args = {
        "venv": str(venv),
        "python": sys.executable,
        "freeze": True,
        "realpath": [str(tmp_path / "current")],
        "nvcc": str(tmp_path / "no-cuda"),
    }
    read = _run(venv_read.VENV_READ_SPEC, venv_read.venv_read_module, args, check_mode)
    assert read["changed"] is False and "failed" not in read
    assert read["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert read["freeze"] == {"rc": 0, "lines": FREEZE, "stderr": ""}
    assert read["realpath"] == {str(tmp_path / "current"): str(venv)}
    assert read["nvcc"]["rc"] == 127 and "No such file or directory" in read["nvcc"]["msg"]
    assert (read["show"], read["torch_cuda"], read["sglang_import"]) == (None, None, None)


def test_venv_read_fails_without_a_venv_or_with_a_python_that_does_not_run(tmp_path):
    read = _run(venv_read.VENV_READ_SPEC, venv_read.venv_read_module, {"freeze": True})
    assert read["failed"] is True and read["msg"] == "freeze, show, torch_cuda and sglang_import need venv"
    missing = str(tmp_path / "python3.99")
    read = _run(venv_read.VENV_READ_SPEC, venv_read.venv_read_module, {"python": missing})
    assert read["failed"] is True
    assert read["msg"] == f"{missing} does not run: [Errno 2] No such file or directory: '{missing}'"


# --- cuda13_apt_read -----------------------------------------------------------------------------


@pytest.mark.parametrize("check_mode", [False, True])
def test_apt_read_reads_the_sources_and_the_files_asked_for_in_check_mode_too(tmp_path, check_mode):
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "debian.sources").write_text("Types: deb\n")
    (etc / "sources.list.d" / ".hidden.list").write_text("deb http://x/ y z\n")
    (etc / "sources.list.d" / "cuda.list.disabled").write_text("deb http://x/ y z\n")
    args = {
        "sources": True,
        "apt_dir": str(etc),
        "exists": [str(etc), str(tmp_path / "no")],
        "read": [str(tmp_path / "no")],
    }
    read = _run(aptstate.APT_READ_SPEC, aptstate.apt_read_module, args, check_mode)
    assert read["changed"] is False and "failed" not in read
    assert read["sources"] == [
        {"path": str(etc / "sources.list.d" / "debian.sources"), "content": "Types: deb\n"}
    ]
    assert read["exists"] == {str(etc): True, str(tmp_path / "no"): False}
    assert (
        read["read"] == {str(tmp_path / "no"): {"exists": False, "content": None}} and read["queries"] == {}
    )


def test_apt_read_fails_naming_the_alternatives_group_it_cannot_query():
    read = _run(aptstate.APT_READ_SPEC, aptstate.apt_read_module, {"query": ["cuda13-nosuch-group"]})
    assert read["failed"] is True
    # The command, its status, then update-alternatives' own words (in the host's language).
    assert read["msg"].startswith(
        "update-alternatives --query cuda13-nosuch-group failed (rc 2): update-alternatives: "
    )
    assert read["msg"].endswith("cuda13-nosuch-group")
    assert _errors(aptstate.APT_READ_SPEC, {"query": "cuda"}) == []  # a string is a list of one
    (error,) = _errors(aptstate.APT_READ_SPEC, {"packages": "maybe"})
    assert error.startswith("argument 'packages' is of type str and we were unable to convert to bool")
