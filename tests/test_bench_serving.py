"""The stand-in ``sglang.bench_serving``: a real streaming client with SGLang's result block."""

from __future__ import annotations

import json
import subprocess

import pytest
from sandbox_mirror import testkit

RATE = 800.0
SCENARIO = {
    "rates_tok_s": {
        "cu128": {"plain": RATE, "eagle3": 500.0},
        "cu130": {"plain": RATE, "eagle3": 500.0},
    },
    "noise_pct": 1.0,
    "ttft_ms": 5,
    "startup_s": 0.1,
}
LABELS = [
    "============ Serving Benchmark Result ============",
    "Backend:",
    "Traffic request rate:",
    "Max request concurrency:",
    "Successful requests:",
    "Benchmark duration (s):",
    "Total input tokens:",
    "Total generated tokens:",
    "Total generated tokens (retokenized):",
    "Request throughput (req/s):",
    "Input token throughput (tok/s):",
    "Output token throughput (tok/s):",
    "Peak output token throughput (tok/s):",
    "Peak concurrent requests:",
    "Total token throughput (tok/s):",
    "Concurrency:",
    "----------------End-to-End Latency----------------",
    "Mean E2E Latency (ms):",
    "Median E2E Latency (ms):",
    "---------------Time to First Token----------------",
    "Mean TTFT (ms):",
    "Median TTFT (ms):",
    "P99 TTFT (ms):",
    "-----Time per Output Token (excl. 1st token)------",
    "Mean TPOT (ms):",
    "---------------Inter-Token Latency----------------",
    "Mean ITL (ms):",
    "Median ITL (ms):",
    "P95 ITL (ms):",
    "P99 ITL (ms):",
    "Max ITL (ms):",
    "=" * 50,
]
JSONL_KEYS = {
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "server_info",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p95_itl_ms",
    "p99_itl_ms",
    "concurrency",
    "accept_length",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
}


@pytest.fixture(scope="module")
def server(venv_cu128, no_ld_conf, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    scenario = root / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    env = testkit.clean_env(
        SGLANG_SIM_SCENARIO=str(scenario),
        CUDA_HOME=str(venv_cu128.cuda_home),
        SANDBOX_LD_SO_CONF_D=str(no_ld_conf),
    )
    srv = testkit.SimServer(venv_cu128.python, env, root, "--tp", "8")
    yield srv
    srv.close()


def bench(venv, url: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    cmd = [
        str(venv.python),
        "-m",
        "sglang.bench_serving",
        "--base-url",
        url,
        "--dataset-name",
        "random",
        "--random-input-len",
        "128",
        *args,
    ]
    return subprocess.run(cmd, env=testkit.clean_env(), cwd=cwd, capture_output=True, text=True, timeout=120)


def test_prints_the_result_block_and_appends_jsonl(venv_cu128, server, tmp_path):
    out = tmp_path / "out.jsonl"
    proc = bench(
        venv_cu128,
        server.url,
        "--backend",
        "sglang",
        "--random-output-len",
        "200",
        "--random-range-ratio",
        "1",
        "--num-prompts",
        "4",
        "--max-concurrency",
        "1",
        "--output-file",
        str(out),
        "--warmup-requests",
        "1",
    )
    assert proc.returncode == 0, proc.stderr
    block = proc.stdout[proc.stdout.index("============ Serving Benchmark Result") :]
    lines = block.splitlines()
    for label in LABELS:
        assert any(line.startswith(label) for line in lines), label
    assert "Backend:                                 sglang    " in lines
    assert "Successful requests:                     4         " in lines
    assert "Max request concurrency:                 1         " in lines
    assert "Total generated tokens:                  800       " in lines
    record = json.loads(out.read_text().splitlines()[-1])
    assert JSONL_KEYS <= set(record)
    assert record["completed"] == 4 and record["total_output_tokens"] == 800
    assert record["output_throughput"] == pytest.approx(RATE, rel=0.15)
    assert record["server_info"]["simulation"]["rate_key"] == "cu128/plain"
    printed = next(ln for ln in lines if ln.startswith("Output token throughput (tok/s):"))
    assert float(printed.split()[-1]) == pytest.approx(record["output_throughput"], abs=0.01)

    again = bench(
        venv_cu128,
        server.url,
        "--backend",
        "sglang-oai",
        "--random-output-len",
        "100",
        "--num-prompts",
        "2",
        "--max-concurrency",
        "1",
        "--output-file",
        str(out),
    )
    assert again.returncode == 0, again.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["backend"] for r in records] == ["sglang", "sglang-oai"]
    assert records[1]["completed"] == 2


def test_default_output_file_name(venv_cu128, server, tmp_path):
    proc = bench(
        venv_cu128,
        server.url,
        "--random-output-len",
        "16",
        "--num-prompts",
        "1",
        "--warmup-requests",
        "0",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (jsonl,) = tmp_path.glob("sglang_*_1_128_16.jsonl")
    assert json.loads(jsonl.read_text())["request_rate"] == float("inf")


def test_unreachable_server_fails_like_the_real_client(venv_cu128, tmp_path):
    url = f"http://127.0.0.1:{testkit.free_port()}"
    proc = bench(venv_cu128, url, "--num-prompts", "1", cwd=tmp_path)
    assert proc.returncode == 1
    assert f"Failed to fetch model from {url}/v1/models." in proc.stdout
    assert "Please specify the correct host and port using `--host` and `--port`." in proc.stdout
