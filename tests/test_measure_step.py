"""Measuring one phase (cuda13_upgrade.steps.measure.phase, under the actions cuda13_measure,
cuda13_baseline, cuda13_verify and cuda13_rollback), without Ansible: tests/stepdoubles.py's server
answers for the service and the benchmark. The order of two hosts' plans measured at once is
tests/test_include_loop_order.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from stepdoubles import NEW_EXEC, NEW_VENV, OLD_EXEC, OLD_VENV, Server, options, trials

from cuda13_upgrade import restarts
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import StepFailed

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
PROFILES = [{"name": "plain", "server_args": []}, {"name": "eagle3", "server_args": EAGLE3}]
PROMPTS = {"seed": 1, "prompts": ["p"]}
BASELINE = {"plain": [{"output_tok_s": v} for v in (89.1, 89.5, 90.0, 89.5, 89.3, 89.7, 89.5)]}
# Candidate trials whose verdict is undecided after 3 and final after 4 (not slower) ...
SETTLES = [80.0, 95.0, 87.0, 88.5, 89.0, 89.2, 89.1]
# ... and undecided until the cap of 7 trials.
NOISY = [75.0, 99.0, 86.8, 86.0, 87.5, 90.0, 89.5]
SOAK_OK = {"requests": 64, "served": 64, "deadline_s": 60.0, "failures": []}
SOAK_STALLED = {
    "requests": 64,
    "served": 3,
    "deadline_s": 60.0,
    "failures": [{"request": 4, "outcome": "stall"}],
}


def _opts(tmp_path: Path, **given) -> dict:
    defaults = {
        "cuda13_profiles": PROFILES,
        "verify_throughput_min_trials": 3,
        "verify_throughput_max_trials": 7,
        "verify_throughput_probe": False,
        "verify_throughput_soak_requests": 0,
    }
    return options(tmp_path, **{**defaults, **given})


def _phase(host, opts, *, phase="candidate", profiles=PROFILES, plan=None, baseline=BASELINE, shown=None):
    return measure.phase(
        host,
        phase=phase,
        options=opts,
        profiles=profiles,
        venv=NEW_VENV if phase == "candidate" else OLD_VENV,
        exec_start=NEW_EXEC if phase == "candidate" else OLD_EXEC,
        run_id="r1",
        plan=plan,
        baseline=baseline,
        prompts=PROMPTS,
        on_trial=(lambda name, found: shown.append((name, len(found)))) if shown is not None else None,
    )


def _trials_of(values: list[float]) -> list[dict]:
    return [{"output_tok_s": v} for v in values]


def test_the_candidate_is_measured_one_trial_more_until_the_verdict_is_final(tmp_path):
    server = Server(
        tmp_path, {"plain": {"args": [], "trials": _trials_of(SETTLES)}}, running=[], exec_start=NEW_EXEC
    )
    shown: list = []
    record = _phase(server.fake(), _opts(tmp_path), profiles=PROFILES[:1], shown=shown)
    assert shown == [("plain", 3), ("plain", 4)]
    assert [t["output_tok_s"] for t in record["results"]["plain"]["trials"]] == SETTLES[:4]
    assert record["results"]["plain"]["summary"]["n"] == 4


def test_a_verdict_that_stays_undecided_stops_at_the_trial_cap(tmp_path):
    server = Server(
        tmp_path, {"plain": {"args": [], "trials": _trials_of(NOISY)}}, running=[], exec_start=NEW_EXEC
    )
    shown: list = []
    _phase(server.fake(), _opts(tmp_path), profiles=PROFILES[:1], shown=shown)
    assert shown == [("plain", n) for n in range(3, 8)]


def test_the_baseline_phase_takes_its_minimum_trials_once(tmp_path):
    server = Server(tmp_path, {"plain": {"args": [], "trials": _trials_of(NOISY)}}, running=[])
    shown: list = []
    record = _phase(
        server.fake(), _opts(tmp_path), phase="baseline", profiles=PROFILES[:1], baseline=None, shown=shown
    )
    assert shown == [("plain", 3)] and len(record["results"]["plain"]["trials"]) == 3


def test_without_a_plan_the_phase_starts_with_what_runs_and_ends_on_the_own_command(tmp_path):
    profiles = {
        "plain": {"args": [], "trials": trials(92.0)},
        "eagle3": {"args": EAGLE3, "trials": trials(96.1)},
    }
    server = Server(tmp_path, profiles, running=EAGLE3, exec_start=NEW_EXEC)
    record = _phase(server.fake(), _opts(tmp_path), baseline={**BASELINE, "eagle3": _trials_of([54.1] * 7)})
    assert record["plan"] == restarts.plan_phase(
        PROFILES, "candidate", running=EAGLE3, end_on_own_command=True
    )
    assert list(record["results"]) == ["eagle3", "plain"]
    assert server.restarts() == [[]] and server.running == [] and record["restarts"] == 1
    # The profile drop-in is gone: the service runs its own command again.
    assert not server.unit_file("/etc/systemd/system/sglang.service.d/60-cuda13-profile.conf").exists()
    eagle3 = record["results"]["eagle3"]
    assert eagle3["command"] == f"{NEW_EXEC} --speculative-algorithm EAGLE3 --speculative-num-steps 3"
    assert (eagle3["server_args"], eagle3["new_stack_args"], eagle3["method"]) == (EAGLE3, [], "builtin")


def test_the_load_metrics_and_the_soak_are_measured_where_on(tmp_path):
    load = {"ttft_ms": {"median": 41.2}}
    server = Server(
        tmp_path,
        {"plain": {"args": [], "trials": _trials_of(SETTLES), "load": load, "soak": SOAK_OK}},
        running=[],
        exec_start=NEW_EXEC,
    )
    host = server.fake()
    opts = _opts(tmp_path, verify_throughput_ttft_prompt_len=512, verify_throughput_soak_requests=64)
    record = _phase(host, opts, profiles=PROFILES[:1])
    (asked,) = [a for a in host.called("cuda13_bench") if a["mode"] == "load"]
    assert (asked["ttft_prompt_len"], asked["soak_requests"], asked["unit"]) == (512, 64, "sglang.service")
    # Every request of every measure sends the key of the unit's server, if it has one (the
    # module reads it on the host from the unit named here).
    assert {a["mode"]: a["auth_unit"] for a in host.called("cuda13_bench")} == {
        "trials": "sglang.service",
        "load": "sglang.service",
    }
    assert record["results"]["plain"]["load"] == load and record["results"]["plain"]["soak"] == SOAK_OK
    assert record["soak_failed"] is None
    # The baseline phase does not soak (verify_throughput_soak_baseline false).
    _phase(host, opts, phase="baseline", profiles=PROFILES[:1], baseline=None)
    assert [a for a in host.called("cuda13_bench") if a["mode"] == "load"][-1]["soak_requests"] == 0


def test_after_a_failed_soak_no_further_profile_is_measured_nor_the_own_command_restored(tmp_path):
    profiles = {
        "plain": {"args": [], "trials": trials(92.0), "soak": SOAK_OK},
        "eagle3": {"args": EAGLE3, "trials": trials(96.1), "soak": SOAK_STALLED},
    }
    server = Server(tmp_path, profiles, running=EAGLE3, exec_start=NEW_EXEC)
    opts = _opts(tmp_path, verify_throughput_soak_requests=64)
    baseline = {**BASELINE, "eagle3": _trials_of([54.1] * 7)}
    record = _phase(server.fake(), opts, baseline=baseline)
    assert record["soak_failed"] == "eagle3" and list(record["results"]) == ["eagle3"]
    assert server.restarts() == [] and server.running == EAGLE3


def test_a_candidate_without_the_old_stacks_trials_cannot_be_measured(tmp_path):
    server = Server(tmp_path, {"plain": {"args": [], "trials": trials(92.0)}}, running=[])
    host = server.fake()
    with pytest.raises(StepFailed) as failed:
        _phase(host, _opts(tmp_path))
    assert failed.value.msg == (
        "gpu-node-01: cannot measure the candidate phase: in the candidate phase"
        " verify_throughput_baseline must hold every profile: it has ['plain'], without ['eagle3']"
    )
    assert server.log == [("serve", [])]  # only what runs was read


def test_a_probe_that_fails_fails_the_phase_with_the_restarts_so_far(tmp_path):
    profiles = {
        "plain": {"args": [], "trials": trials(89.5)},
        "eagle3": {"args": EAGLE3, "fail": {"probe": "HTTP Error 500: Internal Server Error"}},
    }
    server = Server(tmp_path, profiles, running=[])
    with pytest.raises(StepFailed) as failed:
        _phase(server.fake(), _opts(tmp_path, verify_throughput_probe=True), phase="baseline", baseline=None)
    assert failed.value.msg == (
        "gpu-node-01: the correctness probe of eagle3/baseline failed: HTTP Error 500: Internal Server Error"
    )
    assert failed.value.record == {"restarts": 1, "leftovers": []}


def test_a_profile_the_server_does_not_start_into_fails_the_phase_counting_its_restart(tmp_path):
    left = [{"pid": 4242, "command": "python", "gpu_memory_mib": 512}]
    profiles = {"plain": {"args": [], "trials": trials(89.5)}, "eagle3": {"args": EAGLE3}}
    server = Server(tmp_path, profiles, running=[], leftovers=left)
    host = server.fake()
    server.start_error = "systemctl start sglang.service: exit status 1"
    with pytest.raises(StepFailed) as failed:
        _phase(host, _opts(tmp_path), phase="baseline", baseline=None)
    assert failed.value.msg.startswith(
        f"sglang.service (profile eagle3, baseline phase, {OLD_VENV}) did not start:"
        " systemctl start sglang.service: exit status 1."
    )
    assert failed.value.record == {"restarts": 1, "leftovers": left}


def test_results_by_picks_one_key_of_each_profile():
    record = {"results": {"plain": {"trials": [1], "probe": [2]}, "eagle3": {"trials": [3]}}}
    assert measure.results_by(record, "trials") == {"plain": [1], "eagle3": [3]}
    assert measure.results_by(record, "probe") == {"plain": [2], "eagle3": None}
    assert measure.results_by({}, "trials") == {}
