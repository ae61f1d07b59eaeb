"""The action cuda13_toolkit through ansible-playbook on localhost, with --check and for real.

Only paths that are safe on this machine run for real: ``planned`` reads apt's sources from a
directory under ``tmp_path`` (``apt_dir``) and, for a package installed at its version (dpkg
itself), simulates nothing; ``reverted`` undoes a record under ``tmp_path`` that names no hold
and no source. The role entry point ``roles/rollback/tasks/apt.yml`` runs with its options taken
from the task's variables (``rollback_apt_record``).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from playbook import REPO, run_playbook

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")

REPO_URL = "http://127.0.0.1:8080/cuda/repos/debian12/x86_64/"

PLAN = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Plan the toolkit step
      cuda13_toolkit:
        state: planned
        apt_dir: "{apt_dir}"
        options:
          cuda_toolkit_release: "13.0"
          cuda_toolkit_package: dpkg
          cuda_toolkit_package_version: "{version}"
          cuda_toolkit_apt_repo_url: "{url}"
          cuda_toolkit_apt_keyring: /usr/share/keyrings/cuda-sandbox-keyring.gpg
          cuda_toolkit_install_keyring_package: false
          cuda_toolkit_keyring_package_url: "{url}cuda-keyring_1.1-1_all.deb"
          cuda_toolkit_apt_source_file: cuda-debian12-x86_64
      register: __plan
    - name: Keep the plan
      ansible.builtin.copy:
        content: "{{{{ __plan | to_json }}}}"
        dest: "{out}"
        mode: "0644"
      check_mode: false
      changed_when: false
"""

PRESENT = """
- hosts: all
  gather_facts: false
  vars:
    __options:
      cuda_toolkit_release: "13.0"
      cuda_toolkit_package: dpkg
      cuda_toolkit_package_version: "{version}"
      cuda_toolkit_apt_repo_url: "{url}"
      cuda_toolkit_apt_keyring: /usr/share/keyrings/cuda-sandbox-keyring.gpg
      cuda_toolkit_install_keyring_package: false
      cuda_toolkit_keyring_package_url: "{url}cuda-keyring_1.1-1_all.deb"
      cuda_toolkit_apt_source_file: cuda-debian12-x86_64
      cuda_toolkit_hold_driver: true
      cuda_toolkit_pin_alternatives: true
      cuda_toolkit_apt_record: "{record}"
  tasks:
    - name: Plan the toolkit step (the preflight)
      cuda13_toolkit:
        state: planned
        apt_dir: "{apt_dir}"
        options: "{{{{ __options }}}}"
      register: cuda_toolkit_plan
    - name: Install the toolkit
      cuda13_toolkit:
        apt_dir: "{apt_dir}"
        options: "{{{{ __options }}}}"
        plan: "{{{{ cuda_toolkit_plan }}}}"
      register: __result
    - name: Keep the record
      ansible.builtin.copy:
        content: "{{{{ __result | to_json }}}}"
        dest: "{out}"
        mode: "0644"
      check_mode: false
      changed_when: false
"""

REVERT = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Undo the toolkit step's apt changes
      ansible.builtin.include_role:
        name: rollback
        tasks_from: apt
"""


def _dpkg_version() -> str:
    return subprocess.run(
        ["dpkg-query", "--showformat", "${Version}", "--show", "dpkg"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _plan(tmp_path, *args):
    out = tmp_path / "plan.json"
    play = tmp_path / "plan.yml"
    apt_dir = tmp_path / "apt"
    play.write_text(PLAN.format(apt_dir=apt_dir, version=_dpkg_version(), url=REPO_URL, out=out))
    proc = run_playbook(play, *args)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


@pytest.fixture
def apt_dir(tmp_path):
    parts = tmp_path / "apt" / "sources.list.d"
    parts.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "apt" / "debian.sources", parts / "debian.sources")
    return tmp_path / "apt"


@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_a_planned_host_with_the_package_installed_reuses_its_source_and_simulates_nothing(
    tmp_path, apt_dir, check
):
    source = apt_dir / "sources.list.d" / "nvidia-drivers.sources"
    source.write_text(
        f"Types: deb\nURIs: {REPO_URL}\nSuites: /\nSigned-By: /etc/apt/keyrings/nvidia-drivers.gpg\n"
    )
    proc, plan = _plan(tmp_path, *(["--check"] if check else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed=0" in proc.stdout
    assert plan["installed"] == f"{_dpkg_version()} ii"
    assert plan["to_install"] is False and plan["transaction"] is None
    assert plan["package"] == "dpkg" and plan["toolkit_dir"] == "/usr/local/cuda-13.0"
    assert plan["own_source"] == f"{apt_dir}/sources.list.d/cuda-debian12-x86_64.list"
    assert plan["source"]["action"] == "reuse"
    assert [e["file"] for e in plan["source"]["entries"]] == [str(source)]
    assert plan["changed"] is False


@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_a_planned_host_with_conflicting_entries_is_refused_with_the_files_named(tmp_path, apt_dir, check):
    (apt_dir / "sources.list").write_text(
        f"deb [signed-by=/etc/apt/keyrings/nvidia-drivers.gpg] {REPO_URL} /\n"
    )
    (apt_dir / "sources.list.d" / "cuda-debian12-x86_64.list").write_text(
        f"deb [signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg] {REPO_URL} /\n"
    )
    proc, plan = _plan(tmp_path, *(["--check"] if check else []))
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and plan is None
    assert f"{apt_dir}/sources.list:1 signed-by=/etc/apt/keyrings/nvidia-drivers.gpg" in out
    assert (
        f"{apt_dir}/sources.list.d/cuda-debian12-x86_64.list:1 signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg"
        in out
    )
    assert "E: Conflicting values set for option Signed-By regarding source" in out
    assert "and run again. Nothing on the host was changed." in out


def _record(tmp_path):
    record = tmp_path / "state" / "apt.json"
    record.parent.mkdir()
    record.write_text(
        json.dumps(
            {"holds_added": [], "held": [], "source_added": None, "source_used": "/etc/apt/sources.list"}
        )
    )
    return record


def test_the_rollback_s_apt_entry_point_removes_the_record_and_nothing_else(tmp_path):
    record = _record(tmp_path)
    play = tmp_path / "revert.yml"
    play.write_text(REVERT)
    proc = run_playbook(play, "-e", f"rollback_apt_record={record}", "-v", roles=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed=1" in proc.stdout
    assert not record.exists() and record.parent.exists()
    again = run_playbook(play, "-e", f"rollback_apt_record={record}", roles=True)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout


def test_the_rollback_s_apt_entry_point_in_check_mode_leaves_the_record(tmp_path):
    record = _record(tmp_path)
    play = tmp_path / "revert.yml"
    play.write_text(REVERT)
    proc = run_playbook(play, "--check", "-e", f"rollback_apt_record={record}", roles=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed=1" in proc.stdout
    assert record.exists()


def test_a_bad_state_is_refused_naming_the_argument(tmp_path):
    play = tmp_path / "bad.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - cuda13_toolkit:\n        state: installed\n"
    )
    proc = run_playbook(play)
    assert proc.returncode != 0
    assert "value of state must be one of: planned, present, reverted, got: installed" in proc.stdout


def test_the_install_in_check_mode_reuses_the_plan_and_writes_nothing(tmp_path, apt_dir):
    """--check only: a real run would hold this machine's driver packages and read nvcc."""
    source = apt_dir / "sources.list.d" / "nvidia-drivers.sources"
    source.write_text(
        f"Types: deb\nURIs: {REPO_URL}\nSuites: /\nSigned-By: /etc/apt/keyrings/nvidia-drivers.gpg\n"
    )
    record, out = tmp_path / "state" / "apt.json", tmp_path / "result.json"
    play = tmp_path / "present.yml"
    play.write_text(
        PRESENT.format(apt_dir=apt_dir, version=_dpkg_version(), url=REPO_URL, record=record, out=out)
    )
    proc = run_playbook(play, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert not record.exists()
    assert result["plan"]["to_install"] is False and result["plan"]["source"]["action"] == "reuse"
    assert result["apt_changes"]["source_added"] is None
    assert result["apt_changes"]["source_used"] == str(source)
    assert result["pinned"] == [] and result["nvcc"] is None and result["transaction"] is None
    # cuda13_record reports the record it would write
    assert result["changed"] is True
