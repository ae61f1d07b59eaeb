"""The action cuda13_wheels through ``ansible-playbook``: the preflight's resolution installed exactly.

The preflight's resolution (cuda13_upgrade.steps.resolve.resolve, real pip against the sandbox
mirror's indexes and its SGLang repository) for two hosts with the same target: the first
resolves, the second takes its set. Then roles/cu130_wheels on both hosts (``-c local``) installs
that set into each new venv with its hashes, checks the stand-in stack, and a second run of the
action changes nothing; ``--check`` creates nothing; roles/cu130_wheels/tasks/check.yml on its
own (as molecule real-stack's variants use it) refuses a venv holding the CUDA 12.8 kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakehost import FakeHost
from packaging.utils import canonicalize_name
from playbook import run_playbook
from sandbox_mirror import testkit

from cuda13_upgrade.steps import resolve

PINS = [
    "torch==2.9.1+cu130",
    "sgl-kernel==0.3.21+cu130",
    "flashinfer-python==0.6.3",
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
]
HOSTS = ("canary", "follower")

PLAY = """
- name: Install the wheels
  hosts: all
  gather_facts: false
  roles:
    - cu130_wheels
  tasks:
    - name: Run the step again
      cuda13_wheels:
        resolved: "{{ cu130_wheels_resolved_target | default([]) }}"
      register: __again
    - name: Keep what the step returned
      ansible.builtin.copy:
        content: "{{ {'again': __again, 'verdict': cu130_wheels_verdict} | to_json }}"
        dest: "{{ cuda13_new_venv | dirname }}/record.json"
        mode: "0644"
"""


def _mirror_vars(mirror_url: str, **more) -> dict:
    return {
        "cuda13_wheels_index_url": f"{mirror_url}/whl/cu130",
        "cuda13_wheels_extra_index_urls": [
            f"{mirror_url}/sgl-whl/cu130",
            f"{mirror_url}/flashinfer-whl/cu130",
            f"{mirror_url}/pypi/simple",
        ],
        "cu130_wheels_requirements": PINS,
        "cu130_wheels_python": sys.executable,
        "cu130_wheels_driver_library_optional": True,
        **more,
    }


@pytest.fixture(scope="module")
def resolution(mirror_url, tmp_path_factory):
    """The preflight's step on both hosts: ``{host: (record, FakeHost)}``."""
    root = tmp_path_factory.mktemp("preflight")
    options = {
        **_mirror_vars(mirror_url),
        "cu130_wheels_index_url": f"{mirror_url}/whl/cu130",
        "cu130_wheels_extra_index_urls": _mirror_vars(mirror_url)["cuda13_wheels_extra_index_urls"],
        "cu130_wheels_pip_tmpdir": str(root / "venv" / ".pip-tmp"),
        "sglang_build_method": "source",
        "sglang_build_repo": f"{mirror_url}/git/sglang.git",
        "sglang_build_version": "v0.5.9",
    }
    found = {}
    for name in HOSTS:
        host = FakeHost(name)
        found[name] = (resolve.resolve(host, options, run_dir=str(root / "run")), host)
    return found


def _inventory(tmp_path: Path, hosts: dict) -> Path:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": {"ansible_connection": "local"}}}))
    return inventory


def _freeze(venv: Path) -> set[str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--isolated", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = (line.split("==", 1) for line in proc.stdout.split())
    return {f"{canonicalize_name(name)}=={version}" for name, version in pins}


def test_each_host_installs_the_one_resolution_of_its_target(tmp_path, mirror_url, resolution):
    # One resolution for the two hosts: pip's resolver ran on the canary only.
    assert resolution["canary"][1].called("cuda13_resolve") and not resolution["follower"][1].called(
        "cuda13_resolve"
    )
    records = {name: record for name, (record, _) in resolution.items()}
    assert records["canary"]["resolved_by"] == records["follower"]["resolved_by"] == "canary"
    assert records["canary"]["resolved"] == records["follower"]["resolved"]
    resolved = records["canary"]["resolved"]
    assert {"torch", "sgl-kernel", "sglang", "nvidia-cudnn-cu13"} <= {d["name"] for d in resolved}

    hosts = {
        name: {
            "cuda13_new_venv": f"{tmp_path}/{name}/venv",
            "cu130_wheels_resolved_target": records[name]["resolved"],
        }
        for name in HOSTS
    }
    for name in HOSTS:
        (tmp_path / name).mkdir()
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    extra = _mirror_vars(mirror_url, cuda13_old_venv=str(tmp_path / "old-venv"))
    proc = run_playbook(
        play, "-e", json.dumps(extra), inventory=_inventory(tmp_path, hosts), roles=True, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    expected = {f"{d['name']}=={d['version']}" for d in resolved if d["name"] != "sglang"}
    for name in HOSTS:
        venv = tmp_path / name / "venv"
        assert _freeze(venv) == expected
        # The service's user must execute the venv's python: the venv is 0755, though
        # pip's 0700 temporary directory lies inside it.
        assert venv.stat().st_mode & 0o777 == 0o755
        assert (venv / ".pip-tmp").stat().st_mode & 0o777 == 0o700
        requirements = Path(f"{venv}.resolved.txt").read_text()
        assert "torch==2.9.1+cu130 --hash=sha256:" in requirements
        record = json.loads((tmp_path / name / "record.json").read_text())
        # The pins as written are not installed: the resolved set is; again, nothing changes.
        assert record["again"]["installed"] == "resolved" and record["again"]["changed"] is False
        assert record["again"]["resolved_target"] == resolved
        assert record["verdict"]["consistent"] is True
        assert f"{name}: {venv}: consistent; torch 2.9.1+cu130, CUDA 13.0, sgl-kernel 0.3.21+cu130" in out


def test_check_mode_says_it_would_install_and_creates_nothing(tmp_path, mirror_url, resolution):
    hosts = {"canary": {"cuda13_new_venv": f"{tmp_path}/canary/venv",
                        "cu130_wheels_resolved_target": resolution["canary"][0]["resolved"]}}  # fmt: skip
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles: [cu130_wheels]\n")
    extra = _mirror_vars(mirror_url, cuda13_old_venv=str(tmp_path / "old-venv"))
    proc = run_playbook(
        play,
        "--check",
        "-e",
        json.dumps(extra),
        inventory=_inventory(tmp_path, hosts),
        roles=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    task = out.split("TASK [cu130_wheels : Install the cu130 wheels into")[1].split("TASK [")[0]
    assert "changed: [canary]" in task, out[-4000:]
    assert ": consistent;" not in out  # nothing installed, nothing probed
    assert not (tmp_path / "canary").exists()


CHECK_PLAY = """
- name: Check a venv's stack as molecule real-stack's variants do
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the checks
      block:
        - name: Check with cu130_wheels
          ansible.builtin.include_role:
            name: cu130_wheels
            tasks_from: check.yml
          vars:
            cu130_wheels_venv: "{{ venv }}"
            cu130_wheels_compute_capabilities: ["12.0"]
            cu130_wheels_driver_library_optional: true
        - name: Record that it passed
          ansible.builtin.set_fact:
            __message: ""
      rescue:
        - name: Record why it was refused
          ansible.builtin.set_fact:
            __message: "{{ ansible_failed_result.msg }}"
    - name: Keep the message
      ansible.builtin.copy:
        content: "{{ __message }}"
        dest: "{{ venv | dirname }}/message.txt"
        mode: "0644"
"""


def test_check_yml_on_its_own_refuses_the_cuda_12_8_kernel_with_the_verdicts_reasons(tmp_path, mirror_url):
    python = testkit.make_venv(tmp_path / "variant")
    testkit.install_stack(python, mirror_url, "cu130")
    # The real stack with one distribution replaced, installed alone (molecule's variant.yml).
    testkit.pip(python, "--no-deps", "--index-url", f"{mirror_url}/sgl-whl/cu128", "sgl-kernel==0.3.21+cu128")
    play = tmp_path / "check.yml"
    play.write_text(CHECK_PLAY)
    proc = run_playbook(play, "-e", f"venv={tmp_path / 'variant'}", roles=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    message = (tmp_path / "message.txt").read_text()
    assert message.startswith(f"The new stack in {tmp_path / 'variant'} is inconsistent: "), message
    assert "sgl-kernel 0.3.21+cu128 is built for CUDA 12.8" in message, message
