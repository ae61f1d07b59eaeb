"""The batch plan and the window, as playbooks/start.yml and playbooks/upgrade.yml
apply them, on local hosts (ansible_connection local; nothing outside this machine).

The test play takes the upgrade play's own ``serial``, ``max_fail_percentage``, ``vars`` and
``pre_tasks`` from playbooks/upgrade.yml (tests/playbook.py's rollout_book), so what runs here
is what the rollout runs; its one task records which batch each host ran in.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playbook import RECORD_BATCH, batches, fleet_inventory, rollout_book, run_playbook, upgrade_play

HOSTS = [f"gpu-node-{i:02d}" for i in range(1, 9)]


def _run(
    tmp_path: Path, *extra: str, group_vars: dict | None = None, host_vars: dict | None = None, pause: int = 0
) -> tuple[int, str, list[list[str]]]:
    inventory = fleet_inventory(
        tmp_path / "inventory", {h: (host_vars or {}).get(h, {}) for h in HOSTS}, group_vars
    )
    wait = {"name": "Take a while", "ansible.builtin.pause": {"seconds": pause}, "run_once": True}
    book = rollout_book(tmp_path, [RECORD_BATCH, {**wait, "when": pause > 0}])
    done = run_playbook(book, *extra, inventory=inventory, timeout=120)
    out = done.stdout + done.stderr
    return done.returncode, out, batches(out)


def test_the_upgrade_play_reads_serial_from_the_plan():
    assert upgrade_play()["serial"] == "{{ hostvars['localhost'].cuda13_fleet.sizes | default(1) }}"


def test_default_plan_is_printed_and_applied(tmp_path):
    rc, out, played = _run(tmp_path)
    assert rc == 0, out
    assert [len(b) for b in played] == [1, 2, 2, 2, 1]
    assert played[0] == ["gpu-node-01"]
    assert "8 hosts in 5 batches, ramp capped at 2 hosts (cuda13_max_parallel" in out
    assert "batch 1 of 5 (canary, 1 host): gpu-node-01" in out
    assert out.index("batch 5 of 5 (1 host): gpu-node-08") < out.index("BATCH")


def test_serial_from_the_inventory_is_applied(tmp_path):
    # a value in group_vars once passed the check and had no effect
    rc, out, played = _run(tmp_path, group_vars={"cuda13_serial": [1, "50%"]})
    assert rc == 0, out
    assert [len(b) for b in played] == [1, 4, 3]


def test_serial_from_the_command_line_still_wins(tmp_path):
    rc, out, played = _run(tmp_path, "-e", "cuda13_serial=3", group_vars={"cuda13_serial": 1})
    assert rc == 0, out
    assert [len(b) for b in played] == [3, 3, 2]


def test_max_parallel_from_the_inventory(tmp_path):
    rc, out, played = _run(tmp_path, group_vars={"cuda13_max_parallel": 4})
    assert rc == 0, out
    assert [len(b) for b in played] == [1, 2, 4, 1]


def test_limit_leaving_localhost_out_still_plans(tmp_path):
    rc, out, played = _run(tmp_path, "--limit", ",".join(HOSTS[:4]))  # 4 hosts: a quarter is 1
    assert rc == 0, out
    assert played == [["gpu-node-01"], ["gpu-node-02"], ["gpu-node-03"], ["gpu-node-04"]]


@pytest.mark.parametrize(
    ("extra", "group_vars", "host_vars", "message"),
    [
        (["-e", "cuda13_serial=0"], None, None, "cuda13_serial holds '0', which is not a batch size"),
        (
            [],
            {"cuda13_max_parallel": "0%"},
            None,
            "cuda13_max_parallel holds '0%', which is not a batch size",
        ),
        (
            [],
            {"cuda13_window": {"start": "22:00", "end": "06:00", "timezone": "Mars/Base"}},
            None,
            "timezone is not",
        ),
        (
            [],
            None,
            {"gpu-node-03": {"cuda13_serial": 2}},
            "cuda13_serial differs between the hosts of the rollout",
        ),
    ],
)
def test_bad_values_stop_before_any_batch(tmp_path, extra, group_vars, host_vars, message):
    rc, out, played = _run(tmp_path, *extra, group_vars=group_vars, host_vars=host_vars)
    assert rc != 0
    assert message in out
    assert "no host was changed" in out
    assert played == []


def test_a_closed_window_starts_no_batch(tmp_path):
    now = datetime.now(UTC)
    window = {
        "start": (now + timedelta(hours=2)).strftime("%H:%M"),
        "end": (now + timedelta(hours=3)).strftime("%H:%M"),
        "timezone": "UTC",
    }
    rc, out, played = _run(tmp_path, group_vars={"cuda13_window": window})
    assert rc == 0, out
    assert played == []
    assert "not started: outside the window cuda13_window" in out
    assert "(hosts gpu-node-01, gpu-node-02" in out


def test_an_open_window_runs_every_batch(tmp_path):
    now = datetime.now(UTC)
    window = {
        "start": (now - timedelta(hours=1)).strftime("%H:%M"),
        "end": (now + timedelta(hours=1)).strftime("%H:%M"),
        "timezone": "UTC",
    }
    rc, out, played = _run(tmp_path, group_vars={"cuda13_window": window})
    assert rc == 0, out
    assert [len(b) for b in played] == [1, 2, 2, 2, 1]
    assert "batches start only inside the window cuda13_window" in out


def test_until_passes_while_a_batch_runs(tmp_path):
    # the first batch takes longer than until leaves: it finishes, no other starts
    until = (datetime.now(UTC) + timedelta(seconds=12)).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc, out, played = _run(tmp_path, "-e", f"cuda13_until={until}", pause=15)
    assert rc == 0, out
    assert played == [["gpu-node-01"]]
    assert f"not started: past cuda13_until ({until}) (hosts gpu-node-02, gpu-node-03" in out


def test_the_hosts_not_started_are_in_the_run_s_report_at_once(tmp_path):
    # Written by the gate itself: under a --limit that leaves localhost out the
    # Report play does not run, and the command's own summary reads this record.
    until = (datetime.now(UTC) + timedelta(seconds=12)).strftime("%Y-%m-%dT%H:%M:%SZ")
    rc, out, played = _run(tmp_path, "--limit", ",".join(HOSTS), "-e", f"cuda13_until={until}", pause=15)
    assert rc == 0, out
    assert played == [["gpu-node-01"]]
    (record,) = (tmp_path / "reports").glob("*/not_started.json")
    not_started = json.loads(record.read_text())
    assert not_started["said"] == "not started"
    assert not_started["reason"].startswith(f"past cuda13_until ({until})")
    assert not_started["hosts"] == HOSTS[1:]
    summary = (record.parent / "summary.md").read_text()
    assert f"| gpu-node-02 | not started: past cuda13_until ({until})" in summary
