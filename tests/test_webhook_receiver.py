"""molecule/shared/webhook_receiver.py, the fleet scenario's webhook server, run as the scenario runs it.

The script is started as a subprocess on a scratch directory; a POST is answered as Slack's
incoming webhooks answer (200, ``ok``) and kept in ``received.jsonl``; a POST to ``/never...`` is
kept and never answered; ``stop`` in the directory ends it with status 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "molecule" / "shared" / "webhook_receiver.py"


def _post(url: str, data: bytes, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - 127.0.0.1
        return response.status, response.read()


@pytest.fixture
def receiver(tmp_path):
    where = tmp_path / "webhooks"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(where), "--lifetime-s", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not (where / "port").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no port file within 10 s"
            time.sleep(0.05)
        yield where, proc, f"http://127.0.0.1:{(where / 'port').read_text().strip()}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_post_is_kept_and_answered_ok_a_never_post_is_not_answered_and_stop_ends_it(receiver):
    where, proc, url = receiver
    assert (where / "port").read_text().strip().isdigit()
    assert not (where / "port.partial").exists()

    before = time.time()
    status, answer = _post(url + "/hooks/cuda13/abc", json.dumps({"event": "start", "n": 1}).encode(), 5)
    assert (status, answer) == (200, b"ok")
    status, answer = _post(url + "/plain", b"not json", 5)
    assert (status, answer) == (200, b"ok")

    began = time.monotonic()
    with pytest.raises(TimeoutError):
        _post(url + "/never/abc", json.dumps({"event": "end"}).encode(), 1)
    assert time.monotonic() - began < 3

    lines = [json.loads(line) for line in (where / "received.jsonl").read_text().splitlines()]
    assert [(line["path"], line["body"]) for line in lines] == [
        ("/hooks/cuda13/abc", {"event": "start", "n": 1}),
        ("/plain", "not json"),
        ("/never/abc", {"event": "end"}),
    ]
    assert all(line["headers"]["Content-Type"] == "application/json" for line in lines)
    assert all(before <= line["at"] <= time.time() for line in lines)

    (where / "stop").touch()
    assert proc.wait(timeout=5) == 0, proc.communicate()


def test_a_bad_command_line_exits_2(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--lifetime-s", "soon"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--lifetime-s: invalid float value: 'soon'" in done.stderr


def test_it_ends_with_status_0_after_its_lifetime_or_once_its_directory_is_gone(tmp_path):
    lived = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "a"), "--lifetime-s", "1"], timeout=30, check=False
    )
    assert lived.returncode == 0 and (tmp_path / "a" / "port").exists()
    gone = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(gone), "--lifetime-s", "60"])
    try:
        deadline = time.monotonic() + 10
        while not (gone / "port").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for path in gone.iterdir():
            path.unlink()
        gone.rmdir()
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
