"""The breaker as playbooks/start.yml enforces it for a rollout, on local hosts
(ansible_connection local; nothing outside this machine).

The test play imports the real playbooks/start.yml with the switches
playbooks/upgrade.yml gives it, then the upgrade play's own ``serial``,
``pre_tasks`` and ``vars``; a stand-in for roles/upgrade_host records each host's
result where the role does, ``<reports>/<run id>/<host>/result.json``: kept, or
rolled back with a reason. The earlier runs are result files in a temporary
reports directory (``CUDA13_REPORTS_DIR``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from playbook import (
    RECORD_BATCH,
    REPO,
    RESULT_TASKS,
    batches,
    fleet_inventory,
    rollout_book,
    run_playbook,
    upgrade_plays,
)

HOSTS = ["gpu-node-01", "gpu-node-02"]


def _start() -> dict:
    return next(p for p in upgrade_plays() if p.get("ansible.builtin.import_playbook") == "start.yml")


STAND_IN = [
    RECORD_BATCH,
    {
        "name": "End the host as the run tells it",
        "ansible.builtin.set_fact": {
            "cuda13_result": {"status": "{{ stand_in }}", "reason": "stand-in {{ stand_in }}"}
        },
    },
    *RESULT_TASKS,
]


def _earlier(reports: Path, run: str, host: str, hours_ago: float, status: str = "rolled_back") -> None:
    at = datetime.now(UTC) - timedelta(hours=hours_ago)
    path = reports / run / host / "result.json"
    path.parent.mkdir(parents=True)
    record = {
        "host": host,
        "run_id": run,
        "status": status,
        "reason": "slower by 4.1 %",
        "finished_at": at.isoformat(),
    }
    path.write_text(json.dumps(record))


def _run(tmp_path: Path, run_id: str, *extra: str, stand_in: str = "kept"):
    inventory = tmp_path / "inventory"
    if not inventory.exists():
        fleet_inventory(inventory, dict.fromkeys(HOSTS, {}))
        rollout_book(tmp_path, STAND_IN, start=_start()["vars"])
    reports = tmp_path / "reports"
    done = run_playbook(
        tmp_path / "playbooks" / "book.yml",
        "-e",
        json.dumps({"cuda13_serial": "100%", "stand_in": stand_in}),
        *extra,
        inventory=inventory,
        env={"CUDA13_REPORTS_DIR": str(reports), "CUDA13_RUN_ID": run_id},
        timeout=120,
    )
    out = " ".join((done.stdout + done.stderr).split())  # messages wrap in the yaml callback
    return done, out, batches(out), reports / run_id


def test_the_rollout_starts_the_breaker_and_only_the_rollout():
    start = _start()
    # The rollout also tells cuda13_notify's webhooks its start (tests/test_notify_playbook.py).
    assert start["vars"] == {"start_batch_plan": True, "start_breaker": True, "start_notify": True}
    for name in ("plan", "preflight", "verify", "rollback", "stage"):
        assert "start_breaker" not in (REPO / "playbooks" / f"{name}.yml").read_text(), name
        assert "start_notify" not in (REPO / "playbooks" / f"{name}.yml").read_text(), name


def test_two_rollbacks_refuse_the_third_run_until_acknowledged(tmp_path):
    reports = tmp_path / "reports"
    _earlier(reports, "20261206T020000Z", "gpu-node-01", 30)
    _earlier(reports, "20261207T020000Z", "gpu-node-02", 6)
    _earlier(reports, "20261101T020000Z", "gpu-node-02", 24 * 8)  # older than the period

    done, out, played, run_dir = _run(tmp_path, "20261207T120000Z")
    assert done.returncode != 0, out
    assert played == [], out  # refused before any batch: no change
    assert "The breaker is tripped: 2 rollbacks or failures of rollouts within the last 7 days" in out
    assert "- gpu-node-01 rolled back in run 20261206T020000Z at " in out
    assert "- gpu-node-02 rolled back in run 20261207T020000Z at " in out
    assert "20261101T020000Z" not in out
    assert (
        "cuda13-upgrade rollout --ack-breaker 20261207T020000Z (or -e cuda13_breaker_ack=20261207T020000Z)"
        in out
    )
    assert not list(run_dir.glob("*/result.json"))
    not_started = json.loads((run_dir / "not_started.json").read_text())
    assert not_started["said"] == "not started"
    assert not_started["hosts"] == HOSTS
    assert not_started["reason"].startswith("breaker tripped (2 rollbacks or failures of rollouts")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {r["decision"] for r in summary["rows"]} == {f"not started: {not_started['reason']}"}

    # acknowledged: the run goes on
    done, out, played, run_dir = _run(
        tmp_path, "20261207T130000Z", "-e", "cuda13_breaker_ack=20261207T020000Z"
    )
    assert done.returncode == 0, out
    assert played == [HOSTS], out
    assert "2 acknowledged by cuda13_breaker_ack 20261207T020000Z" in out
    assert not (run_dir / "not_started.json").exists()


def test_a_rollback_after_the_acked_run_counts_again(tmp_path):
    reports = tmp_path / "reports"
    _earlier(reports, "20261206T020000Z", "gpu-node-01", 30)
    _earlier(reports, "20261207T020000Z", "gpu-node-02", 6)
    ack = ("-e", "cuda13_breaker_ack=20261207T020000Z")

    # acknowledged, and this run rolls both hosts back
    done, out, played, _ = _run(tmp_path, "20261208T020000Z", *ack, stand_in="rolled_back")
    assert played == [HOSTS], out

    # the same ack no longer covers them
    done, out, played, _ = _run(tmp_path, "20261209T020000Z", *ack)
    assert done.returncode != 0 and played == [], out
    assert "- gpu-node-01 rolled back in run 20261208T020000Z at " in out
    assert "- gpu-node-02 rolled back in run 20261208T020000Z at " in out
    assert "in run 20261207T020000Z" not in out
    assert "--ack-breaker 20261208T020000Z" in out

    # below a raised threshold it runs, and says how many it counted
    done, out, played, _ = _run(tmp_path, "20261209T030000Z", *ack, "-e", "cuda13_breaker_rollbacks=3")
    assert played == [HOSTS], out
    assert "breaker: 2 rollbacks or failures of rollouts within the last 7 days" in out


def test_bad_breaker_values_stop_before_any_batch(tmp_path):
    done, out, played, _ = _run(
        tmp_path, "20261207T120000Z", "-e", "cuda13_breaker_rollbacks=-1", "-e", "cuda13_breaker_days=0"
    )
    assert done.returncode != 0 and played == [], out
    assert (
        "The rollout's batches, window, failure budget or breaker have bad values; no host was changed."
        in out
    )
    assert "cuda13_breaker_rollbacks is not a whole number: '-1'. Option: cuda13_breaker_rollbacks." in out
    assert "cuda13_breaker_days is out of range: '0'. Option: cuda13_breaker_days." in out


def test_a_malformed_result_stops_before_any_batch_naming_the_file(tmp_path):
    path = tmp_path / "reports" / "20261206T020000Z" / "gpu-node-01" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    done, out, played, _ = _run(tmp_path, "20261207T120000Z")
    assert done.returncode != 0 and played == [], out
    assert f"the breaker cannot read the reports: {path} is not a JSON result" in out
    # off, it reads nothing
    done, out, played, _ = _run(tmp_path, "20261207T130000Z", "-e", "cuda13_breaker_rollbacks=0")
    assert played == [HOSTS], out
    assert "the breaker is off (cuda13_breaker_rollbacks 0)" in out
