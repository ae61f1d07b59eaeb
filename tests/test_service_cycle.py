"""hostscripts/service_cycle.py: one planned restart of the service, run as the host runs it.

The GPUs' compute processes after a stop (read from a stand-in nvidia-smi that
prints nvidia-smi's CSV), the wait until a server generates (against stdlib HTTP
servers on this machine), the when-changed decision, and what a failed step reports.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cuda13_upgrade.hostscripts import service_cycle

SCRIPT = Path(__file__).resolve().parents[1] / "src" / "cuda13_upgrade" / "hostscripts" / "service_cycle.py"


def _fake_nvidia_smi(tmp_path: Path, stdout: str, rc: int = 0) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdout.write({stdout!r})\nsys.exit({rc})\n", encoding="utf-8"
    )
    path.chmod(0o755)
    return path


def _run(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def _release(*args: str) -> tuple[int, dict]:
    rc, result = _run("--release-only", *args)
    return rc, result["release"]


def test_processes_of_other_units_are_named_and_left_alone(tmp_path):
    # A process on the GPUs outside the unit's control group (here: this test's
    # sleeper) is listed with its memory summed over GPUs, and never signalled.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        smi = _fake_nvidia_smi(tmp_path, f"{sleeper.pid}, 81234\n{sleeper.pid}, 81234\n")
        rc, result = _release(
            "--unit", "sglang-test-none.service", "--nvidia-smi", str(smi), "--leftover-timeout", "0"
        )
        assert rc == 0
        assert result["free"] is True
        assert result["leftovers"] == [] and result["signalled"] == {}
        assert [(p["pid"], p["gpu_memory_mib"]) for p in result["others"]] == [(sleeper.pid, 162468)]
        assert "time.sleep(60)" in result["others"][0]["command"]
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_failing_nvidia_smi_is_reported_not_taken_for_free_gpus(tmp_path):
    smi = _fake_nvidia_smi(
        tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9
    )
    rc, result = _release("--unit", "sglang-test-none.service", "--nvidia-smi", str(smi))
    assert rc == 0
    assert result["nvidia_smi_error"].startswith("NVIDIA-SMI has failed")


class _Server(BaseHTTPRequestHandler):
    """/health_generate answers ``health`` (a status, or None for 404); POST
    /v1/completions answers one token."""

    health: int | None = 200
    posts = 0

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/get_server_info":
            self._answer(
                200, json.dumps({"tp_size": 8, "enable_torch_symm_mem": True, "version": "0.5.9"}).encode()
            )
            return
        health = type(self).health
        self._answer(404 if health is None or self.path != "/health_generate" else health)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        type(self).posts += 1
        self._answer(
            200,
            json.dumps(
                {"choices": [{"text": " ok"}], "usage": {"completion_tokens": body["max_tokens"]}}
            ).encode(),
        )


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Server]]]:
    handler = type("Handler", (_Server,), {"health": 200, "posts": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()


NO_UNIT = ("--unit", "cuda13-service-cycle-test.service")


def test_a_server_that_generates_is_ready_without_a_restart(server):
    url, _ = server
    rc, result = _run(*NO_UNIT, "--restart", "never", "--ready-url", url + "/", "--ready-timeout", "10")
    assert rc == 0
    assert result["restarted"] is False and result["release"] is None
    assert result["ready"]["generated"] is True
    assert result["ready"]["endpoint"] == "/health_generate"
    # No unit runs here: no main process, nothing to compare.
    assert result["main_pid"] == 0 and result["cmdline_b64"] == ""


def test_with_server_info_a_server_that_generates_is_asked_for_its_arguments(server):
    url, _ = server
    rc, result = _run(*NO_UNIT, "--ready-url", url, "--ready-timeout", "10", "--server-info")
    assert rc == 0
    assert result["server_info"] == {"tp_size": 8, "enable_torch_symm_mem": True, "version": "0.5.9"}
    assert result["server_info_error"] is None
    # No unit runs here: no run of it to read lines of.
    assert result["startup_log"] == []
    rc, plain = _run(*NO_UNIT, "--ready-url", url, "--ready-timeout", "10")
    assert "server_info" not in plain and "startup_log" not in plain


def test_server_info_that_cannot_be_read_says_why(server):
    url, _ = server
    assert service_cycle.server_info(url + "/missing")[0] is None
    info, error = service_cycle.server_info(url + "/missing")
    assert error.startswith("Status code was 404 and not [200]")


def test_a_server_without_health_generate_is_asked_for_one_token(server):
    url, handler = server
    handler.health = None
    rc, result = _run(*NO_UNIT, "--ready-url", url, "--ready-timeout", "10")
    assert rc == 0
    assert result["ready"] == {**result["ready"], "generated": True, "endpoint": "/v1/completions"}
    assert handler.posts == 1


def test_a_server_that_answers_503_is_not_ready_and_says_what_it_answered(server):
    url, handler = server
    handler.health = 503
    started = time.monotonic()
    rc, result = _run(*NO_UNIT, "--ready-url", url, "--ready-timeout", "3")
    assert rc == 1
    assert time.monotonic() - started < 15
    assert result["ready"]["generated"] is False
    assert result["ready"]["last"].startswith("Status code was 503 and not [200]: HTTP Error 503")


def test_no_server_is_a_failed_request_not_a_hang():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rc, result = _run(*NO_UNIT, "--ready-url", f"http://127.0.0.1:{port}", "--ready-timeout", "2")
    assert rc == 1
    assert result["ready"]["last"].startswith("Request failed: <urlopen error [Errno 111]")


def test_a_failed_stop_is_reported_and_nothing_is_started_or_waited_for(server):
    # This machine has no systemd as PID 1: systemctl refuses, as it would for a
    # unit it cannot stop. The start is not tried, the server not waited for.
    url, _ = server
    rc, result = _run(*NO_UNIT, "--restart", "always", "--ready-url", url)
    assert rc == 1
    assert result["restarted"] is True
    assert result["start_error"].startswith("systemctl stop cuda13-service-cycle-test.service: ")
    assert result["release"] is None and result["ready"] is None


@pytest.mark.parametrize(
    ("cmdline", "args", "serves"),
    [
        (b"/opt/ml-env-cu130/bin/python\0-m\0sglang.launch_server\0--tp\0002\0", ["--tp", 2], True),
        (b"/opt/ml-env-cu130/bin/python\0-m\0sglang.launch_server\0", [], True),
        # the old stack's Python: the drop-ins were written, the restart never came
        (b"/opt/ml-env/bin/python\0-m\0sglang.launch_server\0--tp\0002\0", ["--tp", 2], False),
        # another profile's arguments
        (b"/opt/ml-env-cu130/bin/python\0-m\0sglang.launch_server\0--tp\0004\0", ["--tp", 2], False),
        # not running, a wrapper
        (b"", [], False),
        (b"/bin/sh\0/usr/local/bin/serve.sh\0", [], False),
    ],
)
def test_when_changed_restarts_unless_the_main_process_runs_the_profile(cmdline, args, serves):
    own = "/opt/ml-env-cu130/bin/python -m sglang.launch_server"
    assert service_cycle.serves(cmdline, own, "/opt/ml-env-cu130/", args) is serves
