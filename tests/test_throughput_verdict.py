"""The gate's verdict over the new stack's profiles (throughput.gate_verdict)."""

import pytest

from cuda13_upgrade import throughput


def _trials(rate: float, factors=(0.99, 1.0, 1.01, 1.0, 0.995)) -> list[dict]:
    return [{"output_tok_s": rate * f, "decode_tok_s": rate * f} for f in factors]


def _probe(ids: list[int], verify_ct: int | None = None) -> list[dict]:
    return [
        {
            "prompt": f"p{i}",
            "output_ids": ids,
            "text": "",
            "completion_tokens": len(ids),
            "spec_verify_ct": verify_ct,
        }
        for i in range(4)
    ]


SAME = list(range(32))
GARBAGE = [1000 + i for i in range(32)]


def test_kept_profiles_give_every_throughput_reason_in_profile_order():
    verdict = throughput.gate_verdict(
        {"eagle3": {"trials": _trials(96.0)}, "plain": {"trials": _trials(92.0)}},
        {"plain": _trials(89.5), "eagle3": _trials(54.1)},
        profiles=["plain", "eagle3"],
    )
    assert verdict["regressed"] is False
    assert verdict["final"] is True
    assert list(verdict["decisions"]) == ["plain", "eagle3"]
    assert verdict["reason"] == (
        "plain: median 92.0 tok/s on the new stack vs 89.5 tok/s (+2.8 % ± 0.6 %, tolerance -3 %, "
        "5 vs 5 trials): not slower; "
        "eagle3: median 96.0 tok/s on the new stack vs 54.1 tok/s (+77.4 % ± 0.6 %, tolerance -3 %, "
        "5 vs 5 trials): not slower"
    )
    assert verdict["probe"] == verdict["accept_length"] == verdict["load"] == verdict["speculative"] == {}


def test_a_slower_profile_regresses_with_its_reason_only():
    verdict = throughput.gate_verdict(
        {"plain": {"trials": _trials(80.0)}, "fast": {"trials": _trials(100.0)}},
        {"plain": _trials(89.5), "fast": _trials(100.0)},
    )
    assert verdict["regressed"] is True
    assert verdict["final"] is True
    assert verdict["decisions"]["plain"]["verdict"] == "regressed"
    assert verdict["reason"] == (
        "plain: median 80.0 tok/s on the new stack vs 89.5 tok/s (-10.6 % ± 0.6 %, tolerance -3 %, "
        "5 vs 5 trials): regressed"
    )


def test_noisy_trials_below_the_cap_are_not_final():
    noisy = _trials(87.5, factors=(0.9, 1.1, 0.95, 1.05, 1.0))
    verdict = throughput.gate_verdict(
        {"plain": {"trials": noisy}}, {"plain": _trials(89.5)}, tolerance_pct=3.0, max_trials=21
    )
    assert verdict["final"] is False
    assert verdict["regressed"] is False
    assert verdict["reason"].endswith(": too noisy to decide, measuring more trials")
    at_cap = throughput.gate_verdict({"plain": {"trials": noisy}}, {"plain": _trials(89.5)}, max_trials=5)
    assert at_cap["final"] is True
    assert at_cap["reason"].endswith(": decided by the medians at the trial cap (keep)")


def test_the_retry_condition_and_the_decision_agree_on_one_profile():
    # profile.yml asks with one profile's trials, decide.yml with all of them.
    one = throughput.gate_verdict({"plain": {"trials": _trials(92.0)}}, {"plain": _trials(89.5)})
    both = throughput.gate_verdict(
        {"plain": {"trials": _trials(92.0), "probe": _probe(SAME)}, "other": {"trials": _trials(50.0)}},
        {"plain": _trials(89.5), "other": _trials(50.0)},
        profiles=["plain"],
        baseline_probe={"plain": _probe(SAME)},
    )
    assert one["decisions"]["plain"] == both["decisions"]["plain"]
    assert list(both["decisions"]) == ["plain"]


def test_wrong_output_comes_first_and_hides_the_throughput_reason():
    verdict = throughput.gate_verdict(
        {"plain": {"trials": _trials(97.0), "probe": _probe(GARBAGE)}},
        {"plain": _trials(89.5)},
        baseline_probe={"plain": _probe(SAME)},
    )
    assert verdict["regressed"] is True
    assert verdict["probe"]["plain"]["passed"] is False
    assert verdict["reason"].startswith(
        "plain: output differs from the old stack: 0 of 4 probe prompts agree"
    )
    assert "not slower" not in verdict["reason"]
    assert verdict["decisions"]["plain"]["verdict"] == "keep"


@pytest.mark.parametrize(("verify_ct", "regressed"), [(32, True), (10, False)])
def test_a_collapsed_accept_length_regresses(verify_ct, regressed):
    verdict = throughput.gate_verdict(
        {"plain": {"trials": _trials(92.0), "probe": _probe(SAME, verify_ct)}},
        {"plain": _trials(89.5)},
        baseline_probe={"plain": _probe(SAME, 10)},
    )
    assert verdict["regressed"] is regressed
    assert verdict["accept_length"]["plain"]["passed"] is (not regressed)
    if regressed:
        assert verdict["reason"].startswith(
            "plain: speculative accept length collapsed to 1.00 on the new stack"
        )
    else:
        assert verdict["reason"].endswith(": not slower")


def test_load_reasons_and_a_missing_baseline_load():
    old = {"ttft_long_ms": [100.0, 100.0, 100.0], "concurrent_output_tok_s": None}
    new = {"ttft_long_ms": [150.0, 150.0, 150.0], "concurrent_output_tok_s": None}
    verdict = throughput.gate_verdict(
        {"plain": {"trials": _trials(92.0), "load": new}, "other": {"trials": _trials(92.0), "load": {}}},
        {"plain": _trials(89.5), "other": _trials(89.5)},
        baseline_load={"plain": old},
        ttft_tolerance_pct=10.0,
    )
    assert verdict["regressed"] is True
    assert verdict["load"]["plain"]["passed"] is False
    assert verdict["load"]["other"] == {
        "profile": "other",
        "ttft": None,
        "concurrency": None,
        "reasons": [],
        "passed": True,
    }
    assert verdict["reason"] == "; ".join(verdict["load"]["plain"]["reasons"])


def test_speculative_decoding_must_beat_plain_decode():
    verdict = throughput.gate_verdict(
        {"plain": {"trials": _trials(92.0)}, "eagle3": {"trials": _trials(90.0)}},
        {"plain": _trials(89.5), "eagle3": _trials(54.1)},
        speculative_pairs=[{"speculative": "eagle3", "plain": "plain"}],
    )
    assert verdict["regressed"] is True
    assert verdict["speculative"]["eagle3"]["beats"] is False
    assert verdict["reason"] == "speculative decoding (eagle3) does not beat plain decode on the new stack"


def test_a_profile_without_baseline_or_measurement_is_named():
    with pytest.raises(ValueError, match="profile 'eagle3' has no baseline trials"):
        throughput.gate_verdict({"eagle3": {"trials": _trials(90.0)}}, {"plain": _trials(89.5)})
    with pytest.raises(ValueError, match="profile 'eagle3' was not measured on the new stack"):
        throughput.gate_verdict({}, {"eagle3": _trials(89.5)}, profiles=["eagle3"])
    with pytest.raises(ValueError, match="profile 'plain' has no probe outputs of the old stack"):
        throughput.gate_verdict(
            {"plain": {"trials": _trials(92.0), "probe": _probe(SAME)}},
            {"plain": _trials(89.5)},
            baseline_probe={},
        )
