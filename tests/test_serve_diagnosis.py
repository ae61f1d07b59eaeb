"""The journal's cause and remedy where a server fails at first use: the gate's probe and trials
(cuda13_upgrade.steps.measure), the soak (cuda13_upgrade.soak), the soak between batches
(cuda13_upgrade.batch_soak), and the journal the host's side reads for them
(hostscripts/service_cycle.py). The journal lines are the real texts of
tests/fixtures/failures/SOURCES.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from stepdoubles import NEW_EXEC, NEW_VENV, OLD_EXEC, OLD_VENV, Server, options, trials
from test_batch_soak import REFERENCE, UNIT

from cuda13_upgrade import batch_soak, soak
from cuda13_upgrade.hostscripts import service_cycle
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import StepFailed
from cuda13_upgrade.steps.serve import stack_context

FAILURES = Path(__file__).resolve().parent / "fixtures" / "failures"
PTXAS = (FAILURES / "ptxas-block-scale-sm120.txt").read_text().splitlines()
NO_ARCH = (FAILURES / "flashinfer-sm12-nvcc-too-old.txt").read_text().splitlines()
PROFILES = [{"name": "plain", "server_args": []}]
PROMPTS = {"seed": 1, "prompts": ["p"]}


def _phase(tmp_path, server, phase, stack):
    opts = options(
        tmp_path,
        cuda13_profiles=PROFILES,
        verify_throughput_min_trials=3,
        verify_throughput_max_trials=3,
        verify_throughput_probe=True,
        verify_throughput_soak_requests=0,
    )
    return measure.phase(
        server.fake(),
        phase=phase,
        options=opts,
        profiles=PROFILES,
        venv=NEW_VENV if phase == "candidate" else OLD_VENV,
        exec_start=NEW_EXEC if phase == "candidate" else OLD_EXEC,
        run_id="r1",
        baseline={"plain": trials(89.5)},
        baseline_probe={"plain": []},
        prompts=PROMPTS,
        stack=stack,
    )


def test_a_probe_that_kills_the_server_at_first_use_says_the_jit_s_cause(tmp_path):
    # The flashinfer JIT build at the first request fails (antirez/ds4#679's ptxas lines in the journal).
    answer = {"args": [], "trials": trials(92.0), "fail": {"probe": "cannot reach the server at http://x"}}
    server = Server(tmp_path, {"plain": answer}, running=[], exec_start=NEW_EXEC, journal=PTXAS)
    opts = options(tmp_path, cuda13_toolkit_release="13.0", cuda13_new_venv=NEW_VENV)
    with pytest.raises(StepFailed) as failed:
        _phase(tmp_path, server, "candidate", stack_context(opts, "new"))
    lines = failed.value.msg.splitlines()
    assert lines[0] == (
        "gpu-node-01: the correctness probe of plain/candidate failed: cannot reach the server at http://x"
    )
    assert lines[1].startswith("Cause: ptxas rejected ds4_mmq.ptx compiled for .target 'sm_120'")
    assert 'FLASHINFER_CUDA_ARCH_LIST="12.0a"' in lines[1]
    assert lines[2:] == ["Last lines of its journal:", *PTXAS]
    assert failed.value.record == {"restarts": 0, "leftovers": []}
    read = [a for a in server.host.called("cuda13_service") if a.get("journal")]
    assert read == [{"unit": "sglang.service", "restart": "never", "url": "", "journal": True}]


def test_trials_that_fail_on_the_old_stack_point_at_the_old_stack_s_toolkit(tmp_path):
    answer = {"args": [], "trials": trials(89.5), "fail": {"trials": "unexpected answer"}}
    server = Server(tmp_path, {"plain": answer}, running=[], journal=NO_ARCH)
    opts = options(tmp_path, cuda13_toolkit_release="13.0", cuda13_old_venv=OLD_VENV)
    manifest = {"venv": {"path": OLD_VENV}, "cuda": {"nvcc": {"release": "12.8", "version": "12.8.93"}}}
    with pytest.raises(StepFailed) as failed:
        _phase(tmp_path, server, "baseline", stack_context(opts, "old", manifest))
    assert "/usr/local/cuda-12.8 (the CUDA 12.8 toolkit of the old stack)" in failed.value.msg
    assert "Cause: flashinfer's JIT found no GPU architecture to compile for" in failed.value.msg


def test_a_failed_request_with_an_empty_journal_keeps_its_message(tmp_path):
    answer = {"args": [], "trials": trials(92.0), "fail": {"probe": "HTTP Error 500: Internal Server Error"}}
    server = Server(tmp_path, {"plain": answer}, running=[], exec_start=NEW_EXEC)
    with pytest.raises(StepFailed) as failed:
        _phase(tmp_path, server, "candidate", None)
    assert failed.value.msg == (
        "gpu-node-01: the correctness probe of plain/candidate failed: HTTP Error 500: Internal Server Error"
    )


def test_stack_context_follows_the_snapshot_for_the_old_stack_and_the_options_for_the_new():
    opts = {"cuda13_toolkit_release": "13.0", "cuda13_new_venv": NEW_VENV, "cuda13_old_venv": "/srv/old"}
    manifest = {"venv": {"path": OLD_VENV}, "cuda": {"nvcc": {"release": "12.8"}}}
    assert stack_context(opts, "old", manifest) == {
        "stack": "old",
        "stack_cuda": "12.8",
        "target_cuda": "13.0",
        "venv": OLD_VENV,
    }
    # no nvcc in the snapshot: the old stack's release is not known (never the target's)
    assert (
        stack_context(opts, "old", {})["stack_cuda"] == ""
        and stack_context(opts, "old")["venv"] == "/srv/old"
    )
    assert stack_context(opts, "new") == {
        "stack": "new",
        "stack_cuda": "13.0",
        "target_cuda": "13.0",
        "venv": NEW_VENV,
    }
    with pytest.raises(ValueError, match="'both'"):
        stack_context(opts, "both")


def test_a_failed_soak_s_reason_ends_with_the_journal_s_cause():
    record = {
        "requests": 64,
        "served": 0,
        "deadline_s": 30.0,
        "failures": [{"request": 1, "outcome": "error", "detail": "HTTP 500"}],
        "unit_before": UNIT,
        "unit_after": UNIT,
        "journal_tail": NO_ARCH,
    }
    judged = soak.judge(record, profile="plain", context={"stack": "new", "stack_cuda": "13.0"})
    assert judged["reason"].startswith(
        "plain: the soak served 0 of 64 requests; request 1 got an error (HTTP 500); cause: flashinfer's JIT"
    )
    assert "; fix: point the service's CUDA_HOME and PATH at /usr/local/cuda-13.0" in judged["reason"]
    unknown = soak.judge({**record, "journal_tail": ["scheduler: no progress"]}, profile="plain")
    assert unknown["reason"].endswith("request 1 got an error (HTTP 500)")


def test_a_host_degraded_between_batches_says_the_cause_of_its_journal():
    record = {
        "seconds": 60,
        "deadline_s": 60.0,
        "watched_s": 20.0,
        "checks": [{"at_s": 15.0, "outcome": "error", "detail": "HTTP 500", "output_ids": []}],
        "unit_before": UNIT,
        "unit_after": UNIT,
        "journal_tail": PTXAS,
    }
    judged = batch_soak.verdict(record, reference_ids=[REFERENCE], context={"stack": "new"})
    assert judged["healthy"] is False
    assert "check 1 at 15 s got an error (HTTP 500); cause: ptxas rejected ds4_mmq.ptx" in judged["reason"]


def test_the_host_s_side_reads_the_journal_when_asked(monkeypatch):
    monkeypatch.setattr(service_cycle, "journal_tail", lambda unit, lines: [f"{unit}: {lines} lines"])
    asked, ok = service_cycle.cycle("sglang.service", restart="never", journal_too=True)
    assert ok and asked["journal"] == ["sglang.service: 30 lines"]
    plain, ok = service_cycle.cycle("sglang.service", restart="never")
    assert ok and plain["journal"] == []
