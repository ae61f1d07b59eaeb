"""A batch whose every host Ansible lost, as playbooks/upgrade.yml runs it, on local hosts.

Ansible ends the playbook after a batch whose every host it counts as failed or
unreachable (``PlaybookExecutor.run``), the report play and the later batches with it.
The upgrade play records a host whose connection fails instead
(``__cuda13_record_lost``, cuda13_upgrade.steps.lost): here the canary, gpu-node-01,
answers no ssh (127.0.0.1 port 1: ``Connection refused``, nothing leaves this machine)
from its first step on, the lock. The test play takes the upgrade play's own ``serial``,
``vars`` and ``pre_tasks``; the role is a stand-in made of the real steps a lost host
meets (cuda13_lock, a step of the block, the rescue's cuda13_rollback, cuda13_result and
the lock's release), the other hosts kept by a stand-in for the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

from playbook import RECORD_BATCH, batches, fleet_inventory, rollout_book, run_playbook

LOST = "gpu-node-01"


def _stand_in(state_dir: Path, reports: Path) -> list[dict]:
    options = {"cuda13_reports_dir": str(reports), "cuda13_state_dir": str(state_dir)}
    return [
        RECORD_BATCH,
        {
            "name": "Take the host's upgrade lock",
            "cuda13_lock": {
                "state": "acquired",
                "state_dir": str(state_dir) + "/{{ inventory_hostname }}",
                "run_id": "{{ cuda13_run_id }}",
            },
            "register": "__cuda13_lock",
        },
        {
            "name": "Upgrade the host",
            "block": [
                {
                    "name": "Snapshot the running stack",
                    "cuda13_snapshot": {"options": options, "run_id": "{{ cuda13_run_id }}"},
                    "register": "__cuda13_snapshot",
                    "when": f"inventory_hostname == '{LOST}'",
                },
                {"name": "Keep the host", "ansible.builtin.set_fact": {"cuda13_result": {"status": "kept"}}},
            ],
            "rescue": [
                {
                    "name": "Roll the host back",
                    "cuda13_rollback": {
                        "options": options,
                        "run_id": "{{ cuda13_run_id }}",
                        "failed": "{{ ansible_failed_result }}",
                    },
                    "register": "__cuda13_rollback",
                }
            ],
            "always": [
                {
                    "name": "Record the host's result",
                    "cuda13_result": {
                        "options": options,
                        "run_id": "{{ cuda13_run_id }}",
                        "records": {"rollback": "{{ __cuda13_rollback | default({}) }}"},
                    },
                    "when": f"inventory_hostname == '{LOST}'",
                },
                # run_once: on the batch's first host, the lost canary itself; a task that needs no
                # connection runs as usual (a failed run_once task would fail every host of the play).
                {
                    "name": "Write the run's summary",
                    "cuda13_report": {
                        "reports_dir": str(reports),
                        "run_id": "{{ cuda13_run_id }}",
                        "hosts": "{{ ansible_play_hosts_all }}",
                    },
                    "run_once": True,
                },
                {
                    "name": "Release the lock",
                    "cuda13_lock": {
                        "state": "released",
                        "state_dir": str(state_dir) + "/{{ inventory_hostname }}",
                        "run_id": "{{ cuda13_run_id }}",
                        "lock": "{{ __cuda13_lock }}",
                    },
                },
            ],
        },
    ]


def _run(tmp_path: Path, *extra: str, budget: int = 1):
    hosts = {f"gpu-node-{i:02d}": {} for i in range(2, 5)}
    hosts[LOST] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}
    inventory = fleet_inventory(
        tmp_path / "inventory", dict(sorted(hosts.items())), cuda13_max_failed_hosts=budget
    )
    reports = tmp_path / "reports"
    after = tmp_path / "not_started.json"
    book = rollout_book(tmp_path, _stand_in(tmp_path / "state", reports), not_started=after, last_play=True)
    done = run_playbook(
        book,
        "-e",
        '{"cuda13_run_id": "20261206T010000Z"}',
        *extra,
        inventory=inventory,
        timeout=180,
        env={"CUDA13_REPORTS_DIR": str(reports)},
    )
    out = " ".join((done.stdout + done.stderr).split())
    result = reports / "20261206T010000Z" / LOST / "result.json"
    return (
        out,
        batches(out),
        json.loads(after.read_text()) if after.exists() else None,
        json.loads(result.read_text()) if result.exists() else None,
    )


def test_a_lost_canary_is_recorded_and_the_budget_lets_the_next_batches_start(tmp_path):
    out, played, not_started, result = _run(tmp_path, budget=1)
    assert played[0] == [LOST], out
    assert sorted(h for batch in played[1:] for h in batch) == ["gpu-node-02", "gpu-node-03", "gpu-node-04"]
    assert not_started == {}
    assert (tmp_path / "reports" / "20261206T010000Z" / "summary.md").exists()
    assert result["status"] == "unreachable" and result["failed_step"] == "lock"
    assert result["failed_task"] == "Take the host's upgrade lock"
    assert "ssh: connect to host 127.0.0.1 port 1: Connection refused" in result["error"]
    assert result["error"].startswith(
        f"{LOST}: Ansible lost the host at step lock (Take the host's upgrade lock): Data could not be sent "
        'to remote host "127.0.0.1". Make sure this host can be reached over ssh: ssh: connect to host '
        "127.0.0.1 port 1: Connection refused. Nothing was done on it in this run; no lock was taken."
    )
    # The last play fails it, with the result's message.
    assert f"{LOST}: unreachable at step 'lock': {LOST}: Ansible lost the host at step lock" in out


def test_a_lost_canary_spends_a_budget_of_0_and_the_run_reports_the_hosts_not_started(tmp_path):
    out, played, not_started, result = _run(tmp_path, budget=0)
    assert played == [[LOST]], out
    assert result["status"] == "unreachable"
    assert (
        not_started["reason"] == f"failure budget spent (hosts {LOST} unreachable; cuda13_max_failed_hosts 0)"
    )
    assert not_started["hosts"] == ["gpu-node-02", "gpu-node-03", "gpu-node-04"]


def test_without_the_recording_ansible_ends_the_playbook_after_the_lost_batch(tmp_path):
    # Ansible's own behaviour, which the recording exists for: the plays after are not run.
    out, played, not_started, result = _run(tmp_path, "-e", '{"__cuda13_record_lost": false}', budget=1)
    assert played == [[LOST]], out
    assert not_started is None and result is None
    assert "UNREACHABLE" in out
