"""The host a stopped run left drained goes back into service once it serves.

* After Ctrl-C, SIGTERM or SIGHUP, ``playbooks/interrupted.yml`` decides per host
  (cuda13_upgrade.steps.drain.after_interrupt): a host whose lock the run holds and whose
  ``step.json`` says drained is undrained when the run stopped before the switch or while
  undraining and its server generates now (one readiness attempt, no restart); mid-switch,
  mid-verify or mid-rollback, or with the server down, it stays drained and its result says
  "left drained: ..." with the way to put it back. After the hook, ``step.json``'s
  ``drained_at`` is cleared (cuda13_upgrade.steps.result.interrupted).
* A re-run inherits the drain of the run it resolves (cuda13_upgrade.steps.host_state), so
  its undrain puts the host back after a failure before its own drain as well, once the server
  serves (cuda13_upgrade.steps.drain.side, ``after_failure``).

The ansible-playbook run of the same (SIGTERM, a drain hook that writes a file) is in
tests/test_cli_signals_inventory.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakehost import FakeHost
from stepdoubles import StepHost, options

from cuda13_upgrade import runlock
from cuda13_upgrade.steps import drain, host_state, result
from cuda13_upgrade.steps.host import begin_step, drained_at, new_run

HOOKS = {
    "cuda13_drain_tasks": "/hooks/drain.yml",
    "cuda13_undrain_tasks": "/hooks/undrain.yml",
    "cuda13_service_name": "sglang.service",
    "cuda13_server_url": "http://127.0.0.1:30000",
}
REFUSED = "Request failed: <urlopen error [Errno 111] Connection refused>"


def _server(generates: bool, *, last: str = "200"):
    """The host's cuda13_service as the readiness check sees it, and the calls it got."""
    calls: list[dict] = []

    def answer(args: dict) -> dict:
        calls.append(args)
        ready = {"generated": generates, "endpoint": "/health_generate", "waited_s": 0.0, "last": last}
        return {"changed": False, "dropin_changed": False, "ok": generates, "cycle": {"ready": ready}}

    return answer, calls


def _stopped_at(state: Path, stop: str, *, run_id: str = "r1", lock: str | None = "r1") -> str:
    """Run ``run_id``'s steps up to ``stop`` (its drain by the drain hook), as an interrupted run
    leaves them in ``state``; its lock held by ``lock``. Returns when its drain began."""
    host = FakeHost("gpu-node-02")
    run = new_run(run_id=run_id, host="gpu-node-02", target={}, state_dir=str(state), serving="/opt/ml-env")
    order = ("snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline", "switch", "verify")
    for step in order[: order.index(stop) + 1] if stop in order else order:
        run = (
            drain.side(host, run, HOOKS, step="drain")["run"]
            if step == "drain"
            else begin_step(host, run, step)
        )
    if stop in ("undrain", "rollback"):
        run = begin_step(host, run, stop) if stop == "rollback" else run
        if stop == "undrain":
            # The undrain step begun, its hook cut off: step.json still says drained.
            begin_step(host, run, "undrain")
    if lock:
        (state / "run.lock").mkdir(parents=True, exist_ok=True)
        (state / "run.lock" / "owner.json").write_text(json.dumps({"run_id": lock}))
    return next((s["started_at"] for s in run["steps"] if s["step"] == "drain"), "")


def _opts(state: Path, **given) -> dict:
    return {**HOOKS, "cuda13_state_dir": str(state), **given}


def test_a_host_interrupted_before_the_switch_whose_server_generates_is_undrained(tmp_path):
    drained = _stopped_at(tmp_path, "baseline")
    answer, calls = _server(True)
    host = FakeHost("gpu-node-02", handlers={"cuda13_service": answer})
    decided = drain.after_interrupt(host, _opts(tmp_path), run_id="r1")
    assert decided == {
        "hook": "/hooks/undrain.yml",
        "drained_at": drained,
        "step": "baseline",
        "left_drained": "",
    }
    # One readiness attempt, nothing restarted.
    assert calls == [
        {
            "unit": "sglang.service",
            "restart": "never",
            "url": "http://127.0.0.1:30000",
            "ready_timeout": drain.READY_PROBE_S,
            "server_info": False,
        }
    ]
    assert host.told == [
        f"undrained: the interrupted run left the host drained since {drained} and its server generates;"
        " running the undrain hook /hooks/undrain.yml."
    ]


def test_a_host_interrupted_while_undraining_is_undrained_too(tmp_path):
    _stopped_at(tmp_path, "undrain")
    answer, _ = _server(True)
    decided = drain.after_interrupt(
        FakeHost("gpu-node-02", handlers={"cuda13_service": answer}), _opts(tmp_path), run_id="r1"
    )
    assert (decided["hook"], decided["step"]) == ("/hooks/undrain.yml", "undrain")


def test_a_host_whose_server_is_down_stays_drained_and_is_told_how_to_undrain_it(tmp_path):
    _stopped_at(tmp_path, "baseline")
    answer, _ = _server(False, last=REFUSED)
    host = FakeHost("gpu-node-02", handlers={"cuda13_service": answer})
    decided = drain.after_interrupt(host, _opts(tmp_path), run_id="r1")
    line = (
        f"left drained: the server was not serving when the run was interrupted ({REFUSED}); undrain it"
        " after checking: the undrain hook /hooks/undrain.yml (cuda13_undrain_tasks) for gpu-node-02, or run"
        " the same command again, which undrains the host once its server serves."
    )
    assert (decided["hook"], decided["left_drained"]) == ("", f"gpu-node-02: {line}")
    assert host.told == [line]


def test_a_host_interrupted_mid_switch_or_verify_or_rollback_stays_drained_without_asking_its_server(
    tmp_path,
):
    for stop in ("switch", "verify", "rollback"):
        state = tmp_path / stop
        _stopped_at(state, stop)
        answer, calls = _server(True)
        decided = drain.after_interrupt(
            FakeHost("gpu-node-02", handlers={"cuda13_service": answer}), _opts(state), run_id="r1"
        )
        assert decided["hook"] == "" and calls == []
        assert decided["left_drained"] == (
            f"gpu-node-02: left drained: the run was interrupted at step '{stop}', before a gate kept the new"
            " stack, so the server may run a stack that is not verified; undrain it after checking: the"
            " undrain hook /hooks/undrain.yml (cuda13_undrain_tasks) for gpu-node-02, or run the same command"
            " again, which undrains the host once its server serves."
        )


def test_a_host_without_an_undrain_hook_stays_drained_and_says_so(tmp_path):
    _stopped_at(tmp_path, "baseline")
    decided = drain.after_interrupt(
        FakeHost("gpu-node-02"), _opts(tmp_path, cuda13_undrain_tasks=""), run_id="r1"
    )
    assert decided["left_drained"] == (
        "gpu-node-02: left drained: no undrain hook is set (cuda13_undrain_tasks); put it back into the"
        " balancer by hand, or set cuda13_undrain_tasks and run the same command again."
    )


def test_a_host_whose_lock_is_not_the_run_s_or_that_is_not_drained_is_left_alone(tmp_path):
    _stopped_at(tmp_path / "other", "baseline", lock="r9")
    _stopped_at(tmp_path / "nolock", "baseline", lock=None)
    _stopped_at(tmp_path / "early", "toolkit")  # before its drain
    for case in ("other", "nolock", "early"):
        answer, calls = _server(True)
        host = FakeHost("gpu-node-02", handlers={"cuda13_service": answer})
        decided = drain.after_interrupt(host, _opts(tmp_path / case), run_id="r1")
        assert (decided["hook"], decided["left_drained"], calls, host.told) == ("", "", [], []), case


def test_after_the_undrain_hook_the_drain_is_cleared_and_the_next_run_does_not_count_it(tmp_path):
    _stopped_at(tmp_path, "baseline")
    host = FakeHost("gpu-node-02")
    undrain = {"hook": "/hooks/undrain.yml", "left_drained": "", "failed": ""}
    done = result.interrupted(
        host, _opts(tmp_path), run_id="r1", step="Measure the old stack", undrain=undrain
    )
    assert (done["held"], done["recorded"], done["undrained"], done["left_drained"]) == (True, True, True, "")
    step = json.loads((tmp_path / "step.json").read_text())
    assert (step["step"], step["run_id"], step["drained_at"]) == ("baseline", "r1", None)
    assert step["undrained_at"]
    assert runlock.stopped_run(step, None, "r2")["drained_at"] is None
    assert host_state.left_drained_by_earlier(step, "r2") == {}
    assert not (tmp_path / "run.lock").exists()
    assert json.loads((tmp_path / "result.json").read_text())["error"] == (
        "The run was interrupted (Ctrl-C) during step 'Measure the old stack'. Run the same command again to"
        " continue the upgrade, or playbooks/rollback.yml to put the old stack back."
    )


def test_a_host_left_drained_says_so_in_its_result_and_keeps_its_drain(tmp_path):
    drained = _stopped_at(tmp_path, "switch")
    note = drain.left_drained(
        "not_kept", host="gpu-node-02", undrain_tasks="/hooks/undrain.yml", step="switch"
    )
    done = result.interrupted(
        FakeHost("gpu-node-02"),
        _opts(tmp_path),
        run_id="r1",
        step="Switch the service to the new stack",
        by="SIGTERM",
        undrain={"hook": "", "left_drained": note, "failed": ""},
    )
    assert (done["undrained"], done["left_drained"]) == (False, note)
    assert json.loads((tmp_path / "step.json").read_text())["drained_at"] == drained
    assert json.loads((tmp_path / "result.json").read_text())["error"] == (
        "The run was interrupted (SIGTERM) during step 'Switch the service to the new stack'. Run the same"
        " command again to continue the upgrade, or playbooks/rollback.yml to put the old stack back. Left"
        " drained: the run was interrupted at step 'switch', before a gate kept the new stack, so the server"
        " may run a stack that is not verified; undrain it after checking: the undrain hook /hooks/undrain.yml"
        " (cuda13_undrain_tasks) for gpu-node-02, or run the same command again, which undrains the host once"
        " its server serves."
    )


def test_an_undrain_hook_that_failed_leaves_the_drain_and_says_so(tmp_path):
    drained = _stopped_at(tmp_path, "baseline")
    host = FakeHost("gpu-node-02")
    undrain = {"hook": "/hooks/undrain.yml", "left_drained": "", "failed": "Status code was 503"}
    done = result.interrupted(host, _opts(tmp_path), run_id="r1", step="x", undrain=undrain)
    assert done["undrained"] is False
    assert json.loads((tmp_path / "step.json").read_text())["drained_at"] == drained
    assert host.told == [
        "left drained: its undrain hook /hooks/undrain.yml failed (Status code was 503); undrain it after"
        " checking: the undrain hook /hooks/undrain.yml (cuda13_undrain_tasks) for gpu-node-02, or run the same"
        " command again, which undrains the host once its server serves."
    ]
    assert not (tmp_path / "run.lock").exists()  # the lock is released all the same


# --- the re-run undrains what the stopped run drained ---------------------------------------------


def _rerun(tmp_path: Path) -> tuple[dict, str]:
    """The re-run r2's record, as host_state.read starts it after r1 stopped drained at its switch."""
    drained = _stopped_at(tmp_path / "state", "switch")
    (tmp_path / "state" / "run.lock" / "owner.json").write_text(json.dumps({"run_id": "r2"}))

    def state_read(args: dict) -> dict:
        return FakeHost().module("cuda13_state_read", args, check_mode=False, allow_failure=True)

    host = StepHost("gpu-node-02", handlers={"cuda13_state_read": state_read})
    found = host_state.read(host, options(tmp_path, **{**HOOKS}), run_id="r2", locked=True)
    assert (
        f"drained since {drained} by run r1: this run puts the host back into service (its undrain hook)"
        " once its server serves." in host.told
    )
    return found["run"], drained


def test_a_rerun_starts_drained_when_the_stopped_run_left_the_host_drained(tmp_path):
    run, drained = _rerun(tmp_path)
    assert (run["drained"], run["drained_since"], run["drained_by_run"]) == (True, drained, "r1")
    assert drained_at(run) == drained
    # A step before its own drain keeps the earlier drain in step.json (a second interrupt counts it).
    begin_step(FakeHost("gpu-node-02"), run, "toolkit")
    assert json.loads((tmp_path / "state" / "step.json").read_text())["drained_at"] == drained
    # Its own drain: still out of service since the earlier one.
    own = drain.side(FakeHost("gpu-node-02"), run, HOOKS, step="drain")["run"]
    assert own["drained"] and drained_at(own) == drained


def test_a_rerun_that_fails_before_its_own_drain_undrains_the_host_once_it_serves(tmp_path):
    run, _ = _rerun(tmp_path)
    answer, calls = _server(True)
    host = FakeHost("gpu-node-02", handlers={"cuda13_service": answer})
    done = drain.side(host, begin_step(host, run, "wheels"), HOOKS, step="undrain", after_failure=True)
    assert done["hook"] == "/hooks/undrain.yml" and len(calls) == 1
    assert not done["run"]["drained"] and "drained_since" not in done["run"]
    # Drained until the undrain step is over: the result step's boundary says undrained.
    begin_step(host, done["run"], "result")
    assert json.loads((tmp_path / "state" / "step.json").read_text())["drained_at"] is None
    # A run's own undrain after success asks nothing (its gate just saw it generate).
    answer, calls = _server(True)
    drain.side(FakeHost("h", handlers={"cuda13_service": answer}), run, HOOKS, step="undrain")
    assert calls == []


def test_a_rerun_whose_server_is_down_after_the_failure_leaves_the_host_drained(tmp_path):
    run, drained = _rerun(tmp_path)
    answer, _ = _server(False, last=REFUSED)
    host = FakeHost("gpu-node-02", handlers={"cuda13_service": answer})
    done = drain.side(host, run, HOOKS, step="undrain", after_failure=True)
    line = (
        f"gpu-node-02: left drained: the server was not serving after the failure ({REFUSED}); undrain it"
        " after checking: the undrain hook /hooks/undrain.yml (cuda13_undrain_tasks) for gpu-node-02, or run"
        " the same command again, which undrains the host once its server serves."
    )
    assert (done["hook"], done["run"]["drained"], done["run"]["left_drained"]) == ("", True, line)
    assert host.told == [line]
    # Still drained in step.json: the next run inherits it.
    result_step = begin_step(host, done["run"], "result")
    assert drained_at(result_step) == drained
    step = json.loads((tmp_path / "state" / "step.json").read_text())
    assert host_state.left_drained_by_earlier(step, "r3") == {
        "drained": True,
        "drained_since": drained,
        "drained_by_run": "r2",
    }
