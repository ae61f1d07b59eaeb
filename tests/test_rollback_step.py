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


# --- a failure before the switch restores files and links only ------------------------------------

MANIFEST = {
    "service": {"exec_start": OLD, "user": "root"},
    "venv": {"path": "/opt/ml-env", "pip_freeze": ["torch==2.10.0"]},
    "cuda": {"resolved": "/usr/local/cuda-12.8", "alternatives": {}},
}


class RestoringHost(Host):
    """A host the rollback puts back: pip freeze, /usr/local/cuda and the unit match the snapshot."""

    def _command(self, args: dict) -> dict:
        self.commands.append(args["argv"])
        argv = args["argv"]
        if argv[1:4] == ["-m", "pip", "freeze"]:
            return {"rc": 0, "stdout": "torch==2.10.0"}
        if argv[:2] == ["readlink", "-f"]:
            return {"rc": 0, "stdout": "/usr/local/cuda-12.8"}
        if argv[:2] == ["systemctl", "cat"]:
            return {"rc": 0, "stdout": f"# /etc/systemd/system/sglang.service\n[Service]\nExecStart={OLD}\n"}
        return {"rc": 1, "stdout": "", "stderr": "not here"}


def _failed_run(*steps: str) -> dict:
    run = new_run(run_id="r1", host="gpu-node-01", target={}, state_dir="", serving="/opt/ml-env")
    for step in steps:
        run = begin_step(FakeHost(), run, step)
    return {**run, "changed": True, "drained": "drain" in steps}


WHEELS_REFUSED = (
    "torch-2.10.0+cu130 holds a CUDA 12 object (libcudart.so.12): the new stack would not run on CUDA 13."
)


@pytest.mark.parametrize(
    ("steps", "failed"),
    [
        (("snapshot", "toolkit"), {"msg": "apt-get install cuda-toolkit-13-0 failed"}),
        (("snapshot", "toolkit", "wheels"), {"msg": WHEELS_REFUSED}),
        (("snapshot", "toolkit", "wheels", "sglang_build"), {"msg": "the SGLang build failed"}),
        (("snapshot", "toolkit", "wheels", "sglang_build", "drain"), {"msg": "the drain hook failed"}),
        (
            ("snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline"),
            {"msg": "gpu-node-01: cannot measure the baseline phase: no profile", "restarts": 0},
        ),
    ],
    ids=["toolkit", "wheels", "sglang", "drain", "baseline"],
)
def test_a_failure_before_the_switch_restores_files_without_restarting_the_service(tmp_path, steps, failed):
    options = _rollback_options(tmp_path)
    _snapshot(options, json.dumps(MANIFEST))
    host = RestoringHost()
    out = rollback.after_failure(
        host, options, run=_failed_run(*steps), failed=failed, failed_task="the step", records={}
    )
    assert out["status"] == "rolled_back" and out["failed_step"] == steps[-1]
    # The service that never left its stack is not restarted, nor measured again.
    assert host.called("cuda13_service") == [] and not host.called("cuda13_bench")
    assert out["service_restarted"] is False and out["serving_touched"] == "" and out["restarts"] == 0
    # Its files and links are: the upgrade's drop-ins and the new stack's caches removed.
    assert "/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf" in host.removed
    assert str(tmp_path / "cache" / "cu130") in host.removed
    assert out["error"] == f"{failed['msg']} The server was not restarted: it never left the old stack."
    assert host.told[-1] == (
        f"rolled back at step '{steps[-1]}': {failed['msg']}"
        " The server was not restarted: it never left the old stack."
    )


@pytest.mark.parametrize(
    ("steps", "failed", "records", "why"),
    [
        (
            ("snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline", "switch"),
            {"msg": "the new stack did not start"},
            {},
            "the step 'switch' began: the service left its old stack",
        ),
        (
            ("snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline", "switch", "verify"),
            {"msg": "The new stack fails the gate: plain: slower"},
            {},
            "the step 'switch' began: the service left its old stack",
        ),
        (
            ("snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline"),
            {"msg": "gpu-node-01: the benchmark failed on every try", "restarts": 1},
            {},
            "the baseline restarted the service into a profile's arguments",
        ),
    ],
    ids=["switch", "verify", "baseline-restarted"],
)
def test_a_failure_after_the_service_left_its_stack_restarts_it(tmp_path, steps, failed, records, why):
    options = _rollback_options(tmp_path)
    _snapshot(options, json.dumps(MANIFEST))
    host = RestoringHost()
    out = rollback.after_failure(
        host, options, run=_failed_run(*steps), failed=failed, failed_task="the step", records=records
    )
    assert out["status"] == "rolled_back", out["error"]
    assert len(host.called("cuda13_service")) == 1 and out["service_restarted"] is True
    assert out["serving_touched"] == why and out["restarts"] == 1
    assert out["error"] == failed["msg"] and "not restarted" not in host.told[-1]


def test_an_upgrade_into_the_venv_the_service_runs_restarts_it(tmp_path):
    options = {
        **_rollback_options(tmp_path),
        "cuda13_new_venv": "/opt/ml-env",
        "cuda13_old_venv": "/opt/ml-env",
    }
    assert rollback.serving_touched(_failed_run("snapshot", "toolkit", "wheels"), {}, {}, options) == (
        "the upgrade installed into the venv the service runs (/opt/ml-env)"
    )
