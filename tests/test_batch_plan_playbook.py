"""The batch plan and the window, as playbooks/start.yml and playbooks/upgrade.yml
apply them, on local hosts (ansible_connection local; nothing outside this machine).

The test play takes the upgrade play's own ``serial``, ``vars`` and ``pre_tasks`` from
playbooks/upgrade.yml, so what runs here is what the rollout runs; its one task
records which batch each host ran in.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from playbook import fleet_group, run_playbook

REPO = Path(__file__).resolve().parents[1]
HOSTS = [f"gpu-node-{i:02d}" for i in range(1, 9)]


def _upgrade_play() -> dict:
    plays = yaml.safe_load((REPO / "playbooks" / "upgrade.yml").read_text())
    return next(p for p in plays if p.get("name") == "Upgrade, verify, keep or roll back")


def _write(
    tmp_path: Path, group_vars: dict | None = None, host_vars: dict | None = None, pause: int = 0
) -> Path:
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"localhost": {"ansible_connection": "local"}},
                    "children": {
                        "blackwell": fleet_group(
                            {
                                h: {"ansible_connection": "local", **((host_vars or {}).get(h, {}))}
                                for h in HOSTS
                            }
                        )
                    },
                }
            }
        )
    )
    if group_vars:
        (inventory / "group_vars" / "blackwell.yml").write_text(yaml.safe_dump(group_vars))
    upgrade = _upgrade_play()
    book = tmp_path / "playbooks" / "book.yml"
    book.parent.mkdir()
    (tmp_path / "playbooks" / "start.yml").symlink_to(REPO / "playbooks" / "start.yml")
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Start the run",
                    "ansible.builtin.import_playbook": "start.yml",
                    "vars": {"start_batch_plan": True},
                },
                {
                    "name": "Upgrade, verify, keep or roll back",
                    "hosts": "blackwell",
                    "gather_facts": False,
                    "serial": upgrade["serial"],
                    "vars": upgrade["vars"],
                    "pre_tasks": upgrade["pre_tasks"],
                    "tasks": [
                        {
                            "name": "Record the batch",
                            "ansible.builtin.debug": {"msg": "BATCH {{ ansible_play_batch | to_json }}"},
                            "run_once": True,
                        },
                        {
                            "name": "Take a while",
                            "ansible.builtin.pause": {"seconds": pause},
                            "run_once": True,
                            "when": pause > 0,
                        },
                    ],
                },
            ],
            sort_keys=False,
        )
    )
    return inventory


def _run(tmp_path: Path, *extra: str, **write) -> tuple[int, str, list[list[str]]]:
    inventory = _write(tmp_path, **write)
    done = run_playbook(tmp_path / "playbooks" / "book.yml", *extra, inventory=inventory, timeout=120)
    out = done.stdout + done.stderr
    played = [json.loads(m) for m in re.findall(r"BATCH (\[.*?\])", out)]
    return done.returncode, out, played


def test_the_upgrade_play_reads_serial_from_the_plan():
    assert _upgrade_play()["serial"] == "{{ hostvars['localhost'].cuda13_fleet.sizes | default(1) }}"


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
