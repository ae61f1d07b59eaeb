"""The wheels role installs the preflight's resolved set, one resolution per distinct target.

playbooks/preflight.yml (its resolver on, as by default) and then roles/cu130_wheels on two
local hosts with the same target (``-c local``, the nvidia-smi double) against the sandbox
mirror's indexes and its SGLang repository: the first host resolves, the second takes its
resolution, and each new venv holds exactly the resolved set, installed with its hashes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name
from playbook import mirror_preflight_vars

REPO = Path(__file__).resolve().parents[1]

PINS = [
    "torch==2.9.1+cu130",
    "sgl-kernel==0.3.21+cu130",
    "flashinfer-python==0.6.3",
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
]


def _run(tmp_path, mirror_url):
    hosts = {name: {"cuda13_new_venv": f"{tmp_path}/{name}/venv"} for name in ("canary", "follower")}
    for name in hosts:
        (tmp_path / name).mkdir()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": {"ansible_connection": "local"}}}))
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "preflight.yml")},
                {
                    "name": "Install the wheels",
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {"ansible.builtin.import_role": {"name": "cuda13"}},
                        {"ansible.builtin.import_role": {"name": "cu130_wheels"}},
                        {
                            "ansible.builtin.copy": {
                                "content": "{{ {'resolved': cu130_wheels_resolved_target,"
                                " 'by': cu130_wheels_resolved_by,"
                                " 'resolver_dir': __cu130_wheels_resolve_dir.path | default('')} | to_json }}",
                                "dest": "{{ cuda13_new_venv | dirname }}/resolved.json",
                                "mode": "0644",
                            }
                        },
                    ],
                },
            ]
        )
    )
    extra = {**mirror_preflight_vars(mirror_url, PINS), "cu130_wheels_driver_library_optional": True}
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "filter_plugins"),
        "PIP_CONFIG_FILE": os.devnull,
    }
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), str(play), "-i", str(inventory)]
    argv += ["-e", json.dumps(extra)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)


def _freeze(venv: Path) -> set[str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--isolated", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = (line.split("==", 1) for line in proc.stdout.split())
    return {f"{canonicalize_name(name)}=={version}" for name, version in pins}


def test_each_host_installs_the_one_resolution_of_its_target(tmp_path, mirror_url):
    proc = _run(tmp_path, mirror_url)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    # One resolution for the two hosts: pip's resolver ran on the canary only.
    assert (
        "skipping: [follower]" in out.split("TASK [cu130_wheels : Resolve the target]")[1].split("TASK [")[0]
    )
    records = {
        name: json.loads((tmp_path / name / "resolved.json").read_text()) for name in ("canary", "follower")
    }
    assert records["canary"]["by"] == records["follower"]["by"] == "canary"
    # The resolver's throwaway venv and downloads sat on the filesystem of pip's temporary
    # directory (its nearest existing parent before the upgrade), not in the system's /tmp,
    # and are gone.
    resolver_dir = Path(records["canary"]["resolver_dir"])
    assert resolver_dir.parent == tmp_path / "canary" and resolver_dir.name.startswith(".cuda13-resolve-")
    assert not resolver_dir.exists()
    assert records["canary"]["resolved"] == records["follower"]["resolved"]
    resolved = records["canary"]["resolved"]
    assert {"torch", "sgl-kernel", "sglang", "nvidia-cudnn-cu13"} <= {d["name"] for d in resolved}
    expected = {f"{d['name']}=={d['version']}" for d in resolved if d["name"] != "sglang"}
    for name in ("canary", "follower"):
        venv = tmp_path / name / "venv"
        assert _freeze(venv) == expected
        # The service's user must execute the venv's python: the venv is 0755, though
        # pip's 0700 temporary directory lies inside it.
        assert venv.stat().st_mode & 0o777 == 0o755
        assert (venv / ".pip-tmp").stat().st_mode & 0o777 == 0o700
        requirements = Path(f"{venv}.resolved.txt").read_text()
        assert "torch==2.9.1+cu130 --hash=sha256:" in requirements
    # The pins as written are not installed: the resolved set is.
    unresolved = out.split("TASK [cu130_wheels : Install the cu130 wheels into")[1].split("TASK [")[0]
    assert "skipping: [canary]" in unresolved and "skipping: [follower]" in unresolved
