"""The router drain hooks: undrain adds back only a worker that drain took out.

Runs the hooks (playbooks/hooks/sglang-router-*.yml) with ansible-playbook on
localhost against the sandbox's stand-in router (sandbox/host/sglang-router).
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKER = "http://127.0.0.1:30000"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def router(tmp_path):
    def start(name, workers):
        port = _free_port()
        events = tmp_path / f"{name}-events.jsonl"
        proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "sandbox/host/sglang-router"),
                "--port",
                str(port),
                "--worker-urls",
                *workers,
                "--events-file",
                str(events),
            ]
        )
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        return url, events

    started = []
    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)


def _workers(url):
    return json.loads(urllib.request.urlopen(url + "/list_workers", timeout=5).read())["urls"]


def _hooks(tmp_path, hosts):
    """One ansible-playbook run: ``hosts`` maps a host name to (router URL, [hooks]).

    Each host is localhost with its own state directory and router.
    """
    play = tmp_path / "hooks.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  vars:\n"
        f"    cuda13_router_worker_url: {WORKER}\n    cuda13_drain_wait_seconds: 0\n"
        "  tasks:\n"
        f"    - ansible.builtin.include_tasks: {REPO}/playbooks/hooks/sglang-router-drain.yml\n"
        "      when: \"'drain' in hooks\"\n"
        f"    - ansible.builtin.include_tasks: {REPO}/playbooks/hooks/sglang-router-undrain.yml\n"
        "      when: \"'undrain' in hooks\"\n"
    )
    inventory = {
        "all": {
            "hosts": {},
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }
    }
    for name, (url, hooks) in hosts.items():
        (tmp_path / name).mkdir(exist_ok=True)
        inventory["all"]["hosts"][name] = {
            "cuda13_state_dir": str(tmp_path / name),
            "cuda13_router_url": url,
            "hooks": hooks,
        }
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            str(play),
            "-i",
            str(tmp_path / "hosts.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _events(path):
    return [json.loads(line)["event"] for line in path.read_text().splitlines()] if path.exists() else []


def test_undrain_puts_back_only_what_drain_took_out(tmp_path, router):
    present, present_events = router("present", [WORKER])
    absent, absent_events = router("absent", ["http://127.0.0.1:30001"])
    stopped, stopped_events = router("stopped", [WORKER])
    out = _hooks(
        tmp_path,
        {
            "present": (present, ["drain"]),
            "absent": (absent, ["drain", "undrain"]),
            "stopped": (stopped, ["drain"]),
        },
    )
    # A worker in the router is taken out, and the drain records it.
    assert _workers(present) == []
    assert json.loads((tmp_path / "present" / "router-drain.json").read_text())["removed"] is True
    # A worker absent before the run stays absent: nothing added, nothing removed.
    assert _workers(absent) == ["http://127.0.0.1:30001"]
    assert _events(absent_events) == []
    assert "was not in the router before the run" in out
    assert not (tmp_path / "absent" / "router-drain.json").exists()

    # present: undrained; stopped: the run stopped after the drain, the next run
    # drains again (the router answers 404 now) and still puts it back.
    _hooks(tmp_path, {"present": (present, ["undrain"]), "stopped": (stopped, ["drain", "undrain"])})
    for url, events, name in ((present, present_events, "present"), (stopped, stopped_events, "stopped")):
        assert _workers(url) == [WORKER], name
        assert _events(events) == ["remove", "add"], name
        assert not (tmp_path / name / "router-drain.json").exists()
