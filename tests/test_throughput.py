"""The throughput gate's statistics and decision rule, and bench_serving parsing."""

import random
from pathlib import Path

import pytest

from cuda13_upgrade import throughput

FIXTURES = Path(__file__).parent / "fixtures"


def test_parse_bench_serving_reads_output_not_peak_throughput():
    text = (FIXTURES / "bench_serving" / "sglang-single-stream.txt").read_text()
    result = throughput.parse_bench_serving(text)
    assert result["output_tok_s"] == 105.24
    assert result["peak_output_tok_s"] == 110.0
    assert result["backend"] == "sglang"
    assert result["successful_requests"] == 10
    assert result["median_ttft_ms"] == 140.76
    assert result["median_itl_ms"] == 9.15
    assert result["decode_tok_s"] == pytest.approx(1000 / 9.15, rel=1e-3)


def test_parse_bench_serving_when_peak_line_comes_first():
    # The exact label must decide, not the order or a substring match.
    text = (
        "============ Serving Benchmark Result ============\n"
        "Peak output token throughput (tok/s):    200.00\n"
        "Output token throughput (tok/s):         91.50\n"
    )
    assert throughput.parse_bench_serving(text)["output_tok_s"] == 91.5


def test_parse_bench_serving_without_block_names_the_problem():
    with pytest.raises(ValueError, match="no 'Serving Benchmark Result' block"):
        throughput.parse_bench_serving("Traceback (most recent call last):\nConnectionRefusedError")


def test_parse_bench_serving_with_garbled_number():
    text = "== Serving Benchmark Result ==\nOutput token throughput (tok/s):         n/a\n"
    with pytest.raises(ValueError, match=r"Output token throughput \(tok/s\): 'n/a' is not a number"):
        throughput.parse_bench_serving(text)


def test_jsonl_record_becomes_a_trial():
    trial = throughput.parse_bench_serving_jsonl_line(
        {
            "output_throughput": 86.21,
            "median_itl_ms": 11.17,
            "mean_ttft_ms": 249.77,
            "backend": "sglang",
        }
    )
    assert trial == {
        "output_tok_s": 86.21,
        "median_itl_ms": 11.17,
        "mean_ttft_ms": 249.77,
        "decode_tok_s": pytest.approx(89.526, abs=1e-3),
    }
    with pytest.raises(ValueError, match="no output_throughput"):
        throughput.parse_bench_serving_jsonl_line({"median_itl_ms": 9.0})


def test_summarize_reports_spread():
    s = throughput.summarize([89.0, 90.0, 91.0, 89.5, 120.0])
    assert s.median == 90.0
    assert s.min == 89.0 and s.max == 120.0
    assert s.spread_pct == pytest.approx(34.444, abs=1e-3)
    assert s.mad == 1.0


@pytest.mark.parametrize("bad", [[], [0.0], [-1.0], [float("nan")], ["fast"]])
def test_summarize_refuses_bad_trials(bad):
    with pytest.raises(ValueError):
        throughput.summarize(bad)


def test_field_report_numbers_keep_the_upgrade():
    # CUDA 12.8 EAGLE-3 54.1 tok/s -> CUDA 13 96.1 tok/s (the field report).
    d = throughput.decide([54.0, 54.1, 54.3, 53.9, 54.2], [96.0, 96.1, 96.3, 95.8, 96.2], profile="eagle3")
    assert d.verdict == "keep" and d.final
    assert d.change_pct == pytest.approx(77.6, abs=0.5)
    assert "eagle3" in d.reason


def test_ten_percent_slower_is_a_regression():
    base = [89.5, 89.2, 89.9, 89.4, 89.6]
    new = [80.6, 80.4, 80.9, 80.5, 80.7]
    d = throughput.decide(base, new)
    assert d.verdict == "regressed" and d.final
    assert d.change_pct == pytest.approx(-10.0, abs=0.3)


def test_noisy_borderline_asks_for_more_trials_then_decides_at_cap():
    base = [89.5, 85.0, 94.0, 88.0, 91.0]
    new = [87.0, 83.0, 92.0, 86.0, 90.0]  # median -2.8 % with a wide spread
    d = throughput.decide(base, new, tolerance_pct=3.0, max_trials=15)
    assert d.verdict == "undecided" and not d.final
    d = throughput.decide(base, new * 3, tolerance_pct=3.0, max_trials=15)
    assert d.final
    assert d.verdict == "keep"  # -2.8 % is inside the 3 % tolerance
    assert "trial cap" in d.reason


def test_one_outlier_does_not_roll_back():
    base = [89.5, 89.6, 89.4, 89.5, 89.7]
    new = [92.6, 92.4, 40.0, 92.7, 92.5]  # one trial hit by a hiccup
    assert throughput.decide(base, new).verdict == "keep"


def test_decide_validates_its_options():
    with pytest.raises(ValueError, match="tolerance_pct must be >= 0, got -1"):
        throughput.decide([1.0], [1.0], tolerance_pct=-1)
    with pytest.raises(ValueError, match="max_trials must be >= 1, got 0"):
        throughput.decide([1.0], [1.0], max_trials=0)


def test_speculative_gain_matches_the_field_report():
    before = throughput.speculative_gain([89.5], [54.1])
    after = throughput.speculative_gain([92.6], [96.1])
    assert not before["beats"] and before["gain_pct"] == pytest.approx(-39.55, abs=0.01)
    assert after["beats"] and after["gain_pct"] == pytest.approx(3.78, abs=0.01)


def _simulate(rng, true_change, noise, trials=throughput.DEFAULT_MIN_TRIALS):
    base = [89.5 * rng.gauss(1, noise) for _ in range(trials)]
    new = [89.5 * (1 + true_change) * rng.gauss(1, noise) for _ in range(trials)]
    while True:
        d = throughput.decide(base, new)
        if d.final:
            return d.verdict
        new.append(89.5 * (1 + true_change) * rng.gauss(1, noise))


def test_decision_error_rates_at_two_percent_noise():
    # A fixed seed keeps this deterministic; the benchmark prints the rates
    # over many more runs.
    rng = random.Random(20261130)
    runs = 300
    false_rollbacks = sum(_simulate(rng, 0.0, 0.02) == "regressed" for _ in range(runs))
    missed = sum(_simulate(rng, -0.05, 0.02) == "keep" for _ in range(runs))
    assert false_rollbacks / runs < 0.01
    assert missed / runs < 0.05
