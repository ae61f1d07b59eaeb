"""``cuda13-upgrade plan`` and the confirmation ``rollout`` and ``rollback`` ask for:
the flags, the refusal without a terminal, the prompt under a pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import pty
from types import SimpleNamespace

import pytest

from cuda13_upgrade import cli, plan
from cuda13_upgrade.cli import commands

FLEET = "all:\n  children:\n    blackwell:\n      hosts:\n        gpu-node-01:\n        gpu-node-02:\n"


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(FLEET)
    return path


@pytest.fixture
def calls(monkeypatch):
    """ansible_runner.run replaced: each call's keyword arguments. A call of
    playbooks/plan.yml writes the plan of one full host, as the playbook does."""
    import ansible_runner

    seen: list[dict] = []

    def fake_run(**kwargs):
        seen.append(kwargs)
        if kwargs["playbook"].endswith("plan.yml"):
            env = kwargs["envvars"]
            record = plan.host_plan(
                "gpu-node-01",
                verdict={"already_kept": False, "previous": {}},
                profiles=[{"name": "plain", "server_args": []}],
                # no drain hook on the test fleet: allowed explicitly
                allow_undrained=True,
            )
            run_dir = os.path.join(env["CUDA13_REPORTS_DIR"], env["CUDA13_RUN_ID"])
            os.makedirs(run_dir, exist_ok=True)
            with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as handle:
                json.dump(plan.rollout_plan([record], run_id=env["CUDA13_RUN_ID"]), handle)
        return SimpleNamespace(rc=0, status="successful", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    return seen


def _argv(command, inventory, tmp_path, *more):
    return [
        command,
        "-i",
        str(inventory),
        "--reports-dir",
        str(tmp_path / "reports"),
        "--run-id",
        "p1",
        *more,
    ]


def test_plan_runs_the_read_only_playbook_and_prints_the_plan(tmp_path, inventory, calls, capsys):
    assert cli.main(_argv("plan", inventory, tmp_path)) == commands.EXIT_OK
    (call,) = calls
    assert call["playbook"].endswith("playbooks/plan.yml")
    out = capsys.readouterr().out
    assert "gpu-node-01: full (batch 1): never upgraded" in out
    assert "Summary:\n  1 host: 1 full\n" in out
    assert (tmp_path / "reports" / "p1" / "ansible-plan.log").is_file()
    assert not (tmp_path / "reports" / "p1" / "run.json").exists()  # not a run: status and report skip it


def test_plan_json_prints_only_the_plan_on_stdout(tmp_path, inventory, calls, capsys):
    assert cli.main(_argv("plan", inventory, tmp_path, "--json")) == commands.EXIT_OK
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["hosts"][0]["path"] == "full"
    assert document["summary"]["changes"] == 1


def test_plan_without_a_plan_file_says_ansible_failed(tmp_path, inventory, monkeypatch, capsys):
    import ansible_runner

    monkeypatch.setattr(
        ansible_runner,
        "run",
        lambda **kw: SimpleNamespace(
            rc=2, status="failed", stdout=io.StringIO("ERROR! no hosts"), stderr=None
        ),
    )
    assert cli.main(_argv("plan", inventory, tmp_path)) == commands.EXIT_ANSIBLE
    assert "the plan could not be made (ansible-playbook rc 2)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["rollout", "rollback"])
def test_without_a_terminal_rollout_and_rollback_need_yes(
    tmp_path, inventory, calls, monkeypatch, capsys, command
):
    monkeypatch.setattr("sys.stdin", io.StringIO())
    assert cli.main(_argv(command, inventory, tmp_path)) == commands.EXIT_USAGE
    assert calls == []
    err = capsys.readouterr().err
    assert f"{command} changes hosts and asks for confirmation on a terminal, and there is none" in err
    assert "--yes" in err
    # --yes: no question, the command's own playbook runs
    cli.main(_argv(command, inventory, tmp_path, "--yes"))
    assert [c["playbook"].rsplit("/", 1)[-1] for c in calls] == [
        "upgrade-cuda13.yml" if command == "rollout" else "rollback.yml"
    ]


def test_check_mode_asks_nothing(tmp_path, inventory, calls, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO())
    cli.main(_argv("rollout", inventory, tmp_path, "--check"))
    assert len(calls) == 1


def _terminal(answer: str):
    """A pseudo-terminal's slave end as stdin, with ``answer`` typed on it."""
    master, slave = pty.openpty()
    os.write(master, answer.encode())
    return os.fdopen(slave, "r"), master


@pytest.mark.parametrize(("answer", "runs"), [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False)])
def test_rollout_on_a_terminal_shows_the_plan_and_asks(
    tmp_path, inventory, calls, monkeypatch, capsys, answer, runs
):
    stdin, master = _terminal(answer)
    try:
        monkeypatch.setattr("sys.stdin", stdin)
        status = cli.main(_argv("rollout", inventory, tmp_path))
    finally:
        stdin.close()
        os.close(master)
    out = capsys.readouterr().out
    assert "gpu-node-01: full (batch 1)" in out
    assert "Roll out the CUDA 13 stack to 1 of 1 hosts now? [y/N] " in out
    played = [c["playbook"].rsplit("/", 1)[-1] for c in calls]
    if runs:
        assert played == ["plan.yml", "upgrade-cuda13.yml"]
        # the plan stays beside the run's report, same run id
        assert (tmp_path / "reports" / "p1" / "plan.json").is_file()
    else:
        assert played == ["plan.yml"]
        assert status == commands.EXIT_HOSTS
        assert "Not confirmed; nothing was changed." in out


def test_a_plan_that_stops_at_the_preflight_asks_nothing(tmp_path, inventory, monkeypatch, capsys):
    import ansible_runner

    def fake_run(**kwargs):
        env = kwargs["envvars"]
        refused = plan.host_plan(
            "gpu-node-02", verdict={}, refusals=["gpu-node-02: nvidia-smi failed (rc 9)"]
        )
        run_dir = os.path.join(env["CUDA13_REPORTS_DIR"], env["CUDA13_RUN_ID"])
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as handle:
            json.dump(plan.rollout_plan([refused]), handle)
        return SimpleNamespace(rc=0, status="successful", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    stdin, master = _terminal("y\n")
    try:
        monkeypatch.setattr("sys.stdin", stdin)
        assert cli.main(_argv("rollout", inventory, tmp_path)) == commands.EXIT_HOSTS
    finally:
        stdin.close()
        os.close(master)
    out = capsys.readouterr().out
    assert "The rollout would stop at its preflight; nothing was changed." in out
    assert "[y/N]" not in out


def test_rollback_on_a_terminal_lists_the_hosts_and_asks(tmp_path, inventory, calls, monkeypatch, capsys):
    stdin, master = _terminal("y\n")
    try:
        monkeypatch.setattr("sys.stdin", stdin)
        cli.main(_argv("rollback", inventory, tmp_path, "--limit", "gpu-node-02"))
    finally:
        stdin.close()
        os.close(master)
    out = capsys.readouterr().out
    assert "  gpu-node-02: never run\n" in out
    assert "gpu-node-01" not in out.split("[y/N]")[0]
    assert "Roll back 1 host to their pre-upgrade snapshot" in out
    assert [c["playbook"].rsplit("/", 1)[-1] for c in calls] == ["rollback.yml"]
