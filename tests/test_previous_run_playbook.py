"""roles/upgrade_host/tasks/state.yml, kept.yml and step.yml on localhost.

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

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: cuda13
    - name: The validated options, as the preflight leaves them
      ansible.builtin.set_fact:
        nvidia_driver_check_options:
          cuda13_reverify: false
          nvidia_driver_check_nvidia_smi: {nvidia_smi}
          nvidia_driver_check_python: {python}
    - ansible.builtin.import_role:
        name: upgrade_host
        tasks_from: lock
    - name: The run's target, as upgrade.yml notes it
      ansible.builtin.set_fact:
        __cuda13_started: "{{{{ now(utc=true).isoformat() }}}}"
        __cuda13_status: failed
        __cuda13_serving: "{{{{ cuda13_old_venv }}}}"
        __cuda13_target: {target}
    - ansible.builtin.import_role:
        name: upgrade_host
        tasks_from: state
    - ansible.builtin.import_role:
        name: upgrade_host
        tasks_from: step
      vars:
        __cuda13_next_step: snapshot
    - name: Say whether the full run measures
      ansible.builtin.debug:
        msg: "measures={{{{ __cuda13_measure }}}}"
    - name: Stands for the roles of the full run
      ansible.builtin.copy:
        content: walked
        dest: "{{{{ cuda13_state_dir }}}}/walked"
        mode: "0600"
    - name: The gate kept the stack, as verify_throughput decides it
      ansible.builtin.set_fact:
        __cuda13_status: kept
    - ansible.builtin.import_role:
        name: upgrade_host
        tasks_from: result
    - ansible.builtin.import_role:
        name: upgrade_host
        tasks_from: unlock
"""


def _run(tmp_path: Path, run_id: str, target: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    play = tmp_path / "playbooks" / "play.yml"
    play.write_text(
        PLAY.format(
            repo=REPO, target=json.dumps(target or TARGET), nvidia_smi=NVIDIA_SMI, python=sys.executable
        )
    )
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
    assert record["target"] == TARGET


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
