"""roles/verify_throughput on its own reads its documented inputs (action cuda13_measure).

The role's options verify_throughput_plan, verify_throughput_baseline and
verify_throughput_baseline_probe were documented but the action never gave them to
cuda13_upgrade.steps.measure.phase: a candidate phase run through the role was always refused
for want of the old stack's trials, and a given plan was replaced by one planned from what runs.
Here the real action's ``run_step`` runs against tests/stepdoubles.py's server.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from stepdoubles import NEW_EXEC, NEW_VENV, Server, options, trials

from cuda13_upgrade import restarts
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import StepFailed

REPO = Path(__file__).resolve().parents[1]
PROFILES = [{"name": "plain", "server_args": []}]
BASELINE = {"plain": [{"output_tok_s": 89.5}] * 7}


def _action():
    spec = importlib.util.spec_from_file_location(
        "cuda13_measure_action", REPO / "action_plugins" / "cuda13_measure.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return object.__new__(module.ActionModule)  # run_step needs no task: options are given


def _run(tmp_path: Path, **given):
    server = Server(
        tmp_path, {"plain": {"args": [], "trials": trials(92.0)}}, running=[], exec_start=NEW_EXEC
    )
    opts = options(
        tmp_path,
        cuda13_profiles=PROFILES,
        verify_throughput_min_trials=3,
        verify_throughput_max_trials=7,
        verify_throughput_probe=False,
        verify_throughput_soak_requests=0,
        **given,
    )
    args = {
        "options": opts,
        "run_id": "r1",
        "phase": "candidate",
        "profiles": PROFILES,
        "exec_start": NEW_EXEC,
        "venv": NEW_VENV,
    }
    return _action().run_step(server.fake(), args, {}), server


def test_role_inputs_are_the_three_options_or_none():
    assert measure.role_inputs({}) == {"plan": None, "baseline": None, "baseline_probe": None}
    plan = {"steps": [{"profile": "plain", "restart": True}], "restore": False}
    given = {
        "verify_throughput_plan": plan,
        "verify_throughput_baseline": BASELINE,
        "verify_throughput_baseline_probe": {"plain": ["out"]},
    }
    assert measure.role_inputs(given) == {
        "plan": plan,
        "baseline": BASELINE,
        "baseline_probe": {"plain": ["out"]},
    }


def test_the_candidate_phase_measures_against_verify_throughput_baseline(tmp_path):
    record, _ = _run(tmp_path, verify_throughput_baseline=BASELINE)
    assert list(record["measured"]["results"]) == ["plain"]
    assert record["measured"]["results"]["plain"]["summary"]["median"] == pytest.approx(92.0, abs=1.0)


def test_without_verify_throughput_baseline_the_candidate_phase_is_refused_naming_it(tmp_path):
    with pytest.raises(StepFailed) as failed:
        _run(tmp_path, verify_throughput_baseline={})
    assert failed.value.msg == (
        "gpu-node-01: cannot measure the candidate phase: in the candidate phase"
        " verify_throughput_baseline must hold every profile: it has [], without ['plain']"
    )


def test_verify_throughput_plan_is_the_plan_measured(tmp_path):
    plan = restarts.plan_phase(PROFILES, "candidate", running=None, end_on_own_command=False)
    record, _ = _run(tmp_path, verify_throughput_baseline=BASELINE, verify_throughput_plan=plan)
    assert record["measured"]["plan"] == plan
    assert record["measured"]["plan"] != restarts.plan_phase(
        PROFILES, "candidate", running=[], end_on_own_command=True
    )
