"""The fleet's artifact cache (roles/artifact_cache) through ``ansible-playbook``.

Two inventory hosts, both ``connection: local``, each with its own host directory under
``tmp_path``; "upstream" is a copy of the sandbox mirror (the ``sandbox_mirror`` fixture, what
``sandbox/mirror/build.py`` builds) served by ``python3 -m http.server`` on a free loopback
port, whose access log tells which wheels were fetched. The first run fetches every wheel of
the stack's closure exactly once for both hosts and copies it to each; the second fetches
nothing and changes nothing. Then cu130_wheels installs the stack from a host's copy alone
(``--no-index --find-links``), with the hosts' indexes pointing nowhere.
"""

from __future__ import annotations

import filecmp
import json
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from sandbox_mirror import testkit

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
HOSTS = ("host-a", "host-b")

pytestmark = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")

# A wheel the server sent: "GET /whl/cu130/torch-2.9.1%2Bcu130-cp311-....whl HTTP/1.1" 200
_WHEEL_GET = re.compile(r'"GET (?P<path>/\S+\.whl) HTTP/1\.[01]" 200 ')
_RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=\d+\s+changed=(?P<changed>\d+)\s+unreachable=0\s+failed=0", re.M)


def _yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# The sandbox's pins and SGLang's build requirements, as the upgrade play sees them.
SANDBOX_VARS = _yaml(ROOT / "inventory" / "sandbox" / "group_vars" / "all" / "upgrade.yml")
SGLANG_BUILD_DEFAULTS = _yaml(ROOT / "roles" / "sglang_build" / "defaults" / "main.yml")


@pytest.fixture(scope="module")
def upstream(sandbox_mirror, tmp_path_factory):
    """The mirror served on a free loopback port, with its access log."""
    log = tmp_path_factory.mktemp("upstream") / "access.log"
    server = testkit.MirrorServer(sandbox_mirror.out, log)
    yield server.url, log, sandbox_mirror.out
    server.close()


def _wheel_gets(log: Path) -> list[str]:
    """Mirror-relative paths of the wheels the server sent, in order."""
    text = log.read_text(encoding="utf-8", errors="replace")
    return [urllib.parse.unquote(m["path"]).lstrip("/") for m in _WHEEL_GET.finditer(text)]


def _play(tmp_path: Path, url: str, roles: list[Any], **extra_vars: Any) -> Path:
    """A playbook of the given roles on every host, and a task that keeps the cache's facts."""
    play = {
        "name": "Artifact cache",
        "hosts": "all",
        "gather_facts": False,
        "vars": {
            "cuda13_state_dir": str(tmp_path / "state"),
            "cuda13_old_venv": str(tmp_path / "old-venv"),
            "cuda13_new_venv": str(tmp_path / "new-venv"),
            # The hosts' own indexes point nowhere: only the cache's are read.
            "cuda13_wheels_index_url": "http://127.0.0.1:9/whl/cu130",
            "cuda13_wheels_extra_index_urls": ["http://127.0.0.1:9/pypi/simple"],
            "artifact_cache_index_url": f"{url}/whl/cu130",
            "artifact_cache_extra_index_urls": [
                f"{url}/sgl-whl/cu130",
                f"{url}/flashinfer-whl/cu130",
                f"{url}/pypi/simple",
            ],
            "cu130_wheels_requirements": SANDBOX_VARS["cu130_wheels_requirements"],
            "sglang_build_build_requirements": SGLANG_BUILD_DEFAULTS["sglang_build_build_requirements"],
            **extra_vars,
        },
        "roles": roles,
        "post_tasks": [
            {
                "name": "Keep the cache's facts for the test",
                "ansible.builtin.copy": {
                    "content": "{{ {'fetched_bytes': artifact_cache_fetched_bytes,"
                    " 'fetched_files': artifact_cache_fetched_files,"
                    " 'files': artifact_cache_files,"
                    " 'find_links': artifact_cache_find_links} | to_json }}",
                    "dest": str(tmp_path / "facts-{{ inventory_hostname }}.json"),
                    "mode": "0644",
                },
                "delegate_to": "localhost",
                "changed_when": False,
            }
        ],
    }
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False), encoding="utf-8")
    return playbook


def _inventory(tmp_path: Path, hosts: tuple[str, ...]) -> Path:
    inventory = tmp_path / "hosts.yml"
    host_vars = {
        host: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "artifact_cache_host_dir": str(tmp_path / host / "wheels"),
        }
        for host in hosts
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": host_vars}}), encoding="utf-8")
    return inventory


def _run(tmp_path: Path, playbook: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        testkit.clean_env(),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_FILTER_PLUGINS=str(ROOT / "filter_plugins"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_RETRY_FILES_ENABLED="False",
        CUDA13_REPORTS_DIR=str(tmp_path / "reports"),
        CUDA13_RUN_ID="artifact-cache-test",
    )
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "-e", f"ansible_python_interpreter={sys.executable}",
         *args, str(playbook)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def _facts(tmp_path: Path, host: str) -> dict[str, Any]:
    return json.loads((tmp_path / f"facts-{host}.json").read_text(encoding="utf-8"))


def _changed(output: str) -> dict[str, int]:
    return {m["host"]: int(m["changed"]) for m in _RECAP.finditer(output)}


class Rollout(NamedTuple):
    """The same playbook run twice on both hosts, and what upstream sent after each run."""

    root: Path
    mirror: Path
    runs: list[subprocess.CompletedProcess[str]]
    gets: list[list[str]]
    facts: list[dict[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def rollout(upstream, tmp_path_factory) -> Rollout:
    url, log, mirror = upstream
    root = tmp_path_factory.mktemp("fleet")
    playbook, inventory = _play(root, url, ["artifact_cache"]), _inventory(root, HOSTS)
    runs, gets, facts = [], [], []
    for _ in range(2):
        runs.append(_run(root, playbook, inventory))
        gets.append(_wheel_gets(log))
        facts.append({host: _facts(root, host) for host in HOSTS if (root / f"facts-{host}.json").exists()})
    return Rollout(root, mirror, runs, gets, facts)


def test_the_first_run_fetches_each_wheel_once_for_the_fleet(rollout):
    first = rollout.runs[0]
    output = first.stdout + first.stderr
    assert first.returncode == 0, output
    gets = rollout.gets[0]
    assert gets and len(gets) == len(set(gets)), f"a wheel was fetched more than once: {gets}"
    fetched = sorted(Path(p).name for p in gets)
    # The default cache directory, under CUDA13_REPORTS_DIR.
    cache = rollout.root / "reports" / "artifact-cache" / "cu130"
    facts = rollout.facts[0]
    # The same facts reach both hosts: one fetch for the fleet.
    fleet = [{k: v for k, v in facts[host].items() if k != "find_links"} for host in HOSTS]
    assert fleet[0] == fleet[1]
    fact = facts["host-a"]
    assert fact["fetched_files"] == fact["files"] == fetched == sorted(p.name for p in cache.glob("*.whl"))
    assert fact["fetched_bytes"] == sum((rollout.mirror / p).stat().st_size for p in gets) > 0
    # The whole closure for the hosts' platform (cp311, manylinux_2_28): the pins, SGLang's
    # build requirement and torch's nvidia-* dependencies, which the pins do not name.
    distributions = {name.split("-")[0] for name in fetched}
    pinned = {"torch", "sgl_kernel", "flashinfer_python", "flashinfer_cubin", "flashinfer_jit_cache", "wheel"}
    assert pinned <= distributions
    assert any(d.startswith("nvidia_") for d in distributions), distributions
    torch = [n for n in fetched if n.startswith("torch-")]
    assert torch == ["torch-2.9.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert all(_changed(output)[host] > 0 for host in HOSTS), output
    # The operator is told once what came from upstream.
    told = f"Fetched {len(fetched)} wheels, {fact['fetched_bytes']} bytes, from upstream; {cache} holds"
    assert output.count(told) == 1, output


def test_every_host_gets_a_copy_of_the_cache(rollout):
    cache = rollout.root / "reports" / "artifact-cache" / "cu130"
    wheels = sorted(p.name for p in cache.glob("*.whl"))
    assert wheels
    for host in HOSTS:
        host_dir = rollout.root / host / "wheels"
        assert rollout.facts[0][host]["find_links"] == str(host_dir)
        assert sorted(p.name for p in host_dir.iterdir()) == wheels
        _, mismatch, errors = filecmp.cmpfiles(cache, host_dir, wheels, shallow=False)
        assert not mismatch and not errors


def test_the_second_run_fetches_nothing_and_changes_nothing(rollout):
    second = rollout.runs[1]
    output = second.stdout + second.stderr
    assert second.returncode == 0, output
    assert rollout.gets[1] == rollout.gets[0], "the second run fetched wheels again"
    for host in HOSTS:
        again = rollout.facts[1][host]
        assert again["fetched_bytes"] == 0
        assert again["fetched_files"] == []
        assert again["files"] == rollout.facts[0][host]["files"]
    assert _changed(output) == {host: 0 for host in HOSTS}, output


def test_cu130_wheels_installs_from_the_hosts_copy_alone(rollout, upstream):
    url, log, _ = upstream
    root = rollout.root
    playbook = _play(
        root,
        url,
        ["artifact_cache", "cu130_wheels"],
        cu130_wheels_find_links="{{ artifact_cache_find_links }}",
        cu130_wheels_python=sys.executable,
    )
    before = _wheel_gets(log)
    result = _run(root, playbook, _inventory(root, ("host-a",)))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # --no-index: the hosts' indexes (pointing nowhere) were not read, and upstream sent nothing.
    assert _wheel_gets(log) == before
    freeze = subprocess.run(
        [str(root / "new-venv" / "bin" / "python"), "-m", "pip", "freeze", "--isolated"],
        env=testkit.clean_env(), capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for requirement in SANDBOX_VARS["cu130_wheels_requirements"]:
        assert requirement in freeze, freeze
    assert not (root / "old-venv").exists()


def test_check_mode_fetches_nothing_and_creates_nothing(upstream, tmp_path):
    url, log, _ = upstream
    before = _wheel_gets(log)
    playbook, inventory = _play(tmp_path, url, ["artifact_cache"]), _inventory(tmp_path, HOSTS)
    result = _run(tmp_path, playbook, inventory, "--check")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert _wheel_gets(log) == before
    assert not (tmp_path / "reports").exists()
    assert not any((tmp_path / host).exists() for host in HOSTS)
    # Fetched 0 of an empty cache: nothing to send, and the hosts' directories would be made.
    assert "Fetched 0 wheels, 0 bytes, from upstream;" in output
    assert _changed(output) == {host: 1 for host in HOSTS}, output
