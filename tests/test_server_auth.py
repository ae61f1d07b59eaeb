"""A server started with --api-key is measured: the key read on the host, sent as the bearer token,
in no record.

SGLang's rule (python/sglang/srt/utils.py ``add_api_key_middleware``): with ``--api-key KEY``
every request but OPTIONS and the paths under ``/health`` and ``/metrics`` must carry
``Authorization: Bearer KEY``, else 401 ``{"error": "Unauthorized"}``; the sandbox's server
double does the same (sandbox/sglang-src/python/sglang/srt/entrypoints/http_server.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sandbox_mirror import testkit

from cuda13_upgrade.hostscripts import completion_bench, server_auth, service_cycle

KEY = "sk-planted-9f3c2a7e"
PROMPTS = Path(__file__).resolve().parents[1] / "roles" / "verify_throughput" / "files" / "prompts.json"
FAST = {
    "rates_tok_s": {"cu130": {"plain": 1500.0}},
    "noise_pct": 1.0,
    "ttft_ms": 5,
    "startup_s": 0.1,
}


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["python", "-m", "sglang.launch_server", "--api-key", KEY, "--tp", "8"], KEY),
        (["python", "-m", "sglang.launch_server", f"--api-key={KEY}"], KEY),
        (["python", "--api-key", "old", "--api-key", KEY], KEY),  # argparse: the last one
        (["python", "-m", "sglang.launch_server", "--tp", "8"], None),
        (["python", "--api-key="], None),
        (["python", "--api-key"], None),
    ],
)
def test_the_key_is_read_from_a_server_s_argv(argv, key):
    assert server_auth.api_key_from_argv(argv) == key


def test_the_key_is_read_from_the_command_line_of_a_running_process():
    # The child prints once its interpreter runs: its /proc/<pid>/cmdline is then the
    # server-like argv (on a loaded machine it may still be the parent's before that).
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", "--api-key", KEY],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "up\n"
        assert server_auth.api_key_of_pids([proc.pid]) == KEY
        assert server_auth.api_key_of_pids([999_999_999, proc.pid]) == KEY  # a gone pid is skipped
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_no_unit_no_key():
    assert server_auth.unit_api_key(None) is None
    assert server_auth.unit_api_key("") is None


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib signature)
        pass


def test_bearer_sends_the_header_within_the_block_only_and_puts_the_opener_back():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/x"
    before = getattr(urllib.request, "_opener", None)
    try:
        _Recorder.seen = []
        with server_auth.bearer(KEY) as sent:
            assert sent is True
            urllib.request.urlopen(url, timeout=5).read()
            # a request that names its own header keeps it
            urllib.request.urlopen(
                urllib.request.Request(url, headers={"Authorization": "Bearer other"}), timeout=5
            ).read()
        assert getattr(urllib.request, "_opener", None) is before
        urllib.request.urlopen(url, timeout=5).read()
        with server_auth.bearer(None) as sent:
            assert sent is False
            urllib.request.urlopen(url, timeout=5).read()
    finally:
        server.shutdown()
        server.server_close()
    assert _Recorder.seen == [f"Bearer {KEY}", "Bearer other", None, None]
    assert KEY not in repr(server_auth._Bearer(KEY))


@pytest.fixture
def keyed_server(venv_cu130, no_ld_conf, tmp_path, monkeypatch):
    """The server double started with --api-key; the unit ``sglang.service`` is its process."""
    scenario = tmp_path / "fast.json"
    scenario.write_text(json.dumps(FAST))
    env = testkit.clean_env(
        SGLANG_SIM_SCENARIO=str(scenario),
        CUDA_HOME=str(venv_cu130.cuda_home),
        SANDBOX_LD_SO_CONF_D=str(no_ld_conf),
    )
    server = testkit.SimServer(venv_cu130.python, env, tmp_path / "logs", "--api-key", KEY)
    monkeypatch.setattr(
        server_auth, "unit_pids", lambda unit: [server.proc.pid] if unit == "sglang.service" else []
    )
    yield server
    server.close()


def _workload() -> dict:
    return json.loads(PROMPTS.read_text())


def test_the_double_refuses_requests_without_the_key_as_sglang_does(keyed_server):
    assert testkit.http_get(keyed_server.url + "/health")[0] == 200
    assert testkit.http_get(keyed_server.url + "/health_generate")[0] == 200
    status, body = testkit.http_get(keyed_server.url + "/get_server_info")
    assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
    request = urllib.request.Request(
        keyed_server.url + "/get_server_info", headers={"Authorization": f"Bearer {KEY}x"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_a_measure_without_the_unit_says_the_server_wants_a_key(keyed_server):
    with pytest.raises(completion_bench.BenchError) as exc:
        completion_bench.run({"url": keyed_server.url, "trials": 1, "warmup": 0, "max_tokens": 8})
    assert str(exc.value) == (
        f"cannot reach the server at {keyed_server.url}: HTTP Error 401: Unauthorized: the server "
        "answered 401 Unauthorized: it was started with --api-key (SGLang's option), and no unit "
        "was named to read the key from"
    )
    with pytest.raises(completion_bench.BenchError) as exc:
        completion_bench.run(
            {"url": keyed_server.url, "trials": 1, "warmup": 0, "max_tokens": 8, "auth_unit": "other.service"}
        )
    assert str(exc.value).endswith(
        "it was started with --api-key (SGLang's option), and no key was found on the command line "
        "of the unit other.service's processes to send as 'Authorization: Bearer <key>'"
    )


def test_every_measure_of_a_keyed_server_succeeds_and_no_record_holds_the_key(keyed_server):
    workload = _workload()
    common = {"url": keyed_server.url, "auth_unit": "sglang.service", "max_tokens": 8}
    records = [
        completion_bench.bench_module(
            {**common, "mode": "trials", "trials": 2, "warmup": 1, "flush_cache": True, "workload": workload},
            False,
        ),
        completion_bench.bench_module(
            {**common, "mode": "probe", "probe": 2, "max_new_tokens": 4, "workload": workload}, False
        ),
        completion_bench.bench_module(
            {
                **common,
                "mode": "load",
                "workload": workload,
                "ttft_prompt_len": 32,
                "ttft_requests": 2,
                "concurrency": 2,
                "soak_requests": 4,
                "soak_concurrency": 2,
            },
            False,
        ),
        completion_bench.bench_module(
            {
                **common,
                "mode": "watch",
                "workload": workload,
                "watch_seconds": 0.5,
                "watch_interval_s": 0.2,
                "max_new_tokens": 4,
            },
            False,
        ),
    ]
    for record in records:
        assert not record.get("failed"), record
        assert KEY not in json.dumps(record)
    trials, probe, load, watch = (r["bench"] for r in records)
    assert len(trials["trials"]) == 2
    assert len(probe["outputs"]) == 2 and all(o["output_ids"] for o in probe["outputs"])
    assert load["soak"]["served"] == 4 and load["soak"]["failures"] == []
    assert watch["watch"]["checks"] and all(c["outcome"] == "served" for c in watch["watch"]["checks"])


def test_the_restart_s_readiness_and_server_info_send_the_key_and_keep_it_out(keyed_server):
    with server_auth.bearer(server_auth.unit_api_key("sglang.service")):
        ready = service_cycle.wait_until_generates(keyed_server.url, 10)
        info, error = service_cycle.server_info(keyed_server.url)
    assert ready["generated"] is True and error is None
    assert info["tp_size"] == 1 and "api_key" not in info
    assert KEY not in json.dumps([ready, info])
    # Without the key /get_server_info is refused (what a measure of such a server met before).
    assert service_cycle.server_info(keyed_server.url) == (
        None,
        "Status code was 401 and not [200]: HTTP Error 401: Unauthorized",
    )


def test_the_script_reads_the_key_of_the_unit_given(keyed_server, tmp_path):
    """As a script (``--auth-unit``): the key of a unit that runs no server is none, so 401."""
    out = subprocess.run(
        [
            sys.executable,
            completion_bench.__file__,
            "--url",
            keyed_server.url,
            "--trials",
            "1",
            "--warmup",
            "0",
            "--max-tokens",
            "4",
            "--auth-unit",
            "no-such-unit-cuda13.service",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert (
        "no key was found on the command line of the unit no-such-unit-cuda13.service's processes"
        in out.stderr
    )
    assert KEY not in out.stdout + out.stderr


def test_sglang_s_bench_serving_gets_the_key_in_its_environment(keyed_server, venv_cu130):
    """``verify_throughput_method: bench_serving``: SGLang's client sends OPENAI_API_KEY as the
    bearer token (the double's bench_serving.py, as SGLang's get_auth_headers)."""
    asked = {
        "mode": "trials",
        "url": keyed_server.url,
        "method": "bench_serving",
        "python": str(venv_cu130.python),
        "trials": 1,
        "prompts": 2,
        "max_tokens": 8,
        "prompt_len": 16,
    }
    refused = completion_bench.bench_module(asked, False)
    # Without the key its GET /v1/models is refused, so it finds no model to ask for.
    assert refused["failed"] is True
    assert refused["msg"].endswith("No model specified or found. Please provide a model using `--model`.")
    served = completion_bench.bench_module({**asked, "auth_unit": "sglang.service"}, False)
    assert not served.get("failed"), served
    assert served["bench"]["trials"][0]["record"]["completed"] == 2
    assert KEY not in json.dumps(served)
