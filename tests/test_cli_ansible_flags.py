"""The cuda13-upgrade command for production fleets: ansible-playbook's flags passed on to
ansible-runner, the passwords -K and --ask-vault-pass ask for, --version, and host key
checking on for every inventory but the sandbox's.

The runner is replaced at its boundary (``ansible_runner.run``) except in the host key
tests, which run a playbook through the command's own runner invocation on localhost only:
the fleet host in their inventory (192.0.2.10, TEST-NET-1) is never contacted.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cuda13_upgrade import cli
from cuda13_upgrade.cli import commands, parser, runner
from cuda13_upgrade.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
FLEET_HOST = "192.0.2.10"  # TEST-NET-1 (RFC 5737): never routed, never contacted here


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("CUDA13_UPGRADE_HOME", "CUDA13_REPORTS_DIR", "CUDA13_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fleet_inventory(tmp_path: Path) -> Path:
    """A fleet's inventory, as inventory/blackwell is: a host reached over SSH."""
    path = tmp_path / "fleet" / "hosts.yml"
    path.parent.mkdir()
    path.write_text(
        "all:\n  children:\n    blackwell:\n      hosts:\n"
        f"        gpu-node-01:\n          ansible_host: {FLEET_HOST}\n          ansible_user: ops\n"
    )
    return path


@pytest.fixture
def calls(monkeypatch):
    """ansible_runner.run replaced: each call's keyword arguments; the run ends at once."""
    import ansible_runner

    seen: list[dict] = []

    def fake_run(**kwargs):
        seen.append(kwargs)
        return SimpleNamespace(rc=0, status="successful", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    return seen


def _main(argv, tmp_path):
    # rollout and rollback ask for confirmation on a terminal (--yes does not).
    yes = ["--yes"] if argv[0] in ("rollout", "rollback") else []
    return cli.main([*argv, *yes, "--reports-dir", str(tmp_path / "reports"), "--run-id", "r1"])


# --- --version -------------------------------------------------------------------------


def test_version_is_the_installed_package_s(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cuda13-upgrade {importlib.metadata.version('cuda13-upgrade')} (")
    assert f"ansible-runner {importlib.metadata.version('ansible-runner')}" in out


def test_version_text_without_metadata(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert parser.version_text() == (
        "cuda13-upgrade not installed (ansible-core not installed, ansible-runner not installed)"
    )


# --- ansible-playbook's flags ----------------------------------------------------------


def test_parse_the_ansible_flags(tmp_path, fleet_inventory):
    (tmp_path / "vault-pass").write_text("x\n")
    (tmp_path / "id_ed25519").write_text("key\n")
    options = parser.parse_args(
        [
            "rollout",
            "-i",
            str(fleet_inventory),
            "--vault-password-file",
            "vault-pass",
            "-J",
            "-K",
            "--private-key",
            "id_ed25519",
            "-u",
            "ops",
            "-f",
            "32",
            "-t",
            "a,b",
            "--skip-tags",
            "c",
            "-vvv",
        ],
        cwd=tmp_path,
    )
    assert options.vault_password_files == [str(tmp_path / "vault-pass")]
    assert options.ask_vault_pass and options.ask_become_pass
    assert options.private_key == str(tmp_path / "id_ed25519")
    assert (options.user, options.forks, options.tags, options.skip_tags) == ("ops", 32, ["a,b"], ["c"])
    assert options.verbosity == 3
    assert runner.ansible_flags(options) == [
        "--vault-password-file",
        str(tmp_path / "vault-pass"),
        "--ask-vault-pass",
        "--ask-become-pass",
        "--private-key",
        str(tmp_path / "id_ed25519"),
        "--user",
        "ops",
        "--forks",
        "32",
        "--tags",
        "a,b",
        "--skip-tags",
        "c",
        "-vvv",
    ]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--vault-password-file", "nope"], "--vault-password-file: no such file"),
        (["--private-key", "nope"], "--private-key: no such file"),
    ],
)
def test_a_missing_file_names_the_option(tmp_path, fleet_inventory, argv, option):
    with pytest.raises(UsageError, match=re.escape(option)):
        parser.parse_args(["rollout", "-i", str(fleet_inventory), *argv], cwd=tmp_path)


@pytest.mark.parametrize("forks", ["0", "-1", "many"])
def test_forks_must_be_a_positive_number(tmp_path, fleet_inventory, forks, capsys):
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["rollout", "-i", str(fleet_inventory), "--forks", forks], cwd=tmp_path)
    assert exc.value.code == 2
    assert "--forks" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "passed"),
    [
        (["--vault-password-file", "{tmp}/vault-pass"], ["--vault-password-file", "{tmp}/vault-pass"]),
        (["--vault-pass-file", "{tmp}/vault-pass"], ["--vault-password-file", "{tmp}/vault-pass"]),
        (["--private-key", "{tmp}/id_ed25519"], ["--private-key", "{tmp}/id_ed25519"]),
        (["--key-file", "{tmp}/id_ed25519"], ["--private-key", "{tmp}/id_ed25519"]),
        (["-u", "ops"], ["--user", "ops"]),
        (["--user", "ops"], ["--user", "ops"]),
        (["--forks", "8"], ["--forks", "8"]),
        (["-f", "8"], ["--forks", "8"]),
        (["--tags", "drain"], ["--tags", "drain"]),
        (["-t", "a", "-t", "b"], ["--tags", "a", "--tags", "b"]),
        (["--skip-tags", "probe"], ["--skip-tags", "probe"]),
        (["-v"], ["-v"]),
        (["-v", "-v", "-v"], ["-vvv"]),
        (["-vvvv"], ["-vvvv"]),
        (["--verbose", "--verbose"], ["-vv"]),
    ],
)
def test_each_flag_reaches_ansible_runner(tmp_path, fleet_inventory, calls, given, passed):
    (tmp_path / "vault-pass").write_text("x\n")
    (tmp_path / "id_ed25519").write_text("key\n")
    given = [arg.format(tmp=tmp_path) for arg in given]
    passed = [arg.format(tmp=tmp_path) for arg in passed]
    _main(["preflight", "-i", str(fleet_inventory), "--limit", "gpu-node-01", *given], tmp_path)
    (call,) = calls
    assert shlex.split(call["cmdline"]) == ["--limit", "gpu-node-01", *passed]
    assert call["inventory"] == str(fleet_inventory)
    assert call["passwords"] == {}


def test_no_flags_pass_nothing_more(tmp_path, fleet_inventory, calls):
    _main(["preflight", "-i", str(fleet_inventory)], tmp_path)
    assert calls[0]["cmdline"] == ""


def test_ack_breaker_reaches_ansible_runner_as_an_extra_var(tmp_path, fleet_inventory, calls):
    _main(
        ["rollout", "-i", str(fleet_inventory), "-e", "cuda13_serial=1", "--ack-breaker", "20261207T020000Z"],
        tmp_path,
    )
    assert shlex.split(calls[-1]["cmdline"]) == [
        "-e",
        "cuda13_serial=1",
        "-e",
        "cuda13_breaker_ack=20261207T020000Z",
    ]


def test_ack_breaker_must_be_a_run_id(tmp_path, fleet_inventory):
    with pytest.raises(UsageError, match="--ack-breaker '../r1' is not a run id"):
        parser.parse_args(["rollout", "-i", str(fleet_inventory), "--ack-breaker", "../r1"], cwd=tmp_path)


def test_ack_breaker_is_the_rollout_s_alone(tmp_path, fleet_inventory, capsys):
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["stage", "-i", str(fleet_inventory), "--ack-breaker", "r1"], cwd=tmp_path)
    assert exc.value.code == 2
    assert "--ack-breaker" in capsys.readouterr().err


# --- the passwords -K and --ask-vault-pass ask for ---------------------------------------


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_passwords_are_asked_here_and_answer_ansibles_prompts(
    tmp_path, fleet_inventory, calls, monkeypatch
):
    asked = []

    def ask(prompt):
        asked.append(prompt)
        return {"BECOME password: ": "b3come", "Vault password: ": "v4ult"}[prompt]

    monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr(runner.getpass, "getpass", ask)
    _main(["rollout", "-i", str(fleet_inventory), "-K", "--ask-vault-pass"], tmp_path)
    (call,) = calls
    assert asked == ["BECOME password: ", "Vault password: "]
    assert shlex.split(call["cmdline"]) == ["--ask-vault-pass", "--ask-become-pass"]
    passwords = call["passwords"]
    assert set(passwords.values()) == {"b3come", "v4ult"}
    # the patterns answer ansible-playbook's own prompts (ansible-core's CLI.ask_passwords)
    answers = {
        prompt: next(v for p, v in passwords.items() if re.search(p, prompt, re.M))
        for prompt in ("BECOME password: ", "SUDO password: ", "Vault password: ")
    }
    assert answers == {
        "BECOME password: ": "b3come",
        "SUDO password: ": "b3come",
        "Vault password: ": "v4ult",
    }
    # never written down
    for path in (tmp_path / "reports").rglob("*"):
        if path.is_file():
            assert "b3come" not in path.read_text() and "v4ult" not in path.read_text()
    assert "b3come" not in repr(parser.parse_args(["rollout", "-i", str(fleet_inventory)]))


@pytest.mark.parametrize("flag", ["-K", "--ask-become-pass", "--ask-vault-pass", "-J"])
def test_asking_without_a_terminal_is_refused_before_ansible_runs(
    tmp_path, fleet_inventory, calls, monkeypatch, capsys, flag
):
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    assert _main(["rollout", "-i", str(fleet_inventory), flag], tmp_path) == commands.EXIT_USAGE
    assert calls == []
    err = capsys.readouterr().err
    assert "needs a terminal to ask on" in err
    assert "--vault-password-file" in err


def test_no_question_without_the_flags(fleet_inventory, tmp_path):
    options = parser.parse_args(["rollout", "-i", str(fleet_inventory)], cwd=tmp_path)
    assert runner.ask_secrets(options, stdin=io.StringIO(), ask=lambda prompt: pytest.fail(prompt)) == {}


# --- the sandbox's settings apply to the sandbox only ----------------------------------


def test_containers_conf_only_for_the_sandbox_inventory(tmp_path, fleet_inventory, calls, monkeypatch):
    # A fresh checkout's inventory/sandbox has no hosts until `make sandbox` writes
    # hosts.yml: the command's own "no hosts in the group" check is given one here.
    check = commands.check_target_hosts
    monkeypatch.setattr(
        commands,
        "check_target_hosts",
        lambda options: ["cuda13-sandbox-1"] if "sandbox" in str(options.inventory) else check(options),
    )
    assert runner.sandbox_inventory(str(ROOT / "inventory" / "sandbox"), ROOT)
    assert runner.sandbox_inventory(str(ROOT / "inventory" / "sandbox" / "groups.yml"), ROOT)
    assert not runner.sandbox_inventory(str(ROOT / "inventory" / "blackwell"), ROOT)
    assert not runner.sandbox_inventory(str(fleet_inventory), ROOT)
    assert not runner.sandbox_inventory("inventory/sandbox,", ROOT)  # a host list
    _main(["preflight", "-i", str(fleet_inventory)], tmp_path)
    _main(["preflight", "-i", str(ROOT / "inventory" / "sandbox")], tmp_path)
    fleet, sandbox = (call["envvars"] for call in calls)
    assert "CONTAINERS_CONF" not in fleet
    assert sandbox["CONTAINERS_CONF"] == str(ROOT / "sandbox" / "containers.conf")
    assert fleet["ANSIBLE_CONFIG"] == sandbox["ANSIBLE_CONFIG"] == str(ROOT / "ansible.cfg")


def test_host_key_checking_is_set_on_for_ansible_runner(tmp_path, monkeypatch):
    """ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless the environment has it."""
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    assert runner.runner_envvars(ROOT, "r1", tmp_path)["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert runner.runner_envvars(ROOT, "r1", tmp_path, sandbox=True)["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")  # the operator's own choice
    assert runner.runner_envvars(ROOT, "r1", tmp_path)["ANSIBLE_HOST_KEY_CHECKING"] == "False"


PROBE = """\
- name: How Ansible would connect to each host (nothing is contacted)
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Write the ssh connection's host key setting per host
      ansible.builtin.copy:
        dest: "{{ probe_out }}"
        mode: "0644"
        content: >-
          {{ dict(groups['all'] | map('extract', hostvars) | map(attribute='inventory_hostname')
             | zip(groups['all'] | map('extract', hostvars)
                   | map(attribute='ansible_host_key_checking', default='unset')))
             | combine({'__config': lookup('ansible.builtin.config', 'host_key_checking',
                                           plugin_type='connection', plugin_name='ssh'),
                        '__common_args': groups['all'] | map('extract', hostvars)
                                         | map(attribute='ansible_ssh_common_args', default='')
                                         | list})
             | to_json }}
"""


def _probe(tmp_path: Path, inventory: Path) -> dict:
    playbook = tmp_path / "probe.yml"
    playbook.write_text(PROBE)
    out = tmp_path / f"probe-{inventory.parent.name}.json"
    run = runner.run_playbook(
        playbook,
        str(inventory),
        home=ROOT,
        run_id="hostkeys",
        reports_dir=tmp_path / "reports",
        extra_vars=[f"probe_out={out}"],
        stream=io.StringIO(),
    )
    assert run.rc == 0, run.stdout[-2000:]
    return json.loads(out.read_text())


def _checks_host_keys(probe: dict, host: str) -> bool:
    """The ssh connection's host_key_checking as it would apply to ``host``: the host's
    ansible_host_key_checking, else the configuration's; and no ssh argument turning it off."""
    value = probe[host] if probe[host] != "unset" else probe["__config"]
    off_in_args = any("StrictHostKeyChecking=no" in args for args in probe["__common_args"])
    return str(value).lower() in ("true", "1", "yes") and not off_in_args


def test_a_fleet_inventory_checks_host_keys_through_the_command(tmp_path, fleet_inventory):
    """The command's own runner invocation (ansible.cfg of the checkout) on a fleet's
    inventory: host key checking is on."""
    probe = _probe(tmp_path, fleet_inventory)
    assert probe["__config"] is True
    assert _checks_host_keys(probe, "gpu-node-01")


def test_the_sandbox_inventory_does_not_check_host_keys(tmp_path):
    """A sandbox host as playbooks/sandbox.yml writes it into inventory/sandbox/hosts.yml
    (its group_vars those of the checkout's sandbox inventory, as molecule links them)."""
    inventory = tmp_path / "sandbox" / "hosts.yml"
    inventory.parent.mkdir()
    (inventory.parent / "group_vars").symlink_to(ROOT / "inventory" / "sandbox" / "group_vars")
    inventory.write_text(
        "all:\n  children:\n    blackwell:\n      children:\n        sandbox:\n"
        "    sandbox:\n      hosts:\n        cuda13-sandbox-1: {}\n"
    )
    probe = _probe(tmp_path, inventory)
    assert probe["cuda13-sandbox-1"] is False
    assert not _checks_host_keys(probe, "cuda13-sandbox-1")


def test_ansible_cfg_leaves_host_key_checking_on():
    """The README's own `ansible-playbook ... -i inventory/blackwell` from the checkout reads
    ansible.cfg: nothing in it may turn host key checking off for every inventory."""
    text = (ROOT / "ansible.cfg").read_text()
    settings = [line for line in text.splitlines() if not line.lstrip().startswith(("#", ";"))]
    assert not [line for line in settings if re.match(r"\s*host_key_checking\s*=", line)]
    assert "StrictHostKeyChecking" not in "\n".join(settings)


def test_the_molecule_scenarios_turn_it_off_for_their_hosts():
    import yaml

    config = yaml.safe_load((ROOT / ".config" / "molecule" / "config.yml").read_text())
    assert config["provisioner"]["connection_options"]["ansible_host_key_checking"] is False


def test_the_interrupt_clean_up_gets_the_connection_flags_and_passwords_but_not_the_tags(
    tmp_path, fleet_inventory, monkeypatch
):
    """After Ctrl-C, playbooks/interrupted.yml reaches the hosts as the run did (user,
    key, become password), and runs its own tasks whatever tags the run had."""
    import ansible_runner

    seen: list[dict] = []

    def fake_run(**kwargs):
        seen.append(kwargs)
        if len(seen) == 1:
            event = {"play": "Upgrade", "play_pattern": "blackwell", "host": "gpu-node-01"}
            kwargs["event_handler"]({"event": "playbook_on_play_start", "event_data": dict(event, host=None)})
            kwargs["event_handler"](
                {
                    "event": "runner_on_ok",
                    "event_data": dict(event, task="Step", task_action="ansible.builtin.command"),
                }
            )
            return SimpleNamespace(rc=254, status="canceled", stdout=None, stderr=None)
        return SimpleNamespace(rc=0, status="successful", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr(runner.getpass, "getpass", lambda prompt: "b3come")
    argv = ["rollout", "-i", str(fleet_inventory), "-u", "ops", "-K", "-t", "drain", "--skip-tags", "x"]
    assert _main(argv, tmp_path) == commands.EXIT_INTERRUPTED
    run, cleanup = seen
    assert shlex.split(run["cmdline"]) == [
        "--ask-become-pass",
        "--user",
        "ops",
        "--tags",
        "drain",
        "--skip-tags",
        "x",
    ]
    assert cleanup["playbook"] == str(ROOT / "playbooks" / "interrupted.yml")
    args = shlex.split(cleanup["cmdline"])
    assert args[-3:] == ["--ask-become-pass", "--user", "ops"]
    assert "--tags" not in args and "--skip-tags" not in args
    assert list(cleanup["passwords"].values()) == ["b3come"]


def test_the_exit_status_table_lists_each_status_once():
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text.partition("## Exit status")[2].partition("\n## ")[0]
    statuses = re.findall(r"^\| (\d+)[ ,|]", table, re.M)
    assert statuses == ["0", "1", "2", "3", "4", "130"]
    codes = [
        commands.EXIT_OK,
        commands.EXIT_HOSTS,
        commands.EXIT_USAGE,
        commands.EXIT_ANSIBLE,
        commands.EXIT_BREAKER,
        commands.EXIT_INTERRUPTED,
    ]
    assert [int(s) for s in statuses] == codes


def test_until_reaches_ansible_runner_as_the_window_s_extra_var(tmp_path, fleet_inventory, calls):
    _main(["rollout", "-i", str(fleet_inventory), "--until", "2099-12-01T06:00+01:00"], tmp_path)
    assert shlex.split(calls[-1]["cmdline"]) == ["-e", '{"cuda13_until": "2099-12-01T06:00+01:00"}']


@pytest.mark.parametrize("value", ["6am", "2020-01-01T06:00Z", "25:00"])
def test_until_is_checked_before_any_run_naming_the_flag(tmp_path, fleet_inventory, value):
    with pytest.raises(UsageError, match="--until"):
        parser.parse_args(["rollout", "-i", str(fleet_inventory), "--until", value], cwd=tmp_path)


def test_until_is_the_rollout_s_and_the_plan_s(tmp_path, fleet_inventory, capsys):
    assert parser.parse_args(["plan", "-i", str(fleet_inventory), "--until", "06:00"], cwd=tmp_path)
    with pytest.raises(SystemExit):
        parser.parse_args(["verify", "-i", str(fleet_inventory), "--until", "06:00"], cwd=tmp_path)
    assert "--until" in capsys.readouterr().err
