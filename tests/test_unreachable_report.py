"""An unreachable host in the report: the step it was at and the connection's own error.

tests/fixtures/runner-events/unreachable.jsonl: the events ``ansible_runner.run``
emitted (record.py unreachable there) for a host that answers no ssh when the
switch step's action first reaches it (roles/upgrade_host/tasks/main.yml, the
steps' actions stand-ins): the task is unreachable with ssh's own error, and no
run record comes back, so the step is the one whose action started. A looped
task (an operator's hook) says only "All items completed" (ansible-core's
``TaskExecutor._run_loop``); the item's result has ssh's error. The form of that
error for port 22 is the one Ansible prints in ansible/ansible#32859 ("Failed to
connect to the host via ssh: ssh: connect to host 127.0.0.1 port 22: Connection
refused\\r\\n").
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

from cuda13_upgrade import cli, hostresult
from cuda13_upgrade.progress import Progress

EVENTS = [
    json.loads(line)
    for line in (Path(__file__).parent / "fixtures" / "runner-events" / "unreachable.jsonl")
    .read_text()
    .splitlines()
]
REFUSED = "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused"


def test_the_recording_has_the_step_actions_connection_error_and_no_run_record():
    """The step's action found the host gone: its result is the connection's error alone, without
    the run record (cuda13_host_run) that names the step."""
    event = next(e for e in EVENTS if e["event"] == "runner_on_unreachable")
    assert event["event_data"]["task_action"] == "cuda13_switch"
    assert REFUSED in event["event_data"]["res"]["msg"]
    assert "ansible_facts" not in event["event_data"]["res"]


def test_a_looped_task_keeps_the_items_error():
    """The fault of a looped task (recorded before the steps were actions: a loop of the switch
    step's file module): its own message is the loop's, not the connection's."""
    progress = Progress(io.StringIO())
    progress(
        {
            "event": "runner_on_unreachable",
            "event_data": {
                "host": "gpu-node-03",
                "play": "Upgrade, verify, keep or roll back",
                "play_pattern": "blackwell",
                "task": "Remove the upgrade's drop-ins",
                "task_action": "ansible.builtin.file",
                "res": {
                    "changed": False,
                    "msg": "All items completed",
                    "results": [
                        {
                            "_ansible_item_label": "50-cuda13-switch.conf",
                            "ansible_loop_var": "item",
                            "changed": False,
                            "item": "50-cuda13-switch.conf",
                            "msg": f"Task failed: {REFUSED}",
                            "unreachable": True,
                        }
                    ],
                    "unreachable": True,
                },
            },
        }
    )
    assert progress.outcomes["gpu-node-03"].message == REFUSED


def test_progress_keeps_the_connections_error_and_the_step():
    out = io.StringIO()
    progress = Progress(out)
    for event in EVENTS:
        progress(event)
    outcome = progress.outcomes["gpu-node-03"]
    assert outcome.unreachable
    assert outcome.step == "switch"
    assert outcome.message == REFUSED
    assert (
        f"gpu-node-03: switch › Switch the service to the new stack ... UNREACHABLE: {REFUSED}"
        in out.getvalue()
    )
    assert "All items completed" not in out.getvalue()


def test_an_unlooped_task_keeps_its_message_without_the_line_end():
    """Ansible's wording for port 22, with the \\r\\n ssh leaves (ansible/ansible#32859)."""
    progress = Progress(io.StringIO())
    progress(
        {
            "event": "runner_on_unreachable",
            "event_data": {
                "host": "gpu-node-05",
                "play": "Upgrade",
                "play_pattern": "blackwell",
                "task": "Gathering Facts",
                "res": {
                    "changed": False,
                    "msg": "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.5 port 22: "
                    "Connection refused\r\n",
                    "unreachable": True,
                },
            },
        }
    )
    assert progress.outcomes["gpu-node-05"].message == (
        "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.5 port 22: Connection refused"
    )


def test_run_json_and_the_report_name_the_step_and_the_error(tmp_path, monkeypatch, capsys):
    import ansible_runner

    def replay(**kwargs):
        for event in EVENTS:
            kwargs["event_handler"](event)
        return SimpleNamespace(rc=4, status="failed", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", replay)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[blackwell]\ngpu-node-03\n")
    argv = ["rollout", "--yes", "-i", str(inventory), "--reports-dir", str(tmp_path / "r"), "--run-id", "u1"]
    assert cli.main(argv) == 1
    run_dir = tmp_path / "r" / "u1"
    outcome = hostresult.load_run_record(run_dir)["outcomes"]["gpu-node-03"]
    assert outcome["status"] == "unreachable"
    assert outcome["failed_step"] == "switch"
    assert outcome["error"] == REFUSED
    summary = json.loads((run_dir / "summary.json").read_text())
    row = summary["rows"][0]
    assert row["decision"] == "unreachable at step switch"
    assert row["reason"] == REFUSED
    markdown = (run_dir / "summary.md").read_text()
    assert f"| gpu-node-03 | unreachable at step switch | {REFUSED} |" in markdown
    assert "All items completed" not in markdown
    assert REFUSED in capsys.readouterr().out
