"""The fleet's failure budget as playbooks/upgrade.yml enforces it, on local hosts
(ansible_connection local; nothing outside this machine).

The test play takes the upgrade play's own ``serial``, ``max_fail_percentage``, ``vars`` and
``pre_tasks`` from playbooks/upgrade.yml; a stand-in for roles/upgrade_host ends
each host as the role does: kept, or failed inside a block whose ``rescue`` records
``cuda13_result`` (rolled_back or failed) and leaves the host running, or failed with
no result at all (a host that failed before its result was written).
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from playbook import (
    RECORD_BATCH,
    batches,
    fleet_inventory,
    rollout_book,
    run_playbook,
    stand_in_role,
    upgrade_play,
)

from cuda13_upgrade.steps import fleet


def _run(tmp_path: Path, n_hosts: int, stand_in: dict[str, str], *extra: str, group_vars=None):
    hosts = [f"gpu-node-{i:02d}" for i in range(1, n_hosts + 1)]
    ends = {h: {"stand_in": stand_in.get(h, "kept")} for h in hosts}
    inventory = fleet_inventory(tmp_path / "inventory", ends, group_vars)
    kept = tmp_path / "not_started.json"
    book = rollout_book(tmp_path, [RECORD_BATCH, stand_in_role()], not_started=kept, last_play=True)
    done = run_playbook(book, *extra, inventory=inventory, timeout=120)
    out = " ".join((done.stdout + done.stderr).split())  # messages wrap in the yaml callback
    return out, batches(out), (json.loads(kept.read_text()) if kept.exists() else None)


def test_only_the_budget_step_counts_failures():
    # a limit Ansible reached would end the run before the budget step (the mixed batch below)
    assert upgrade_play()["max_fail_percentage"] == 100
    # One gate before each batch, the budget decided before the window (cuda13_upgrade.steps.fleet).
    gate = upgrade_play()["pre_tasks"][0]
    assert gate["cuda13_fleet"]["action"] == "batch"
    closed = {"start": "00:00", "end": "00:01", "timezone": "UTC"}
    the_fleet = fleet.plan(["gpu-node-01", "gpu-node-02"], {"cuda13_window": closed})
    with tempfile.TemporaryDirectory() as reports:
        decided = fleet.batch_gate(
            the_fleet,
            hosts=["gpu-node-01", "gpu-node-02"],
            batch=["gpu-node-02"],
            active=["gpu-node-01", "gpu-node-02"],
            statuses={"gpu-node-01": "rolled_back", "gpu-node-02": None},
            run_id="20261201T101500Z",
            reports_dir=reports,
            run_hosts=["gpu-node-01", "gpu-node-02"],
            now="2026-12-01T12:00:00Z",
        )
    assert decided["not_started"]["said"] == "not reached"


def test_a_mixed_batch_spends_a_budget_of_0(tmp_path):
    # batches [2, "100%"], the first host rolled back, the second kept:
    # the run went on to upgrade hosts 3 and 4. The rollback's failure is raised
    # from a rescue.
    out, played, not_started = _run(
        tmp_path, 4, {"gpu-node-01": "rolled_back"}, "-e", '{"cuda13_serial": [2, "100%"]}'
    )
    assert played == [["gpu-node-01", "gpu-node-02"]], out
    assert (
        "not reached: failure budget spent (hosts gpu-node-01 rolled back; cuda13_max_failed_hosts 0) "
        "(hosts gpu-node-03, gpu-node-04)" in out
    )
    assert not_started["said"] == "not reached"
    assert not_started["hosts"] == ["gpu-node-03", "gpu-node-04"]


def test_a_failed_canary_starts_no_other_batch(tmp_path):
    out, played, not_started = _run(tmp_path, 4, {"gpu-node-01": "failed"})
    assert played == [["gpu-node-01"]], out
    assert (
        not_started["reason"] == "failure budget spent (hosts gpu-node-01 failed; cuda13_max_failed_hosts 0)"
    )
    assert not_started["hosts"] == ["gpu-node-02", "gpu-node-03", "gpu-node-04"]


def test_one_host_batches_that_roll_back_go_on_within_the_budget(tmp_path):
    # Batches of one host (the canary, and the ramp of a fleet of 4 or fewer): a
    # rolled-back host is its batch's every host. Ansible ends a play after a batch
    # whose every host failed, so the rescue does not fail the host: the budget decides.
    out, played, not_started = _run(
        tmp_path,
        4,
        {"gpu-node-01": "rolled_back", "gpu-node-03": "rolled_back"},
        group_vars={"cuda13_max_failed_hosts": 1},
    )
    assert played == [["gpu-node-01"], ["gpu-node-02"], ["gpu-node-03"]], out
    assert not_started["reason"] == (
        "failure budget spent (hosts gpu-node-01 rolled back, gpu-node-03 rolled back; cuda13_max_failed_hosts 1)"
    )
    assert not_started["hosts"] == ["gpu-node-04"]
    # The upgrade's last play fails the hosts that rolled back, for ansible-playbook's status.
    assert re.search(r"gpu-node-01 : ok=\d+ changed=\d+ unreachable=0 failed=1", out), out
    assert re.search(r"gpu-node-02 : ok=\d+ changed=\d+ unreachable=0 failed=0", out), out
    assert re.search(r"gpu-node-03 : ok=\d+ changed=\d+ unreachable=0 failed=1", out), out


def test_a_budget_of_1_over_three_batches(tmp_path):
    out, played, not_started = _run(
        tmp_path,
        6,
        {"gpu-node-02": "rolled_back", "gpu-node-05": "no_result"},
        group_vars={"cuda13_serial": [1, 2, 2, "100%"], "cuda13_max_failed_hosts": 1},
    )
    # one failure is within the budget; the second, in the third batch, spends it
    assert played == [["gpu-node-01"], ["gpu-node-02", "gpu-node-03"], ["gpu-node-04", "gpu-node-05"]], out
    assert not_started["reason"] == (
        "failure budget spent (hosts gpu-node-02 rolled back, gpu-node-05 failed without a result; "
        "cuda13_max_failed_hosts 1)"
    )
    assert not_started["hosts"] == ["gpu-node-06"]


def test_a_percentage_budget_not_spent_runs_every_batch(tmp_path):
    # 25% of 8 hosts is 2: two failures leave the budget unspent
    out, played, not_started = _run(
        tmp_path,
        8,
        {"gpu-node-02": "rolled_back", "gpu-node-04": "failed"},
        "-e",
        "cuda13_max_failed_hosts=25%",
    )
    assert [len(b) for b in played] == [1, 2, 2, 2, 1], out
    assert "no batch starts once more than 2 host(s) of the fleet failed or rolled back" in out
    assert not_started == {}
    assert "not reached: failure budget spent" not in out


def test_a_bad_budget_stops_before_any_batch(tmp_path):
    out, played, _ = _run(tmp_path, 2, {}, "-e", "cuda13_max_failed_hosts=-1")
    assert "cuda13_max_failed_hosts is not a failure budget: '-1'. Option: cuda13_max_failed_hosts." in out
    assert "no host was changed" in out
    assert played == []
