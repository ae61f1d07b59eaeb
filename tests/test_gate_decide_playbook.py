"""roles/verify_throughput/tasks/decide.yml on localhost: which checks roll back, with which reason.

The decision (probe, accept length, load, throughput, speculative gain: one call of
cuda13_gate_verdict) runs in ansible-playbook on recorded trial shapes: trials at the sandbox's rates and probe outputs
from the simulated server's greedy tokens (same, garbage, drift stacks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from playbook import run_playbook

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sandbox" / "sglang-src" / "python"))
from sglang.srt import simulation  # noqa: E402

PROMPTS = json.loads((REPO / "roles" / "verify_throughput" / "files" / "prompts.json").read_text())[
    "prompts"
][:8]


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


def _decide(
    tmp_path: Path,
    *,
    probe_new: list[dict],
    rate_new: float = 92.0,
    accept_new: int | None = None,
    extra: dict | None = None,
) -> dict:
    profiles = [{"name": "plain", "server_args": []}]
    old_probe = _probe(verify_ct=None if accept_new is None else 10)
    if accept_new is not None:
        probe_new = [{**o, "spec_verify_ct": accept_new} for o in probe_new]
    facts = {
        "verify_throughput_profiles": profiles,
        "verify_throughput_baseline": {"plain": _trials(89.5)},
        "verify_throughput_baseline_probe": {"plain": old_probe},
        "verify_throughput_results": {
            "candidate": {"plain": {"trials": _trials(rate_new), "probe": probe_new, "load": {}}}
        },
        "verify_throughput_min_trials": 5,
        **(extra or {}),
    }
    # Every profile soaked (verify_throughput_soak_requests: 64 by default), served all.
    for measured in facts["verify_throughput_results"]["candidate"].values():
        measured.setdefault("soak", _soak(64))
    (tmp_path / "vars.json").write_text(json.dumps(facts))
    out = tmp_path / "decision.json"
    playbook = tmp_path / "decide.yml"
    playbook.write_text(
        f"""---
- hosts: all
  gather_facts: false
  tasks:
    # The options as the preflight validates and keeps them (nvidia_driver_check_options).
    - ansible.builtin.include_role:
        name: nvidia_driver_check
        tasks_from: options
    - ansible.builtin.include_role:
        name: verify_throughput
        tasks_from: decide
    - ansible.builtin.copy:
        dest: {out}
        content: "{{{{ {{'regressed': verify_throughput_regressed, 'reason': verify_throughput_reason,
                        'probe': verify_throughput_probe_results,
                        'accept_length': verify_throughput_accept_length,
                        'speculative': verify_throughput_speculative,
                        'soak': verify_throughput_soak}} | to_json }}}}"
        mode: "0644"
"""
    )
    proc = run_playbook(playbook, "-e", f"@{tmp_path / 'vars.json'}", roles=True, filters=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_faster_garbage_regresses_with_the_output_reason(tmp_path):
    decision = _decide(tmp_path, probe_new=_probe("garbage"), rate_new=97.0)
    assert decision["regressed"] is True
    assert decision["reason"].startswith(
        "plain: output differs from the old stack: 0 of 8 probe prompts agree"
    )
    assert "not slower" not in decision["reason"]


def test_numeric_drift_at_the_same_rate_is_kept(tmp_path):
    decision = _decide(tmp_path, probe_new=_probe("drift", after=12))
    assert decision["regressed"] is False
    assert "not slower" in decision["reason"]
    assert decision["probe"]["plain"]["passed"] is True


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
        extra={
            "verify_throughput_probe": False,
            "cuda13_profiles": profiles,
            "verify_throughput_profiles": profiles,
            "verify_throughput_baseline": {"plain": _trials(89.5), "eagle3": _trials(54.1)},
            "verify_throughput_results": {
                "candidate": {
                    "plain": {"trials": _trials(92.0), "probe": [], "load": {}},
                    "eagle3": {"trials": _trials(90.0), "probe": [], "load": {}},
                }
            },
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
        extra={
            "verify_throughput_results": {
                "candidate": {
                    "plain": {
                        "trials": _trials(92.0),
                        "probe": _probe(),
                        "load": {},
                        "soak": _soak(3, (stall,)),
                    }
                }
            }
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
        extra={
            "verify_throughput_soak_requests": 0,
            "verify_throughput_results": {
                "candidate": {"plain": {"trials": _trials(92.0), "probe": _probe(), "load": {}, "soak": {}}}
            },
        },
    )
    assert decision["regressed"] is False and decision["soak"] == {}
