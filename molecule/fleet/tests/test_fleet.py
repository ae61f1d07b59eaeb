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


def test_canary_installed_the_release_wheel_and_cloned_no_tree(fleet):
    host = fleet[1]
    # sglang_build_method: wheel -- no SGLang source tree, the release's wheel in the new venv.
    assert not host.file("/opt/sglang-cu130").exists
    code = "import importlib.metadata as m, sglang; print(sglang.__version__, m.version('sglang'), sglang.__file__)"
    version, dist, path = host.check_output(f'/opt/ml-env-cu130/bin/python -c "{code}"').split()
    assert (version, dist) == ("0.5.9", "0.5.9")
    assert path.startswith("/opt/ml-env-cu130/lib/") and path.endswith("/site-packages/sglang/__init__.py")
    assert "Editable project location" not in host.check_output(
        "/opt/ml-env-cu130/bin/python -m pip --isolated show sglang"
    )
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "kept"
    assert (result["target"]["sglang_version"], result["target"]["sglang_method"]) == ("v0.5.9", "wheel")
    assert "sglang==0.5.9" in result["resolved_target"]
    record = json.loads(host.file("/var/lib/cuda13-upgrade/sglang-build.json").content_string)
    assert (record["method"], record["requirement"], record["paths"]) == (
        "wheel",
        "sglang==0.5.9",
        ["/opt/ml-env-cu130"],
    )


def test_regressed_host_rolled_back(fleet):
    host = fleet[2]
    assert _serving_venv(host) == "/opt/ml-env/bin/python"
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-12.8"
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "rolled_back"
    # It built SGLang from the tag (sglang_build_method: source); the tree stays for diagnosis.
    assert result["target"]["sglang_method"] == "source"
    assert host.check_output("git -C /opt/sglang-cu130 describe --tags --exact-match") == "v0.5.9"


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
