"""roles/cuda13/tasks/serve.yml (the action cuda13_serve) on localhost, without a unit: what each
mode does.

The server is a stdlib HTTP server whose /health_generate answers 200; this machine has
no systemd as PID 1, so no main process is named and the running-arguments check has
nothing to compare (a wrapper's case), and a stop fails as a unit that cannot be stopped
would. The drop-in is written in check mode only, so nothing under /etc/systemd/system is
written. The one task's record (``cuda13_serve_result``) is kept for the assertions.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playbook import run_playbook

UNIT = "cuda13-serve-test.service"


class _Generates(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200 if self.path == "/health_generate" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Generates)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def _serve(tmp_path: Path, url: str, *args: str, **options: str) -> subprocess.CompletedProcess:
    extra = "".join(f"        {name}: {value}\n" for name, value in options.items())
    playbook = tmp_path / "serve.yml"
    playbook.write_text(
        f"""---
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: cuda13
        tasks_from: serve
      vars:
        cuda13_serve_service: {UNIT}
        cuda13_serve_exec_start: /opt/ml-env/bin/python -m sglang.launch_server
        cuda13_serve_venv: /opt/ml-env
        cuda13_serve_url: "{url}"
        cuda13_serve_timeout: 10
        cuda13_serve_what: the profile under test
{extra}
  post_tasks:
    - name: Keep the record
      ansible.builtin.copy:
        dest: {tmp_path / "served.json"}
        content: "{{{{ cuda13_serve_result | default({{}}) | to_json }}}}"
        mode: "0644"
      check_mode: false
      changed_when: false
"""
    )
    return run_playbook(playbook, *args, roles=True, filters=True)


def _ran(proc: subprocess.CompletedProcess) -> dict[str, str]:
    """Task name -> its status on localhost (ok, changed, skipping, fatal)."""
    out = proc.stdout
    ran = {}
    for match in re.finditer(
        r"^TASK \[cuda13 : (.+?)\] \*+\n(?:(?!TASK ).*\n)*?(ok|changed|skipping|fatal): \[localhost\]",
        out,
        re.M,
    ):
        ran[match.group(1)] = match.group(2)
    return ran


def _served(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "served.json").read_text())


SERVE = f"Put the service into the profile and wait until it generates, {UNIT}"


def test_never_waits_and_checks_without_touching_the_drop_in(tmp_path, url):
    proc = _serve(tmp_path, url, cuda13_serve_restart="never", cuda13_serve_args='["--tp", 2]')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = _ran(proc)
    assert ran[SERVE] == "ok"
    assert f"{UNIT} serves the profile under test, not restarted." in proc.stdout
    # One task on the host beyond the argument check: the drop-in is left, the server waited for.
    assert sorted(ran) == sorted([SERVE, *[n for n in ran if n.startswith("Validating arguments")]])
    served = _served(tmp_path)
    assert served["restarted"] is False and served["dropin_changed"] is False
    assert served["cycle"]["restart"] == "never" and served["cycle"]["ready"]["generated"] is True
    assert "diff" not in served


def test_when_changed_in_check_mode_reports_the_restart_and_does_not_wait(tmp_path, url):
    proc = _serve(
        tmp_path,
        url,
        "--check",
        "--diff",
        cuda13_serve_restart="when-changed",
        cuda13_serve_args='["--tp", 2, "a b"]',
        cuda13_serve_check="false",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The drop-in sets the own command with the arguments, each quoted for systemd's shell-like split.
    assert (
        "+ExecStart=\n+ExecStart=/opt/ml-env/bin/python -m sglang.launch_server --tp 2 'a b'\n" in proc.stdout
    )
    ran = _ran(proc)
    assert ran[SERVE] == "changed"
    assert f"Would restart {UNIT} (the profile under test)." in proc.stdout
    served = _served(tmp_path)
    # Nothing ran on the host beyond the drop-in's comparison: no cycle, no wait.
    assert served["cycle"] is None and served["would_restart"] is True
    assert not Path(f"/etc/systemd/system/{UNIT}.d").exists()


def test_a_mode_that_is_not_one_of_three_fails_at_the_arguments(tmp_path, url):
    proc = _serve(tmp_path, url, cuda13_serve_restart="sometimes")
    assert proc.returncode != 0
    assert "cuda13_serve_restart" in proc.stdout + proc.stderr


def test_when_changed_restarts_a_service_that_does_not_run_the_venv(tmp_path, url):
    # No drop-in changed, but no main process runs /opt/ml-env's Python: the restart
    # begins, and stops at the stop this machine's systemctl refuses; the server is
    # not waited for, and the failure names the step and what to check.
    proc = _serve(tmp_path, url, cuda13_serve_restart="when-changed", cuda13_serve_check="false")
    ran = _ran(proc)
    assert ran[SERVE] == "fatal"
    assert f"{UNIT} (the profile under test) did not start: systemctl stop {UNIT}: " in proc.stdout
    assert "cuda13_health_timeout" in proc.stdout
    assert proc.returncode != 0
    # The failed task's result is kept small: the message and what counts.
    failed = proc.stdout[proc.stdout.index("fatal: [localhost]") :]
    assert "restarted: true" in failed and "leftovers: []" in failed
    assert "cycle:" not in failed
