"""roles/upgrade_host/tasks/rescue.yml on localhost: a step that ran out of disk space says so."""

import subprocess
from pathlib import Path

import pytest
from playbook import extra_vars, run_playbook

REPO = Path(__file__).resolve().parents[1]

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: cuda13
    - block:
        - ansible.builtin.set_fact:
            __cuda13_step: verify
            __cuda13_changed: false
        - name: The failing step
          ansible.builtin.command:
            argv: {argv}
      rescue:
        - ansible.builtin.import_role:
            name: upgrade_host
            tasks_from: rescue
"""


def _run(tmp_path, argv, venv):
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(repo=REPO, argv=argv))
    proc = run_playbook(
        play, *extra_vars(cuda13_new_venv=venv, cuda13_new_sglang_src=f"{tmp_path}/sglang-cu130")
    )
    # The rescue's last message is a debug task's, printed as YAML (its quotes doubled).
    return proc.returncode, " ".join(proc.stdout.split()).replace("''", "'")


def test_pips_text_of_a_full_disk_is_named_with_the_remedy(tmp_path):
    # pip's message for ENOSPC (pypa/pip#5816).
    text = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    rc, out = _run(tmp_path, ["sh", "-c", f"echo '{text}' >&2; exit 1"], tmp_path / "ml-env-cu130")
    assert rc == 0, out  # the rescue leaves the host running; the upgrade's last play fails it
    assert (
        "failed at step 'verify': the step ran out of disk space: the step reported 'No space left on device';"
        in out
    )
    assert "point cuda13_new_venv and cuda13_new_sglang_src at a larger one" in out


def test_another_failure_is_not_called_a_full_disk(tmp_path):
    rc, out = _run(
        tmp_path, ["sh", "-c", "echo 'No matching distribution' >&2; exit 1"], tmp_path / "ml-env-cu130"
    )
    assert rc == 0, out  # the rescue leaves the host running; the upgrade's last play fails it
    assert "failed at step 'verify'" in out and "disk space" not in out


@pytest.fixture
def small_fs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_venv_that_fills_its_filesystem_is_named_though_ensurepip_says_nothing(tmp_path, small_fs):
    # python -m venv keeps ensurepip's output to itself: only the full filesystem tells.
    venv = small_fs / "ml-env-cu130"
    rc, out = _run(tmp_path, ["python3", "-m", "venv", str(venv)], venv)
    assert rc == 0, out  # the rescue leaves the host running; the upgrade's last play fails it
    assert f"the step ran out of disk space: the filesystem it writes is full (full: {small_fs})" in out
