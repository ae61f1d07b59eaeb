"""Reports are private: the run's report directory 0700, its files 0600 (the
metrics textfile 0644, for node_exporter), and no token of the unit's ``Environment=``, of an
index URL's userinfo or of a server's ``--api-key`` in any file under it
(cuda13_upgrade.redact, cuda13_upgrade.reportfiles)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

from stepdoubles import options
from test_snapshot_step import _host, _raw

from cuda13_upgrade import reportfiles
from cuda13_upgrade.redact import MASK, redact, redact_environment, redact_text
from cuda13_upgrade.steps import snapshot
from cuda13_upgrade.summary import fleet_summary

TOKEN = "hf_PLANTEDsecret0123"
KEY = "sk-PLANTEDkey4567"
INDEX = f"https://ci-user:{TOKEN}@pypi.internal.example/simple"

UNIT = f"""# /etc/systemd/system/sglang.service
[Service]
User=sglang
Environment=HF_TOKEN={TOKEN} CUDA_HOME=/usr/local/cuda-12.8
Environment="PIP_INDEX_URL={INDEX}"
ExecStart=/opt/ml-env/bin/python -m sglang.launch_server --model-path /models/m --api-key {KEY} --port 30000
"""


def test_a_units_environment_values_are_masked_but_the_paths_the_upgrade_sets_are_kept():
    assert redact_text("Environment=HF_TOKEN=abc CUDA_HOME=/usr/local/cuda-13.0") == (
        "Environment=HF_TOKEN=*** CUDA_HOME=/usr/local/cuda-13.0"
    )
    assert redact_text("Environment=\"A=b c\" 'TRITON_CACHE_DIR=/c/triton'") == (
        "Environment=\"A=***\" 'TRITON_CACHE_DIR=/c/triton'"
    )
    # systemctl show -p Environment prints every assignment on one line
    assert redact_text("MainPID=7\nEnvironment=HF_TOKEN=abc HOME=/home/sglang\nUser=sglang") == (
        "MainPID=7\nEnvironment=HF_TOKEN=*** HOME=/home/sglang\nUser=sglang"
    )
    # the unit's text inside a JSON document (a task's result in ansible's log)
    assert TOKEN not in redact_text(json.dumps({"unit_text": UNIT}))
    assert "CUDA_HOME=/usr/local/cuda-12.8" in redact_text(json.dumps({"unit_text": UNIT}))


def test_url_userinfo_and_api_keys_are_masked_in_every_form():
    assert redact_text(f"Ask each package index (item={INDEX})") == (
        "Ask each package index (item=https://***@pypi.internal.example/simple)"
    )
    assert redact_text("https://token@host/simple https://host/simple") == (
        "https://***@host/simple https://host/simple"
    )
    assert redact_text(f"--api-key {KEY} --port 1") == "--api-key *** --port 1"
    assert redact_text(f"--api-key={KEY}") == "--api-key=***"
    assert redact_text(json.dumps(["--api-key", KEY], indent=4)) == json.dumps(["--api-key", MASK], indent=4)
    assert redact(["--port", "1", "--api-key", KEY]) == ["--port", "1", "--api-key", MASK]
    assert redact({"environment": {"HF_TOKEN": TOKEN, "HOME": "/h"}}) == {
        "environment": {"HF_TOKEN": MASK, "HOME": "/h"}
    }
    assert redact_environment({"XDG_CACHE_HOME": "/x", "SECRET": "s"}) == {
        "XDG_CACHE_HOME": "/x",
        "SECRET": MASK,
    }


def test_a_text_without_secrets_is_unchanged_and_redacting_twice_changes_nothing():
    plain = (
        "ExecStart=/opt/ml-env/bin/python -m sglang.launch_server --port 30000 http://127.0.0.1:30000/health"
    )
    assert redact_text(plain) == plain
    once = redact_text(UNIT)
    assert redact_text(once) == once and TOKEN not in once and KEY not in once


def _modes(run: Path) -> dict[str, int]:
    return {str(p.relative_to(run)): stat.S_IMODE(p.stat().st_mode) for p in [run, *run.rglob("*")]}


def test_a_planted_token_reaches_no_file_of_the_run_and_every_file_is_private(tmp_path, monkeypatch):
    """The snapshot (the unit's text, systemctl show's Environment, /proc/<pid>/environ), a
    host's result with the index URL and the server's arguments, the summary and the log the
    command writes: the token is in none of them; directories 0700, files 0600."""
    monkeypatch.delenv("CUDA13_METRICS_TEXTFILE_DIR", raising=False)
    run = tmp_path / "reports" / "r1"
    raw = _raw(
        tmp_path,
        unit_text=UNIT.rstrip("\n"),
        identity_show=f"MainPID=42\nUser=sglang\nGroup=sglang\nEnvironment=HF_TOKEN={TOKEN}\n",
        environ_b64=base64.b64encode(f"HF_TOKEN={TOKEN}\0HOME=/home/sglang\0".encode()).decode(),
    )
    opts = options(tmp_path)
    taken = snapshot.take(
        _host(raw),
        opts,
        run_id="r1",
        write_report=lambda manifest: reportfiles.write_json(run / "gpu-node-01" / "snapshot.json", manifest),
    )
    # the host's own copy keeps the unit as it is (the rollback and the measurement read it)
    assert KEY in json.dumps(taken["manifest"])
    result = {
        "host": "gpu-node-01",
        "status": "kept",
        "records": {"snapshot": taken, "preflight": {"index_url": INDEX}},
        "server_args": ["--model-path", "/models/m", "--api-key", KEY],
        "message": f"pip: could not reach {INDEX}",
    }
    reportfiles.write_json(run / "gpu-node-01" / "result.json", result)
    reportfiles.write_text(
        run / "ansible-rollout.log",
        f"TASK [Ask each package index] ok: [gpu-node-01] => (item={INDEX})\n{json.dumps(result)}\n",
    )
    fleet_summary(run, hosts=["gpu-node-01"])
    files = [p for p in run.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"snapshot.json", "result.json", "ansible-rollout.log", "summary.md"}
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        assert TOKEN not in text and KEY not in text and "ci-user" not in text, path
    snapshot_text = (run / "gpu-node-01" / "snapshot.json").read_text()
    assert "Environment=HF_TOKEN=***" in snapshot_text and "--api-key ***" in snapshot_text
    modes = _modes(run)
    assert modes.pop(".") == 0o700 and modes.pop("gpu-node-01") == 0o700
    assert modes.pop("cuda13_upgrade.prom") == 0o644  # node_exporter's textfile collector reads it
    assert set(modes.values()) == {0o600}, modes


def test_a_report_file_is_rewritten_private_when_an_older_run_left_it_world_readable(tmp_path):
    path = tmp_path / "run" / "host" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}\n")
    path.chmod(0o644)
    assert reportfiles.write_json(path, {}) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(reportfiles.private_dir(tmp_path / "run").stat().st_mode) == 0o700


def test_a_url_that_cannot_be_read_keeps_at_most_its_scheme_and_host():
    from cuda13_upgrade.redact import redact_url

    assert redact_url("https://hooks.example.com:99999/hook/SECRETPATH") == "https://hooks.example.com/***"
    assert redact_url("https://u:p/w@h.example/SECRETPATH") == "https://***"
    assert redact_url("htps://hooks.example.com/hook/SECRETPATH") == "htps://hooks.example.com/***"
    assert redact_url("hooks.example.com/hook/SECRETPATH") == "hooks.example.com/***"
    assert redact_url("https://hooks.example.com/hook/SECRET\x00PATH") == "https://***"
    assert redact_url("slack") == "slack"  # a target's format under cuda13_notify is kept
    told = redact({"cuda13_notify": [{"url": "https://u:p/w@h.example/SECRETPATH", "format": "json"}]})
    assert told == {"cuda13_notify": [{"url": "https://***", "format": "json"}]}
    for shown in ("https://***", "hooks.example.com/***", "https://hooks.example.com/***"):
        assert redact_url(shown) == shown


def test_a_prometheus_password_that_text_patterns_miss_is_masked_under_its_option():
    """redact_text's userinfo pattern stops at a quote, a backslash, a "/" or a space (so that it
    never spans two strings of a JSON or Python list); under cuda13_block_on_alerts a URL loses
    everything between :// and its last @ whatever the password holds."""
    from cuda13_upgrade.redact import redact_userinfo

    for password in ("it's", 'pa"ss', "pa\\ss", "pa/ss", "pa ss", "pa\nss", f"{TOKEN}@x"):
        url = f"http://ops:{password}@prom.example:9090/prometheus"
        record = redact({"cuda13_block_on_alerts": {"url": url, "ignore": ["Watchdog"]}})
        assert record == {
            "cuda13_block_on_alerts": {
                "url": "http://***@prom.example:9090/prometheus",
                "ignore": ["Watchdog"],
            }
        }
        assert redact({"cuda13_block_on_alerts": url}) == {
            "cuda13_block_on_alerts": "http://***@prom.example:9090/prometheus"
        }
    assert redact_userinfo("http://prom.example:9090") == "http://prom.example:9090"
    assert redact_userinfo(redact_userinfo("http://ops:it's@prom")) == "http://***@prom"
    assert redact_userinfo({"match": {"severity": "critical|page"}}) == {
        "match": {"severity": "critical|page"}
    }
