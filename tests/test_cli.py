"""Tests of the cuda13-upgrade command (cuda13_upgrade.cli).

Argument parsing and its errors, exit_status for every case, the progress
lines from runner events, the report subcommand on a run directory, and real
ansible-runner runs of throwaway playbooks against two local hosts
(``ansible_connection=local``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cuda13_upgrade import cli
from cuda13_upgrade.cli import commands, parser, runner
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.hostresult import load_run_record
from cuda13_upgrade.progress import Progress
from cuda13_upgrade.summary import fleet_summary

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("report_fixtures", ROOT / "tests" / "test_report.py")
assert _spec is not None and _spec.loader is not None
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("CUDA13_UPGRADE_HOME", "CUDA13_REPORTS_DIR", "CUDA13_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(
        "[blackwell]\n"
        f"node-a ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        f"node-b ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return path


# --- parsing ---------------------------------------------------------------------------


def test_parse_rollout(tmp_path, inventory, monkeypatch):
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("cuda13_serial: 1\n")
    options = parser.parse_args(
        [
            "rollout",
            "-i",
            "hosts.ini",
            "--limit",
            "node-a",
            "-e",
            "cuda13_reverify=true",
            "-e",
            "@vars.yml",
            "--check",
        ],
        cwd=tmp_path,
    )
    assert options.command == "rollout"
    assert options.inventory == str(inventory)
    assert options.limit == "node-a"
    assert options.extra_vars == ["cuda13_reverify=true", f"@{vars_file}"]
    assert options.check is True
    assert options.home == ROOT
    assert options.reports_dir == ROOT / "reports"
    assert re.fullmatch(r"\d{8}T\d{6}Z", options.run_id)
    assert parser.playbook_path(options) == ROOT / "upgrade-cuda13.yml"


def test_parse_reports_dir_from_option_or_environment(tmp_path, inventory, monkeypatch):
    options = parser.parse_args(["preflight", "-i", str(inventory), "--reports-dir", "out"], cwd=tmp_path)
    assert options.reports_dir == tmp_path / "out"
    monkeypatch.setenv("CUDA13_REPORTS_DIR", str(tmp_path / "env-reports"))
    options = parser.parse_args(["preflight", "-i", str(inventory), "--run-id", "r1"], cwd=tmp_path)
    assert options.reports_dir == tmp_path / "env-reports"
    assert options.run_id == "r1"
    assert parser.playbook_path(options) == ROOT / "playbooks" / "preflight.yml"


def test_stage_runs_the_stage_playbook_and_a_staged_host_is_fine(tmp_path, inventory):
    options = parser.parse_args(["stage", "-i", str(inventory)], cwd=tmp_path)
    assert parser.playbook_path(options) == ROOT / "playbooks" / "stage.yml"
    command = parser.COMMANDS["stage"]
    assert commands.exit_status([{"status": "staged"}], 0, [command.ok_status]) == commands.EXIT_OK
    assert (
        commands.exit_status([{"status": "staged"}, {"status": "failed"}], 2, [command.ok_status])
        == commands.EXIT_HOSTS
    )


def test_driver_runs_the_driver_window_alone_and_its_statuses_are_fine(tmp_path, inventory):
    options = parser.parse_args(
        ["driver", "-i", str(inventory), "-e", "cuda13_driver_target=R580", "--until", "06:00"], cwd=tmp_path
    )
    assert parser.playbook_path(options) == ROOT / "playbooks" / "driver.yml"
    # The plan that confirms it and the playbook both see the switch (cuda13_driver_only).
    assert json.loads(options.extra_vars[-1]) == {"cuda13_driver_only": True}
    assert json.loads(options.extra_vars[-2]) == {"cuda13_until": "06:00"}
    ok = parser.COMMANDS["driver"].ok_statuses
    assert ok == ("driver_kept", "driver_current", "kept")
    moved = [{"status": "driver_kept"}, {"status": "driver_current"}, {"status": "kept"}]
    assert commands.exit_status(moved, 0, ok) == commands.EXIT_OK
    assert commands.exit_status([*moved, {"status": "rolled_back"}], 2, ok) == commands.EXIT_HOSTS
    # A rollout's exit status does not take a moved driver as an upgrade.
    rollout = parser.COMMANDS["rollout"].ok_statuses
    assert commands.exit_status([{"status": "driver_kept"}], 0, rollout) == commands.EXIT_HOSTS
    assert "driver" in parser.CONFIRMED


def test_a_host_list_is_an_inventory(tmp_path):
    options = parser.parse_args(["preflight", "-i", "node-a,node-b,"], cwd=tmp_path)
    assert options.inventory == "node-a,node-b,"


def test_the_inventory_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["rollout"])
    assert exc.value.code == 2
    assert "the following arguments are required: -i/--inventory" in capsys.readouterr().err


def test_report_takes_no_inventory(capsys):
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["report", "-i", "x"])
    assert exc.value.code == 2
    assert "unrecognized arguments: -i x" in capsys.readouterr().err


def test_a_subcommand_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["upgrade"])
    assert exc.value.code == 2
    assert "invalid choice: 'upgrade'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["rollout", "-i", "missing.yml"],
            "-i/--inventory: no such file or directory: {tmp}/missing.yml",
        ),
        (
            ["rollout", "-i", "hosts.ini", "-e", "@nope.yml"],
            "-e/--extra-vars: no such file: {tmp}/nope.yml",
        ),
        (
            ["rollout", "-i", "hosts.ini", "--run-id", "../x"],
            "--run-id '../x' is not a plain directory name",
        ),
        (
            ["rollout", "-i", "hosts.ini", "--playbook", "pb.yml"],
            "--playbook: no such file: {tmp}/pb.yml",
        ),
        (["report", "--run-id", "a b"], "--run-id 'a b' is not a plain directory name"),
    ],
)
def test_usage_errors_name_the_option(tmp_path, inventory, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cuda13-upgrade: error: ")
    assert message.format(tmp=tmp_path) in err


def test_home_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA13_UPGRADE_HOME", str(tmp_path))
    with pytest.raises(UsageError, match=r"from CUDA13_UPGRADE_HOME\) is not a cuda13-upgrade checkout"):
        parser.home_dir()
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    assert parser.home_dir() == tmp_path


def test_a_playbook_the_checkout_lacks_is_a_clear_error(tmp_path, inventory, monkeypatch, capsys):
    home = tmp_path / "checkout"
    home.mkdir()
    (home / "ansible.cfg").write_text("[defaults]\n")
    monkeypatch.setenv("CUDA13_UPGRADE_HOME", str(home))
    for command, playbook in (
        ("verify", "playbooks/verify.yml"),
        ("rollback", "playbooks/rollback.yml"),
    ):
        yes = ["--yes"] if command == "rollback" else []
        assert cli.main([command, "-i", str(inventory), *yes]) == 2
        err = capsys.readouterr().err
        assert f"'{command}' needs {playbook}, which this checkout ({home}) does not have yet" in err


def test_runner_cmdline_and_envvars(tmp_path):
    assert runner.runner_cmdline(None, [], False) == ""
    assert (
        runner.runner_cmdline("gpu-node-0*", ["a=1", '{"b": "x y"}'], True)
        == "--limit 'gpu-node-0*' -e a=1 -e '{\"b\": \"x y\"}' --check"
    )
    env = runner.runner_envvars(ROOT, "r1", tmp_path)
    assert env["ANSIBLE_CONFIG"] == str(ROOT / "ansible.cfg")
    assert "CONTAINERS_CONF" not in env  # the sandbox's, for its inventory only
    assert runner.runner_envvars(ROOT, "r1", tmp_path, sandbox=True)["CONTAINERS_CONF"] == str(
        ROOT / "sandbox" / "containers.conf"
    )
    assert env["CUDA13_RUN_ID"] == "r1"
    assert env["CUDA13_REPORTS_DIR"] == str(tmp_path)
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


# --- exit status -----------------------------------------------------------------------


def rows(*statuses: str) -> list[dict[str, Any]]:
    return [{"host": f"h{i}", "status": s} for i, s in enumerate(statuses)]


@pytest.mark.parametrize(
    ("statuses", "rc", "ok", "expected"),
    [
        (("kept", "kept"), 0, ("kept",), 0),
        (("kept", "rolled_back"), 2, ("kept",), 1),
        (("kept", "failed"), 2, ("kept",), 1),
        (("kept", "not reached"), 2, ("kept",), 1),
        (("kept", "unreachable"), 4, ("kept",), 1),
        (("kept", "kept"), 2, ("kept",), 1),  # every host kept, but the report play failed
        (("not reached", "not reached"), 4, ("kept",), 3),  # ansible failed before any host
        ((), 4, ("kept",), 3),  # syntax error: no host at all
        ((), 0, ("kept",), 1),  # nothing targeted
        (("not reached",), 0, ("kept",), 1),
        (("kept",), None, ("kept",), 0),
        (("passed", "passed"), 0, ("passed",), 0),
        (("passed", "failed"), 2, ("passed",), 1),
        (("rolled_back",), 0, ("rolled_back",), 0),
        (("rolled_back", "failed"), 2, ("rolled_back",), 1),
    ],
)
def test_exit_status(statuses, rc, ok, expected):
    assert commands.exit_status(rows(*statuses), rc, ok) == expected


def test_exit_status_defaults_to_the_rollout():
    assert commands.exit_status(rows("kept"), 0) == 0
    assert commands.exit_status(rows("passed"), 0) == 1


# --- progress --------------------------------------------------------------------------


def _event(kind: str, host: str | None = None, **data: Any) -> dict[str, Any]:
    base = {"play": "Upgrade", "play_pattern": "blackwell", "host": host}
    return {"event": kind, "event_data": {**base, **data}}


def test_progress_lines_per_host_and_step():
    import io

    out = io.StringIO()
    progress = Progress(out)
    events = [
        _event("playbook_on_play_start", play="Start the run", play_pattern="localhost"),
        _event(
            "runner_on_ok",
            "localhost",
            play_pattern="localhost",
            task="Fix id",
            task_action="ansible.builtin.set_fact",
        ),
        _event("playbook_on_play_start"),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Create the state directory",
            task_action="ansible.builtin.file",
            task_path="/r/roles/upgrade_host/tasks/lock.yml:4",
            role="upgrade_host",
            res={"changed": True},
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Record the lock",
            task_action="ansible.builtin.set_fact",
            task_path="/r/roles/upgrade_host/tasks/lock.yml:36",
            role="upgrade_host",
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Note the start",
            task_action="ansible.builtin.set_fact",
            task_path="/r/roles/upgrade_host/tasks/upgrade.yml:2",
            role="upgrade_host",
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Read the nvcc version",
            role="stack_snapshot",
            task_action="ansible.builtin.command",
            res={"changed": False},
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Measure the new stack",
            task_action="ansible.builtin.include_role",
        ),
        _event(
            "runner_on_skipped",
            "gpu-node-01",
            task="Check",
            role="verify_throughput",
            task_action="ansible.builtin.assert",
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task='Measure "plain" (candidate)',
            role="verify_throughput",
            task_action="ansible.builtin.script",
        ),
        _event(
            "runner_on_failed",
            "gpu-node-01",
            task="Roll back when the new stack is slower",
            task_action="ansible.builtin.fail",
            task_path="/r/roles/upgrade_host/tasks/upgrade.yml:90",
            role="upgrade_host",
            res={"msg": "Throughput regressed on the new stack:\n plain -10 %"},
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Check",
            task_action="ansible.builtin.command",
            task_path="/r/x.yml:1",
            ignore_errors=True,
        ),
        _event(
            "runner_on_failed",
            "gpu-node-02",
            task="Probe",
            task_action="ansible.builtin.command",
            ignore_errors=True,
            res={"msg": "ignored"},
        ),
        _event(
            "runner_on_unreachable",
            "gpu-node-03",
            task="Probe",
            task_action="ansible.builtin.command",
            res={"msg": "ssh: connect to host 10.0.0.13 port 22: No route to host"},
        ),
        _event(
            "runner_on_ok",
            "gpu-node-01",
            task="Wait for health",
            role="rollback",
            task_action="ansible.builtin.uri",
        ),
        _event(
            "playbook_on_stats",
            failures={"gpu-node-01": 1},
            dark={"gpu-node-03": 1},
            ok={},
            processed={},
        ),
    ]
    for event in events:
        assert progress(event) is True
    assert out.getvalue().splitlines() == [
        "== Start the run",
        "== Upgrade",
        "gpu-node-01: lock ... changed",
        "gpu-node-01: stack_snapshot ... ok",
        "gpu-node-01: verify_throughput (Measure the new stack) ... ok",
        "gpu-node-01: upgrade › Roll back when the new stack is slower ... FAILED: "
        "Throughput regressed on the new stack: plain -10 %",
        "gpu-node-03: Probe ... UNREACHABLE: ssh: connect to host 10.0.0.13 port 22: No route to host",
        "gpu-node-01: Check ... ok",
        "gpu-node-02: Probe ... ok",
        "gpu-node-01: rollback ... ok",
    ]
    assert progress.hosts == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    assert progress.outcomes["gpu-node-01"].failed
    assert progress.outcomes["gpu-node-01"].task == "Roll back when the new stack is slower"
    assert progress.outcomes["gpu-node-03"].unreachable
    assert "gpu-node-02" not in progress.outcomes


# --- report ----------------------------------------------------------------------------


def _write_run(reports: Path, run_id: str, results: list[dict[str, Any]], record: dict | None = None) -> Path:
    run = reports / run_id
    run.mkdir(parents=True)
    for result in results:
        (run / result["host"]).mkdir(parents=True)
        (run / result["host"] / "result.json").write_text(json.dumps(result, indent=4) + "\n")
    if record is not None:
        (run / "run.json").write_text(json.dumps(record))
    return run


def test_report_of_a_run(tmp_path, capsys):
    run = _write_run(
        tmp_path,
        "20250101T120000Z",
        [fixtures.kept("gpu-node-01"), fixtures.rolled_back_regressed("gpu-node-02")],
        {
            "command": "rollout",
            "runner_rc": 2,
            "hosts": ["gpu-node-01", "gpu-node-02", "gpu-node-03"],
            "outcomes": {},
        },
    )
    assert cli.main(["report", "--reports-dir", str(tmp_path), "--run-id", "20250101T120000Z"]) == 1
    out = capsys.readouterr().out
    assert "# cuda13-upgrade run 20250101T120000Z" in out
    assert "1 kept, 1 not reached, 1 rolled back" in out
    assert "| gpu-node-02 | rolled back at verify |" in out
    assert f"report: {run / 'summary.md'}" in out
    assert str(run / "summary.png") in out
    assert (run / "summary.png").stat().st_size > 0
    assert json.loads((run / "summary.json").read_text())["rows"][2]["status"] == "not reached"


def test_report_takes_the_latest_run(tmp_path, capsys):
    import os

    old = _write_run(tmp_path, "20250101T120000Z", [fixtures.rolled_back_at_switch("gpu-node-01")])
    new = _write_run(tmp_path, "my-run", [fixtures.kept("gpu-node-01")])
    os.utime(old / "gpu-node-01" / "result.json", (1_700_000_000, 1_700_000_000))
    os.utime(new / "gpu-node-01" / "result.json", (1_800_000_000, 1_800_000_000))
    assert cli.main(["report", "--reports-dir", str(tmp_path)]) == 0
    assert "# cuda13-upgrade run my-run" in capsys.readouterr().out


def test_report_exit_status_follows_the_recorded_command(tmp_path):
    _write_run(
        tmp_path,
        "pf",
        [],
        {"command": "preflight", "runner_rc": 0, "ok_status": "passed", "hosts": ["a", "b"],
         "outcomes": {"a": {"status": "passed"}, "b": {"status": "passed"}}},
    )  # fmt: skip
    assert cli.main(["report", "--reports-dir", str(tmp_path), "--run-id", "pf"]) == 0


def test_report_of_an_unknown_run(tmp_path, capsys):
    assert cli.main(["report", "--reports-dir", str(tmp_path), "--run-id", "nope"]) == 2
    assert f"--run-id nope: no such run under {tmp_path}" in capsys.readouterr().err
    assert cli.main(["report", "--reports-dir", str(tmp_path / "empty")]) == 2
    assert "(--reports-dir)" in capsys.readouterr().err


# --- runs through ansible-runner -------------------------------------------------------

PREFLIGHT = """\
- name: Start the run
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Fix this run's identifier
      ansible.builtin.set_fact:
        cuda13_run_id: "{{ lookup('ansible.builtin.env', 'CUDA13_RUN_ID') }}"

- name: Preflight (read-only)
  hosts: blackwell
  gather_facts: false
  tasks:
    - name: Check the driver
      ansible.builtin.command:
        argv: ["true"]
      changed_when: false

    - name: Check the disk
      ansible.builtin.fail:
        msg: "only 3 GiB free on /opt, need 20 GiB"
      when: inventory_hostname == 'node-b'
"""

ROLLOUT = """\
- name: Upgrade
  hosts: blackwell
  gather_facts: false
  vars:
    run_dir: "{{ lookup('ansible.builtin.env', 'CUDA13_REPORTS_DIR') }}/{{ lookup('ansible.builtin.env', 'CUDA13_RUN_ID') }}"
  tasks:
    - name: Write the result on the control node
      when: inventory_hostname == 'node-a' or (extra_host | default(false) | bool)
      block:
        - name: Create the run's report directory
          ansible.builtin.file:
            path: "{{ run_dir }}/{{ inventory_hostname }}"
            state: directory
            mode: "0755"
          check_mode: false

        - name: Write the result on the control node
          ansible.builtin.copy:
            content: "{{ {'host': inventory_hostname, 'run_id': lookup('ansible.builtin.env', 'CUDA13_RUN_ID'),
                          'status': 'kept', 'check_mode': ansible_check_mode} | to_nice_json }}"
            dest: "{{ run_dir }}/{{ inventory_hostname }}/result.json"
            mode: "0644"
          check_mode: false
"""


def _playbook(tmp_path: Path, text: str, name: str = "play.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_preflight_through_ansible_runner(tmp_path, inventory, capsys):
    playbook = _playbook(tmp_path, PREFLIGHT)
    reports = tmp_path / "reports"
    argv = [
        "preflight",
        "-i",
        str(inventory),
        "--playbook",
        str(playbook),
        "--reports-dir",
        str(reports),
    ]
    assert cli.main([*argv, "--run-id", "pf1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"cuda13-upgrade preflight: play.yml on {inventory}, run pf1"
    # Without a terminal: timestamped lines, a step's start and its end with its duration.
    stamped = [line for line in lines if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", line)]
    lines = [line.split(" ", 1)[1] if line in stamped else line for line in lines]
    assert "== Start the run" in lines
    assert "== Preflight (read-only)" in lines
    assert "node-a: Check the driver started" in lines
    assert [line for line in lines if re.match(r"^node-b: Check the driver done in \d+ s$", line)]
    assert "node-b: Check the disk ... FAILED: only 3 GiB free on /opt, need 20 GiB" in lines
    assert "node-b: Check the disk ... FAILED: only 3 GiB free on /opt, need 20 GiB" in [
        line.split(" ", 1)[1] for line in stamped
    ]
    assert not [line for line in lines if line.startswith("localhost:")]
    assert "| node-a | passed | - |" in lines
    assert "| node-b | failed at Preflight (read-only) | only 3 GiB free on /opt, need 20 GiB |" in lines
    record = json.loads((reports / "pf1" / "run.json").read_text())
    assert record["hosts"] == ["node-a", "node-b"]
    assert record["runner_rc"] == 2
    assert record["outcomes"]["node-b"] == {
        "status": "failed",
        "failed_step": "Preflight (read-only)",
        "failed_task": "Check the disk",
        "error": "only 3 GiB free on /opt, need 20 GiB",
    }
    assert "only 3 GiB free" in (reports / "pf1" / "ansible-preflight.log").read_text()

    # Only the host that passes: exit 0.
    assert cli.main([*argv, "--run-id", "pf2", "--limit", "node-a"]) == 0
    out = capsys.readouterr().out
    assert "node-b" not in out
    assert "1 passed" in out


def test_rollout_reads_the_results_the_playbook_writes(tmp_path, inventory, capsys):
    playbook = _playbook(tmp_path, ROLLOUT)
    reports = tmp_path / "reports"
    argv = [
        "rollout",
        "--yes",
        "-i",
        str(inventory),
        "--playbook",
        str(playbook),
        "--reports-dir",
        str(reports),
    ]
    # node-b writes no result: it was not reached.
    assert cli.main([*argv, "--run-id", "r1"]) == 1
    out = capsys.readouterr().out
    assert "Z node-a: Create the run's report directory started\n" in out
    assert re.search(r"Z node-a: Write the result on the control node done in \d+ s\n", out)
    assert re.search(r"Z batch 1 \(", out)  # no preflight play before: the number of batches is unknown
    assert "| node-a | kept |" in out
    assert "| node-b | not reached |" in out
    assert (reports / "r1" / "node-a" / "result.json").exists()
    record = json.loads((reports / "r1" / "run.json").read_text())
    assert record["batches"] == {"node-a": 1, "node-b": 1}  # the batch each host ran in
    started, finished = (datetime.fromisoformat(record[k]) for k in ("started_at", "finished_at"))
    assert timedelta(0) < finished - started < timedelta(minutes=5)
    assert "cuda13_upgrade_batch_hosts" in (reports / "r1" / "cuda13_upgrade.prom").read_text()
    # Both write a result, in check mode: exit 0, the report says check mode.
    assert cli.main([*argv, "--run-id", "r2", "--check", "-e", "extra_host=true"]) == 0
    out = capsys.readouterr().out
    assert "| node-b | kept (check mode) |" in out
    assert "Check mode: nothing was changed" in out


ALREADY_KEPT = """\
- name: Upgrade
  hosts: blackwell
  gather_facts: false
  vars:
    run_dir: "{{ lookup('ansible.builtin.env', 'CUDA13_REPORTS_DIR') }}/{{ lookup('ansible.builtin.env', 'CUDA13_RUN_ID') }}"
  tasks:
    - name: Write the result on the control node
      when: inventory_hostname == 'node-a'
      block:
        - name: Create the run's report directory
          ansible.builtin.file:
            path: "{{ run_dir }}/{{ inventory_hostname }}"
            state: directory
            mode: "0755"

        # As roles/upgrade_host/tasks/early.yml records a host kept by an earlier run.
        - name: Write the result on the control node
          ansible.builtin.copy:
            content: "{{ {'host': inventory_hostname, 'run_id': lookup('ansible.builtin.env', 'CUDA13_RUN_ID'),
                          'status': 'kept', 'already_kept': true, 'measured': false,
                          'verified_in_run': 'r0', 'check_mode': false} | to_nice_json }}"
            dest: "{{ run_dir }}/{{ inventory_hostname }}/result.json"
            mode: "0644"
"""


def test_run_json_says_already_kept_for_a_host_kept_before(tmp_path, inventory, capsys):
    """run.json called a host already kept "not reached": each host with a result file
    now has its result's status there."""
    playbook = _playbook(tmp_path, ALREADY_KEPT)
    reports = tmp_path / "reports"
    argv = [
        "rollout",
        "--yes",
        "-i",
        str(inventory),
        "--playbook",
        str(playbook),
        "--reports-dir",
        str(reports),
    ]
    assert cli.main([*argv, "--run-id", "k1"]) == 1  # node-b was not reached
    out = capsys.readouterr().out
    assert "| node-a | already kept (verified in run r0) |" in out
    record = json.loads((reports / "k1" / "run.json").read_text())
    assert record["outcomes"] == {"node-a": {"status": "already kept"}, "node-b": {"status": "not reached"}}


def test_recorded_outcomes_take_each_result_files_status(tmp_path):
    run = tmp_path / "r"
    for host, result in {
        "a": {"status": "kept", "already_kept": True},
        "b": {"status": "kept", "already_kept": False},
        "c": {"status": "rolled_back"},
    }.items():
        (run / host).mkdir(parents=True)
        (run / host / "result.json").write_text(json.dumps(result))
    (run / "d").mkdir()
    (run / "d" / "result.json").write_text("{damaged")
    seen = {h: {"status": "not reached"} for h in "abcd"} | {
        "e": {"status": "unreachable", "failed_step": "switch"}
    }
    assert commands.recorded_outcomes(run, list("abcde"), seen, 0.0) == {
        "a": {"status": "already kept"},
        "b": {"status": "kept"},
        "c": {"status": "rolled_back"},
        "d": {"status": "not reached"},
        "e": {"status": "unreachable", "failed_step": "switch"},
    }
    # A result file older than the run (the same --run-id given again) is not this run's.
    assert commands.recorded_outcomes(run, ["a"], seen, 4e9) == {"a": {"status": "not reached"}}


def test_a_broken_playbook_exits_3_with_ansibles_message(tmp_path, inventory, capsys):
    playbook = _playbook(
        tmp_path,
        "- name: Broken\n  hosts: all\n  tasks:\n    - name: X\n      no.such.module: {}\n",
    )
    argv = [
        "preflight",
        "-i",
        str(inventory),
        "--playbook",
        str(playbook),
        "--reports-dir",
        str(tmp_path / "r"),
    ]
    assert cli.main([*argv, "--run-id", "bad"]) == 3
    captured = capsys.readouterr()
    assert "ansible-playbook failed (rc 4) before any host had a result" in captured.err
    assert "no.such.module" in captured.err
    assert str(tmp_path / "r" / "bad" / "ansible-preflight.log") in captured.err


def test_an_interrupted_run_exits_130(tmp_path, inventory, monkeypatch, capsys):
    import ansible_runner

    def fake_run(**kwargs):
        kwargs["event_handler"](_event("playbook_on_play_start", play="Preflight"))
        kwargs["event_handler"](
            _event("runner_on_ok", "node-a", task="Check", task_action="ansible.builtin.command")
        )
        assert kwargs["envvars"]["CUDA13_RUN_ID"] == "int1"
        assert kwargs["project_dir"] == str(ROOT)
        assert kwargs["cmdline"] == "--limit node-a"
        return SimpleNamespace(rc=254, status="canceled", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    argv = [
        "preflight",
        "-i",
        str(inventory),
        "--limit",
        "node-a",
        "--reports-dir",
        str(tmp_path),
        "--run-id",
        "int1",
    ]
    assert cli.main(argv) == 130
    captured = capsys.readouterr()
    assert "Z node-a: Check started\n" in captured.out
    assert "interrupted" in captured.err
    assert "  node-a: in step Check for 0 s\n" in captured.err  # what the host was doing
    assert load_run_record(tmp_path / "int1")["runner_status"] == "canceled"


LONG_STEP = """\
- name: Upgrade
  hosts: all
  gather_facts: false
  vars:
    cuda13_run_id: "{{{{ lookup('ansible.builtin.env', 'CUDA13_RUN_ID') }}}}"
  tasks:
    - name: Take the host's upgrade lock
      cuda13_lock:
        state: acquired
        state_dir: "{{{{ cuda13_state_dir }}}}"
        run_id: "{{{{ cuda13_run_id }}}}"
      register: __cuda13_lock
    - name: Build
      block:
        - name: A long step
          ansible.builtin.command: sleep 120
          changed_when: true
      always:
        - name: Release the lock
          cuda13_lock:
            state: released
            state_dir: "{{{{ cuda13_state_dir }}}}"
            run_id: "{{{{ cuda13_run_id }}}}"
            lock: "{{{{ __cuda13_lock }}}}"
"""


def test_ctrl_c_stops_ansible_records_each_hosts_step_and_releases_the_lock(tmp_path):
    """SIGINT to the command during a long step: exit 130, ansible-playbook
    stopped (not killed), the host's step recorded, its lock released."""
    import signal
    import subprocess
    import sys
    import time

    playbook = _playbook(tmp_path, LONG_STEP.format(root=ROOT))
    state = tmp_path / "state"
    reports = tmp_path / "reports"
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(f"node-a ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    argv = [
        str(Path(sys.executable).with_name("cuda13-upgrade")),
        "rollout",
        "--yes",
        "-i",
        str(hosts),
        "--playbook",
        str(playbook),
        "--reports-dir",
        str(reports),
        "--run-id",
        "ctrl-c",
        "-e",
        "cuda13_target_hosts=all",
        "-e",
        f"cuda13_state_dir={state}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (state / "run.lock" / "owner.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(3)  # into the long step
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "interrupt: SIGINT received; stopping ansible-playbook (pid" in out
    assert "interrupted: node-a during A long step. Their locks are released." in err
    assert not (state / "run.lock").exists()
    record = json.loads((state / "result.json").read_text())
    assert record["status"] == "interrupted"
    assert record["run_id"] == "ctrl-c"
    assert record["failed_step"] == "A long step"
    assert "interrupted (Ctrl-C) during step 'A long step'. Run the same command again" in record["error"]
    assert json.loads((reports / "ctrl-c" / "node-a" / "result.json").read_text()) == record
    # ansible-playbook itself ended (it was told to stop, not left behind).
    pid = int(out.split("stopping ansible-playbook (pid ", 1)[1].split(")", 1)[0])
    assert not Path(f"/proc/{pid}").exists()


def test_a_long_refusal_is_printed_whole_and_notices_are_shown():
    import io

    out = io.StringIO()
    progress = Progress(out)
    holder = json.dumps({"run_id": "r0", "control_node": "ctl-1", "playbook": "x" * 300})
    refusal = (
        "Another cuda13-upgrade run holds the lock /var/lib/cuda13-upgrade/run.lock on gpu-node-01: run r0 "
        "from ctl-2 holds a lease until 2026-12-02T08:00:00+00:00. Wait for it to finish. If that run is "
        "dead, run again with -e cuda13_break_lock=true, or remove the directory on the host. "
        f"Holder: {holder}."
    )
    progress(
        _event(
            "runner_on_failed",
            "gpu-node-01",
            task="Refuse a second concurrent run",
            task_action="ansible.builtin.fail",
            res={"msg": refusal},
        )
    )
    progress(
        _event(
            "runner_on_ok",
            "gpu-node-02",
            task="Say whose lock this run takes over",
            task_action="ansible.builtin.set_fact",
            res={"ansible_facts": {"cuda13_notice": "gpu-node-02: took over the lock\n of run r0: gone."}},
        )
    )
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(f"FAILED: {refusal}")
    assert "-e cuda13_break_lock=true" in lines[0]
    assert lines[1] == "gpu-node-02: took over the lock of run r0: gone."
    assert progress.last_step == {
        "gpu-node-01": "Refuse a second concurrent run",
        "gpu-node-02": "Say whose lock this run takes over",
    }


def test_an_unreachable_host_is_reported_at_the_step_the_play_recorded(tmp_path):
    """Ansible runs neither rescue nor always for a host that drops
    (ansible/ansible#13870): no result file, so the report's row comes from
    the runner, at the upgrade step the host last began: the step of the action
    that found it gone (its result carries no run record), or the step its run
    record (cuda13_host_run) names while an operator's hook task runs, not the
    task or role that found it gone."""
    import io

    def run_record(*steps):
        return {
            "cuda13_host_run": {
                "steps": [{"step": s, "started_at": "2026-12-02T10:00:00+00:00"} for s in steps]
            }
        }

    progress = Progress(io.StringIO())
    for event in [
        _event("playbook_on_play_start"),
        _event(
            "runner_on_ok",
            "gpu-node-03",
            task="Measure the old stack, or reuse its recorded baseline",
            task_action="cuda13_baseline",
            res={"ansible_facts": run_record("snapshot", "drain", "baseline")},
        ),
        _event(
            "runner_on_start",
            "gpu-node-03",
            task="Switch the service to the new stack",
            task_action="cuda13_switch",
        ),
        _event(
            "runner_on_unreachable",
            "gpu-node-03",
            task="Switch the service to the new stack",
            task_action="cuda13_switch",
            res={"msg": "Failed to connect to the host via ssh: Connection timed out during banner exchange"},
        ),
        _event(
            "runner_on_ok",
            "gpu-node-04",
            task="Begin the drain step",
            task_action="cuda13_step",
            res={"ansible_facts": run_record("snapshot", "drain")},
        ),
        _event(
            "runner_on_unreachable",
            "gpu-node-04",
            task="Take the host out of the router",
            task_action="ansible.builtin.uri",
            res={"msg": "Failed to connect to the host via ssh: Connection timed out during banner exchange"},
        ),
        _event(
            "playbook_on_stats", failures={}, dark={"gpu-node-03": 1, "gpu-node-04": 1}, ok={}, processed={}
        ),
    ]:
        progress(event)
    run = runner.RunResult(
        rc=4, status="failed", hosts=progress.hosts, outcomes=progress.outcomes, stdout="", stderr=""
    )
    outcomes = runner.host_outcomes(run, parser.COMMANDS["rollout"])
    assert outcomes["gpu-node-03"]["status"] == "unreachable"
    assert outcomes["gpu-node-03"]["failed_step"] == "switch"
    assert outcomes["gpu-node-04"]["failed_step"] == "drain"
    hosts = ["gpu-node-03", "gpu-node-04"]
    run_dir = _write_run(tmp_path, "r1", [], {"hosts": hosts, "outcomes": outcomes})
    summary = fleet_summary(run_dir)
    assert summary["rows"][0]["decision"] == "unreachable at step switch"
    assert "| gpu-node-03 | unreachable at step switch |" in summary["markdown"]
    assert "| gpu-node-04 | unreachable at step drain |" in summary["markdown"]


def test_a_run_the_breaker_refused_lists_every_host_it_named(tmp_path):
    # The breaker's refusal runs once, on the first host; not_started.json names every host of the run.
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "not_started.json").write_text(
        json.dumps(
            {
                "said": "not started",
                "reason": "breaker tripped (2 rollbacks or failures of rollouts within the last 7 days)",
                "hosts": ["node-a", "node-b"],
                "before_any_change": True,
            }
        )
    )
    seen = SimpleNamespace(hosts=["node-a"])
    assert commands._run_hosts(run_dir, seen, 0.0) == ["node-a", "node-b"]
    summary = fleet_summary(run_dir, commands._run_hosts(run_dir, seen, 0.0))
    assert [r["host"] for r in summary["rows"]] == ["node-a", "node-b"]
    assert {r["decision"] for r in summary["rows"]} == {
        "not started: breaker tripped (2 rollbacks or failures of rollouts within the last 7 days)"
    }
    assert "| node-b |" in summary["markdown"]
    # A refusal of an earlier run under the same --run-id is not this run's.
    assert commands._run_hosts(run_dir, seen, 4e9) == ["node-a"]
