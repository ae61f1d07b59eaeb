"""bench_serving's whole result: every field of the block and of the JSONL record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda13_upgrade.throughput import (
    known_number,
    normalize_trials,
    parse_bench_serving,
    parse_bench_serving_jsonl_line,
    trial_metric,
)

FIXTURES = Path(__file__).parent / "fixtures" / "bench_serving"


def block(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_field_of_the_speculative_block():
    result = parse_bench_serving(block("sglang-eagle3-accept-length.txt"))
    assert result["accept_length"] == 2.46
    assert result["max_concurrency"] == 1
    assert result["request_rate"] == "inf"
    assert result["output_tok_s"] == 95.62
    assert result["peak_output_tok_s"] == 157.0
    assert result["median_tpot_ms"] == 9.25
    assert result["p99_tpot_ms"] == 11.73
    assert result["p90_e2e_latency_ms"] == 4200.62
    assert result["p99_e2e_latency_ms"] == 5588.52
    assert result["p95_itl_ms"] == 22.81
    assert result["p99_itl_ms"] == 23.33
    assert result["total_input_vision_tokens"] == 0  # a count keeps its 0
    assert result["concurrency"] == 1.0
    assert result["decode_tok_s"] == round(1000 / 7.64, 3)


def test_zero_latencies_are_unknown_not_zero():
    result = parse_bench_serving(block("sglang-zero-latencies.txt"))
    assert result["output_tok_s"] == 825.94
    assert result["median_tpot_ms"] is None  # printed -0.00
    assert result["median_itl_ms"] is None  # printed 0.00
    assert result["p99_itl_ms"] is None
    assert result["p99_tpot_ms"] == 28.33
    assert "decode_tok_s" not in result


def test_a_block_of_any_length_without_its_title_is_read():
    text = block("sglang-eagle3-accept-length.txt")
    many = "\n".join(f"log line {i}" for i in range(100)) + "\n" + text
    assert parse_bench_serving(many)["accept_length"] == 2.46
    untitled = "\n".join(text.splitlines()[1:])  # a tail that lost the title
    assert parse_bench_serving(untitled)["output_tok_s"] == 95.62
    with pytest.raises(ValueError, match="no 'Serving Benchmark Result' block"):
        parse_bench_serving("Traceback (most recent call last):\nRuntimeError: boom\n")


# The JSONL record bench_serving writes for the speculative block above (its
# fields as sglang.bench_serving's --output-file writes them), with the 0.0
# timings a speculative run reports.
RECORD = {
    "backend": "sglang",
    "dataset_name": "random",
    "request_rate": float("inf"),
    "max_concurrency": 1,
    "duration": 29.11,
    "completed": 10,
    "total_input_tokens": 1972,
    "total_output_tokens": 2784,
    "request_throughput": 0.34,
    "input_throughput": 67.73,
    "output_throughput": 95.62,
    "mean_ttft_ms": 317.58,
    "median_ttft_ms": 191.31,
    "p99_ttft_ms": 740.79,
    "mean_tpot_ms": 9.09,
    "median_tpot_ms": 9.25,
    "mean_itl_ms": 0.0,
    "median_itl_ms": 0.0,
    "p95_itl_ms": None,
    "p99_itl_ms": float("nan"),
    "concurrency": 1.0,
    "accept_length": 2.46,
}


def test_jsonl_keeps_every_field_and_reads_zero_as_unknown():
    trial = parse_bench_serving_jsonl_line(json.loads(json.dumps(RECORD)))
    assert trial["accept_length"] == 2.46
    assert trial["max_concurrency"] == 1
    assert trial["completed"] == 10
    assert trial["output_tok_s"] == 95.62
    assert trial["duration_s"] == 29.11
    assert trial["median_itl_ms"] is None and trial["mean_itl_ms"] is None
    assert trial["p95_itl_ms"] is None and trial["p99_itl_ms"] is None
    assert trial["decode_tok_s"] == round(1000 / 9.25, 3)  # from TPOT: ITL unknown
    assert "backend" not in trial and "request_rate" not in trial


def test_jsonl_without_a_known_throughput_is_refused():
    for value in (0.0, None, float("inf")):
        with pytest.raises(ValueError, match="no output_throughput"):
            parse_bench_serving_jsonl_line({**RECORD, "output_throughput": value})


def test_normalising_twice_gives_the_same_trials():
    raw = [
        {"method": "bench_serving", "record": RECORD, "stdout_tail": block("sglang-eagle3-accept-length.txt")}
    ]
    once = normalize_trials(raw)
    assert normalize_trials(once) == once
    assert trial_metric(normalize_trials(once)) == [95.62]
    # The record lacking its throughput falls back to the printed block.
    fallback = normalize_trials([{**raw[0], "record": {**RECORD, "output_throughput": 0.0}}])
    assert fallback[0]["accept_length"] == 2.46
    assert normalize_trials(fallback) == fallback


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, None), (-0.0, None), (float("inf"), None), ("x", None), (None, None), (9.25, 9.25)],
)
def test_known_number(value, expected):
    assert known_number(value) == expected
