"""The pre-upgrade snapshot (cuda13_upgrade.steps.snapshot, action cuda13_snapshot), without Ansible.

The host module cuda13_snapshot_read runs for real (its ``store``, and its ``collect`` where a
snapshot exists or the serving venv cannot be read); only the reads of systemd, dpkg and
update-alternatives that ``collect`` makes are answered with recorded outputs
(tests/fixtures/tools, tests/fixtures/nvcc)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fakehost import FakeHost
from stepdoubles import OLD_EXEC, StepHost, options
from test_service import PASSWD_SGLANG

from cuda13_upgrade.steps import snapshot
from cuda13_upgrade.steps.host import ModuleFailed, StepFailed

FIXTURES = Path(__file__).resolve().parent / "fixtures"
UNIT_TEXT = (FIXTURES / "tools" / "systemctl-cat-sglang.txt").read_text()
FREEZE = "torch==2.10.0+cu128\nsgl-kernel==0.3.21+cu128\n"


def _raw(tmp_path: Path, **changes) -> dict:
    """What ``collect`` reads on a host whose unit runs as sglang, its caches under tmp_path."""
    show = f"MainPID=0\nUser=sglang\nGroup=sglang\nEnvironment=XDG_CACHE_HOME={tmp_path}/xdg\n"
    raw = {
        "pip_freeze": FREEZE,
        "alternatives": {"cuda": (FIXTURES / "tools" / "update-alternatives-cuda.txt").read_text()},
        "cuda_resolved": "/usr/local/cuda-12.8",
        "nvcc": (FIXTURES / "nvcc" / "nvcc-12.8.txt").read_text(),
        "packages": "cuda-toolkit-12-8 12.8.1-1 ii \ncuda-toolkit-13-0 13.0.2-1 rc \n",
        "sglang": {"src": "/opt/sglang", "commit": None, "dirty": False, "describe": None},
        "unit_text": UNIT_TEXT.rstrip("\n"),
        "show": "FragmentPath=/etc/systemd/system/sglang.service\n"
        "DropInPaths=/etc/systemd/system/sglang.service.d/10-limits.conf\nActiveState=active\n",
        "identity_show": show,
        "passwd": PASSWD_SGLANG,
        "environ_b64": base64.b64encode(b"").decode(),
    }
    raw.update(changes)
    return raw


def _host(raw: dict, *, check_mode: bool = False) -> StepHost:
    """A host whose collect reads ``raw`` where no snapshot exists yet; the rest is the real module."""

    def snapshot_read(args: dict) -> dict:
        if args["action"] == "collect" and not Path(args["snapshot_file"]).exists():
            return {"changed": False, "existing": None, "raw": raw}
        return FakeHost().module("cuda13_snapshot_read", args, check_mode=host.effective_check)

    host = StepHost(check_mode=check_mode, handlers={"cuda13_snapshot_read": snapshot_read})
    return host


def _take(host, opts, copies: list) -> dict:
    return snapshot.take(host, opts, run_id="r1", write_report=copies.append)


def test_the_first_run_records_the_running_stack_once_on_the_host_and_in_the_report(tmp_path):
    opts = options(tmp_path, stack_snapshot_cache_dirs=[str(tmp_path / "hf"), str(tmp_path / "absent")])
    (tmp_path / "xdg" / "torch_extensions").mkdir(parents=True)
    (tmp_path / "hf").mkdir()
    copies: list = []
    taken = _take(_host(_raw(tmp_path)), opts, copies)
    assert taken["taken"] is True and taken["changed"] is True
    path = tmp_path / "state" / "snapshots" / "pre-upgrade.json"
    manifest = json.loads(path.read_text())
    assert taken["manifest"] == manifest and copies == [manifest]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert (manifest["host"], manifest["run_id"]) == ("gpu-node-01", "r1")
    assert manifest["venv"] == {"path": "/opt/ml-env", "pip_freeze": sorted(FREEZE.split())}
    assert manifest["cuda"]["alternatives"]["cuda"]["value"] == "/usr/local/cuda-12.8"
    assert manifest["cuda"]["nvcc"]["release"] == "12.8"
    assert manifest["cuda"]["packages"] == {"cuda-toolkit-12-8": "12.8.1-1"}
    service = manifest["service"]
    assert service["exec_start"] == OLD_EXEC
    assert (service["user"], service["group"], service["home"]) == ("sglang", "sglang", "/var/lib/sglang")
    assert service["dropin_paths"] == ["/etc/systemd/system/sglang.service.d/10-limits.conf"]
    assert service["cache_dirs"]["torch_extensions"] == f"{tmp_path}/xdg/torch_extensions"
    # Of the caches the unit's identity and the option name, those that exist.
    assert manifest["cache_dirs"] == sorted([f"{tmp_path}/xdg/torch_extensions", str(tmp_path / "hf")])


def test_a_rerun_reads_the_first_snapshot_back_and_never_replaces_it(tmp_path):
    opts = options(tmp_path)
    first = _take(_host(_raw(tmp_path)), opts, [])
    path = tmp_path / "state" / "snapshots" / "pre-upgrade.json"
    written = path.read_text()
    # After the switch the venv serves the new stack: the record of the old one stays.
    host = _host(_raw(tmp_path, pip_freeze="torch==2.9.1+cu130\n"))
    copies: list = []
    again = snapshot.take(host, opts, run_id="r2", write_report=copies.append)
    assert again == {"manifest": first["manifest"], "taken": False, "changed": False}
    assert again["manifest"]["run_id"] == "r1" and copies == [first["manifest"]]
    assert path.read_text() == written
    assert [a["action"] for a in host.called("cuda13_snapshot_read")] == ["collect"]


def test_check_mode_builds_the_manifest_but_writes_it_nowhere(tmp_path):
    opts = options(tmp_path)
    copies: list = []
    host = _host(_raw(tmp_path), check_mode=True)
    taken = _take(host, opts, copies)
    assert taken["taken"] is True and taken["changed"] is True
    assert taken["manifest"]["service"]["exec_start"] == OLD_EXEC
    assert not (tmp_path / "state").exists() and copies == []


def test_without_fetch_the_control_node_keeps_no_copy(tmp_path):
    copies: list = []
    _take(_host(_raw(tmp_path)), options(tmp_path, stack_snapshot_fetch=False), copies)
    assert copies == [] and (tmp_path / "state" / "snapshots" / "pre-upgrade.json").exists()


def test_a_unit_user_the_host_does_not_know_refuses_the_snapshot(tmp_path):
    host = _host(_raw(tmp_path, passwd=""))
    with pytest.raises(StepFailed) as failed:
        _take(host, options(tmp_path), [])
    assert failed.value.msg == (
        "gpu-node-01: the service's User= is not a user of this host (getent passwd found none):"
        " 'sglang'. Option: cuda13_service_name. Fix: create the user, or fix the unit's User=."
    )
    assert [a["action"] for a in host.called("cuda13_snapshot_read")] == ["collect"]
    assert not (tmp_path / "state").exists()


def test_a_unit_without_a_command_refuses_the_snapshot_with_a_message(tmp_path):
    # It was a ValueError out of the action plugin (a traceback in ansible-playbook's output).
    unit = "# /etc/systemd/system/sglang.service\n[Service]\nType=simple\nExecStart=\n"
    with pytest.raises(StepFailed) as failed:
        _take(_host(_raw(tmp_path, unit_text=unit)), options(tmp_path), [])
    assert failed.value.msg == (
        "gpu-node-01: cannot record the running stack: the unit has no ExecStart= in its [Service]"
        " section; nothing on the host was changed."
    )
    assert not (tmp_path / "state").exists()


def test_a_serving_venv_that_cannot_be_read_fails_naming_it(tmp_path):
    # The real collect: the venv's pip is the first read, and this one has no Python.
    opts = options(tmp_path, stack_snapshot_venv=str(tmp_path / "no-venv"))
    with pytest.raises(ModuleFailed) as failed:
        snapshot.take(FakeHost(), opts, run_id="r1")
    assert failed.value.msg == (
        "cannot read the serving venv's pip freeze: [Errno 2] No such file or directory:"
        f" '{tmp_path}/no-venv/bin/python'"
    )
    assert failed.value.record["module"] == "cuda13_snapshot_read"


def test_a_snapshot_that_is_not_json_fails_naming_the_file(tmp_path):
    path = tmp_path / "state" / "snapshots" / "pre-upgrade.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ModuleFailed) as failed:
        snapshot.take(FakeHost(), options(tmp_path), run_id="r1")
    assert failed.value.msg.startswith(f"cannot read the snapshot {path}: Expecting property name")
