"""The action cuda13_verify on localhost: which checks roll back, with which reason.

The gate (probe, accept length, load, throughput, speculative gain, soak: one call of
``cuda13_upgrade.steps.verify.gate``) runs in ansible-playbook, inside the action that measures
the new stack: the service and the benchmark are the stand-ins of tests/servedouble.py, which
answer with recorded trial shapes: trials at the sandbox's rates and probe outputs from the
simulated server's greedy tokens (same, garbage, drift stacks). The options are the validated
record of ``cuda13_options``, from the values given with -e.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import servedouble
from playbook import run_playbook

from cuda13_upgrade import restarts

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sandbox" / "sglang-src" / "python"))
from sglang.srt import simulation  # noqa: E402

PROMPTS = json.loads((REPO / "roles" / "verify_throughput" / "files" / "prompts.json").read_text())[
    "prompts"
][:8]
NEW_VENV = "/opt/ml-env-cu130"
EXEC_START = f"{NEW_VENV}/bin/python -m sglang.launch_server --model-path /models/m --port 30000"
PLAIN = [{"name": "plain", "server_args": []}]


def _probe(mode: str = "same", after: int = 0, verify_ct: int | None = None) -> list[dict]:
    return [
        {
            "prompt": p,
            "output_ids": simulation.greedy_token_ids(p, 32, mode, after),
            "text": "",
            "completion_tokens": 32,
            "spec_verify_ct": verify_ct,
        }
        for p in PROMPTS
    ]


def _trials(rate: float) -> list[dict]:
    return [{"output_tok_s": rate * f, "decode_tok_s": rate * f} for f in (0.99, 1.0, 1.01, 1.0, 0.995)]


def _soak(served: int, failures: tuple = ()) -> dict:
    """A soak record of hostscripts/completion_bench.py (64 requests, 8 at once, 30 s each)."""
    return {
        "requests": 64,
        "concurrency": 8,
        "deadline_s": 30.0,
        "max_tokens": 64,
        "served": served,
        "seconds": 5.6,
        "failures": list(failures),
        "unit_before": {},
        "unit_after": {},
        "journal_tail": [],
    }


PLAY = """---
- hosts: all
  gather_facts: false
  tasks:
    - name: Check every option's value
      cuda13_options: {{}}
    - name: Measure the new stack and decide
      cuda13_verify:
        options: "{{{{ cuda13_options }}}}"
        run_id: r1
        snapshot: {{manifest: {{service: {{exec_start: "", user: ""}}}}}}
        baseline: "{{{{ test_baseline }}}}"
        switch: {{exec_start: "{exec_start}", kernel_log_mark: null}}
      register: __verify
    - name: Keep the record
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ __verify | to_json }}}}"
        mode: "0644"
"""


def _decide(
    tmp_path: Path,
    *,
    probe_new: list[dict],
    rate_new: float = 92.0,
    accept_new: int | None = None,
    profiles: list[dict] | None = None,
    baseline: dict | None = None,
    candidate: dict | None = None,
    extra: dict | None = None,
) -> dict:
    """Run cuda13_verify with the old stack's ``baseline`` (``{profile: trials}``) and the new
    stack's answers ``candidate`` (``{profile: {"trials", "probe", "load", "soak"}}``); returns
    ``{"regressed", "reason", "probe", "accept_length", "speculative", "soak", "rollback",
    "reason_to_roll_back"}`` of its record."""
    profiles = profiles or PLAIN
    old_probe = _probe(verify_ct=None if accept_new is None else 10)
    if accept_new is not None:
        probe_new = [{**o, "spec_verify_ct": accept_new} for o in probe_new]
    baseline = baseline or {"plain": _trials(89.5)}
    candidate = candidate or {"plain": {"trials": _trials(rate_new), "probe": probe_new, "load": {}}}
    # Every profile soaked (verify_throughput_soak_requests: 64 by default), served all.
    for measured in candidate.values():
        measured.setdefault("soak", _soak(64))
    plan = restarts.plan_upgrade(profiles, running=None, baseline_recorded=True)
    values = {
        "cuda13_state_dir": str(tmp_path / "state"),
        "cuda13_reports_dir": str(tmp_path / "reports"),
        "cuda13_new_venv": NEW_VENV,
        "cuda13_profiles": profiles,
        "verify_throughput_min_trials": 5,
        **(extra or {}),
        "test_baseline": {
            "baseline": {
                "profiles": {
                    name: {"trials": trials, "probe": old_probe, "load": {}}
                    for name, trials in baseline.items()
                }
            },
            "restart_plan": plan,
        },
    }
    (tmp_path / "vars.json").write_text(json.dumps(values))
    by_name = {p["name"]: p for p in profiles}
    env = servedouble.library(
        tmp_path,
        {
            name: {**answer, "args": restarts.profile_args(by_name[name], "candidate")}
            for name, answer in candidate.items()
        },
        # The switch started the new stack into the candidate phase's first profile.
        running=plan["switch_args"],
    )
    out = tmp_path / "verify.json"
    playbook = tmp_path / "verify.yml"
    playbook.write_text(PLAY.format(exec_start=EXEC_START, out=out))
    proc = run_playbook(playbook, "-e", f"@{tmp_path / 'vars.json'}", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    verdict = record["verdict"]
    return {
        "regressed": record["regressed"],
        "reason": record["reason"],
        "probe": verdict["probe"],
        "accept_length": verdict["accept_length"],
        "speculative": verdict["speculative"],
        "soak": verdict["soak"],
        "rollback": record["rollback"],
        "reason_to_roll_back": record["reason_to_roll_back"],
    }


def test_faster_garbage_regresses_with_the_output_reason(tmp_path):
    decision = _decide(tmp_path, probe_new=_probe("garbage"), rate_new=97.0)
    assert decision["regressed"] is True
    assert decision["reason"].startswith(
        "plain: output differs from the old stack: 0 of 8 probe prompts agree"
    )
    assert "not slower" not in decision["reason"]
    # The play's fail task rolls the host back with this message (roles/upgrade_host/tasks/main.yml).
    assert decision["rollback"] is True
    assert decision["reason_to_roll_back"] == f"The new stack fails the gate: {decision['reason']}"


def test_numeric_drift_at_the_same_rate_is_kept(tmp_path):
    decision = _decide(tmp_path, probe_new=_probe("drift", after=12))
    assert decision["regressed"] is False
    assert "not slower" in decision["reason"]
    assert decision["probe"]["plain"]["passed"] is True
    assert decision["rollback"] is False and decision["reason_to_roll_back"] == ""


@pytest.mark.parametrize(("verify_ct", "regressed"), [(32, True), (10, False)])
def test_accept_length_collapse_regresses(tmp_path, verify_ct, regressed):
    decision = _decide(tmp_path, probe_new=_probe(), accept_new=verify_ct)
    assert decision["regressed"] is regressed
    if regressed:
        assert "plain: speculative accept length collapsed to 1.00 on the new stack" in decision["reason"]
    assert decision["accept_length"]["plain"]["passed"] is (not regressed)


def test_without_the_probe_garbage_is_not_compared_and_speculative_gain_decides(tmp_path):
    profiles = [
        {"name": "plain", "server_args": []},
        {"name": "eagle3", "server_args": ["--speculative-algorithm", "EAGLE3"]},
    ]
    decision = _decide(
        tmp_path,
        probe_new=_probe("garbage"),
        profiles=profiles,
        baseline={"plain": _trials(89.5), "eagle3": _trials(54.1)},
        candidate={
            "plain": {"trials": _trials(92.0), "probe": _probe("garbage"), "load": {}},
            "eagle3": {"trials": _trials(90.0), "probe": _probe("garbage"), "load": {}},
        },
        extra={
            "verify_throughput_probe": False,
            "verify_throughput_require_speculative_gain": [{"speculative": "eagle3", "plain": "plain"}],
        },
    )
    assert decision["probe"] == {}
    assert decision["regressed"] is True
    assert decision["speculative"]["eagle3"]["beats"] is False
    assert decision["reason"] == "speculative decoding (eagle3) does not beat plain decode on the new stack"


def test_a_stalled_soak_rolls_back_first_with_the_count_served(tmp_path):
    stall = {"request": 4, "outcome": "stall", "detail": "", "tokens": 0, "seconds": 30.0}
    decision = _decide(
        tmp_path,
        probe_new=_probe(),
        candidate={
            "plain": {"trials": _trials(92.0), "probe": _probe(), "load": {}, "soak": _soak(3, (stall,))}
        },
    )
    assert decision["regressed"] is True
    assert (
        decision["reason"] == "plain: the soak served 3 of 64 requests; request 4 got no answer within 30 s"
    )
    assert decision["soak"]["plain"]["outcome"] == "stall"


def test_without_a_soak_no_soak_record_is_read(tmp_path):
    decision = _decide(
        tmp_path,
        probe_new=_probe(),
        candidate={"plain": {"trials": _trials(92.0), "probe": _probe(), "load": {}, "soak": {}}},
        extra={"verify_throughput_soak_requests": 0},
    )
    assert decision["regressed"] is False and decision["soak"] == {}
    # No soak asked: no load run either (no load metrics are on).
    assert not [c for c in servedouble.calls(tmp_path) if c.get("mode") == "load"]


def test_each_profile_is_measured_on_a_server_that_runs_it(tmp_path):
    profiles = [
        {"name": "plain", "server_args": []},
        {"name": "eagle3", "server_args": ["--speculative-algorithm", "EAGLE3"]},
    ]
    _decide(
        tmp_path,
        probe_new=_probe(),
        profiles=profiles,
        baseline={"plain": _trials(89.5), "eagle3": _trials(54.1)},
        candidate={
            "plain": {"trials": _trials(92.0), "probe": _probe(), "load": {}},
            "eagle3": {"trials": _trials(96.1), "probe": _probe(), "load": {}},
        },
    )
    served = [
        (c["module"], c.get("restart"), c.get("args"), c.get("mode"), c.get("profile"))
        for c in servedouble.calls(tmp_path)
    ]
    # The restart plan: eagle3 first (the switch started it), plain after one restart; plain's own
    # command is what the service keeps serving, so no restore.
    assert served == [
        ("cuda13_service", "never", ["--speculative-algorithm", "EAGLE3"], None, None),
        ("cuda13_bench", None, None, "probe", "eagle3"),
        ("cuda13_bench", None, None, "trials", "eagle3"),
        ("cuda13_bench", None, None, "load", "eagle3"),
        ("cuda13_service", "always", [], None, None),
        ("cuda13_bench", None, None, "probe", "plain"),
        ("cuda13_bench", None, None, "trials", "plain"),
        ("cuda13_bench", None, None, "load", "plain"),
    ]
