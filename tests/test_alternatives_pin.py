"""roles/cuda_toolkit/tasks/pin.yml with Debian's real update-alternatives.

The groups live in a private alternatives directory (a wrapper adds --altdir,
--admindir and --log), shaped like NVIDIA's packages register them: cuda and
cuda-12 in auto mode on 12.8. After the pin, a package script's
`update-alternatives --install` of 13.0 at a higher priority (what installing
cuda-toolkit-13-0 does) must leave /usr/local/cuda where it was.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from playbook import run_playbook

REPO = Path(__file__).resolve().parents[1]
UA = shutil.which("update-alternatives")

pytestmark = pytest.mark.skipif(UA is None, reason="needs Debian's update-alternatives")

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Pin
      ansible.builtin.include_role:
        name: cuda_toolkit
        tasks_from: pin.yml
      vars:
        cuda_toolkit_release: "13.0"
"""


@pytest.fixture
def alternatives(tmp_path):
    root = tmp_path / "root"
    for d in ("etc/alternatives", "var/lib/dpkg/alternatives", "usr/local", "log"):
        (root / d).mkdir(parents=True)
    for release in ("12.8", "13.0"):
        (root / f"usr/local/cuda-{release}").mkdir()
    wrapper = tmp_path / "bin" / "update-alternatives"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec {UA} --altdir {root}/etc/alternatives --admindir {root}/var/lib/dpkg/alternatives "
        f'--log {root}/log/alternatives.log "$@"\n'
    )
    wrapper.chmod(0o755)

    def ua(*args):
        return subprocess.run([str(wrapper), *args], capture_output=True, text=True, check=True).stdout

    def install(release, priority, group):
        link = f"{root}/usr/local/{group}"
        ua("--install", link, group, f"{root}/usr/local/cuda-{release}", str(priority))

    install("12.8", 128, "cuda")
    install("12.8", 128, "cuda-12")
    return root, wrapper.parent, ua, install


def _pin(tmp_path, bin_dir):
    play = tmp_path / "pin.yml"
    play.write_text(PLAY)
    return run_playbook(play, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})


def test_the_pin_puts_auto_groups_in_manual_mode_and_the_install_leaves_them(tmp_path, alternatives):
    root, bin_dir, ua, install = alternatives
    assert "Status: auto" in ua("--query", "cuda")
    proc = _pin(tmp_path, bin_dir)
    assert proc.returncode == 0, proc.stdout
    assert "changed: [localhost] => (item=cuda -> " in proc.stdout
    for group in ("cuda", "cuda-12"):
        query = ua("--query", group)
        assert "Status: manual" in query
        assert f"Value: {root}/usr/local/cuda-12.8" in query
    # What installing cuda-toolkit-13-0 does: register 13.0 at priority 130.
    install("13.0", 130, "cuda")
    query = ua("--query", "cuda")
    assert "Best: " + f"{root}/usr/local/cuda-13.0" in query
    assert f"Value: {root}/usr/local/cuda-12.8" in query and "Status: manual" in query
    assert os.path.realpath(root / "usr/local/cuda") == str(root / "usr/local/cuda-12.8")
    # A second run changes nothing.
    again = _pin(tmp_path, bin_dir)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout


def test_without_the_pin_the_install_moves_the_link(alternatives):
    """The fault itself, with the real tool: an auto group follows the higher priority."""
    root, _, ua, install = alternatives
    install("13.0", 130, "cuda")
    assert os.path.realpath(root / "usr/local/cuda") == str(root / "usr/local/cuda-13.0")
    assert "link group cuda updated to point to" in (root / "log/alternatives.log").read_text()


ROLLBACK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Shared settings
      ansible.builtin.import_role:
        name: cuda13
    - name: Start the list
      ansible.builtin.set_fact:
        rollback_alternatives_manual: []
    - name: Restore the group as the rollback does
      ansible.builtin.include_role:
        name: rollback
        tasks_from: alternatives.yml
      vars:
        __rollback_group:
          key: cuda
          value: {status: auto, value: "{root}/usr/local/cuda-12.8", link: "{root}/usr/local/cuda"}
    - name: Write what stays manual
      ansible.builtin.copy:
        content: "{{ rollback_alternatives_manual | to_json }}"
        dest: "{out}"
        mode: "0644"
"""


def test_the_rollback_leaves_a_group_manual_while_auto_would_pick_the_new_toolkit(tmp_path, alternatives):
    """After the pin and the 13.0 install, the snapshot's auto group cannot go back to auto:
    the rollback keeps 12.8 selected (manual) and records what --auto would select."""
    root, bin_dir, ua, install = alternatives
    assert _pin(tmp_path, bin_dir).returncode == 0
    install("13.0", 130, "cuda")
    play = tmp_path / "rollback.yml"
    play.write_text(ROLLBACK.replace("{root}", str(root)).replace("{out}", str(tmp_path / "left.json")))
    proc = run_playbook(
        play, roles=True, filters=True, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    )
    assert proc.returncode == 0, proc.stdout
    query = ua("--query", "cuda")
    assert "Status: manual" in query and f"Value: {root}/usr/local/cuda-12.8" in query
    left = json.loads((tmp_path / "left.json").read_text())
    assert left == [
        {
            "group": "cuda",
            "selected": f"{root}/usr/local/cuda-12.8",
            "auto_would_select": f"{root}/usr/local/cuda-13.0",
        }
    ]
