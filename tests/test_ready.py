"""roles/cuda13 (entry point serve, no restart) on localhost: ready means the server generates.

Run with ansible-playbook against the simulated server (a warm-up window where /health is
200 and generation blocks) and against a stdlib server without /health_generate.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from playbook import run_playbook
from sandbox_mirror import testkit
from test_sim_server import FAST, server_env

REPO = Path(__file__).resolve().parents[1]


def _wait(tmp_path: Path, url: str, timeout: int) -> subprocess.CompletedProcess:
    playbook = tmp_path / "wait.yml"
    playbook.write_text(
        f"""---
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: cuda13
        tasks_from: serve
      vars:
        cuda13_serve_service: sglang-test.service
        cuda13_serve_exec_start: /opt/ml-env/bin/python -m sglang.launch_server
        cuda13_serve_restart: never
        cuda13_serve_url: "{url}"
        cuda13_serve_timeout: {timeout}
        cuda13_serve_what: the stack under test
"""
    )
    return run_playbook(playbook, roles=True, filters=True)


def _sim(venv, no_ld_conf, tmp_path, window: float) -> testkit.SimServer:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({**FAST, "warmup_window_s": {"cu130": window}}))
    env = server_env(venv, scenario, no_ld_conf, SGLANG_HEALTH_CHECK_TIMEOUT="2")
    return testkit.SimServer(venv.python, env, tmp_path)


def test_waits_through_the_warmup_window_until_the_server_generates(venv_cu130, no_ld_conf, tmp_path):
    server = _sim(venv_cu130, no_ld_conf, tmp_path, 6)
    try:
        started = time.monotonic()
        proc = _wait(tmp_path, server.url, 60)
        waited = time.monotonic() - started
        info = json.loads(testkit.http_get(server.url + "/get_server_info")[1])
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # /health was 200 from the start; the task returned only after the window.
    assert waited >= 5.0
    assert info["simulation"]["warmup_left_s"] == 0
    assert info["simulation"]["requests_in_warmup"] == 0


def test_a_server_that_never_generates_fails_with_the_wait_and_the_option(venv_cu130, no_ld_conf, tmp_path):
    server = _sim(venv_cu130, no_ld_conf, tmp_path, 120)
    try:
        proc = _wait(tmp_path, server.url, 4)
    finally:
        server.close()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "sglang-test.service (the stack under test) did not generate a token at" in out
    assert f"{server.url} within 4 s (last answer: Status code was 503" in out
    assert "cuda13_health_timeout" in out


class _NoHealthGenerate(BaseHTTPRequestHandler):
    """A server without /health_generate that answers one-token completions."""

    completions = 0

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        type(self).completions += 1
        data = json.dumps(
            {"choices": [{"text": " ok"}], "usage": {"completion_tokens": body["max_tokens"]}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_server_without_health_generate_is_asked_for_one_token(tmp_path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _NoHealthGenerate)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        proc = _wait(tmp_path, f"http://127.0.0.1:{httpd.server_address[1]}", 20)
    finally:
        httpd.shutdown()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _NoHealthGenerate.completions == 1
