"""The alert gate against a real Prometheus: Debian's ``prometheus`` package (installed by
scripts/install-system-packages.sh), started by each test on 127.0.0.1 with its own rule file
(``evaluation_interval: 1s``) and a TSDB under tmp_path.

A rule whose alert fires and then resolves holds a batch and then lets it go; an alert over the
project's own metric (``absent(cuda13_upgrade_hosts{...})``, firing all along) never holds one; an
alert that does not resolve holds the batch until ``cuda13_until`` passes and is named in the
report; a closed port and a wrong path refuse the batch, naming the URL and the error. The same
through ansible-playbook: playbooks/start.yml and the upgrade play's own batch gate on local
hosts (tests/test_batch_plan_playbook.py's play).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from test_batch_plan_playbook import HOSTS as FLEET
from test_batch_plan_playbook import _run

from cuda13_upgrade import alerts
from cuda13_upgrade.steps import fleet

PROMETHEUS = shutil.which("prometheus")
HOSTS = ["gpu-node-01", "gpu-node-02"]

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="no prometheus binary (Debian's package: scripts/install-system-packages.sh)"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rules(resolves_at: int) -> str:
    return f"""groups:
  - name: fleet
    interval: 1s
    rules:
      - alert: GpuNodeHot
        expr: vector(time()) < {resolves_at}
        for: 0s
        labels:
          severity: page
      - alert: StorageDegraded
        expr: vector(1)
        for: 0s
        labels:
          team: storage
      - alert: Cuda13UpgradeRolledBack
        expr: absent(cuda13_upgrade_hosts{{state="rolled_back"}})
        for: 0s
        labels:
          severity: page
"""


@pytest.fixture
def prometheus(tmp_path):
    """Start a Prometheus whose GpuNodeHot fires for about 7 s from now; yields its URL."""
    config = tmp_path / "prometheus.yml"
    (tmp_path / "rules.yml").write_text(_rules(int(time.time()) + 8))
    config.write_text("global:\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\n")
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"prometheus exited {process.returncode}:\n{(tmp_path / 'prometheus.log').read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus not ready in 15 s:\n{(tmp_path / 'prometheus.log').read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _firing(url: str, *names: str, within_s: float = 5) -> dict:
    """Wait until the rules API lists ``names`` as firing (the first evaluations); its last answer."""
    gate = alerts.parse(url)
    deadline = time.monotonic() + within_s
    while True:
        answer = alerts.active_alerts(json.loads(alerts.http_get(gate.rules_url, gate.headers(), 5)))
        firing = {a["alertname"] for a in answer if a["state"] == "firing"}
        if set(names) <= firing or time.monotonic() > deadline:
            return {"firing": firing, "alerts": answer}
        time.sleep(0.2)


def _gate(tmp_path, option, **more):
    plan = fleet.plan(HOSTS, {"cuda13_serial": 1, "cuda13_block_on_alerts": option, **more})
    assert plan["ok"], plan["failures"]
    said: list[str] = []
    began = time.monotonic()
    result = fleet.batch_gate(
        plan,
        hosts=HOSTS,
        batch=["gpu-node-01"],
        active=HOSTS,
        statuses={},
        run_id="r1",
        reports_dir=tmp_path / "reports",
        run_hosts=HOSTS,
        say=said.append,
    )
    return result, said, time.monotonic() - began


@needs_prometheus
def test_a_firing_alert_holds_the_canary_until_it_resolves(prometheus, tmp_path):
    seen = _firing(prometheus, "GpuNodeHot", "StorageDegraded", "Cuda13UpgradeRolledBack")
    assert {"GpuNodeHot", "StorageDegraded", "Cuda13UpgradeRolledBack"} <= seen["firing"]
    option = {"url": prometheus, "ignore": {"team": "storage"}, "interval_s": 1, "max_wait_s": 20}
    result, said, took = _gate(tmp_path, option)
    assert result == {"start": True, "not_started": None}
    assert said[0].startswith(
        f"the batch gpu-node-01 waits: 1 active alert (Prometheus {prometheus}, cuda13_block_on_alerts): "
        'GpuNodeHot{severity="page"} firing since '
    )
    assert said[-1].startswith("the alerts cleared after ") and said[-1].endswith(
        f"s: the batch gpu-node-01 starts (Prometheus {prometheus}, cuda13_block_on_alerts)"
    )
    assert len(said) >= 2 and 0.5 < took < 15
    # The batch after it: the project's own alert fires all along, and holds nothing.
    after = alerts.ask(alerts.parse(option))
    assert [a["alertname"] for a in after["own"]] == ["Cuda13UpgradeRolledBack"] and after["blocking"] == []
    again, said, took = _gate(tmp_path, {**option, "match": "Cuda13Upgrade.*", "firing_only": False})
    assert again == {"start": True, "not_started": None} and said == [] and took < 5


@needs_prometheus
def test_an_alert_that_does_not_resolve_holds_the_batch_until_cuda13_until(prometheus, tmp_path):
    _firing(prometheus, "StorageDegraded")
    until = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 3))
    result, said, took = _gate(
        tmp_path, {"url": prometheus, "match": {"team": "storage"}, "interval_s": 1}, cuda13_until=until
    )
    held = result["not_started"]
    assert result["start"] is False and held["hosts"] == HOSTS
    assert held["reason"].startswith(
        f'held by active alerts until cuda13_until passed ({until[:19]}Z): StorageDegraded{{team="storage"}} '
        "firing since "
    )
    assert held["reason"].endswith(f"(Prometheus {prometheus}, cuda13_block_on_alerts)")
    assert [a["alertname"] for a in held["alerts"]] == ["StorageDegraded"]
    assert len(said) >= 2 and took < 8
    written = json.loads((tmp_path / "reports" / "r1" / "not_started.json").read_text())
    assert written["reason"] == held["reason"]


@needs_prometheus
def test_a_wrong_path_is_refused_with_prometheus_s_own_answer(prometheus, tmp_path):
    result, said, _ = _gate(tmp_path, {"url": prometheus + "/prometheus"})
    assert result["not_started"]["reason"] == (
        f"Prometheus cannot be asked for its alerts (GET {prometheus}/prometheus/api/v1/rules?type=alert: "
        "HTTP 404 Not Found); cuda13_block_on_alerts on_unreachable is refuse"
    )


def test_an_unreachable_prometheus_refuses_the_batch_naming_the_url(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there any more
    result, said, took = _gate(tmp_path, {"url": url, "timeout_s": 2})
    assert result["start"] is False and said == []
    assert result["not_started"]["reason"] == (
        f"Prometheus cannot be asked for its alerts (GET {url}/api/v1/rules?type=alert: [Errno 111] Connection "
        "refused); cuda13_block_on_alerts on_unreachable is refuse"
    )
    assert result["not_started"]["hosts"] == HOSTS
    assert Path(tmp_path / "reports" / "r1" / "not_started.json").is_file()


@needs_prometheus
def test_the_upgrade_play_holds_its_canary_until_the_alert_resolves(prometheus, tmp_path):
    _firing(prometheus, "GpuNodeHot", "StorageDegraded")
    option = {"url": prometheus, "ignore": {"team": "storage"}, "interval_s": 1, "max_wait_s": 20}
    rc, out, played = _run(tmp_path, group_vars={"cuda13_serial": [1, 2], "cuda13_block_on_alerts": option})
    assert rc == 0, out
    assert played == [FLEET[:1], FLEET[1:3], FLEET[3:5], FLEET[5:7], FLEET[7:]]
    assert (
        f"batches wait while Prometheus at {prometheus} has firing alerts (cuda13_block_on_alerts: not" in out
    )
    waits = re.findall(r"^the batch (.+?) waits: 1 active alert \(.*?\): GpuNodeHot", out, re.MULTILINE)
    assert waits and set(waits) == {"gpu-node-01"}, out  # the canary only; the alert resolved then
    cleared = re.findall(r"^the alerts cleared after \d+ s: the batch (.+?) starts", out, re.MULTILINE)
    assert cleared == ["gpu-node-01"]
    assert out.index("the alerts cleared after") < out.index("BATCH")


def test_the_upgrade_play_starts_no_batch_when_prometheus_does_not_answer(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    rc, out, played = _run(tmp_path, group_vars={"cuda13_block_on_alerts": url})
    assert rc == 0, out
    assert played == []
    assert (
        f"not started: Prometheus cannot be asked for its alerts (GET {url}/api/v1/rules?type=alert: [Errno 111] "
        "Connection refused); cuda13_block_on_alerts on_unreachable is refuse (hosts gpu-node-01, gpu-node-02"
    ) in out
