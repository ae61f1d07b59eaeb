"""The action cuda13_rollback (the upgrade's rescue) on localhost: a step that ran out of disk space
says so."""

import json
import subprocess
from pathlib import Path

import pytest
from playbook import extra_vars, run_playbook

REPO = Path(__file__).resolve().parents[1]

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Check every option's value
      cuda13_options: {{}}
    - block:
        - name: The host's run so far, unchanged
          ansible.builtin.set_fact:
            cuda13_host_run:
              run_id: r1
              host: localhost
              started_at: "2026-12-03T09:00:00+00:00"
              target: {{}}
              state_dir: "{{{{ cuda13_options.cuda13_state_dir }}}}"
              serving: /opt/ml-env
              drained: false
              changed: false
              steps: [{{step: verify, started_at: "2026-12-03T09:00:00+00:00"}}]
              failure: null
        - name: The failing step
          ansible.builtin.command:
            argv: {argv}
      rescue:
        - name: Roll the host back
          cuda13_rollback:
            options: "{{{{ cuda13_options }}}}"
            run_id: r1
            failed: "{{{{ ansible_failed_result }}}}"
            failed_task: "{{{{ ansible_failed_task.name | default('') }}}}"
            failed_action: "{{{{ ansible_failed_task.action | default('') }}}}"
          register: __rollback
        - name: Keep the record
          ansible.builtin.copy:
            dest: {out}
            content: "{{{{ __rollback | to_json }}}}"
            mode: "0644"
"""


def _run(tmp_path, argv, venv):
    play = tmp_path / "play.yml"
    out = tmp_path / "rollback.json"
    play.write_text(PLAY.format(argv=json.dumps([str(a) for a in argv]), out=out))
    proc = run_playbook(
        play,
        *extra_vars(
            cuda13_new_venv=venv,
            cuda13_new_sglang_src=f"{tmp_path}/sglang-cu130",
            cuda13_state_dir=f"{tmp_path}/state",
            cuda13_reports_dir=f"{tmp_path}/reports",
        ),
    )
    record = json.loads(out.read_text()) if out.exists() else {}
    # What the rescue told, on one line.
    return proc.returncode, " ".join(proc.stdout.split()), record


def test_pips_text_of_a_full_disk_is_named_with_the_remedy(tmp_path):
    # pip's message for ENOSPC (pypa/pip#5816).
    text = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    rc, out, record = _run(tmp_path, ["sh", "-c", f"echo '{text}' >&2; exit 1"], tmp_path / "ml-env-cu130")
    assert rc == 0, out  # the rescue leaves the host running; the upgrade's last play fails it
    assert (
        "failed at step 'verify': the step ran out of disk space: the step reported 'No space left on device';"
        in out
    )
    assert "point cuda13_new_venv and cuda13_new_sglang_src at a larger one" in out
    assert record["no_space"]["cause"] in record["error"]
    # After the switch the new stack serves: nothing is removed to free space.
    assert record["space_freed"] is None


def test_another_failure_is_not_called_a_full_disk(tmp_path):
    rc, out, record = _run(
        tmp_path, ["sh", "-c", "echo 'No matching distribution' >&2; exit 1"], tmp_path / "ml-env-cu130"
    )
    assert rc == 0, out  # the rescue leaves the host running; the upgrade's last play fails it
    assert "failed at step 'verify'" in out and "disk space" not in out
    assert record["no_space"] is None


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
    rc, out, _ = _run(tmp_path, ["python3", "-m", "venv", str(venv)], venv)
    assert rc == 0, out  # the rescue leaves the host running; the upgrade's last play fails it
    assert f"the step ran out of disk space: the filesystem it writes is full (full: {small_fs})" in out
