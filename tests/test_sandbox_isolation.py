"""playbooks/sandbox.yml acts only on its own containers (its sandbox_name_prefix).

Two sandboxes on one machine (a developer's, a benchmark's) used to remove
each other's hosts: the playbook removed every container with the sandbox
label that was not in its own list. Here two sandboxes' containers exist
(created, never started, from an empty image) beside a container of the
older label (value "1"), and the playbook's removal runs for one prefix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/cuda13-test-empty:1"

pytestmark = pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make setup)")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "sandbox" / "containers.conf")}
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=check)


@pytest.fixture
def prefixes():
    """Two sandbox prefixes of this test process and their containers, removed at the end."""
    tag = f"cuda13-test{os.getpid()}"
    mine, other = f"{tag}-mine", f"{tag}-other"
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        subprocess.run(
            f"tar -cf - --files-from /dev/null | CONTAINERS_CONF={ROOT}/sandbox/containers.conf podman import - {IMAGE}",
            shell=True,
            check=True,
            capture_output=True,
        )
    names = {
        f"{mine}-1": mine,
        f"{mine}-2": mine,
        f"{mine}-3": "1",  # labelled before labels named the prefix
        f"{other}-1": other,
        f"{other}-2": other,
    }
    for name, label in names.items():
        podman("create", "--name", name, "--label", f"cuda13-upgrade.sandbox={label}", IMAGE, "/sbin/init")
    yield mine, other, list(names)
    for name in names:
        podman("rm", "--force", name, check=False)


def existing(names: list[str]) -> set[str]:
    listed = podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
    return set(listed) & set(names)


def run_sandbox_playbook(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "CONTAINERS_CONF": str(ROOT / "sandbox" / "containers.conf"),
    }
    # An inventory of its own: the checkout's inventory/sandbox/hosts.yml may name
    # the hosts of a sandbox this machine ran before, whose containers are gone.
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        str(ROOT / "playbooks" / "sandbox.yml"),
        "-i",
        str(inventory),
        "-e",
        "sandbox_state=absent",
        "-e",
        f"sandbox_inventory_file={tmp_path / 'hosts.yml'}",
        *extra,
    ]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_removing_one_sandbox_leaves_another_sandbox_s_hosts(prefixes, tmp_path):
    mine, other, names = prefixes
    run = run_sandbox_playbook(tmp_path, "-e", f"sandbox_name_prefix={mine}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert existing(names) == {f"{other}-1", f"{other}-2"}


def test_a_malformed_prefix_is_refused_before_any_container_is_touched(prefixes, tmp_path):
    _mine, _other, names = prefixes
    run = run_sandbox_playbook(tmp_path, "-e", '{"sandbox_name_prefix": "Bad Prefix/"}')
    assert run.returncode != 0
    said = " ".join(run.stdout.split())
    assert "sandbox_name_prefix lower-case letters, digits, dots and dashes (got Bad Prefix/)" in said, said
    assert existing(names) == set(names)


def test_provisioning_one_sandbox_leaves_another_sandbox_s_hosts_alone(prefixes, tmp_path):
    # Two prefixes share one inventory directory, each with its own hosts file,
    # as `-e sandbox_name_prefix=...` writes them: the group `sandbox` holds both
    # sandboxes' hosts. Provisioning one must not reach the other's hosts (here
    # a container that is not running: a task on it would fail unreachable).
    mine, other, _names = prefixes
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    shutil.copy(ROOT / "inventory" / "sandbox" / "groups.yml", inventory / "groups.yml")
    (inventory / "group_vars").symlink_to(ROOT / "inventory" / "sandbox" / "group_vars")
    other_group = "sandbox_" + other.replace("-", "_")
    (inventory / f"hosts-{other}.yml").write_text(
        f"all:\n  children:\n    sandbox:\n      children:\n        {other_group}:\n"
        f"    {other_group}:\n      hosts:\n        {other}-1:\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "CONTAINERS_CONF": str(ROOT / "sandbox" / "containers.conf"),
    }
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        str(ROOT / "playbooks" / "sandbox.yml"),
        "-i",
        str(inventory),
        "-e",
        f"sandbox_name_prefix={mine}",
        "-e",
        f"sandbox_inventory_file={inventory / f'hosts-{mine}.yml'}",
        "-e",
        f"ansible_ssh_private_key_file={ROOT / '.sandbox' / 'ssh' / 'id_ed25519'}",
    ]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    written = inventory / f"hosts-{mine}.yml"
    assert f"{mine}-1:" in written.read_text()
    assert f"ok: [{mine}-1]" in run.stdout
    assert f"[{other}-1]" not in run.stdout, run.stdout
