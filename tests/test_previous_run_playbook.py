"""The host's state under the lock (cuda13_host_state), its step boundaries (the host's run
record, ``step.json``) and its result (cuda13_result) on localhost, in the order of
roles/upgrade_host/tasks/main.yml.

What a run reads first on a host: a kept host whose stack digest
(hostscripts/stack_digest.py, run for real on this machine) still matches its
result is "already kept" and ends after that one comparison; one whose stack
differs goes on, saying what differed; a run that stopped part way (its step
record at "switch", its lock left behind by an ansible-playbook that is gone)
is named, its lock taken over, and the next step boundary is this run's.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from playbook import kept_host_state

from cuda13_upgrade import rerun

REPO = Path(__file__).resolve().parents[1]
DIGEST = REPO / "src" / "cuda13_upgrade" / "hostscripts" / "stack_digest.py"
# The GPU boundary: the sandbox's nvidia-smi double, in its default state (8 GPUs, driver 590.48.01).
NVIDIA_SMI = REPO / "sandbox" / "host" / "nvidia-smi"
TARGET = {
    "toolkit_release": "13.0",
    "toolkit_package_version": "13.0.2-1",
    "requirements": ["torch==2.9.1+cu130"],
    "sglang_version": "v0.5.9",
    "profiles": [{"name": "plain", "args": []}],
}

# The upgrade's table of contents (roles/upgrade_host/tasks/main.yml), its steps after the
# host's state the real snapshot and a stand-in for the rest.
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Check every option's value
      cuda13_options: {{}}

    - name: The run's target, as the inventory gives it
      ansible.builtin.set_fact:
        cuda13_options: "{{{{ cuda13_options | combine(__target) }}}}"
      vars:
        __target: {target}

    - name: Take the host's upgrade lock
      cuda13_lock:
        state: acquired
        state_dir: "{{{{ cuda13_options.cuda13_state_dir }}}}"
        run_id: "{{{{ cuda13_run_id }}}}"
      register: __cuda13_lock

    - name: Upgrade the host
      block:
        - name: Read what earlier runs left on the host and decide
          cuda13_host_state:
            options: "{{{{ cuda13_options }}}}"
            run_id: "{{{{ cuda13_run_id }}}}"
            locked: true
          register: __cuda13_host

        - name: Walk the host through the steps
          when: not __cuda13_host.already_kept
          block:
            - name: Snapshot the running stack
              cuda13_snapshot:
                options: "{{{{ cuda13_options }}}}"
                run_id: "{{{{ cuda13_run_id }}}}"
              register: __cuda13_snapshot

            - name: Say whether the full run measures
              ansible.builtin.debug:
                msg: "measures={{{{ __cuda13_host.measure }}}}"

            - name: Stands for the steps of the full run
              ansible.builtin.copy:
                content: walked
                dest: "{{{{ cuda13_options.cuda13_state_dir }}}}/walked"
                mode: "0600"
      always:
        - name: Record the host's result
          cuda13_result:
            options: "{{{{ cuda13_options }}}}"
            run_id: "{{{{ cuda13_run_id }}}}"
            records:
              host_state: "{{{{ __cuda13_host | default({{}}) }}}}"
              snapshot: "{{{{ __cuda13_snapshot | default({{}}) }}}}"

        - name: Write the run's summary
          cuda13_report:
            reports_dir: "{{{{ cuda13_options.cuda13_reports_dir }}}}"
            run_id: "{{{{ cuda13_run_id }}}}"
            hosts: "{{{{ ansible_play_hosts_all }}}}"
          run_once: true

        - name: Release the lock
          cuda13_lock:
            state: released
            state_dir: "{{{{ cuda13_options.cuda13_state_dir }}}}"
            run_id: "{{{{ cuda13_run_id }}}}"
            lock: "{{{{ __cuda13_lock }}}}"
"""


def _target_options(target: dict) -> dict:
    """The options a run's target comes from (cuda13_upgrade.rerun.target)."""
    return {option: target[part] for part, option in rerun.TARGET_OPTIONS.items() if part in target}


def _run(tmp_path: Path, run_id: str, target: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    # The pre-upgrade snapshot the earlier run took: a run reads it back (it is written once), so
    # the snapshot step needs neither the serving venv nor systemd on this machine.
    snapshot = tmp_path / "state" / "snapshots" / "pre-upgrade.json"
    if not snapshot.exists():
        snapshot.parent.mkdir(parents=True)
        snapshot.write_text(
            json.dumps(
                {
                    "host": "localhost",
                    "run_id": "20261201T101500Z",
                    "taken_at": "2026-12-01T10:16:02+00:00",
                    "venv": {"path": "/opt/ml-env"},
                }
            )
        )
    play = tmp_path / "playbooks" / "play.yml"
    play.write_text(PLAY.format(target=json.dumps(_target_options(target or TARGET))))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "CUDA13_REPORTS_DIR": str(tmp_path / "reports"),
    }
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        str(play),
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        f"cuda13_state_dir={tmp_path}/state",
        "-e",
        f"cuda13_new_venv={tmp_path}/venv",
        "-e",
        f"cuda13_old_venv={tmp_path}/old-venv",
        "-e",
        "cuda13_service_name=nosuch-cuda13-test.service",
        "-e",
        f"nvidia_driver_check_nvidia_smi={NVIDIA_SMI}",
        "-e",
        f"cuda13_run_id={run_id}",
    ]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)


def _kept_host(tmp_path: Path) -> Path:
    """A host whose run 20261201T101500Z kept the target, with the digest of its stack then."""
    return kept_host_state(tmp_path, TARGET, "nosuch-cuda13-test.service")


def test_a_kept_host_whose_stack_is_unchanged_is_already_kept_and_ends_there(tmp_path):
    state = _kept_host(tmp_path)
    proc = _run(tmp_path, "r-again")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "localhost: already kept: run 20261201T101500Z verified this target" in out
    assert not (state / "walked").exists()
    assert not (state / "run.lock").exists()
    result = json.loads((tmp_path / "reports" / "r-again" / "localhost" / "result.json").read_text())
    assert (result["status"], result["already_kept"], result["measured"]) == ("kept", True, False)
    assert result["verified_in_run"] == "20261201T101500Z"
    assert result["stack_after"]["torch"] == "2.9.1+cu130"
    summary = (tmp_path / "reports" / "r-again" / "summary.md").read_text()
    assert "| localhost | already kept (verified in run 20261201T101500Z) |" in summary
    # The host keeps the verified record, digest and all.
    assert json.loads((state / "result.json").read_text())["run_id"] == "20261201T101500Z"


def test_a_kept_host_whose_stack_differs_goes_through_the_full_run_and_says_what_differed(tmp_path):
    state = _kept_host(tmp_path)
    result = json.loads((state / "result.json").read_text())
    result["stack_digest"]["parts"]["toolkit"] = "0" * 64
    (state / "result.json").write_text(json.dumps(result))
    proc = _run(tmp_path, "r-again")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "localhost: not already kept: its stack differs from the one run 20261201T101500Z kept: toolkit;"
        " the full run follows." in out
    )
    assert (state / "walked").exists()
    # The stack verified is not the one it serves: the gate measures it again.
    assert "msg: measures=True" in out


def test_a_host_kept_with_sglang_from_source_is_not_kept_for_its_wheel(tmp_path):
    # The kept record predates sglang_build_method (its target has no sglang_method): a
    # source build. The same release's wheel is another target; a source run is the same one.
    state = _kept_host(tmp_path)
    proc = _run(tmp_path, "r-source", {**TARGET, "sglang_method": "source"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "localhost: already kept" in " ".join(proc.stdout.split())
    assert not (state / "walked").exists()
    proc = _run(tmp_path, "r-wheel", {**TARGET, "sglang_method": "wheel"})
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "localhost: not already kept: it was kept for another target (run 20261201T101500Z);"
        " the full run follows." in out
    )
    assert (state / "walked").exists()


def test_a_run_that_stopped_after_the_switch_is_named_and_its_lock_taken_over(tmp_path):
    """What a run that lost its host after the switch leaves: the lock of an
    ansible-playbook that has ended, the step record at "switch", no result."""
    state = tmp_path / "state"
    (state / "run.lock").mkdir(parents=True)
    # Above Linux's largest pid (pid_max is at most 2**22): no process has it.
    owner = {"run_id": "20261201T101500Z", "control_node": socket.gethostname(), "pid": 2**22 + 17}
    (state / "run.lock" / "owner.json").write_text(json.dumps(owner))
    step = {
        "run_id": "20261201T101500Z",
        "step": "switch",
        "started_at": "2026-12-01T10:41:07+00:00",
        "serving": "/opt/ml-env",
        "steps": ["snapshot", "switch"],
    }
    (state / "step.json").write_text(json.dumps(step))
    proc = _run(tmp_path, "r-next")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "took over the lock" in out and "of run 20261201T101500Z" in out
    assert "That run had begun step switch at 2026-12-01T10:41:07+00:00." in out
    assert "localhost: run 20261201T101500Z stopped at step switch (begun 2026-12-01T10:41:07+00:00" in out
    assert (state / "walked").exists()
    assert not (state / "run.lock").exists()
    # This run's own boundaries, through to its result: the stopped run is resolved.
    record = json.loads((state / "step.json").read_text())
    assert (record["run_id"], record["step"], record["steps"]) == ("r-next", "result", ["snapshot", "result"])
    assert record["serving"] == f"{tmp_path}/old-venv"
    # The run's target: TARGET and the install method sglang_build_method defaults to.
    assert record["target"] == {**TARGET, "sglang_method": "source"}


def test_a_kept_record_without_the_driver_part_is_completed_unmeasured_then_already_kept(tmp_path):
    """A host kept by an earlier version of cuda13-upgrade (its digest has no driver part):
    through the roles once, not measured, its verified record completed with the whole
    digest; the run after that finds it already kept."""
    state = _kept_host(tmp_path)
    result = json.loads((state / "result.json").read_text())
    del result["stack_digest"]["parts"]["driver"]
    (state / "result.json").write_text(json.dumps(result))
    proc = _run(tmp_path, "r-complete")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "recorded has no driver part (an earlier version of cuda13-upgrade wrote it)" in out
    assert "msg: measures=False" in out
    assert (state / "walked").exists()
    kept = json.loads((state / "result.json").read_text())
    assert (kept["run_id"], kept["verified_in_run"], kept["measured"]) == ("20261201T101500Z",) * 2 + (True,)
    assert set(kept["stack_digest"]["parts"]) == {"freeze", "dropins", "alternatives", "toolkit", "driver"}
    (state / "walked").unlink()
    proc = _run(tmp_path, "r-after")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "localhost: already kept: run 20261201T101500Z verified this target" in " ".join(
        proc.stdout.split()
    )
    assert not (state / "walked").exists()
