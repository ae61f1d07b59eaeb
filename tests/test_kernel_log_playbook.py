"""The kernel log's tasks of roles/upgrade_host on localhost: the mark before the switch and
the decision (upgrade.yml's own tasks, taken from the file), the read between them
(kernel_log.yml), and the result's ``kernel_log`` (cuda13_host_result).

The log is a file printed by a stand-in command, as dmesg prints the ring buffer; the lines
"logged after the switch" are real ones (tests/test_xid.py, with their sources).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from playbook import run_playbook
from test_xid import LOADING, XID45, XID79

REPO = Path(__file__).resolve().parents[1]
UPGRADE = REPO / "roles" / "upgrade_host" / "tasks" / "upgrade.yml"
RESCUE = REPO / "roles" / "upgrade_host" / "tasks" / "rescue.yml"


def _task(name_start: str, path: Path = UPGRADE) -> dict:
    tasks = yaml.safe_load(path.read_text())
    (task,) = [t for t in tasks if str(t.get("name", "")).startswith(name_start)]
    return task


def _run(
    tmp_path: Path, after_switch: list[str], *, command: str | None = None, regressed: bool = False
) -> dict:
    log = tmp_path / "kmsg"
    log.write_text(f"{XID79}\n{LOADING}\n")  # an Xid 79 before the switch is not the new stack's
    show = tmp_path / "show-log"
    show.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(log)!r}).read())\n")
    show.chmod(0o755)
    # The extracted tasks find the host scripts where upgrade_host does: role_path/../../src.
    (tmp_path / "src").symlink_to(REPO / "src")
    tasks_dir = tmp_path / "roles" / "probe" / "tasks"
    tasks_dir.mkdir(parents=True)
    # rescue.yml includes kernel_log.yml from its own role's tasks.
    (tasks_dir / "kernel_log.yml").symlink_to(REPO / "roles" / "upgrade_host" / "tasks" / "kernel_log.yml")
    switch = {
        "name": "The new stack logs",
        "ansible.builtin.copy": {
            "dest": str(log),
            "content": "".join(f"{line}\n" for line in [XID79, LOADING, *after_switch]),
            "mode": "0644",
        },
    }
    gate = _task("Roll back when the new stack is slower")
    tasks = [
        {"name": "Options", "ansible.builtin.set_fact": {"__cuda13_measure": True}},
        _task("Mark the kernel log before the switch"),
        switch,
        {
            "block": [
                {
                    "name": "Read",
                    "ansible.builtin.include_role": {"name": "upgrade_host", "tasks_from": "kernel_log"},
                },
                gate,
                {"name": "Kept", "ansible.builtin.set_fact": {"__outcome": "kept"}},
            ],
            # The gate's own rollback goes through the rescue, which reads the log only
            # where the decision did not (rescue.yml's task): the read must survive it.
            "rescue": [
                _task("Read the kernel log since the switch", RESCUE),
                {
                    "name": "Rolled back",
                    "ansible.builtin.set_fact": {"__outcome": "{{ ansible_failed_result.msg }}"},
                },
            ],
        },
        {
            "name": "Result",
            "ansible.builtin.copy": {
                "dest": str(tmp_path / "out.json"),
                "mode": "0644",
                "content": "{{ {'outcome': __outcome, 'result': {'finished_at': '2026-12-03T10:00:00+00:00',"
                " 'status': 'kept', 'kernel_log_mark': __cuda13_kernel_log_mark,"
                " 'kernel_log_read': __cuda13_kernel_log_read} | cuda13_host_result} | to_json }}",
            },
        },
    ]
    (tasks_dir / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "cuda13_kernel_log_command": command or str(show),
                "nvidia_driver_check_options": {"nvidia_driver_check_python": sys.executable},
                "verify_throughput_regressed": regressed,
                "verify_throughput_reason": "plain: output differs from the old stack",
            },
            "roles": [{"role": "probe"}],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    proc = run_playbook(
        playbook,
        filters=True,
        env={"ANSIBLE_ROLES_PATH": f"{tmp_path / 'roles'}:{REPO / 'roles'}"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "out.json").read_text())


def test_a_gpu_fallen_off_the_bus_after_the_mark_rolls_back_with_its_line(tmp_path):
    out = _run(tmp_path, [XID45, XID79], regressed=True)
    assert out["outcome"].startswith(
        "The new stack fails the gate: the kernel log shows Xid 79 after the switch"
    )
    assert repr(XID79) in out["outcome"] and "RESTART_BM" in out["outcome"]
    assert out["outcome"].endswith("; plain: output differs from the old stack")
    log = out["result"]["kernel_log"]
    assert log["gated"] is True and log["marker_found"] is True
    # Only the lines after the mark: the Xid 79 logged before the switch is not counted twice.
    assert [e["xid"] for e in log["xid"]] == [45, 79]


def test_an_application_xid_is_shown_and_the_host_kept(tmp_path):
    out = _run(tmp_path, [XID45])
    assert out["outcome"] == "kept"
    log = out["result"]["kernel_log"]
    assert log["gated"] is False and [(e["xid"], e["gate"]) for e in log["xid"]] == [(45, False)]


def test_a_log_that_cannot_be_read_gates_nothing(tmp_path):
    out = _run(tmp_path, [XID79], command="/nonexistent/journalctl -k")
    assert out["outcome"] == "kept"
    log = out["result"]["kernel_log"]
    assert log["read"] is False and log["gated"] is False
    assert log["message"] == "kernel log not read: /nonexistent/journalctl: No such file or directory"
