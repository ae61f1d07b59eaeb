"""Tests of ``cuda13-upgrade status`` (cuda13_upgrade.fleetstate, cuda13_upgrade.cli.commands.status_command).

Report trees written here with the result files of tests/test_report.py (the keys
roles/upgrade_host/tasks/result.yml writes) and the shapes the other playbooks write
(rollback.yml's on-demand rollback, interrupted.yml's record, run.json's outcomes),
and a temporary inventory of made-up hosts (192.0.2.0/24, TEST-NET-1), never contacted:
status opens no connection.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cuda13_upgrade import cli, fleetstate
from cuda13_upgrade.cli import commands

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("report_fixtures", ROOT / "tests" / "test_report.py")
assert _spec is not None and _spec.loader is not None
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)

HOSTS = [f"192.0.2.{n}" for n in range(1, 10)]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("CUDA13_UPGRADE_HOME", "CUDA13_REPORTS_DIR", "CUDA13_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    # status_command points ANSIBLE_CONFIG at the checkout's ansible.cfg; restored after each test.
    monkeypatch.setenv("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """An inventory directory: the blackwell group with its hosts, another group, and a
    vaulted group_vars file status must not need to open."""
    inv = tmp_path / "fleet"
    (inv / "group_vars" / "blackwell").mkdir(parents=True)
    lines = ["all:", "  children:", "    blackwell:", "      hosts:"]
    lines += [f"        {host}: {{}}" for host in HOSTS]
    lines += ["    canary:", "      hosts:", "        192.0.2.1: {}", "    other:", "      hosts:"]
    lines += ["        198.51.100.7: {}"]
    (inv / "hosts.yml").write_text("\n".join(lines) + "\n")
    (inv / "group_vars" / "blackwell" / "vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    return inv


def _write(reports: Path, run_id: str, host: str, result: dict[str, Any], mtime: float | None = None) -> Path:
    path = reports / run_id / host / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**result, "host": host, "run_id": run_id}, indent=2) + "\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _at(result: dict[str, Any], finished_at: str) -> dict[str, Any]:
    return {**result, "finished_at": finished_at}


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """One host per state, some with older runs below the newest."""
    r = tmp_path / "reports"
    h = HOSTS
    # 1: rolled back in run A, kept in the later run B.
    _write(r, "A", h[0], _at(fixtures.rolled_back_regressed(h[0]), "2026-01-10T10:00:00+00:00"))
    _write(r, "B", h[0], _at(fixtures.kept(h[0]), "2026-01-11T10:00:00+00:00"))
    # 2: kept in A, rolled back on demand in B (rollback.yml's control-node result has no
    # finished_at: the file's time counts).
    _write(r, "A", h[1], _at(fixtures.kept(h[1]), "2026-01-10T10:00:00+00:00"))
    on_demand = {
        "status": "rolled_back",
        "reason": "rolled back on demand (playbooks/rollback.yml)",
        "rollback": {"performed": True, "seconds": 41.0},
    }
    _write(r, "B", h[1], on_demand, mtime=1_768_300_000)  # 2026-01-13
    # 3: failed at the wheels step.
    _write(r, "B", h[2], _at(fixtures.failed_at_snapshot(h[2]), "2026-01-11T10:00:00+00:00"))
    # 4: kept in A, already kept in B (early.yml: no role ran).
    _write(r, "A", h[3], _at(fixtures.kept(h[3]), "2026-01-10T10:00:00+00:00"))
    already = fixtures._result(h[3], already_kept=True, measured=False, verified_in_run="A")
    _write(r, "B", h[3], _at(already, "2026-01-11T10:00:00+00:00"))
    # 5: staged by stage.yml.
    staged = fixtures._result(h[4], status="staged", measured=False, verified_in_run=None)
    staged.update(started_at="2026-01-09T10:00:00+00:00")
    _write(r, "S", h[4], _at(staged, "2026-01-09T10:04:10+00:00"))
    # 6: interrupted (playbooks/interrupted.yml's record).
    interrupted = {"status": "interrupted", "check_mode": False, "measured": False, "failed_step": "wheels"}
    _write(r, "B", h[5], _at(interrupted, "2026-01-11T10:00:00+00:00"))
    # 7: unreachable in B: no result file, run.json says so.
    (r / "B" / "run.json").write_text(
        json.dumps(
            {
                "command": "rollout",
                "check": False,
                "finished_at": "2026-01-11T11:00:00+00:00",
                "hosts": h[:7],
                "outcomes": {
                    h[6]: {
                        "status": "unreachable",
                        "failed_step": "switch",
                        "failed_task": "x",
                        "error": "gone",
                    },
                    h[7]: {"status": "not reached"},
                },
            }
        )
    )
    # 8: kept only in check mode, and "not reached" in B: never run. 9: nothing at all.
    checked = fixtures._result(h[7], check_mode=True)
    _write(r, "C", h[7], _at(checked, "2026-01-12T10:00:00+00:00"))
    # A host outside the group has results too: not shown.
    _write(r, "B", "198.51.100.7", _at(fixtures.kept("198.51.100.7"), "2026-01-11T10:00:00+00:00"))
    return r


EXPECTED = {
    HOSTS[0]: ("kept", "kept", "B"),
    HOSTS[1]: ("rolled back", "rolled back", "B"),
    HOSTS[2]: ("failed", "failed at snapshot", "B"),
    HOSTS[3]: ("already kept", "already kept (verified in run A)", "B"),
    HOSTS[4]: ("staged", "staged in 4 min 10 s", "S"),
    HOSTS[5]: ("interrupted", "interrupted at wheels", "B"),
    HOSTS[6]: ("unreachable", "unreachable at step switch", "B"),
    HOSTS[7]: ("never run", "never run", None),
    HOSTS[8]: ("never run", "never run", None),
}


def test_every_state_from_the_newest_record(reports):
    states = fleetstate.host_states(reports, HOSTS)
    got = {s["host"]: (s["state"], s["decision"], s["run_id"]) for s in states}
    assert got == EXPECTED
    by_host = {s["host"]: s for s in states}
    assert by_host[HOSTS[0]]["finished_at"] == "2026-01-11T10:00:00+00:00"
    # No finished_at in the file: its modification time, in UTC.
    assert by_host[HOSTS[1]]["finished_at"].startswith("2026-01-13T")
    assert by_host[HOSTS[1]]["reason"] == "rolled back on demand (playbooks/rollback.yml)"
    assert by_host[HOSTS[6]]["source"].endswith("B/run.json")
    assert by_host[HOSTS[7]]["source"] is None


def test_a_run_the_breaker_refused_changes_no_host_s_state(reports):
    # The refusal failed the first host (run_once); not_started.json says no host started.
    run = reports / "R"
    run.mkdir()
    failed = {"status": "failed", "failed_step": "Start the run on the hosts", "error": "breaker"}
    record = {
        "command": "rollout",
        "finished_at": "2026-02-01T00:00:00+00:00",
        "outcomes": {HOSTS[0]: failed},
    }
    (run / "run.json").write_text(json.dumps(record))
    refused = {"said": "not started", "reason": "breaker tripped", "hosts": HOSTS, "before_any_change": True}
    (run / "not_started.json").write_text(json.dumps(refused))
    state = fleetstate.host_states(reports, HOSTS[:1])[0]
    assert (state["state"], state["run_id"]) == ("kept", "B")


def test_the_inventory_gives_the_group_in_natural_order_without_its_vars(inventory):
    hosts = [f"192.0.2.{n}" for n in (10, 2, 1)]
    inv = inventory.parent / "small.yml"
    inv.write_text(
        "all:\n  children:\n    blackwell:\n      hosts:\n" + "".join(f"        {h}: {{}}\n" for h in hosts)
    )
    assert fleetstate.inventory_hosts(str(inv), "blackwell") == ["192.0.2.1", "192.0.2.2", "192.0.2.10"]
    # The vaulted group_vars file is never decrypted.
    assert fleetstate.inventory_hosts(str(inventory), "blackwell") == HOSTS
    assert fleetstate.inventory_hosts(str(inventory), "canary") == ["192.0.2.1"]


def test_status_prints_the_table(inventory, reports, capsys):
    assert cli.main(["status", "-i", str(inventory), "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"cuda13-upgrade status: 9 hosts of 'blackwell' in {inventory}, reports in {reports}\n"
    )
    assert "| 192.0.2.1 | kept | B | 2026-01-11T10:00:00+00:00 |" in out
    assert "| 192.0.2.4 | already kept (verified in run A) | B | 2026-01-11T10:00:00+00:00 |" in out
    assert "| 192.0.2.9 | never run | - | - |" in out
    assert "198.51.100.7" not in out
    assert out.rstrip().endswith(
        "1 kept, 1 rolled back, 1 failed, 1 already kept, 1 staged, 1 interrupted, 1 unreachable, 2 never run"
    )


def test_status_json(inventory, reports, capsys):
    argv = ["status", "-i", str(inventory), "--reports-dir", str(reports), "--json"]
    assert cli.main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["group"] == "blackwell"
    assert document["inventory"] == str(inventory)
    assert document["reports_dir"] == str(reports)
    got = {s["host"]: (s["state"], s["decision"], s["run_id"]) for s in document["hosts"]}
    assert got == EXPECTED


def test_the_target_group_comes_from_extra_vars(inventory, reports, capsys, tmp_path):
    argv = ["status", "-i", str(inventory), "--reports-dir", str(reports), "--json"]
    assert cli.main([*argv, "-e", "cuda13_target_hosts=canary"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["group"], [s["host"] for s in document["hosts"]]) == ("canary", ["192.0.2.1"])
    site = tmp_path / "site.yml"
    site.write_text("cuda13_target_hosts: other\n")
    assert cli.main([*argv, "-e", f"@{site}"]) == 0
    assert [s["state"] for s in json.loads(capsys.readouterr().out)["hosts"]] == ["kept"]


def test_a_group_without_hosts_is_a_usage_error(inventory, reports, capsys):
    argv = ["status", "-i", str(inventory), "--reports-dir", str(reports), "-e", "cuda13_target_hosts=gpus"]
    assert cli.main(argv) == commands.EXIT_USAGE
    assert "has no hosts in the group 'gpus' (cuda13_target_hosts)" in capsys.readouterr().err


def test_no_reports_yet_every_host_never_run(inventory, tmp_path, capsys):
    argv = ["status", "-i", str(inventory), "--reports-dir", str(tmp_path / "none")]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.rstrip().endswith("9 never run")


def test_a_damaged_result_is_named(inventory, tmp_path, capsys):
    path = tmp_path / "reports" / "X" / HOSTS[0] / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert cli.main(["status", "-i", str(inventory), "--reports-dir", str(tmp_path / "reports")]) == 1
    assert f"{path} is not a JSON result" in capsys.readouterr().err


def test_status_writes_nothing(inventory, reports):
    before = {p: p.stat().st_mtime for p in reports.rglob("*")}
    assert cli.main(["status", "-i", str(inventory), "--reports-dir", str(reports)]) == 0
    assert {p: p.stat().st_mtime for p in reports.rglob("*")} == before


def _rollback_run(reports: Path, run_id: str, host: str, error: str, finished_at: str) -> None:
    """A run of playbooks/rollback.yml that failed ``host`` without a result file (run.json's outcome)."""
    run = reports / run_id
    run.mkdir(parents=True, exist_ok=True)
    failed = {
        "status": "failed",
        "failed_step": "upgrade_host",
        "failed_task": "Drain the host",
        "error": error,
    }
    record = {"command": "rollback", "check": False, "finished_at": finished_at, "outcomes": {host: failed}}
    (run / "run.json").write_text(json.dumps(record))


def test_a_refused_on_demand_rollback_leaves_the_kept_host_kept_with_a_note(inventory, reports, capsys):
    from cuda13_upgrade import ondemand

    # A rollback refused before any change (no drain hook) leaves the host kept: status must not
    # show the kept, serving host as failed, only note the refusal.
    refusal = ondemand.drain_plan("rollback", HOSTS[0], "sglang.service", "", "")["refusal"]
    assert "Nothing was changed." in refusal
    _rollback_run(reports, "R", HOSTS[0], refusal, "2026-02-01T00:00:00+00:00")
    state = fleetstate.host_states(reports, HOSTS[:1])[0]
    assert (state["state"], state["decision"], state["run_id"]) == ("kept", "kept", "B")
    assert state["note"] == (
        f"an on-demand rollback was refused: {refusal} (run R, finished 2026-02-01T00:00:00+00:00)"
    )
    assert cli.main(["status", "-i", str(inventory), "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert (
        "| 192.0.2.1 | kept; an on-demand rollback was refused (below) | B | 2026-01-11T10:00:00+00:00 |"
        in out
    )
    assert (
        f"Runs refused before any change (each host kept the state above):\n- 192.0.2.1: {state['note']}\n"
        in out
    )
    assert out.rstrip().endswith(
        "1 kept, 1 rolled back, 1 failed, 1 already kept, 1 staged, 1 interrupted, 1 unreachable, 2 never run"
    )


def test_a_rollback_that_failed_after_a_change_still_shows_failed_and_an_old_refusal_no_note(reports):
    # The same refusal before the newest record says nothing any more.
    _rollback_run(reports, "0", HOSTS[0], "x: ... Nothing was changed. ...", "2026-01-01T00:00:00+00:00")
    assert fleetstate.host_states(reports, HOSTS[:1])[0]["note"] is None
    # A rollback that failed part way changed the host: failed, as before.
    said = "gpu: the restore failed at 'apt': E: Unable to locate package cuda-toolkit-12-8"
    _rollback_run(reports, "R", HOSTS[0], said, "2026-02-01T00:00:00+00:00")
    state = fleetstate.host_states(reports, HOSTS[:1])[0]
    assert (state["state"], state["run_id"], state["note"]) == ("failed", "R", None)


def test_a_lock_refusal_says_nothing_was_changed_and_counts_as_a_refusal(tmp_path):
    from fakehost import FakeHost

    from cuda13_upgrade.steps import lock
    from cuda13_upgrade.steps.host import StepFailed

    (tmp_path / "run.lock").mkdir()
    (tmp_path / "run.lock" / "owner.json").write_text(
        json.dumps({"run_id": "r1", "control_node": "cn", "pid": 7})
    )
    mine = lock.owner_record(run_id="r2", control_node="cn", pid=8, playbook="p", lease_hours=24)
    with pytest.raises(StepFailed) as refused:
        lock.acquire(FakeHost(), state_dir=str(tmp_path), owner=mine, pid_alive=lambda pid: True)
    assert "is running. Nothing on the host was changed. Wait for it to finish." in refused.value.msg
    note = fleetstate.refusal_of({"status": "failed", "error": refused.value.msg}, "rollback")
    assert note == f"an on-demand rollback was refused: {refused.value.msg}"
    assert (
        fleetstate.refusal_of({"status": "unreachable", "error": "Nothing was changed."}, "rollback") is None
    )


def test_the_driver_windows_statuses_are_states_of_their_own():
    # cuda13-upgrade driver: a moved driver is not a kept stack.
    assert fleetstate.state_of({"status": "driver_kept"}) == "driver kept"
    assert fleetstate.state_of({"status": "driver_current"}) == "driver current"
    assert fleetstate.state_of({"status": "kept"}) == "kept"
    assert "driver" in fleetstate.CHANGING_COMMANDS
