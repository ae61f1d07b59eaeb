"""The inventory's dropped values, host key checking turned
off by the caller, SIGTERM and SIGHUP handled as Ctrl-C, an unreachable host in ``plan`` and in
an interactive ``rollout``, and the breaker's own exit status.

Real ansible-playbook runs on local hosts (``ansible_connection=local``), an unreachable host
at 127.0.0.1 on port 1 (closed: ssh's connection is refused at once), and the command run as a
child process for the signals.
"""

from __future__ import annotations

import importlib.util
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cuda13_upgrade import cli, inventorycheck
from cuda13_upgrade.cli import commands, parser

ROOT = Path(__file__).resolve().parents[1]
COMMAND = str(Path(sys.executable).with_name("cuda13-upgrade"))

_spec = importlib.util.spec_from_file_location("cli_tests", ROOT / "tests" / "test_cli.py")
assert _spec is not None and _spec.loader is not None
cli_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli_tests)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("CUDA13_UPGRADE_HOME", "CUDA13_REPORTS_DIR", "CUDA13_RUN_ID", "ANSIBLE_HOST_KEY_CHECKING"):
        monkeypatch.delenv(name, raising=False)


def _local_inventory(tmp_path: Path, group: str = "blackwell") -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(
        f"[{group}]\nnode-a ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return path


# --- SIGTERM and SIGHUP ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "status", "by"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP")]
)
def test_sigterm_and_sighup_stop_ansible_record_the_step_and_release_the_lock(tmp_path, signum, status, by):
    """SIGTERM (a CI cancel, timeout, systemctl stop) or SIGHUP to the command during a long
    step: ansible-playbook is told to stop (SIGINT), the host's step is recorded, its lock
    released, run.json written, and the command exits 128 + the signal."""
    playbook = cli_tests._playbook(tmp_path, cli_tests.LONG_STEP.format(root=ROOT))
    state = tmp_path / "state"
    reports = tmp_path / "reports"
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(f"node-a ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    argv = [
        COMMAND, "rollout", "--yes", "-i", str(hosts), "--playbook", str(playbook),
        "--reports-dir", str(reports), "--run-id", "term", "-e", "cuda13_target_hosts=all",
        "-e", f"cuda13_state_dir={state}",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (state / "run.lock" / "owner.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(3)  # into the long step
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, out + err
    assert f"interrupt: {by} received; stopping ansible-playbook (pid" in out
    assert "interrupted: node-a during A long step. Their locks are released." in err
    assert not (state / "run.lock").exists()
    record = json.loads((state / "result.json").read_text())
    assert record["status"] == "interrupted"
    assert (
        f"The run was interrupted ({by}) during step 'A long step'. Run the same command again"
        in (record["error"])
    )
    run = json.loads((reports / "term" / "run.json").read_text())
    assert run["interrupted_by"] == by
    pid = int(out.split("stopping ansible-playbook (pid ", 1)[1].split(")", 1)[0])
    assert not Path(f"/proc/{pid}").exists()


def test_the_interrupted_status_is_128_plus_the_signal():
    assert commands.interrupted_status(signal.SIGINT) == 130
    assert commands.interrupted_status(signal.SIGTERM) == 143
    assert commands.interrupted_status(signal.SIGHUP) == 129
    assert commands.interrupted_status(None) == 130


# --- host key checking off by the caller's environment ------------------------------------


def _fake_runner(monkeypatch, result=None, before=None):
    import ansible_runner

    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        if before is not None:
            before(kwargs)
        return result or SimpleNamespace(rc=0, status="successful", stdout=None, stderr=None)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    return seen


@pytest.mark.parametrize("value", ["False", "0", "no", "off"])
def test_host_key_checking_off_in_the_callers_environment_is_warned_and_recorded(
    tmp_path, monkeypatch, capsys, value
):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", value)
    seen = _fake_runner(monkeypatch)
    inventory = _local_inventory(tmp_path)
    argv = ["preflight", "-i", str(inventory), "--reports-dir", str(tmp_path / "r"), "--run-id", "hk"]
    cli.main(argv)
    err = capsys.readouterr().err
    assert (
        f"warning: host key checking is off for this run: ANSIBLE_HOST_KEY_CHECKING={value} in the caller's "
        "environment, so no host's SSH key is checked against known_hosts (a replaced or spoofed host is not "
        "noticed). Unset it and add the hosts' keys to ~/.ssh/known_hosts (ssh-keyscan) to check them.\n"
    ) in err
    assert seen["envvars"]["ANSIBLE_HOST_KEY_CHECKING"] == value
    record = json.loads((tmp_path / "r" / "hk" / "run.json").read_text())
    assert record["host_key_checking"] == {
        "off": True,
        "by": f"ANSIBLE_HOST_KEY_CHECKING={value} (the caller's environment)",
    }


@pytest.mark.parametrize("value", [None, "True", "1", "yes"])
def test_host_key_checking_left_on_gives_no_warning(tmp_path, monkeypatch, capsys, value):
    if value is not None:
        monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", value)
    _fake_runner(monkeypatch)
    inventory = _local_inventory(tmp_path)
    cli.main(["preflight", "-i", str(inventory), "--reports-dir", str(tmp_path / "r"), "--run-id", "hk"])
    assert "host key checking is off" not in capsys.readouterr().err
    record = json.loads((tmp_path / "r" / "hk" / "run.json").read_text())
    assert record["host_key_checking"] == {"off": False, "by": ""}


# --- the breaker's exit status --------------------------------------------------------------


def test_a_tripped_breaker_exits_with_its_own_status(tmp_path, monkeypatch, capsys):
    reports = tmp_path / "r"
    reason = "breaker tripped (2 rollbacks or failures of rollouts within the last 7 days)"

    def refuse(kwargs):
        run = reports / "br"
        run.mkdir(parents=True, exist_ok=True)
        (run / "not_started.json").write_text(
            json.dumps(
                {"said": "not started", "reason": reason, "hosts": ["node-a"], "before_any_change": True}
            )
        )

    _fake_runner(monkeypatch, SimpleNamespace(rc=2, status="failed", stdout=None, stderr=None), refuse)
    inventory = _local_inventory(tmp_path)
    argv = ["rollout", "--yes", "-i", str(inventory), "--reports-dir", str(reports), "--run-id", "br"]
    assert cli.main(argv) == commands.EXIT_BREAKER == 4
    err = capsys.readouterr().err
    assert (
        f"The breaker refused the rollout; no host was changed (exit status 4): {reason} (full output: "
        in err
    )


# --- no hosts in the group, one message and one status --------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["preflight"],
        ["plan"],
        ["stage"],
        ["verify"],
        ["rollout", "--yes"],
        ["rollback", "--yes"],
        ["status"],
    ],
)
def test_no_hosts_in_the_group_is_one_message_and_exit_2_in_every_command(
    tmp_path, monkeypatch, capsys, argv
):
    seen = _fake_runner(monkeypatch)
    inventory = _local_inventory(tmp_path, group="gpus")
    status = cli.main([*argv, "-i", str(inventory), "--reports-dir", str(tmp_path / "r")])
    assert status == commands.EXIT_USAGE == 2
    assert capsys.readouterr().err.endswith(
        f"cuda13-upgrade: error: The inventory {inventory} has no hosts in the group 'blackwell' "
        "(cuda13_target_hosts): pass -i inventory/<your fleet> with a 'blackwell' group, or set "
        "cuda13_target_hosts with -e\n"
    )
    assert not seen  # no playbook ran


# --- group_vars that name no group; hosts without any must-set value ---------------------------


def test_group_vars_of_a_group_the_inventory_does_not_have_are_named(tmp_path):
    (tmp_path / "group_vars" / "blackwell").mkdir(parents=True)
    (tmp_path / "group_vars" / "gpus.yml").write_text("cuda13_serial: 1\n")
    (tmp_path / "group_vars" / "all.yml").write_text("{}\n")
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    messages = inventorycheck.stray_group_vars([str(tmp_path / "hosts.yml")], ["all", "ungrouped", "gpus"])
    assert messages == [
        f"{tmp_path}/group_vars/blackwell/ is for the group 'blackwell', which the inventory {tmp_path} does "
        "not have (its groups: gpus): Ansible loads none of its values, and every host would get the roles' "
        "defaults instead. Rename it to the group's name, or name the group 'blackwell' in the inventory."
    ]
    assert inventorycheck.stray_group_vars(["a,b,"], ["all"]) == []


def test_hosts_that_receive_no_must_set_value_are_named_with_the_values():
    bare = inventorycheck.value_sources({}, {})
    some = inventorycheck.value_sources(
        {"cuda13_old_venv": "/root/ml-env"}, {"cuda13_old_venv": "/inv/g.yml:1"}
    )
    assert some["cuda13_old_venv"] == "/inv/g.yml:1" and some["cuda13_new_venv"] == "role default"
    assert inventorycheck.hosts_without_values({"n1": bare, "n2": some}, {"n1": ["gpus"]}) == [
        "n1 receives none of the values a fleet must set (cuda13_service_name, cuda13_server_url, "
        "cuda13_old_venv, cuda13_old_sglang_src, cuda13_new_venv, cuda13_new_sglang_src, cuda13_profiles, "
        "cuda13_drain_tasks, cuda13_undrain_tasks, cuda_toolkit_apt_repo_url, "
        "nvidia_driver_check_expected_gpu_count) from the inventory: each would be the roles' default. Set "
        "them in group_vars/<group>/ of a group it is in (gpus), or in host_vars/<host>.yml (docs/options.md, "
        '"Must set for a fleet").'
    ]


def _renamed_group_inventory(tmp_path: Path) -> Path:
    """hosts.yml's group renamed to 'gpus', group_vars/blackwell/ left as it was."""
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "blackwell").mkdir(parents=True)
    (inventory / "group_vars" / "blackwell" / "serving.yml").write_text(
        "cuda13_service_name: sglang-a.service\ncuda13_old_venv: /root/ml-env\n"
    )
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    gpus:\n      hosts:\n        node-a:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
    )
    return inventory


@pytest.mark.parametrize("playbook", ["playbooks/preflight.yml", "playbooks/plan.yml", "upgrade-cuda13.yml"])
def test_a_renamed_group_is_refused_by_ansible_playbook_itself(tmp_path, playbook):
    """Run as users do, ansible-playbook directly: refused before any host is touched."""
    inventory = _renamed_group_inventory(tmp_path)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), playbook, "-i", str(inventory),
         "-e", "cuda13_target_hosts=gpus"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "CUDA13_REPORTS_DIR": str(tmp_path / "reports"), "HOME": str(tmp_path)},
    )  # fmt: skip
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, out
    assert (
        f"{inventory}/group_vars/blackwell/ is for the group 'blackwell', which the inventory {inventory} "
        "does not have (its groups: gpus)"
    ) in out
    assert "node-a receives none of the values a fleet must set (cuda13_service_name," in out
    assert "Check the host" not in out  # no host step ran


def test_plan_says_where_each_must_set_value_came_from(tmp_path):
    from cuda13_upgrade import plan

    record = {
        "host": "n1", "path": "full", "batch": 1, "why": "never upgraded", "refusals": [], "notice": "",
        "apt": None, "wheels": None, "space": [], "restarts": None, "warnings": [],
        "drain": {"drain": "", "undrain": ""}, "out_of_service_s": None, "estimate_from": "",
        "must_set_from": {"cuda13_old_venv": "/inv/group_vars/gpus/a.yml:2", "cuda13_service_name":
                          "/inv/group_vars/gpus/a.yml:1", "cuda13_server_url": "-e", "cuda13_profiles": "role default"},
    }  # fmt: skip
    text = plan.render_text({"hosts": [record], "summary": {"lines": []}})
    assert "  set in /inv/group_vars/gpus/a.yml: cuda13_old_venv, cuda13_service_name\n" in text
    assert "  set in -e: cuda13_server_url\n  role default: cuda13_profiles\n" in text


# --- an unreachable host in plan and in an interactive rollout --------------------------------


def _unreachable_inventory(tmp_path: Path) -> Path:
    """One host at 127.0.0.1 on port 1, which nothing listens on (refused at once); no other address."""
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    blackwell:\n      hosts:\n        gpu-node-09:\n"
        "          ansible_host: 127.0.0.1\n          ansible_port: 1\n          ansible_user: nobody\n"
        "          cuda13_service_name: sglang.service\n"
        '          ansible_ssh_common_args: "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'
        ' -o ConnectTimeout=3"\n'
    )
    return path


UNREACHABLE_WHY = (
    "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused"
)


def test_plan_records_an_unreachable_host_and_finishes(tmp_path, capsys):
    inventory = _unreachable_inventory(tmp_path)
    reports = tmp_path / "r"
    status = cli.main(["plan", "-i", str(inventory), "--reports-dir", str(reports), "--run-id", "p1"])
    captured = capsys.readouterr()
    assert status == 1, captured.out + captured.err
    the_plan = json.loads((reports / "p1" / "plan.json").read_text())
    assert [(h["host"], h["path"], h["why"]) for h in the_plan["hosts"]] == [
        ("gpu-node-09", "unreachable", UNREACHABLE_WHY)
    ]
    assert the_plan["summary"]["unreachable"] == ["gpu-node-09"] and the_plan["summary"]["stops"]
    assert f"gpu-node-09: unreachable (no batch): {UNREACHABLE_WHY}\n" in captured.out
    assert "UNREACHABLE!" not in captured.out + captured.err  # no raw dump
    assert "the plan could not be made" not in captured.err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_an_interactive_rollout_shows_the_unreachable_host_in_its_plan_and_stops(tmp_path):
    inventory = _unreachable_inventory(tmp_path)
    options = parser.parse_args(
        ["rollout", "-i", str(inventory), "--reports-dir", str(tmp_path / "r"), "--run-id", "i1"],
        cwd=tmp_path,
    )
    out = io.StringIO()
    assert commands.confirm_command(options, out, _Terminal("y\n")) == commands.EXIT_HOSTS
    text = out.getvalue()
    assert f"gpu-node-09: unreachable (no batch): {UNREACHABLE_WHY}\n" in text
    assert "The rollout would stop at its preflight; nothing was changed." in text
    assert "UNREACHABLE!" not in text


def test_an_interactive_driver_window_shows_its_plan_and_stops_on_an_unreachable_host(tmp_path):
    inventory = _unreachable_inventory(tmp_path)
    options = parser.parse_args(
        [
            "driver",
            "-i",
            str(inventory),
            "-e",
            "cuda13_driver_target=R580",
            "--reports-dir",
            str(tmp_path / "r"),
        ],
        cwd=tmp_path,
    )
    out = io.StringIO()
    assert commands.confirm_command(options, out, _Terminal("y\n")) == commands.EXIT_HOSTS
    text = out.getvalue()
    assert f"gpu-node-09: unreachable (no batch): {UNREACHABLE_WHY}\n" in text
    assert "The driver window would stop at its preflight; nothing was changed." in text
    assert "Move the NVIDIA driver" not in text


# --- the interrupted run's drained host undrained once it serves ------------------------------

DRAINED_LONG_STEP = """\
- name: Upgrade
  hosts: all
  gather_facts: false
  vars:
    cuda13_run_id: "{{ lookup('ansible.builtin.env', 'CUDA13_RUN_ID') }}"
  tasks:
    - name: Take the host's upgrade lock
      cuda13_lock:
        state: acquired
        state_dir: "{{ cuda13_state_dir }}"
        run_id: "{{ cuda13_run_id }}"
      register: __cuda13_lock
    - name: Drained by the drain hook, measuring the old stack (as the drain step leaves step.json)
      ansible.builtin.copy:
        dest: "{{ cuda13_state_dir }}/step.json"
        content: >-
          {{ {'run_id': cuda13_run_id, 'step': 'baseline', 'steps': ['snapshot', 'drain', 'baseline'],
              'drained_at': '2025-01-01T10:00:00+00:00'} | to_json }}
        mode: "0600"
    - name: Measure the old stack
      ansible.builtin.command: sleep 120
      changed_when: true
"""


class _Health(__import__("http.server").server.BaseHTTPRequestHandler):
    """A server that generates: 200 at /health_generate."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/health_generate" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("serving", [True, False])
def test_sigterm_undrains_the_drained_host_once_its_server_serves(tmp_path, serving):
    """SIGTERM while the drained host's old stack is measured: the interrupted play runs the
    undrain hook (it writes a file) when /health_generate answers, and clears step.json's drain;
    with the server down the host stays drained and its result says so."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    port = server.server_address[1]
    if serving:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    else:
        server.server_close()  # nothing listens on the port
    playbook = cli_tests._playbook(tmp_path, DRAINED_LONG_STEP)
    state, reports, marker = tmp_path / "state", tmp_path / "reports", tmp_path / "undrained.txt"
    (tmp_path / "drain.yml").write_text("- name: Drain\n  ansible.builtin.debug: {msg: drain}\n")
    (tmp_path / "undrain.yml").write_text(
        f"- name: Undrain\n  ansible.builtin.copy: {{dest: '{marker}', content: \"undrained\\n\", mode: '0644'}}\n"
    )
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(f"node-a ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    argv = [
        COMMAND, "rollout", "--yes", "-i", str(hosts), "--playbook", str(playbook),
        "--reports-dir", str(reports), "--run-id", "term", "-e", "cuda13_target_hosts=all",
        "-e", f"cuda13_state_dir={state}", "-e", f"cuda13_server_url=http://127.0.0.1:{port}",
        "-e", "cuda13_service_name=cuda13-test-absent.service",
        "-e", f"cuda13_drain_tasks={tmp_path / 'drain.yml'}", "-e", f"cuda13_undrain_tasks={tmp_path / 'undrain.yml'}",
    ]  # fmt: skip
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (state / "step.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(3)  # into the long step
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        if serving:
            server.shutdown()
            server.server_close()
    assert proc.returncode == 143, out + err
    assert not (state / "run.lock").exists()
    step = json.loads((state / "step.json").read_text())
    record = json.loads((state / "result.json").read_text())
    if serving:
        assert marker.read_text() == "undrained\n", out + err
        assert step["step"] == "baseline" and step["drained_at"] is None and step["undrained_at"]
        assert "Left drained" not in record["error"]
    else:
        assert not marker.exists()
        assert step["drained_at"] == "2025-01-01T10:00:00+00:00"
        assert record["error"].endswith(
            "Left drained: the server was not serving when the run was interrupted (Request failed: <urlopen"
            " error [Errno 111] Connection refused>); undrain it after checking: the undrain hook"
            f" {tmp_path / 'undrain.yml'} (cuda13_undrain_tasks) for node-a, or run the same command again,"
            " which undrains the host once its server serves."
        )
