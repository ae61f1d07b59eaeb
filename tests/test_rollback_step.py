"""The step rollback (cuda13_upgrade.steps.rollback) with FakeHost: what a rollback that cannot go on
says, and that a snapshot the rollback cannot use changes nothing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fakehost import FakeHost
from test_steps import _options

from cuda13_upgrade.hostscripts import statedir
from cuda13_upgrade.steps import rollback
from cuda13_upgrade.steps.host import StepFailed, begin_step, new_run

OLD = "/opt/ml-env/bin/python -m sglang.launch_server --model-path /models/m"


def _rollback_options(tmp_path: Path) -> dict:
    state = tmp_path / "state"
    return {
        **_options(tmp_path),
        "rollback_snapshot_file": str(state / "snapshots" / "pre-upgrade.json"),
        "rollback_service_name": "sglang.service",
        "rollback_dropins": ["50-cuda13-upgrade.conf", "60-cuda13-profile.conf"],
        "rollback_clear_dirs": [str(tmp_path / "cache" / "cu130")],
        "rollback_profile_dropin": "60-cuda13-profile.conf",
        "rollback_server_url": "http://127.0.0.1:30000",
        "rollback_health_timeout": 60,
        "rollback_sglang_build_record": str(state / "sglang-build.json"),
        "rollback_new_venv": "/opt/ml-env-cu130",
        "rollback_new_sglang_src": "/opt/sglang-cu130",
    }


class Host(FakeHost):
    """Reads of the host's files are the real module's; removals and commands are recorded."""

    def __init__(self, *, start_error: str | None = None) -> None:
        self.removed: list[str] = []
        self.commands: list[list[str]] = []
        super().__init__(
            handlers={
                "cuda13_record": self._record,
                "cuda13_service": lambda args: self._service(args, start_error),
                "ansible.builtin.command": self._command,
            }
        )

    def _record(self, args: dict) -> dict:
        if args.get("read"):
            return statedir.record_module({"files": [], "absent": [], "read": args["read"]}, False)
        self.removed += list(args.get("absent") or [])
        return {"changed": bool(args.get("absent"))}

    def _command(self, args: dict) -> dict:
        self.commands.append(args["argv"])
        if args["argv"][:2] == ["systemctl", "show"]:
            return {
                "rc": 0,
                "stdout": "ActiveState=failed\nDropInPaths=/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf",
            }
        if args["argv"][:2] == ["readlink", "-f"]:
            return {"rc": 0, "stdout": "/usr/local/cuda-13.0"}
        return {"rc": 1, "stdout": "", "stderr": "not here"}

    def _service(self, args: dict, start_error: str | None) -> dict:
        argv = [*OLD.split(), *args["args"]]
        cycle = {
            "restarted": True,
            "release": {"free": True, "leftovers": []},
            "start_error": start_error,
            "ready": None if start_error else {"generated": True, "last": "200"},
            "journal": ["sglang.service: Main process exited, code=exited, status=1/FAILURE"]
            if start_error
            else [],
            "cmdline_b64": ""
            if start_error
            else base64.b64encode("".join(a + "\0" for a in argv).encode()).decode(),
        }
        return {"changed": True, "dropin_changed": False, "cycle": cycle}


def _snapshot(options: dict, content: str) -> None:
    path = Path(options["rollback_snapshot_file"])
    path.parent.mkdir(parents=True)
    path.write_text(content)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{}", "is not a pre-upgrade snapshot of cuda13-upgrade: it lacks service.exec_start, venv.path,"),
        ('{"cut": ', "is not JSON (Expecting value"),
    ],
)
def test_a_snapshot_the_rollback_cannot_use_changes_nothing(tmp_path, content, said):
    options = _rollback_options(tmp_path)
    _snapshot(options, content)
    host = Host()
    with pytest.raises(StepFailed) as refused:
        rollback.restore(host, options)
    assert refused.value.msg.startswith(
        f"Load the snapshot: {options['rollback_snapshot_file']} on gpu-node-01 "
    )
    assert said in refused.value.msg and "Nothing on the host was changed." in refused.value.msg
    assert refused.value.record["where"] == "Load the snapshot"
    assert host.removed == [] and not host.called("cuda13_service")


def test_a_missing_snapshot_is_named_as_the_read_that_failed(tmp_path):
    options = _rollback_options(tmp_path)
    with pytest.raises(StepFailed) as refused:
        rollback.restore(Host(), options)
    assert refused.value.record["where"] == "Read the pre-upgrade snapshot"


def test_an_old_stack_that_does_not_start_is_named_with_what_the_rollback_left(tmp_path):
    options = _rollback_options(tmp_path)
    manifest = {
        "service": {"exec_start": OLD, "user": "root"},
        "venv": {"path": "/opt/ml-env", "pip_freeze": ["torch==2.10.0"]},
        "cuda": {"resolved": "/usr/local/cuda-12.8", "alternatives": {}},
    }
    _snapshot(options, json.dumps(manifest))
    run = {**new_run(run_id="r1", host="gpu-node-01", target={}, state_dir="", serving="/v"), "changed": True}
    run = begin_step(FakeHost(), run, "switch")
    host = Host(start_error="systemctl start sglang.service: Job for sglang.service failed")
    out = rollback.after_failure(
        host,
        options,
        run=run,
        failed={"msg": "The new stack fails the gate: plain: slower"},
        failed_task="Roll back a new stack that failed the gate or degraded in service",
        records={},
    )
    assert out["status"] == "failed" and out["failed_step"] == "switch"
    assert out["error"].startswith(
        "The new stack fails the gate: plain: slower Then the rollback itself failed at 'Start the old stack"
        " with the first profile's arguments': sglang.service (the old stack, after the rollback) did not"
        " start: systemctl start sglang.service: Job for sglang.service failed."
    )
    assert out["error"].endswith(
        "Left on the host: service sglang.service ActiveState=failed, its drop-ins"
        " /etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf (the switch drop-in 50-cuda13-upgrade.conf is the pointer"
        " to the new stack), /usr/local/cuda -> /usr/local/cuda-13.0. Fix the cause, then run"
        " playbooks/rollback.yml --limit gpu-node-01."
    )
    # The drop-ins and the caches went before the start; the rollback is the run's last step.
    assert "/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf" in host.removed
    assert [s["step"] for s in out["run"]["steps"]] == ["switch", "rollback"]
    assert host.told[-1].startswith("failed at step 'switch': The new stack fails the gate")
