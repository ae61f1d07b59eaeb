"""The verify and the soak between batches (cuda13_upgrade.steps.verify, actions cuda13_verify and
cuda13_batch_soak), without Ansible: the new stack measured on tests/stepdoubles.py's server, the
kernel log read by the real module (a file printed by ``cat``, as dmesg prints the ring buffer;
its lines are tests/test_xid.py's real ones), the decision the gate's."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakehost import FakeHost
from stepdoubles import NEW_EXEC, Server, options, trials
from test_batch_soak import REFERENCE, UNIT
from test_xid import LOADING, XID79

from cuda13_upgrade import restarts
from cuda13_upgrade.steps import verify
from cuda13_upgrade.steps.host import StepFailed

PROFILES = [{"name": "plain", "server_args": []}]
PROMPTS = {"seed": 1, "prompts": ["p"]}
PROBE = [{"prompt": "p", "output_ids": REFERENCE, "text": "", "completion_tokens": 7, "spec_verify_ct": None}]
BATCHES = [["gpu-node-01"], ["gpu-node-02"]]


def _setup(tmp_path: Path, rate: float = 92.0, *, after_switch: tuple = (), **given):
    """Options, the server running the new stack's first profile, and the switch's record (the
    kernel log marked before ``after_switch`` was logged)."""
    log = tmp_path / "kern.log"
    log.write_text(f"{LOADING}\n")
    opts = options(
        tmp_path,
        cuda13_profiles=PROFILES,
        cuda13_kernel_log_command=f"cat {log}",
        cuda13_soak_seconds=300,
        verify_throughput_min_trials=5,
        verify_throughput_max_trials=5,
        verify_throughput_soak_requests=0,
        **given,
    )
    mark = FakeHost().module("cuda13_kernel_log", {"action": "mark", "command": f"cat {log}"})["log"]
    log.write_text("".join(f"{line}\n" for line in (LOADING, *after_switch)))
    server = Server(
        tmp_path,
        {"plain": {"args": [], "trials": trials(rate, 5), "probe": PROBE}},
        running=[],
        exec_start=NEW_EXEC,
    )
    switch = {"exec_start": NEW_EXEC, "kernel_log_mark": mark}
    return opts, server, switch


def _baseline(rate: float = 89.5) -> dict:
    return {"profiles": {"plain": {"server_args": [], "trials": trials(rate, 5), "probe": PROBE, "load": {}}}}


def _verify(host, opts, switch, baseline=None):
    return verify.verify(
        host,
        opts,
        run_id="r1",
        baseline=baseline or _baseline(),
        restart_plan=restarts.plan_upgrade(PROFILES, running=None, baseline_recorded=True),
        switch=switch,
        manifest={"service": {"exec_start": NEW_EXEC.replace("-cu130", ""), "user": "root"}},
        batches=BATCHES,
        prompts=PROMPTS,
    )


def test_a_new_stack_as_fast_and_a_clean_kernel_log_is_kept_and_watched_before_the_next_batch(tmp_path):
    opts, server, switch = _setup(tmp_path)
    record = _verify(server.fake(), opts, switch)
    assert (
        record["rollback"] is False and record["regressed"] is False and record["reason_to_roll_back"] == ""
    )
    assert record["verdict"]["decisions"]["plain"]["verdict"] == "keep"
    assert record["kernel_log_read"] == {
        "lines": [LOADING],
        "since": LOADING,
        "marker_found": None,
        "error": None,
    }
    assert record["kernel_log"]["gated"] is False
    assert record["batch_soak"] == {
        "watch": True,
        "seconds": 300,
        "why": "watched 300 s in service before the next batch starts",
    }
    assert record["measured"]["phase"] == "candidate" and record["restarts"] == 0
    assert ("trials", "plain") in server.log


def test_a_slower_new_stack_is_rolled_back_with_the_gates_reason(tmp_path):
    opts, server, switch = _setup(tmp_path, rate=80.0)
    record = _verify(server.fake(), opts, switch)
    assert record["regressed"] is True and record["rollback"] is True
    assert record["reason_to_roll_back"] == f"The new stack fails the gate: {record['reason']}"
    assert record["reason"].startswith("plain: median 80.")
    assert record["batch_soak"]["watch"] is False


def test_a_gpu_fallen_off_the_bus_after_the_switch_rolls_back_however_fast(tmp_path):
    opts, server, switch = _setup(tmp_path, after_switch=(XID79,))
    record = _verify(server.fake(), opts, switch)
    assert record["regressed"] is False and record["rollback"] is True
    assert record["kernel_log"]["gated"] is True and record["kernel_log_read"]["lines"] == [LOADING, XID79]
    assert record["reason_to_roll_back"] == f"The new stack fails the gate: {record['kernel_log']['reason']}"
    assert "Xid 79 after the switch" in record["reason_to_roll_back"]


def test_check_mode_measures_and_reads_nothing(tmp_path):
    opts, server, switch = _setup(tmp_path)
    host = server.fake(check_mode=True)
    record = _verify(host, opts, switch)
    assert host.calls == [] and record["measured"] is None and record["rollback"] is False
    assert record["batch_soak"] == {"watch": False, "seconds": 0, "why": "not measured this run"}


def test_a_stack_that_cannot_be_measured_fails_with_the_kernel_log_since_the_switch(tmp_path):
    opts, server, switch = _setup(tmp_path, after_switch=(XID79,))
    server.profiles["plain"]["fail"] = {"probe": "HTTP Error 502: Bad Gateway"}
    with pytest.raises(StepFailed) as failed:
        _verify(server.fake(), opts, switch)
    assert (
        failed.value.msg
        == "gpu-node-01: the correctness probe of plain/candidate failed: HTTP Error 502: Bad Gateway"
    )
    assert failed.value.record["kernel_log_read"]["lines"] == [LOADING, XID79]
    assert failed.value.record["restarts"] == 0


def test_the_gate_reads_its_tolerance_from_the_options(tmp_path):
    candidate = {"plain": {"trials": trials(86.0, 5), "probe": PROBE, "load": {}, "soak": {}}}
    before = _baseline()["profiles"]
    given = {"cuda13_profiles": PROFILES, "verify_throughput_soak_requests": 0}
    loose = verify.gate(options(tmp_path, **given, verify_throughput_tolerance_pct=5), candidate, before)
    strict = verify.gate(options(tmp_path, **given, verify_throughput_tolerance_pct=3), candidate, before)
    assert loose["regressed"] is False and strict["regressed"] is True
    assert "tolerance -3 %" in strict["reason"]


# --- the soak between batches -------------------------------------------------------------------


def _watch(*checks: dict) -> dict:
    """A watch record of hostscripts/completion_bench.py (tests/test_batch_soak.py's shape)."""
    return {
        "seconds": 300,
        "interval_s": 15,
        "deadline_s": 60.0,
        "max_new_tokens": 32,
        "watched_s": 300.0,
        "checks": list(checks),
        "unit_before": UNIT,
        "unit_after": UNIT,
        "journal_tail": ["scheduler: no progress"],
    }


def _served(at: float) -> dict:
    return {"at_s": at, "outcome": "served", "detail": "", "output_ids": list(REFERENCE)}


def _soak(host, opts, switch, watch_plan=None):
    kept = {
        "batch_soak": watch_plan or {"watch": True, "seconds": 300, "why": "watched"},
        "measured": {"results": {"plain": {"probe": PROBE}}},
    }
    return verify.soak_between_batches(
        host, opts, verify=kept, baseline=_baseline(), switch=switch, prompts=PROMPTS
    )


def test_a_host_that_answers_every_check_is_healthy(tmp_path):
    opts, server, switch = _setup(tmp_path)
    server.watch = _watch(_served(0), _served(15))
    host = server.fake()
    soaked = _soak(host, opts, switch)
    assert soaked["healthy"] is True and soaked["rollback"] is False and soaked["msg"] == ""
    assert (soaked["checks"], soaked["served"], soaked["output_compared"]) == (2, 2, True)
    (asked,) = host.called("cuda13_bench")
    assert (asked["mode"], asked["watch_seconds"], asked["watch_interval_s"]) == ("watch", 300, 15)
    assert asked["unit"] == "sglang.service" and asked["url"] == "http://127.0.0.1:30000"
    assert asked["auth_unit"] == "sglang.service"  # the key of its server, read on the host
    assert soaked["kernel_log"]["gated"] is False


def test_a_host_that_stalls_in_service_is_rolled_back_saying_when(tmp_path):
    opts, server, switch = _setup(tmp_path)
    server.watch = _watch(_served(0), {"at_s": 15.2, "outcome": "stall", "detail": "", "output_ids": []})
    soaked = _soak(server.fake(), opts, switch)
    assert soaked["rollback"] is True and soaked["outcome"] == "stall"
    assert soaked["msg"] == (
        "degraded in service 300 s into the 300 s soak between batches (cuda13_soak_seconds):"
        " check 2 at 15 s got no answer within 60 s"
    )


def test_a_host_not_planned_for_a_watch_or_in_check_mode_is_not_watched(tmp_path):
    opts, server, switch = _setup(tmp_path)
    host = server.fake()
    plan = {"watch": False, "seconds": 300, "why": "the last batch: no batch starts after it"}
    assert _soak(host, opts, switch, plan) == {
        "healthy": True,
        "outcome": "not watched",
        "why": "the last batch: no batch starts after it",
        "rollback": False,
        "msg": "",
    }
    checking = server.fake(check_mode=True)
    assert _soak(checking, opts, switch)["outcome"] == "not watched"
    assert host.calls == [] and checking.calls == []


def _driver_after(tmp_path: Path, rate: float):
    """The driver window's measurement (cuda13_upgrade.steps.driver_move.measure_after): the old
    stack, unchanged, measured on the new driver against its baseline on the old one."""
    from stepdoubles import OLD_EXEC, OLD_VENV

    from cuda13_upgrade.steps import driver_move

    opts, _, switch = _setup(tmp_path)
    server = Server(
        tmp_path,
        {"plain": {"args": [], "trials": trials(rate, 5), "probe": PROBE}},
        running=[],
        exec_start=OLD_EXEC,
    )
    host = server.fake()
    record = driver_move.measure_after(
        host,
        {**opts, "cuda13_old_venv": OLD_VENV},
        run_id="r1",
        baseline={"baseline": _baseline()},
        manifest={"service": {"exec_start": OLD_EXEC, "user": "root"}, "venv": {"path": OLD_VENV}},
        moved={"kernel_log_mark": switch["kernel_log_mark"], "check": {"driver_version": "580.142"}},
        prompts=PROMPTS,
    )
    return record, host, opts


def test_the_old_stack_slower_on_the_new_driver_rolls_the_driver_back(tmp_path):
    record, host, opts = _driver_after(tmp_path, rate=80.0)
    assert record["rollback"] is True and record["kept"] is False
    assert record["reason_to_roll_back"].startswith(
        "The stack on the new driver fails the gate: plain: median 80."
    )
    assert not (Path(opts["cuda13_state_dir"]) / "baseline.json").exists()


def test_the_old_stack_as_fast_on_the_new_driver_keeps_it_and_becomes_the_stacks_baseline(tmp_path):
    import json

    record, host, opts = _driver_after(tmp_path, rate=89.5)
    assert record["rollback"] is False and record["kept"] is True and record["baseline_recorded"] is True
    written = json.loads((Path(opts["cuda13_state_dir"]) / "baseline.json").read_text())
    assert written["driver_version"] == "580.142" and set(written["profiles"]) == {"plain"}
    assert restarts.recorded_baseline(written, PROFILES, max_age_hours=1, now=written["taken_at_epoch"] + 1)[
        "usable"
    ]
    assert any(line.startswith("driver window gate: plain: median 89.") for line in host.told)


def test_the_driver_windows_measurement_is_a_series_of_its_own_beside_the_baseline(tmp_path):
    """The bench appends each phase's trials to one file per phase and profile and returns the
    run's series whole: the measurement on the new driver must not read the old driver's trials."""
    _, host, _ = _driver_after(tmp_path, rate=89.5)
    (bench,) = [a for a in host.called("cuda13_bench") if a["mode"] == "trials"]
    assert bench["series"] == "r1/driver-580.142" and bench["append"].endswith("/baseline-plain.json")
