"""The simulated SGLang server: endpoints, decode rate, and refusals of inconsistent stacks.

Servers run from the session venvs (``venv_cu128``: SGLang v0.5.8 built against CUDA 12.8;
``venv_cu130``: v0.5.9 built against 13.0) with a fast scenario, on free loopback ports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from sandbox_mirror import testkit

from cuda13_upgrade.diagnosis import diagnose

FAST = {
    "rates_tok_s": {
        "cu128": {"plain": 1000.0, "eagle3": 600.0},
        "cu130": {"plain": 1500.0, "eagle3": 1800.0},
    },
    "noise_pct": 1.0,
    "ttft_ms": 5,
    "startup_s": 0.1,
    "spec_accept_length": {"eagle3": 3.2},
}
EAGLE3 = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/sandbox-eagle3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "fast.json"
    path.write_text(json.dumps(FAST))
    return path


def server_env(venv: testkit.StackVenv, scenario: Path, ld_conf: Path, **extra: str) -> dict:
    return testkit.clean_env(
        SGLANG_SIM_SCENARIO=str(scenario),
        CUDA_HOME=str(venv.cuda_home),
        SANDBOX_LD_SO_CONF_D=str(ld_conf),
        **extra,
    )


@pytest.fixture(scope="module")
def plain_cu128(venv_cu128, scenario, no_ld_conf, tmp_path_factory):
    env = server_env(venv_cu128, scenario, no_ld_conf)
    server = testkit.SimServer(
        venv_cu128.python,
        env,
        tmp_path_factory.mktemp("logs"),
        "--tp",
        "8",
        "--trust-remote-code",
        "--unknown-flag",
        "x",
    )
    yield server
    server.close()


def get_json(url: str) -> dict:
    status, body = testkit.http_get(url)
    assert status == 200, body
    return json.loads(body)


def stream_completion(url: str, max_tokens: int) -> tuple[list[dict], float, float]:
    """Stream /v1/completions; return the JSON chunks, the TTFT and the total time (s)."""
    body = json.dumps(
        {
            "prompt": "one two three four",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    )
    req = urllib.request.Request(
        url + "/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    chunks: list[dict] = []
    start = time.perf_counter()
    ttft = 0.0
    done = False
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for raw in resp:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                done = True
                continue
            if not chunks:
                ttft = time.perf_counter() - start
            chunks.append(json.loads(payload))
    assert done
    return chunks, ttft, time.perf_counter() - start


def test_health_is_200_with_an_empty_body(plain_cu128):
    status, body = testkit.http_get(plain_cu128.url + "/health")
    assert (status, body) == (200, b"")


def test_server_info_reports_args_and_the_installed_stack(plain_cu128, venv_cu128, sandbox_mirror):
    info = get_json(plain_cu128.url + "/get_server_info")
    assert info["version"] == "0.5.8"
    assert info["tp_size"] == 8 and info["port"] == plain_cu128.port
    assert info["speculative_algorithm"] is None
    stack = info["stack"]
    assert stack["torch"] == {"version": "2.9.1+cu128", "cuda": "12.8"}
    assert stack["sgl_kernel"] == "0.3.21+cu128"
    assert stack["flashinfer_python"] == "0.6.1"
    assert stack["flashinfer_jit_cache"] == "0.6.1+cu128"
    build = stack["build_info"]
    assert build["cuda_version"] == "12.8" and build["nvcc_version"] == "12.8.93"
    assert build["git_commit"] == sandbox_mirror.manifest["git"]["sglang"]["tags"]["v0.5.8"]
    assert info["simulation"]["rate_key"] == "cu128/plain"
    assert "avg_spec_accept_length" not in info["internal_states"][0]


def test_models_lists_the_served_model(plain_cu128):
    models = get_json(plain_cu128.url + "/v1/models")
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["/models/sandbox-model"]


def test_streamed_completion_counts_tokens_at_the_scenario_rate(plain_cu128):
    chunks, ttft, total = stream_completion(plain_cu128.url, 200)
    assert len(chunks) == 200
    assert all(len(c["choices"][0]["text"].split()) == 1 for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[0]["object"] == "text_completion"
    assert ttft >= 0.004
    rate = len(chunks) / total
    assert rate == pytest.approx(FAST["rates_tok_s"]["cu128"]["plain"], rel=0.15)


def test_non_streamed_completion_reports_usage(plain_cu128):
    body = json.dumps({"prompt": "a b c d e", "max_tokens": 7}).encode()
    req = urllib.request.Request(
        plain_cu128.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        data = json.loads(resp.read())
    assert data["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    assert len(data["choices"][0]["text"].split()) == 7


def test_generate_streams_cumulative_text(plain_cu128):
    body = json.dumps({"text": "x y", "sampling_params": {"max_new_tokens": 5}, "stream": True})
    req = urllib.request.Request(plain_cu128.url + "/generate", data=body.encode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        events = [ln.decode().strip()[6:] for ln in resp if ln.strip()]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["meta_info"]["completion_tokens"] == 5
    assert len(last["text"].split()) == 5


def test_eagle3_flags_pick_the_eagle3_rate(venv_cu128, scenario, no_ld_conf, tmp_path):
    env = server_env(venv_cu128, scenario, no_ld_conf)
    server = testkit.SimServer(venv_cu128.python, env, tmp_path, "--tp", "8", *EAGLE3)
    try:
        info = get_json(server.url + "/get_server_info")
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_draft_tokens"] == 4
        assert info["simulation"]["rate_key"] == "cu128/eagle3"
        assert info["internal_states"][0]["avg_spec_accept_length"] == 3.2
        chunks, _, total = stream_completion(server.url, 120)
        rate = len(chunks) / total
        assert rate == pytest.approx(FAST["rates_tok_s"]["cu128"]["eagle3"], rel=0.15)
    finally:
        server.close()


def test_cu130_stack_serves_at_the_cu130_rate(venv_cu130, scenario, no_ld_conf, tmp_path):
    server = testkit.SimServer(venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path)
    try:
        info = get_json(server.url + "/get_server_info")
        assert info["simulation"]["rate_key"] == "cu130/plain"
        assert info["stack"]["build_info"]["cuda_version"] == "13.0"
    finally:
        server.close()


def refused(python: Path, env: dict) -> subprocess.CompletedProcess:
    port = testkit.free_port()
    cmd = [str(python), "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback (most recent call last):" in proc.stderr
    assert not testkit.wait_port(port, 0.2)
    return proc


def test_refuses_a_cu128_kernel_under_cu130_torch(venv_cu130, toolkits, scenario, mirror_url, tmp_path):
    overlay = tmp_path / "overlay"
    testkit.pip(
        venv_cu130.python,
        "--no-deps",
        "--target",
        str(overlay),
        "--index-url",
        f"{mirror_url}/sgl-whl/cu128",
        "sgl-kernel==0.3.21+cu128",
    )
    ld_conf = tmp_path / "ld.so.conf.d"
    ld_conf.mkdir()
    (ld_conf / "988_cuda-12.conf").write_text(f"{toolkits['12.8']}/targets/x86_64-linux/lib\n")
    env = server_env(venv_cu130, scenario, ld_conf, PYTHONPATH=str(overlay))
    proc = refused(venv_cu130.python, env)
    assert "[sgl_kernel] CRITICAL: Could not load any common_ops library!" in proc.stderr
    assert "common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEa" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("- ModuleNotFoundError: No module named 'common_ops'")
    # The server's journal is diagnosed (cuda13_upgrade.diagnosis), as the switch's health wait does.
    assert diagnose(proc.stderr, context={"torch_version": "2.10.0+cu130"}).kind == "kernel_torch_abi"

    # Without a CUDA 12 runtime anywhere, the same wheel fails on its library instead.
    env = server_env(venv_cu130, scenario, tmp_path / "empty", PYTHONPATH=str(overlay))
    proc = refused(venv_cu130.python, env)
    assert (
        "- ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
        in proc.stderr
    )
    assert diagnose(proc.stderr).kind == "cuda12_on_cuda13"


def test_refuses_sglang_built_for_cuda12_with_only_a_cuda13_toolkit(
    venv_cu130, toolkits, scenario, no_ld_conf, mirror_url, tmp_path
):
    clone = testkit.clone_sglang(mirror_url, "v0.5.9", tmp_path / "sglang-old")
    target = tmp_path / "old-build"
    info = testkit.install_sglang(
        venv_cu130.python, clone, toolkits["12.8"], "--no-deps", "--target", str(target)
    )
    assert info["cuda_version"] == "12.8"
    env = server_env(venv_cu130, scenario, no_ld_conf, PYTHONPATH=str(target))
    assert env["CUDA_HOME"] == str(toolkits["13.0"])
    proc = refused(venv_cu130.python, env)
    assert proc.stderr.strip().splitlines()[-1] == (
        "OSError: libcudart.so.12: cannot open shared object file: No such file or directory"
    )
    assert diagnose(proc.stderr).kind == "cuda12_on_cuda13"


def test_refuses_a_jit_cache_of_another_flashinfer_version(venv_cu128, scenario, no_ld_conf, tmp_path):
    fake = tmp_path / "overlay" / "flashinfer_jit_cache"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "__version__ = '0.6.0+cu128'\ndef get_jit_cache_dir():\n    return '/nonexistent'\n"
    )
    env = server_env(venv_cu128, scenario, no_ld_conf, PYTHONPATH=str(tmp_path / "overlay"))
    proc = refused(venv_cu128.python, env)
    assert proc.stderr.strip().splitlines()[-1] == (
        "RuntimeError: flashinfer-jit-cache version (0.6.0+cu128) does not match flashinfer "
        "version (0.6.1). Please install the same version of both packages. "
        "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."
    )
    assert diagnose(proc.stderr).kind == "flashinfer_jit_cache_mismatch"


def test_refuses_a_cu128_jit_cache_without_a_cuda12_runtime(
    venv_cu130, scenario, no_ld_conf, mirror_url, tmp_path
):
    overlay = tmp_path / "overlay"
    testkit.pip(
        venv_cu130.python,
        *("--no-deps", "--target", str(overlay)),
        *("--index-url", f"{mirror_url}/flashinfer-whl/cu128"),
        "flashinfer-jit-cache==0.6.3+cu128",
    )
    env = server_env(venv_cu130, scenario, no_ld_conf, PYTHONPATH=str(overlay))
    proc = refused(venv_cu130.python, env)
    assert proc.stderr.strip().splitlines()[-1] == (
        "OSError: libcudart.so.12: cannot open shared object file: No such file or directory"
    )
    assert "flashinfer/jit/core.py" in proc.stderr


def _scenario_file(tmp_path: Path, **extra) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({**FAST, **extra}))
    return path


def _probe(url: str, tmp_path: Path) -> list[dict]:
    """Run the correctness probe host script against a server, as the role does."""
    from cuda13_upgrade.hostscripts import completion_bench

    prompts = Path(__file__).resolve().parents[1] / "roles" / "verify_throughput" / "files" / "prompts.json"
    out = subprocess.run(
        [
            sys.executable,
            completion_bench.__file__,
            "--url",
            url,
            "--prompt-file",
            str(prompts),
            "--probe",
            "4",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)["outputs"]


def test_health_is_200_in_the_warmup_window_while_health_generate_waits(venv_cu130, no_ld_conf, tmp_path):
    scenario = _scenario_file(tmp_path, warmup_window_s={"cu130": 3})
    env = server_env(venv_cu130, scenario, no_ld_conf, SGLANG_HEALTH_CHECK_TIMEOUT="1")
    server = testkit.SimServer(venv_cu130.python, env, tmp_path)
    try:
        assert testkit.http_get(server.url + "/health")[0] == 200
        # SGLang's health_generate answers 503 when no token came within its timeout.
        status, _ = testkit.http_get(server.url + "/health_generate", timeout=10)
        assert status == 503
        assert get_json(server.url + "/get_server_info")["simulation"]["warmup_left_s"] > 0
        # A completion sent now blocks until the window is over, and is counted.
        chunks, ttft, _ = stream_completion(server.url, 4)
        assert ttft > 1.0 and len(chunks) == 4
        assert get_json(server.url + "/get_server_info")["simulation"]["requests_in_warmup"] == 1
        assert testkit.http_get(server.url + "/health_generate", timeout=10)[0] == 200
    finally:
        server.close()
    assert "arrived in the warm-up window" in server.stdout_path.read_text()


def test_greedy_tokens_are_the_same_on_both_stacks_unless_the_scenario_says(
    venv_cu128, venv_cu130, no_ld_conf, tmp_path
):
    servers = {
        "cu128": testkit.SimServer(
            venv_cu128.python, server_env(venv_cu128, _scenario_file(tmp_path / "a"), no_ld_conf), tmp_path
        ),
        "same": testkit.SimServer(
            venv_cu130.python, server_env(venv_cu130, _scenario_file(tmp_path / "b"), no_ld_conf), tmp_path
        ),
        "garbage": testkit.SimServer(
            venv_cu130.python,
            server_env(
                venv_cu130, _scenario_file(tmp_path / "c", tokens={"cu130": {"mode": "garbage"}}), no_ld_conf
            ),
            tmp_path,
        ),
        "drift": testkit.SimServer(
            venv_cu130.python,
            server_env(
                venv_cu130,
                _scenario_file(tmp_path / "d", tokens={"cu130": {"mode": "drift", "after": 5}}),
                no_ld_conf,
            ),
            tmp_path,
        ),
    }
    try:
        outputs = {name: _probe(server.url, tmp_path) for name, server in servers.items()}
        again = _probe(servers["cu128"].url, tmp_path)
    finally:
        for server in servers.values():
            server.close()
    from cuda13_upgrade import probe

    assert outputs["cu128"] == again  # greedy decoding is deterministic
    assert all(len(o["output_ids"]) == 32 and len(o["text"].split()) == 32 for o in outputs["cu128"])
    assert probe.compare_outputs(outputs["cu128"], outputs["same"])["per_prompt"][0]["common_prefix"] == 32
    assert not probe.compare_outputs(outputs["cu128"], outputs["garbage"])["passed"]
    drift = probe.compare_outputs(outputs["cu128"], outputs["drift"], min_prefix_tokens=5)
    assert drift["passed"] and {p["common_prefix"] for p in drift["per_prompt"]} == {5}


def test_speculative_counters_per_request_and_cumulative(venv_cu130, no_ld_conf, tmp_path):
    scenario = _scenario_file(
        tmp_path, spec_accept_length={"cu130": {"eagle3": 1.0}, "cu128": {"eagle3": 3.2}}
    )
    server = testkit.SimServer(
        venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path, *EAGLE3
    )
    try:
        outputs = _probe(server.url, tmp_path)
        info = get_json(server.url + "/get_server_info")
    finally:
        server.close()
    assert all(o["spec_verify_ct"] == o["completion_tokens"] == 32 for o in outputs)
    assert info["internal_states"][0]["avg_spec_accept_length"] == 1.0


def _ttft(url: str, prompt: str) -> float:
    body = json.dumps({"prompt": prompt, "max_tokens": 2, "ignore_eos": True, "stream": True})
    req = urllib.request.Request(
        url + "/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=30) as resp:
        for raw in resp:
            if raw.strip().startswith(b"data: {"):
                return time.perf_counter() - start
    raise AssertionError("no token")


def test_ttft_grows_with_the_uncached_prompt_and_the_cache_flushes(venv_cu128, no_ld_conf, tmp_path):
    scenario = _scenario_file(tmp_path, prefill_tok_s=2000, noise_pct=0)
    server = testkit.SimServer(venv_cu128.python, server_env(venv_cu128, scenario, no_ld_conf), tmp_path)
    long_prompt = " ".join(f"w{i}" for i in range(2000))
    try:
        short = _ttft(server.url, "a short prompt")
        cold = _ttft(server.url, long_prompt)
        warm = _ttft(server.url, long_prompt)
        req = urllib.request.Request(server.url + "/flush_cache", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        flushed = _ttft(server.url, long_prompt)
    finally:
        server.close()
    assert cold > short + 0.8  # 2000 prompt tokens at 2000 tok/s of prefill
    assert warm < cold - 0.8  # a prefix-cache hit
    assert flushed > cold - 0.2
    assert "#cached-token: 2000" in server.stdout_path.read_text()


def test_flashinfer_allreduce_fusion_refuses_to_start_on_the_cuda_12_8_stack(
    venv_cu128, venv_cu130, scenario, no_ld_conf, tmp_path
):
    flag = "--enable-flashinfer-allreduce-fusion"
    env = server_env(venv_cu128, scenario, no_ld_conf)
    port = testkit.free_port()
    cmd = [
        str(venv_cu128.python),
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--port",
        str(port),
        flag,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    # sgl-project/sglang#15650, FlashInfer's allreduce fusion on sm_120.
    assert proc.stderr.rstrip().endswith(
        "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10]."
    )
    server = testkit.SimServer(
        venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path, flag
    )
    try:
        # The CUDA 13 stack starts with the flag and generates.
        assert testkit.http_get(server.url + "/health_generate")[0] == 200
    finally:
        server.close()


REPO = Path(__file__).resolve().parents[1]


def test_default_scenario_eagle3_accept_length_is_in_a_kept_hosts_report(
    venv_cu128, venv_cu130, no_ld_conf, tmp_path
):
    """`make demo`'s scenario: both stacks' EAGLE-3 servers count verify steps at the sourced
    accept length, the probe reads them as the role does, and summary.md shows before -> after."""
    from cuda13_upgrade import probe, summary

    default = json.loads((REPO / "sandbox" / "mirror" / "scenarios" / "default.json").read_text())
    # The scenario's own accept length; only the timing is made fast.
    fast = {**default, "rates_tok_s": FAST["rates_tok_s"], "ttft_ms": 5, "startup_s": 0.1}
    scenario = tmp_path / "default-fast.json"
    scenario.write_text(json.dumps(fast))
    outputs = {}
    for name, venv in (("old", venv_cu128), ("new", venv_cu130)):
        server = testkit.SimServer(
            venv.python, server_env(venv, scenario, no_ld_conf), tmp_path / name, *EAGLE3
        )
        try:
            outputs[name] = _probe(server.url, tmp_path)
            info = get_json(server.url + "/get_server_info")
        finally:
            server.close()
        assert info["simulation"]["rate_key"].endswith("/eagle3")
        # 32 tokens at 2.687 per verify step take 12 steps (SGLang's meta_info counters).
        assert {(o["completion_tokens"], o["spec_verify_ct"]) for o in outputs[name]} == {(32, 12)}
    accept = probe.compare_accept_length(outputs["old"], outputs["new"])
    assert accept["passed"] is True and accept["change_pct"] == 0.0
    result = {
        "host": "cuda13-sandbox-1",
        "status": "kept",
        "probe": {"eagle3": probe.compare_outputs(outputs["old"], outputs["new"])},
        "accept_length": {"eagle3": accept},
    }
    text = summary.render_markdown("run-1", summary.summary_rows([result]))
    assert "## Speculative accept length" in text
    assert "- cuda13-sandbox-1 eagle3: 2.67 -> 2.67 tokens per verify step (+0.0 %, healthy)" in text
    assert "- cuda13-sandbox-1 eagle3: output matches the old stack (4 of 4 prompts" in text


def test_trials_accumulate_within_a_series_and_start_afresh_in_another(venv_cu130, no_ld_conf, tmp_path):
    # hostscripts/completion_bench.py --append --series, as verify_throughput's profile.yml
    # runs it: the gate's retries add one trial each to the run's series; the next run's
    # first attempt (another run id) does not count the trials left from the last one.
    from cuda13_upgrade.hostscripts import completion_bench

    env = server_env(venv_cu130, _scenario_file(tmp_path), no_ld_conf)
    server = testkit.SimServer(venv_cu130.python, env, tmp_path)
    trials = tmp_path / "candidate-plain.json"

    def bench(series: str) -> list[dict]:
        out = subprocess.run(
            [
                sys.executable,
                completion_bench.__file__,
                "--url",
                server.url,
                "--append",
                str(trials),
                "--series",
                series,
                "--min-trials",
                "2",
                "--trials",
                "1",
                "--warmup",
                "0",
                "--max-tokens",
                "8",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(out.stdout)
        assert json.loads(trials.read_text()) == result and result["series"] == series
        return result["trials"]

    try:
        assert len(bench("20261203T010000Z")) == 2
        assert len(bench("20261203T010000Z")) == 3
        assert len(bench("20261203T020000Z")) == 2
    finally:
        server.close()


def test_a_scenario_s_disabled_paths_log_sglang_s_line_per_rank_and_keep_the_argument(
    venv_cu130, no_ld_conf, tmp_path
):
    # What the flag asked for stays in /get_server_info: the workers turn the path off
    # after the arguments were parsed, and only the log says so (cuda13_upgrade.effective).
    path = tmp_path / "disabled.json"
    path.write_text(
        json.dumps({**FAST, "disabled_paths": {"cu130": ["torch_symm_mem", "custom_all_reduce"]}})
    )
    env = server_env(venv_cu130, path, no_ld_conf)
    server = testkit.SimServer(
        venv_cu130.python,
        env,
        tmp_path,
        "--tp",
        "4",
        "--enable-torch-symm-mem",
        "--disable-custom-all-reduce",
    )
    try:
        info = get_json(server.url + "/get_server_info")
    finally:
        server.close()
    assert info["enable_torch_symm_mem"] is True and info["disable_custom_all_reduce"] is True
    assert info["enable_flashinfer_allreduce_fusion"] is False and info["disable_cuda_graph"] is False
    log = server.stdout_path.read_text().splitlines()
    symm = [line for line in log if "TorchSymmMemCommunicator" in line]
    assert [line.split("] ", 1)[1] for line in symm] == [
        "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."
    ] * 4
    assert [line.split("] ", 1)[0].rsplit(" ", 1)[1] for line in symm] == ["TP0", "TP1", "TP2", "TP3"]
    # Custom allreduce was not asked for (--disable-custom-all-reduce): no line.
    assert not any("Custom allreduce" in line for line in log)
    from cuda13_upgrade import effective

    found = effective.disabled_lines(log)
    assert [(r["path"], r["ranks"]) for r in found] == [("torch symmetric memory allreduce", 4)]


def _soak(url: str, *extra: str, timeout: float = 120) -> dict:
    """Run completion_bench.py's soak (with --load-metrics, as profile.yml runs it)."""
    from cuda13_upgrade.hostscripts import completion_bench

    prompts = Path(__file__).resolve().parents[1] / "roles" / "verify_throughput" / "files" / "prompts.json"
    out = subprocess.run(
        [
            sys.executable,
            completion_bench.__file__,
            "--url",
            url,
            "--load-metrics",
            "--prompt-file",
            str(prompts),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    return json.loads(out.stdout)["soak"]


def test_a_soak_at_the_sandbox_s_rates_serves_every_request(venv_cu130, no_ld_conf, tmp_path):
    # The sandbox's own rates and output length (inventory/sandbox: 64 tokens) with the
    # soak's defaults (64 requests, 8 at once): its seconds are what a sandbox profile adds.
    scenario = tmp_path / "default.json"
    scenario.write_text(json.dumps({**FAST, "rates_tok_s": {"cu130": {"plain": 92.6}}, "ttft_ms": 150}))
    server = testkit.SimServer(venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path)
    try:
        soak = _soak(server.url, "--max-tokens", "64", "--soak-requests", "64", "--soak-concurrency", "8")
    finally:
        server.close()
    assert soak["served"] == 64 and soak["failures"] == []
    assert soak["seconds"] < 15, soak["seconds"]
    print(f"soak of 64 requests at concurrency 8, 64 tokens: {soak['seconds']} s")


def test_a_server_that_stops_answering_stalls_the_soak_while_health_is_200(venv_cu130, no_ld_conf, tmp_path):
    scenario = _scenario_file(tmp_path, stall_after_completions={"cu130": 5})
    env = server_env(venv_cu130, scenario, no_ld_conf, SGLANG_HEALTH_CHECK_TIMEOUT="1")
    server = testkit.SimServer(venv_cu130.python, env, tmp_path)
    try:
        soak = _soak(
            server.url,
            "--max-tokens",
            "8",
            "--soak-requests",
            "20",
            "--soak-concurrency",
            "1",
            "--soak-deadline-s",
            "2",
        )
        assert testkit.http_get(server.url + "/health")[0] == 200
        assert testkit.http_get(server.url + "/health_generate", timeout=10)[0] == 503
    finally:
        server.close()
    assert soak["served"] == 5
    assert [(f["request"], f["outcome"]) for f in soak["failures"]] == [(6, "stall")]
    assert 2 <= soak["failures"][0]["seconds"] < 5


def test_a_server_that_crashes_on_a_request_fails_the_soak_as_a_crash(venv_cu130, no_ld_conf, tmp_path):
    scenario = _scenario_file(tmp_path, crash_on_request={"cu130": 4})
    server = testkit.SimServer(venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path)
    try:
        soak = _soak(server.url, "--max-tokens", "8", "--soak-requests", "10", "--soak-concurrency", "1")
        server.proc.wait(timeout=10)
        code = server.proc.returncode
    finally:
        server.close()
    assert soak["served"] == 3
    assert [(f["request"], f["outcome"]) for f in soak["failures"]] == [(4, "crash")]
    assert code == -8  # SIGFPE, as sgl-project/sglang PR #40485 reports the scheduler's end
