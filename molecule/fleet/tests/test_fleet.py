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


def test_canary_was_watched_in_service_before_the_next_batch(fleet):
    result = json.loads(fleet[1].file("/var/lib/cuda13-upgrade/result.json").content_string)
    watched = result["batch_soak"]
    assert watched["healthy"] is True and watched["output_compared"] is True
    assert watched["checks"] == watched["served"] >= 30  # every 5 s for 150 s (host_vars, inventory/sandbox)
    assert result["run_id"] == "molecule-fleet-window"
    steps = [step["step"] for step in result["steps"]]
    assert steps[steps.index("verify") :] == ["verify", "undrain", "batch_soak", "result"]


def test_verify_drained_the_kept_canary_and_put_it_back(fleet):
    events = [
        json.loads(line)
        for line in fleet[1].file("/var/log/sglang-router-events.jsonl").content_string.splitlines()
    ]
    # The rollout: out for the upgrade, back for the soak between batches. Then verify: out, back.
    assert [e["event"] for e in events] == ["remove", "add", "remove", "add"]
    assert events[-1]["workers"] == ["http://127.0.0.1:30000"]
    # verify measured the stack the canary kept, and left it so.
    assert _serving_venv(fleet[1]) == "/opt/ml-env-cu130/bin/python"


def test_host_that_crashed_in_the_soak_between_batches_rolled_back(fleet):
    host = fleet[3]
    assert _serving_venv(host) == "/opt/ml-env/bin/python"
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-12.8"
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "rolled_back"
    # The gate kept it: every profile passed; the soak between batches found the crash.
    assert {d["verdict"] for d in result["decisions"].values()} == {"keep"}
    assert result["failed_step"] == "batch_soak"
    assert result["batch_soak"]["outcome"] == "crash"
    assert result["reason"].startswith("degraded in service ")
    assert "soak between batches (cuda13_soak_seconds)" in result["reason"]
    assert "SIGFPE" in result["reason"]
    assert result["rollback"]["performed"] is True
    # Out of the router for the upgrade, back for the soak, out again for the rollback, back after.
    events = [
        json.loads(line)
        for line in host.file("/var/log/sglang-router-events.jsonl").content_string.splitlines()
    ]
    assert [e["event"] for e in events] == ["remove", "add", "remove", "add"]
    assert events[-1]["workers"] == ["http://127.0.0.1:30000"]


def test_unreached_hosts_are_untouched(fleet):
    for n in (4,):
        host = fleet[n]
        assert _serving_venv(host) == "/opt/ml-env/bin/python"
        assert not host.package("cuda-toolkit-13-0").is_installed
        assert not host.file("/opt/ml-env-cu130").exists
        assert not host.file("/var/lib/cuda13-upgrade/snapshots").exists


def test_report_rows_agree_with_the_hosts():
    rows = _summary_rows()
    assert rows["cuda13-fleet-1"]["status"] == "kept"
    assert rows["cuda13-fleet-2"]["status"] == "rolled_back"
    assert rows["cuda13-fleet-3"]["status"] == "rolled_back"
    assert rows["cuda13-fleet-4"]["status"] == "not reached"
    summary = (RUN / "summary.md").read_text()
    assert "failure budget spent" in summary and "cuda13_max_failed_hosts 1" in summary
    assert "## Soak between batches" in summary
    print(summary)
    assert (RUN / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_window_run_kept_the_canary_and_did_not_start_the_second_host():
    window = RUN.parent / "molecule-fleet-window"
    rows = {row["host"]: row for row in json.loads((window / "summary.json").read_text())["rows"]}
    assert set(rows) == {"cuda13-fleet-1", "cuda13-fleet-2"}
    assert rows["cuda13-fleet-1"]["status"] == "kept"
    assert rows["cuda13-fleet-2"]["status"] == "not reached"
    assert rows["cuda13-fleet-2"]["reason"].startswith("past cuda13_until (")
    assert "not started: past cuda13_until" in (window / "summary.md").read_text()
    # The run that continued the fleet reports the whole of it, the canary already kept.
    continued = {row["host"]: row for row in json.loads((RUN / "summary.json").read_text())["rows"]}
    assert set(continued) == {f"cuda13-fleet-{n}" for n in range(1, 5)}
    assert continued["cuda13-fleet-1"]["status"] == "kept"
    assert continued["cuda13-fleet-1"]["already_kept"] is True
