"""The action cuda13_lock through ansible-playbook on localhost: a live run's lock is refused,
a dead run's taken over, the lock released; nothing taken in check mode."""

import json
import socket
import subprocess
from datetime import datetime

import pytest
from playbook import extra_vars, run_playbook

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Take the host's upgrade lock
      cuda13_lock:
        state: acquired
        state_dir: "{{ state_dir }}"
        run_id: test-run-2
      register: lock
    - name: Keep a copy of the lock's owner
      ansible.builtin.copy:
        src: "{{ state_dir }}/run.lock/owner.json"
        dest: "{{ state_dir }}/owner-seen.json"
        remote_src: true
        mode: "0600"
      when: not ansible_check_mode
    - name: Release the lock
      cuda13_lock:
        state: released
        state_dir: "{{ state_dir }}"
        run_id: test-run-2
        lock: "{{ lock }}"
"""


def _run(tmp_path, *extra):
    play = tmp_path / "lock-play.yml"
    play.write_text(PLAY)
    return run_playbook(play, *extra_vars(state_dir=f"{tmp_path}/state"), *extra, timeout=120)


def _hold(tmp_path, **owner):
    lock = tmp_path / "state" / "run.lock"
    lock.mkdir(parents=True)
    (lock / "owner.json").write_text(json.dumps({"run_id": "old-run-1", **owner}))
    return lock


@pytest.fixture
def live_ansible_playbook(tmp_path):
    """A process whose argv[0] is named ansible-playbook, as a live run's is."""
    fake = tmp_path / "bin" / "ansible-playbook"
    fake.parent.mkdir()
    fake.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(fake), "120"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_live_run_on_this_control_node_is_refused_with_the_remedy(tmp_path, live_ansible_playbook):
    lock = _hold(tmp_path, control_node=socket.gethostname(), pid=live_ansible_playbook)
    proc = _run(tmp_path)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert (
        f"the ansible-playbook of run old-run-1 (pid {live_ansible_playbook} on {socket.gethostname()}) is running"
        in out
    )
    assert "-e cuda13_break_lock=true" in out
    assert json.loads((lock / "owner.json").read_text())["run_id"] == "old-run-1"


def test_a_killed_run_on_this_control_node_is_taken_over(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    _hold(tmp_path, control_node=socket.gethostname(), pid=dead.pid)
    proc = _run(tmp_path)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert (
        f"took over the lock {tmp_path}/state/run.lock of run old-run-1: the ansible-playbook "
        f"of run old-run-1 (pid {dead.pid} on {socket.gethostname()}) is no longer running" in out
    )
    # This run recorded itself as the owner, with its lease, and released the lock at the end.
    owner = json.loads((tmp_path / "state" / "owner-seen.json").read_text())
    assert owner["run_id"] == "test-run-2"
    assert owner["control_node"] == socket.gethostname()
    assert int(owner["pid"]) > 1 and int(owner["pid"]) != dead.pid
    lease = datetime.fromisoformat(owner["lease_expires_at"]) - datetime.fromisoformat(owner["started_at"])
    assert abs(lease.total_seconds() - 24 * 3600) < 60
    assert not (tmp_path / "state" / "run.lock").exists()


def test_check_mode_takes_no_lock(tmp_path):
    proc = _run(tmp_path, "--check")
    assert proc.returncode == 0, proc.stdout
    assert not (tmp_path / "state").exists()
