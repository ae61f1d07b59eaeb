"""After a regression: the host equals its pre-upgrade snapshot and serves at the old rate.

The fleet's regressed host (cuda13-fleet-2, the second batch), with a strict
start limit and a unit whose stops leave the server's scheduler behind
(host_vars/cuda13-fleet-2.yml).
"""

import json
from datetime import datetime
from statistics import median

import pytest
from probes import stream_decode

from cuda13_upgrade.stack import parse_alternatives_query


@pytest.fixture(scope="module")
def host(fleet):
    return fleet[2]


def _snapshot(host):
    return json.loads(host.file("/var/lib/cuda13-upgrade/snapshots/pre-upgrade.json").content_string)


def test_result_says_rolled_back_with_the_reason(host):
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "rolled_back"
    assert result["failed_step"] == "verify"
    assert {d["verdict"] for d in result["decisions"].values()} == {"regressed"}
    assert "regressed" in result["reason"]
    assert result["rollback"]["performed"] is True
    assert result["rollback"]["confirmed"] is True
    # Quick, measured against this very run rather than a wall-clock bound (the machine
    # may be loaded): restoring takes less than what a rebuild of the old stack would
    # redo, the toolkit, wheels and build steps this run took for the new one.
    rebuild_s = sum(
        s["duration_s"] for s in result["steps"] if s["step"] in {"toolkit", "wheels", "sglang_build"}
    )
    assert 0 < float(result["rollback"]["seconds"]) < rebuild_s, (result["rollback"], result["steps"])


def test_old_venv_freeze_equals_the_snapshot(host):
    now = sorted(host.check_output("/opt/ml-env/bin/python -m pip freeze --all --isolated").splitlines())
    assert now == _snapshot(host)["venv"]["pip_freeze"]


def test_alternatives_point_where_the_snapshot_says(host):
    snapshot = _snapshot(host)
    assert (
        host.check_output("readlink -f /usr/local/cuda")
        == snapshot["cuda"]["resolved"]
        == "/usr/local/cuda-12.8"
    )
    assert host.check_output("readlink -f /usr/local/cuda-12") == "/usr/local/cuda-12.8"
    assert "release 12.8" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_each_alternatives_group_has_its_recorded_target_and_mode(host):
    # The rollback restores each group's target as recorded, and its mode: a group
    # recorded in auto mode is auto again where auto picks the recorded target, else
    # (the newer toolkit still installed, with the higher priority) manual on it.
    recorded = {name: q for name, q in _snapshot(host)["cuda"]["alternatives"].items() if q}
    assert {"cuda", "cuda-12"} <= set(recorded)
    for name, before in recorded.items():
        now = parse_alternatives_query(host.check_output(f"update-alternatives --query {name}"))
        assert now["value"] == before["value"], (name, before, now)
        if before["status"] == "manual" or now["best"] != before["value"]:
            assert now["status"] == "manual", (name, before, now)
        else:
            assert now["status"] == "auto", (name, before, now)


def test_unit_has_no_upgrade_dropins_and_equals_the_snapshot(host):
    snapshot = _snapshot(host)
    assert not host.file("/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf").exists
    assert not host.file("/etc/systemd/system/sglang.service.d/60-cuda13-profile.conf").exists
    assert host.check_output("systemctl cat sglang.service") == snapshot["service"]["unit_text"]


def test_service_runs_from_the_old_venv_at_the_old_rate(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    cmdline = host.file(f"/proc/{pid}/cmdline").content_string.replace("\0", " ")
    assert cmdline.startswith("/opt/ml-env/bin/python -m sglang.launch_server")
    result = stream_decode(host, max_tokens=64, trials=3)
    rate = median(t["output_tok_s"] for t in result["trials"])
    assert abs(rate - 89.5) / 89.5 < 0.05, rate


def test_new_stack_kept_for_diagnosis_and_its_caches_cleared(host):
    assert host.file("/opt/ml-env-cu130/bin/python").exists
    assert not host.file("/var/cache/cuda13-upgrade/cu130").exists


def test_worker_is_back_in_the_router_after_the_rollback(host):
    events = [
        json.loads(line)
        for line in host.file("/var/log/sglang-router-events.jsonl").content_string.splitlines()
    ]
    assert [e["event"] for e in events] == ["remove", "add"]
    assert events[-1]["workers"] == ["http://127.0.0.1:30000"]


def _result(host):
    return json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)


def _unit_journal_since_drain(host):
    result = _result(host)
    drain = next(s for s in result["steps"] if s["step"] == "drain")
    since = datetime.fromisoformat(drain["started_at"]).timestamp()
    out = host.check_output(f"journalctl -u sglang.service -o json --no-pager --since @{int(since)}")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_the_service_restarted_exactly_as_planned(host):
    # Two profiles: 3 restarts for the upgrade (baseline eagle3, the switch into
    # eagle3, candidate plain) and 2 for the rollback (into eagle3, then plain).
    result = _result(host)
    plan = result["restart_plan"]
    assert (plan["restarts_upgrade"], plan["restarts_rollback"]) == (3, 2)
    assert [s["profile"] for s in plan["candidate"]["steps"]] == ["eagle3", "plain"]
    assert result["restarts"] == 5
    # Counted on the host: systemd's "Started <unit>" messages since the drain.
    started = [
        e
        for e in _unit_journal_since_drain(host)
        if str(e.get("MESSAGE", "")).startswith("Started sglang.service")
    ]
    assert len(started) == 5, [e["MESSAGE"] for e in started]


def test_a_strict_start_limit_did_not_refuse_a_planned_restart(host):
    assert host.check_output("systemctl show -p StartLimitBurst --value sglang.service") == "3"
    messages = [str(e.get("MESSAGE", "")) for e in _unit_journal_since_drain(host)]
    assert not [m for m in messages if "Start request repeated too quickly" in m]
    assert host.check_output("systemctl show -p ActiveState --value sglang.service") == "active"


def test_leftover_processes_were_named_and_stopped_before_the_next_start(host):
    # KillMode=process leaves the server's scheduler process holding GPU memory.
    leftovers = _result(host)["leftover_processes"]
    assert leftovers, "the scheduler processes the stops left are recorded"
    assert all(p["gpu_memory_mib"] == 81234 * 8 for p in leftovers), leftovers
    assert all("/bin/python" in p["command"] for p in leftovers), leftovers
    for p in leftovers:
        assert not host.file(f"/proc/{p['pid']}").exists
    # systemd warns when a unit starts beside its own leftovers; it never had to.
    messages = [str(e.get("MESSAGE", "")) for e in _unit_journal_since_drain(host)]
    assert not [m for m in messages if "Found left-over process" in m]
    # What holds the GPUs now is the running server's scheduler alone.
    apps = host.check_output("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits")
    assert len({line.split(",")[0] for line in apps.splitlines()}) == 1, apps
