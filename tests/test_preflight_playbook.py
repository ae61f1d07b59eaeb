"""playbooks/preflight.yml refuses bad inventory values of every step before any change."""

import re
import sys
from pathlib import Path

import pytest
import yaml
from playbook import extra_vars, fleet_group, run_playbook

REPO = Path(__file__).resolve().parents[1]


def _preflight(tmp_path, *extra):
    return run_playbook(
        REPO / "playbooks" / "preflight.yml",
        *extra_vars(
            # localhost has no package index: the resolution is tests/test_resolve_step.py's
            cuda13_preflight_resolve="false",
            cuda13_target_hosts="all",
            cuda13_new_venv=f"{tmp_path}/venv",
            # localhost has no serving stack: the checks against the host are the molecule bad-input scenario's
            nvidia_driver_check_host_checks="false",
        ),
        *extra,
        interpreter=False,
        timeout=120,
    )


def _preflight_told(out: str, host: str = "localhost") -> bool:
    """Whether the host reached the preflight's checks of its GPUs: the action cuda13_preflight
    prints ``<host>: not a WSL host; driver ... supports CUDA ...`` (the checks that passed)
    once nvidia-smi answered (the old task 'Query the GPUs with nvidia-smi')."""
    return re.search(rf"(?m)^{re.escape(host)}: ", out) is not None


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("verify_throughput_method", "carrier-pigeon", "carrier-pigeon"),
        ("verify_throughput_min_trials", "many", "verify_throughput_min_trials"),
        ("stack_switch_set_cuda_alternative", "perhaps", "stack_switch_set_cuda_alternative"),
    ],
)
def test_bad_value_of_a_later_step_fails_in_the_preflight(tmp_path, option, value, expected):
    proc = _preflight(tmp_path, "-e", f"{option}={value}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert option in out and expected in out
    # Refused by the validation (cuda13_options), before the first read of the GPUs.
    assert "invalid option values; nothing on the host was changed" in out
    assert not _preflight_told(out)
    assert not (tmp_path / "venv").exists()


def test_missing_nvidia_smi_is_refused_with_the_remedy(tmp_path):
    # The host module cuda13_host_facts runs under this Python: the interpreter Ansible would
    # discover on a build machine may be a shim that does not run (pyenv's python3.13).
    proc = _preflight(
        tmp_path,
        "-e",
        "nvidia_driver_check_nvidia_smi=/nonexistent/nvidia-smi",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "localhost: /nonexistent/nvidia-smi failed (rc 127, not_installed)" in out
    assert "Fix: nvidia-smi is not installed: install the NVIDIA driver's utilities" in out
    assert "Nothing on the host was changed" in out
    assert not _preflight_told(out)


def test_one_refused_host_stops_the_run_after_every_host_was_checked(tmp_path):
    inventory = tmp_path / "hosts.yml"
    double = REPO / "sandbox" / "host" / "nvidia-smi"
    blackwell = fleet_group(
        {
            "good-node": {"nvidia_driver_check_nvidia_smi": str(double)},
            "bad-node": {"nvidia_driver_check_nvidia_smi": "/nonexistent/nvidia-smi"},
        },
        ansible_connection="local",
        ansible_python_interpreter=sys.executable,
        nvidia_driver_check_required_disk_gib=0.001,
        nvidia_driver_check_space_stack="sandbox",
        nvidia_driver_check_host_checks=False,
        cuda13_new_venv=f"{tmp_path}/venv",
    )
    inventory.write_text(yaml.safe_dump({"all": {"children": {"blackwell": blackwell}}}))
    proc = run_playbook(
        REPO / "playbooks" / "preflight.yml",
        # localhost has no package index: the resolution is tests/test_resolve_step.py's
        *extra_vars(cuda13_preflight_resolve="false"),
        inventory=inventory,
        interpreter=False,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "The preflight refused 1 of 2 hosts (bad-node)" in out
    assert "RTX PRO 6000" in out or "driver 590.48.01" in out  # the good host was fully checked


def _preflight_with_state(tmp_path, state, *extra):
    """The preflight playbook on localhost with the nvidia-smi double in ``state``."""
    double = REPO / "sandbox" / "host" / "nvidia-smi"
    return run_playbook(
        REPO / "playbooks" / "preflight.yml",
        *extra_vars(
            # localhost has no package index: the resolution is tests/test_resolve_step.py's
            cuda13_preflight_resolve="false",
            cuda13_target_hosts="all",
            cuda13_new_venv=f"{tmp_path}/venv",
            nvidia_driver_check_nvidia_smi=double,
        ),
        "-e",
        '{"nvidia_driver_check_required_disk_gib": 0.001, "nvidia_driver_check_space_stack": "sandbox"}',
        *extra_vars(nvidia_driver_check_host_checks="false"),
        *extra,
        env={
            "NVIDIA_SMI_DOUBLE_STATE": str(REPO / "sandbox" / "host" / "nvidia-smi-states" / f"{state}.json")
        },
    )


def test_wsl_host_is_refused_by_the_playbook(tmp_path):
    proc = _preflight_with_state(tmp_path, "wsl")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "this is a WSL host" in out
    assert "nvidia-smi 570.124.06 reports the driver as 572.70" in out
    assert "nvidia_driver_check_allow_wsl" in out
    assert not (tmp_path / "venv").exists()


def test_mixed_models_are_flagged_by_the_playbook_and_allowed_by_the_option(tmp_path):
    proc = _preflight_with_state(tmp_path, "mixed-models")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "GPU 2, 3: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition" in out
    assert "nvidia_driver_check_allow_mixed_gpu_models" in out
    proc = _preflight_with_state(
        tmp_path, "mixed-models", "-e", "nvidia_driver_check_allow_mixed_gpu_models=true"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_hung_nvidia_smi_is_refused_as_such_within_the_timeout(tmp_path):
    # The double's "hang" state blocks like nvidia-smi on a GPU the driver cannot bring up;
    # a wrapper logs each run of it.
    double = REPO / "sandbox" / "host" / "nvidia-smi"
    runs = tmp_path / "runs.log"
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {runs}\nexec {double} "$@"\n')
    wrapper.chmod(0o755)
    proc = _preflight_with_state(
        tmp_path,
        "hang",
        "-e",
        "nvidia_driver_check_nvidia_smi_timeout=2",
        "-e",
        f"nvidia_driver_check_nvidia_smi={wrapper}",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"{wrapper} did not answer within 2 s (nvidia_driver_check_nvidia_smi_timeout)." in out
    assert "'dmesg' or 'journalctl -k'" in out and "Nothing on the host was changed" in out
    # refused after the first run: the hung query of the GPUs, not the table or the processes
    assert runs.read_text().splitlines() == [
        "--query-gpu=index,name,uuid,driver_version,compute_cap,memory.total,pci.bus_id "
        "--format=csv,noheader,nounits"
    ]
    assert not _preflight_told(out)
    assert not (tmp_path / "venv").exists()


def test_a_timeout_out_of_range_is_refused_naming_the_option(tmp_path):
    proc = _preflight(tmp_path, "-e", "nvidia_driver_check_nvidia_smi_timeout=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "nvidia_driver_check_nvidia_smi_timeout is out of range: '0'" in out
    assert not _preflight_told(out)
