"""roles/nvidia_driver_check/tasks/stack_driver.yml: after pip's resolution, the driver the
preflight read is checked against every CUDA component of the resolved target.

A play on localhost (``-c local``) validates the options (tasks/options.yml, as the preflight
does), takes the GPUs' driver and a resolved target as the preflight and
roles/cu130_wheels/tasks/resolve.yml leave them, and includes the task file that
playbooks/preflight.yml and playbooks/plan.yml include after the resolution.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from playbook import run_playbook

REPO = Path(__file__).resolve().parents[1]


def _target(**changes):
    """The real PyPI stack's CUDA components (tests/fixtures/probes/real-stack.json), as resolved."""
    dists = json.loads((REPO / "tests" / "fixtures" / "probes" / "real-stack.json").read_text())["dists"]
    dists.update(changes)
    return [{"name": n, "version": v, "url": None, "sha256": None} for n, v in sorted(dists.items())]


def _run(tmp_path, driver, target, *args):
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The stack's driver floor",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Check the options",
                            "ansible.builtin.include_role": {
                                "name": "nvidia_driver_check",
                                "tasks_from": "options",
                            },
                        },
                        {
                            "name": "Take what the preflight and the resolution leave",
                            "ansible.builtin.set_fact": {
                                "nvidia_driver_check_gpus": [{"index": 0, "driver_version": driver}],
                                "cu130_wheels_resolved_target": target,
                            },
                        },
                        {
                            "name": "Check the driver",
                            "ansible.builtin.include_role": {
                                "name": "nvidia_driver_check",
                                "tasks_from": "stack_driver",
                            },
                        },
                    ],
                }
            ]
        )
    )
    return run_playbook(
        play, "-e", "cuda13_toolkit_package_version=13.0.2-1", *args, roles=True, filters=True
    )


def test_a_580_driver_is_refused_under_cuda_python_13_1(tmp_path):
    proc = _run(tmp_path, "580.95.05", _target(**{"cuda-bindings": "13.1.0", "cuda-python": "13.1.0"}))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "localhost fails the preflight for its resolved target; nothing was changed:" in out
    assert "cuda-bindings 13.1.0 (CUDA 13.1) needs >= 590.44.01 (CUDA Toolkit Release Notes, Table 3" in out
    assert "Option: cu130_wheels_requirements." in out


def test_the_real_stack_passes_on_590_naming_its_floor(tmp_path):
    proc = _run(tmp_path, "590.48.01", _target(), "-v")  # -v: the assertion's success message
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    out = " ".join(out.split())  # the YAML callback folds long lines
    assert "driver 590.48.01 >= 580.95.05, set by cuda-toolkit 13.0.2 (CUDA 13.0 Update 2)" in out
