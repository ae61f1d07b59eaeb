"""Every host's state after the rollout agrees with the fleet report."""

import json
import os
from pathlib import Path

RUN = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports" / "molecule-fleet"


def _serving_venv(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    return host.file(f"/proc/{pid}/cmdline").content_string.split("\0")[0]


def _summary_rows():
    rows = json.loads((RUN / "summary.json").read_text())["rows"]
    return {row["host"]: row for row in rows}


def test_canary_kept_the_upgrade(fleet):
    host = fleet[1]
    assert _serving_venv(host) == "/opt/ml-env-cu130/bin/python"
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-13.0"
    assert json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)["status"] == "kept"


def test_regressed_host_rolled_back(fleet):
    host = fleet[2]
    assert _serving_venv(host) == "/opt/ml-env/bin/python"
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-12.8"
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "rolled_back"


def test_unreached_hosts_are_untouched(fleet):
    for n in (3, 4):
        host = fleet[n]
        assert _serving_venv(host) == "/opt/ml-env/bin/python"
        assert not host.package("cuda-toolkit-13-0").is_installed
        assert not host.file("/opt/ml-env-cu130").exists
        assert not host.file("/var/lib/cuda13-upgrade/snapshots").exists


def test_report_rows_agree_with_the_hosts():
    rows = _summary_rows()
    assert rows["cuda13-fleet-1"]["status"] == "kept"
    assert rows["cuda13-fleet-2"]["status"] == "rolled_back"
    assert rows["cuda13-fleet-3"]["status"] == "not reached"
    assert rows["cuda13-fleet-4"]["status"] == "not reached"
    assert (RUN / "summary.md").read_text().count("not reached") >= 2
    assert (RUN / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
