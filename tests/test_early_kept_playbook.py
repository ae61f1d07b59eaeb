"""upgrade-cuda13.yml on localhost: a host already kept leaves the run before its preflight.

The real playbook, with localhost as the one host of the fleet: the GPU is the sandbox's
nvidia-smi double, the stack digest is the real host script's. A host whose last result kept
this very target, its stack unchanged, no lock and no stopped run on it, is "already kept"
after one script, its preflight never begun and nothing written on it. A host with a lock on
it, a new driver or another target goes through the preflight, which here refuses it (it asks
for more disk than any machine has), so that nothing after the preflight ever runs on this
machine; those runs are also in check mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from playbook import REPO, extra_vars, kept_host_state, run_playbook

from cuda13_upgrade import options, rerun

DIGEST = REPO / "src" / "cuda13_upgrade" / "hostscripts" / "stack_digest.py"
NVIDIA_SMI = REPO / "sandbox" / "host" / "nvidia-smi"
STATES = REPO / "sandbox" / "host" / "nvidia-smi-states"
UNIT = "nosuch-cuda13-test.service"
PREFLIGHT_BEGUN = (
    "TASK [nvidia_driver_check : Check the host, the toolkit's apt transaction and the target's resolution]"
)
REFUSED = "localhost fails the preflight for CUDA 13.0.2; nothing was changed"


def _target() -> dict:
    """The target of a run with the roles' defaults, as the playbook derives it."""
    specs = {}
    for path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        specs.update(yaml.safe_load(path.read_text())["argument_specs"]["main"].get("options") or {})
    checked = options.validate({}, specs)
    assert checked["ok"], checked["failures"]
    return rerun.target(checked["values"])


def _kept_host(tmp_path: Path, *, target: dict | None = None, host: str = "localhost") -> Path:
    """State of a host whose run 20261201T101500Z kept the target, on the double's default GPUs."""
    return kept_host_state(tmp_path, target or _target(), UNIT, host=host, gpus="default.json")


def _upgrade(
    tmp_path: Path, run_id: str, *args: str, gpus: str = "default.json", inventory: Path | None = None
):
    hosts = (
        {} if inventory else {"cuda13_state_dir": tmp_path / "state", "cuda13_new_venv": tmp_path / "venv"}
    )
    return run_playbook(
        REPO / "upgrade-cuda13.yml",
        *extra_vars(
            cuda13_target_hosts="all",
            **hosts,
            cuda13_old_venv=tmp_path / "old-venv",
            cuda13_service_name=UNIT,
            nvidia_driver_check_nvidia_smi=NVIDIA_SMI,
            nvidia_driver_check_python=sys.executable,
            nvidia_driver_check_host_checks="false",
            cuda13_preflight_resolve="false",
            # localhost has no drain hook: allowed explicitly
            cuda13_allow_undrained="true",
            # More than any disk holds: the preflight refuses every host it checks.
            nvidia_driver_check_required_disk_gib=10**9,
        ),
        *args,
        inventory=inventory or "localhost,",
        env={
            "CUDA13_RUN_ID": run_id,
            "CUDA13_REPORTS_DIR": str(tmp_path / "reports"),
            "NVIDIA_SMI_DOUBLE_STATE": str(STATES / gpus),
        },
        timeout=240,
    )


def _files(state: Path) -> dict[str, bytes]:
    return {str(p.relative_to(state)): p.read_bytes() for p in sorted(state.rglob("*")) if p.is_file()}


def test_an_unchanged_kept_host_is_already_kept_before_its_preflight(tmp_path):
    state = _kept_host(tmp_path)
    before = _files(state)
    proc = _upgrade(tmp_path, "r-again")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "localhost: already kept: run 20261201T101500Z verified this target" in out
    assert PREFLIGHT_BEGUN not in proc.stdout
    assert "TASK [upgrade_host : Take the host's upgrade lock]" not in proc.stdout
    # Nothing written on the host: no lock, no step record, the verified result as it was.
    assert _files(state) == before
    assert not (state / "run.lock").exists()
    result = json.loads((tmp_path / "reports" / "r-again" / "localhost" / "result.json").read_text())
    assert (result["status"], result["already_kept"], result["measured"]) == ("kept", True, False)
    assert result["verified_in_run"] == "20261201T101500Z"
    assert result["target"] == _target()
    summary = (tmp_path / "reports" / "r-again" / "summary.md").read_text()
    assert "| localhost | already kept (verified in run 20261201T101500Z) |" in summary


@pytest.mark.parametrize(
    ("change", "gpus"),
    [
        ("lock", "default.json"),
        ("stopped", "default.json"),
        ("driver", "driver-too-old.json"),
        ("target", "default.json"),
    ],
)
def test_any_other_host_goes_through_the_preflight(tmp_path, change, gpus):
    """A lock held (another run may be changing the host), a run stopped after its switch, a
    new driver (the double's state on driver 570.86.15), another target: each host is checked
    by the preflight, here refused, with nothing after it run."""
    target = {**_target(), "sglang_version": "v0.5.8"} if change == "target" else None
    state = _kept_host(tmp_path, target=target)
    if change == "lock":
        (state / "run.lock").mkdir()
        (state / "run.lock" / "owner.json").write_text('{"run_id": "20261202T080000Z"}')
    if change == "stopped":
        (state / "step.json").write_text(json.dumps({"run_id": "20261202T080000Z", "step": "switch"}))
    proc = _upgrade(tmp_path, f"r-{change}", "--check", gpus=gpus)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "localhost: already kept" not in out
    assert PREFLIGHT_BEGUN in proc.stdout
    assert REFUSED in out, proc.stdout[-3000:]
    assert "PLAY [Upgrade, verify, keep or roll back]" not in proc.stdout


def test_the_preflight_and_the_batches_take_only_the_hosts_not_already_kept(tmp_path):
    """A fleet of two (both this machine, each with its own state directory): the kept one
    leaves before the preflight, whose play (and the upgrade play's batches, the canary
    first) is the other host's alone; the run's summary lists both."""
    for host in ("gpu-node-01", "gpu-node-02"):
        (tmp_path / host).mkdir()
    _kept_host(tmp_path / "gpu-node-01", host="gpu-node-01")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        host: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "cuda13_state_dir": str(tmp_path / host / "state"),
                            "cuda13_new_venv": str(tmp_path / host / "venv"),
                        }
                        for host in ("gpu-node-01", "gpu-node-02")
                    }
                }
            }
        )
    )
    proc = _upgrade(tmp_path, "r-fleet", "--check", inventory=inventory)
    out = " ".join(proc.stdout.split())
    assert "gpu-node-01: already kept: run 20261201T101500Z verified this target" in out
    # the batch plan: printed over the fleet at the start, then over the hosts that upgrade
    assert "batch 1 of 2 (canary, 1 host): gpu-node-01 batch 2 of 2 (1 host): gpu-node-02" in out
    assert (
        "1 host in 1 batch, ramp capped at 1 host (cuda13_max_parallel '25%'): batch 1 of 1 (1 host): gpu-node-02"
    ) in out
    preflight = proc.stdout.split("PLAY [Preflight (read-only)]", 1)[1]
    assert "[gpu-node-02]" in preflight and "[gpu-node-01]" not in preflight
    assert "gpu-node-02 fails the preflight for CUDA 13.0.2; nothing was changed" in " ".join(
        preflight.split()
    )
    assert json.loads((tmp_path / "reports" / "r-fleet" / "gpu-node-01" / "result.json").read_text())[
        "already_kept"
    ]
    summary = (tmp_path / "reports" / "r-fleet" / "summary.md").read_text()
    assert "| gpu-node-01 | already kept (verified in run 20261201T101500Z) (check mode) |" in summary
    assert "| gpu-node-02 | not reached |" in summary
