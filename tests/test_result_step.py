"""The host's result (cuda13_upgrade.steps.result, action cuda13_result), without Ansible: the
records written by cuda13_record's own function into the state directory under tmp_path; the
probe of the serving venv's torch and the digest of the kept stack (which read pip, systemd, dpkg
and the GPUs) answered by the test. How a host ends (``status_of``) and the interrupted run are
tests/test_steps.py's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fakehost import FakeHost
from stepdoubles import NEW_VENV, OLD_VENV, options

from cuda13_upgrade import metrics
from cuda13_upgrade.steps import result
from cuda13_upgrade.steps.host import new_run

PARTS = {
    name: hashlib.sha256(name.encode()).hexdigest()
    for name in ("freeze", "dropins", "alternatives", "toolkit", "driver")
}
DIGEST = hashlib.sha256(json.dumps(PARTS, sort_keys=True).encode()).hexdigest()
FREEZE = ["sglang==0.5.9", "torch==2.9.1+cu130"]
# What stack_probe.py reports of each venv's torch (tests/test_report.py's, tests/playbook.py's).
TORCH = {
    NEW_VENV: {"version": "2.9.1+cu130", "cuda": "13.0"},
    OLD_VENV: {"version": "2.10.0+cu128", "cuda": "12.8"},
}
TARGET = {"toolkit_release": "13.0", "toolkit_package_version": "13.0.2-1"}
VERIFIED = {
    "verdict": {"decisions": {"plain": {"verdict": "keep"}}},
    "regressed": False,
    "reason": "plain: median 92.0 tok/s on the new stack vs 89.5 tok/s: not slower",
    "restarts": 1,
    "leftovers": [],
}


class Host(FakeHost):
    """A host whose venvs' torch and stack digest are answered (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(
            handlers={"cuda13_stack_probe": self._probe, "cuda13_state_read": self._state}, **kwargs
        )

    def _probe(self, args: dict) -> dict:
        python = self.calls[-1][2]
        return {"changed": False, "probe": {"torch": TORCH[python.removesuffix("/bin/python")]}}

    def _state(self, args: dict) -> dict:
        found = {"changed": False, "state": {}, "digest": None, "parts": None, "errors": {}}
        if args.get("digest"):
            found.update(digest=DIGEST, parts=PARTS)
        if args.get("freeze"):
            found["freeze"] = {"rc": 0, "lines": FREEZE, "error": ""}
        return found


def _run(tmp_path: Path, **changes) -> dict:
    run = new_run(
        run_id="r1",
        host="gpu-node-01",
        target=TARGET,
        state_dir=str(tmp_path / "state"),
        serving=OLD_VENV,
        started_at="2026-12-03T09:00:00+00:00",
    )
    return {**run, "measure": True, **changes}


def _record(host, tmp_path: Path, records: dict, *, mode: str = "upgrade", run: dict | None = None, **given):
    copies: list = []
    done = result.record(
        host,
        options(tmp_path, **given),
        run or _run(tmp_path),
        records,
        mode=mode,
        write_report=copies.append,
    )
    return done, copies


def test_a_kept_host_is_recorded_on_the_host_with_its_digest_and_metrics(tmp_path):
    host = Host()
    done, copies = _record(
        host,
        tmp_path,
        {"verify": VERIFIED, "switch": {"restarts": 1}},
        cuda13_metrics_textfile_dir=str(tmp_path / "textfile"),
    )
    recorded = done["result"]
    assert copies == [recorded]
    assert (recorded["status"], recorded["measured"], recorded["verified_in_run"]) == ("kept", True, "r1")
    assert recorded["stack_digest"]["digest"] == DIGEST and recorded["stack_digest"]["parts"] == PARTS
    assert recorded["stack_after"] == {"venv": NEW_VENV, "torch": "2.9.1+cu130", "torch_cuda": "13.0"}
    assert recorded["restarts"] == 2 and recorded["decisions"] == VERIFIED["verdict"]["decisions"]
    state = tmp_path / "state"
    assert json.loads((state / "result.json").read_text()) == recorded
    assert oct((state / "result.json").stat().st_mode & 0o777) == "0o600"
    prom = tmp_path / "textfile" / "cuda13_upgrade.prom"
    assert prom.read_text() == metrics.host_metrics(recorded)
    assert oct(prom.stat().st_mode & 0o777) == "0o644"
    # The result step begun, on the host too; the new venv's torch probed.
    assert [s["step"] for s in done["run"]["steps"]] == ["result"]
    assert json.loads((state / "step.json").read_text())["step"] == "result"
    assert [python for name, _, python in host.calls if name == "cuda13_stack_probe"] == [
        f"{NEW_VENV}/bin/python"
    ]
    (read,) = host.called("cuda13_state_read")
    assert (read["digest"], read["freeze"], read["venv"]) == (True, False, NEW_VENV)


def test_a_rolled_back_host_is_recorded_with_the_old_stacks_torch_and_no_digest(tmp_path):
    host = Host()
    rollback = {
        "status": "rolled_back",
        "failed_step": "verify",
        "error": "The new stack fails the gate: plain",
    }
    done, _ = _record(host, tmp_path, {"verify": {**VERIFIED, "regressed": True}, "rollback": rollback})
    recorded = json.loads((tmp_path / "state" / "result.json").read_text())
    assert recorded == done["result"]
    assert (recorded["status"], recorded["failed_step"]) == ("rolled_back", "verify")
    assert recorded["stack_digest"] is None and recorded["stack_after"]["torch"] == "2.10.0+cu128"
    assert not host.called("cuda13_state_read")
    assert not (tmp_path / "textfile").exists()


def test_a_staged_host_records_the_target_its_resolved_set_and_the_new_venvs_freeze(tmp_path):
    preflight = {
        "resolved": [{"name": "torch", "version": "2.9.1+cu130"}, {"name": "sglang", "version": "0.5.9"}]
    }
    done, _ = _record(
        Host(), tmp_path, {"preflight": preflight}, mode="stage", run=_run(tmp_path, measure=False)
    )
    state = tmp_path / "state"
    staged = json.loads((state / "staged.json").read_text())
    assert staged["run_id"] == "r1" and staged["target"] == TARGET
    assert staged["resolved_target"] == ["torch==2.9.1+cu130", "sglang==0.5.9"] and staged["freeze"] == FREEZE
    assert oct((state / "staged.json").stat().st_mode & 0o777) == "0o600"
    assert done["result"]["status"] == "staged"
    assert json.loads((state / "result.json").read_text())["status"] == "staged"


def test_check_mode_writes_nothing_on_the_host_and_the_report_says_it_checked(tmp_path):
    host = Host(check_mode=True)
    done, copies = _record(
        host, tmp_path, {"verify": VERIFIED}, cuda13_metrics_textfile_dir=str(tmp_path / "t")
    )
    assert not (tmp_path / "state").exists() and not (tmp_path / "t").exists()
    assert copies == [done["result"]] and done["result"]["check_mode"] is True
    assert done["result"]["measured"] is False and not host.called("cuda13_record")


def test_an_already_kept_host_keeps_its_verified_record_and_writes_nothing(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    verified = {"run_id": "r0", "status": "kept", "verified_in_run": "r0", "stack_digest": {"digest": DIGEST}}
    (state / "result.json").write_text(json.dumps(verified))
    run = _run(tmp_path, measure=False, already_kept=True)
    host_state = {"already_kept": True, "measure": False, "previous": verified}
    host = Host()
    done, copies = _record(
        host, tmp_path, {"host_state": host_state}, run=run, cuda13_metrics_textfile_dir=str(tmp_path / "t")
    )
    recorded = done["result"]
    assert (recorded["status"], recorded["already_kept"], recorded["verified_in_run"]) == ("kept", True, "r0")
    assert recorded["stack_digest"] == {"digest": DIGEST} and copies == [recorded]
    assert json.loads((state / "result.json").read_text()) == verified
    assert not (state / "step.json").exists() and not (tmp_path / "t").exists()
    assert host.calls == [] and done["run"] == run


def test_a_kept_host_walked_without_measuring_completes_its_verified_record_with_the_digest(tmp_path):
    # Its record lacked the digest's parts (an older run): the record stays, the digest is added.
    previous = {
        "run_id": "r0",
        "status": "kept",
        "measured": True,
        "verified_in_run": "r0",
        "stack_digest": None,
    }
    host_state = {"already_kept": False, "measure": False, "previous": previous}
    done, _ = _record(Host(), tmp_path, {"host_state": host_state}, run=_run(tmp_path, measure=False))
    assert done["result"]["measured"] is False and done["result"]["verified_in_run"] == "r0"
    written = json.loads((tmp_path / "state" / "result.json").read_text())
    assert written == {**previous, "stack_digest": done["result"]["stack_digest"]}
    assert written["stack_digest"]["digest"] == DIGEST


def test_a_driver_window_rolled_back_is_recorded_with_its_move(tmp_path):
    host = Host()
    reason = "The stack on the new driver fails the gate: plain -9.8 %"
    window = {
        "cache": {"driver_version": "570.211.01", "dir": "/var/lib/cuda13-upgrade/driver-cache/570.211.01"},
        "moved": {"activation": "reload", "reboot": False},
        "checked": {"driver_version": "580.142"},
        "measured": {"rollback": True, "reason_to_roll_back": reason},
        "restored": {"check": {"driver_version": "570.211.01"}},
    }
    rollback = {"status": "rolled_back", "failed_step": "driver", "error": reason}
    done, _ = _record(host, tmp_path, {"driver_window": window, "rollback": rollback})
    recorded = done["result"]
    assert recorded["status"] == "rolled_back" and recorded["error"] == reason
    assert recorded["driver_window"] == {
        "from": "570.211.01",
        "to": "580.142",
        "activation": "reload",
        "reboot": False,
        "kept": False,
        "restored": True,
        "reason": reason,
        "baseline_recorded": False,
        "activation_seconds": None,
        "reboot_seconds": None,
        "measure_seconds": None,
        # The run record of this test has no steps: no time split.
        "old_driver_measure_seconds": None,
        "driver_seconds": None,
    }


def test_a_driver_that_could_not_be_put_back_fails_the_host_whatever_the_stacks_rollback_says(tmp_path):
    host = Host()
    failed = "gpu-node-01: apt could not put the old driver's packages back: E: ..."
    window = {
        "cache": {"driver_version": "570.211.01"},
        "moved": {"activation": "reload"},
        "restored": {"restore_failed": True, "msg": failed},
    }
    rollback = {"status": "rolled_back", "failed_step": "driver", "error": "the checks after failed"}
    done, _ = _record(host, tmp_path, {"driver_window": window, "rollback": rollback})
    assert done["result"]["status"] == "failed" and done["result"]["error"] == failed


def test_a_run_without_a_driver_window_records_none():
    from cuda13_upgrade.steps import driver_move

    assert driver_move.summary(None) is None
    assert driver_move.summary({"cache": {}, "moved": {"skipped": True}}) is None


KEPT_MOVE = {
    "cache": {"driver_version": "570.211.01"},
    "moved": {"activation": "reload", "reboot": False},
    "checked": {"driver_version": "580.142"},
    "measured": {"kept": True, "rollback": False, "baseline_recorded": True},
}


def test_the_driver_window_alone_records_a_kept_move_as_driver_kept_not_as_a_kept_stack(tmp_path):
    host = Host()
    done, copies = _record(
        host, tmp_path, {"driver_window": KEPT_MOVE}, cuda13_driver_only=True, cuda13_driver_target="R580"
    )
    recorded = done["result"]
    assert recorded["status"] == result.DRIVER_KEPT and copies == [recorded]
    assert recorded["driver_window"]["kept"] is True and recorded["stack_after"]["venv"] == OLD_VENV
    # On the host: the next rollout reads a result that is not "kept", so it walks the host.
    written = json.loads((tmp_path / "state" / "result.json").read_text())
    assert written["status"] == "driver_kept"
    from cuda13_upgrade import rerun

    verdict = rerun.kept_rerun(written, TARGET, digest=None, reverify=False)
    assert verdict["already_kept"] is False and verdict["measure"] is True


def test_the_driver_window_alone_leaves_the_record_of_a_host_that_needed_no_move(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    previous = {"run_id": "r0", "status": "rolled_back"}
    (state / "result.json").write_text(json.dumps(previous))
    host = Host()
    done, copies = _record(
        host,
        tmp_path,
        {"driver_window": {"cache": {}, "moved": {"skipped": True}}},
        cuda13_driver_only=True,
        cuda13_driver_target="R580",
        cuda13_metrics_textfile_dir=str(tmp_path / "t"),
    )
    assert done["result"]["status"] == result.DRIVER_CURRENT and copies == [done["result"]]
    assert json.loads((state / "result.json").read_text()) == previous
    assert not (tmp_path / "t").exists()


def test_the_driver_window_alone_rolled_back_is_rolled_back(tmp_path):
    rollback = {"status": "rolled_back", "failed_step": "driver", "error": "plain -9.8 %"}
    window = {**KEPT_MOVE, "measured": {"rollback": True}, "restored": {"check": {}}}
    done, _ = _record(
        Host(),
        tmp_path,
        {"driver_window": window, "rollback": rollback},
        cuda13_driver_only=True,
        cuda13_driver_target="R580",
    )
    assert done["result"]["status"] == "rolled_back"
