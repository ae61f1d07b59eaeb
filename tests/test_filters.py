"""Tests of filter_plugins/cuda13.py, called the way Ansible calls them."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

_spec = importlib.util.spec_from_file_location("cuda13_filters", ROOT / "filter_plugins" / "cuda13.py")
assert _spec is not None and _spec.loader is not None
cuda13_filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda13_filters)

FILTERS = cuda13_filters.FilterModule().filters()


def f(name):
    return FILTERS[name]


def test_the_filters_are_exposed():
    assert sorted(FILTERS) == [
        "cuda13_nvidia_smi_failure",
        "cuda13_parse_nvcc_version",
        "cuda13_parse_query_gpu",
        "cuda13_preflight",
        "cuda13_stack_driver",
        "cuda13_torch_cuda_arch_list",
    ]


def test_every_filter_is_documented():
    import yaml

    documented = [entry["name"] for entry in yaml.safe_load(cuda13_filters.DOCUMENTATION)]
    assert sorted(documented) == sorted(FILTERS)
    assert yaml.safe_load(cuda13_filters.RETURN)["_value"]["description"]
    assert set(yaml.safe_load(cuda13_filters.EXAMPLES)) >= {"rows", "report", "arch_list"}


# --- cuda13_parse_query_gpu -------------------------------------------------------------


def test_parse_query_gpu():
    text = (FIXTURES / "nvidia-smi" / "query-csv-rtxpro6000-9gpu-580.65.06.txt").read_text()
    rows = f("cuda13_parse_query_gpu")(text, "index,name,compute_cap,memory.total,driver_version", "csv")
    assert len(rows) == 9
    assert rows[0]["memory.total"] == 97887


def test_parse_query_gpu_type_errors():
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_parse_query_gpu")(None, ["index"])
    assert str(info.value) == (
        "cuda13_parse_query_gpu: input must be the stdout text of nvidia-smi --query-gpu, got NoneType: None"
    )
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_parse_query_gpu")("0\n", 5)
    assert str(info.value) == (
        "cuda13_parse_query_gpu: fields must be a list of field names or a comma-separated string, got int: 5"
    )


def test_parse_query_gpu_wraps_parse_errors():
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_parse_query_gpu")("garbage\n", ["index", "name"], "csv,noheader")
    assert str(info.value) == (
        "cuda13_parse_query_gpu: nvidia-smi line does not have one value per queried field "
        "(1 values, 2 fields): 'garbage'. Option: fields. Fix: query exactly index,name with "
        "--format=csv,noheader."
    )
    assert isinstance(info.value.__cause__, ValueError)


# --- cuda13_nvidia_smi_failure -----------------------------------------------------------


def test_nvidia_smi_failure():
    result = {
        "rc": 9,
        "stdout": (FIXTURES / "nvidia-smi" / "failure-no-driver.txt").read_text(),
        "stderr": "",
    }
    failure = f("cuda13_nvidia_smi_failure")(result)
    assert failure["code"] == "driver_not_loaded"
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_nvidia_smi_failure")({"stdout": ""})
    assert str(info.value) == (
        "cuda13_nvidia_smi_failure: input must be a registered command result with an integer "
        "rc (or msg, or timedout), got dict: {'stdout': ''}"
    )
    with pytest.raises(AnsibleFilterError, match="^cuda13_nvidia_smi_failure: timeout must be the seconds"):
        f("cuda13_nvidia_smi_failure")(result, "60")


def test_nvidia_smi_failure_of_a_hang():
    # roles/nvidia_driver_check: nvidia-smi under timeout --foreground --kill-after=10 N.
    hung = f("cuda13_nvidia_smi_failure")({"rc": 124, "stdout": "", "stderr": ""}, 60)
    assert (hung["code"], hung["rc"], hung["timeout_s"]) == ("timeout", 124, 60)
    assert hung["summary"] == "did not answer within 60 s (nvidia_driver_check_nvidia_smi_timeout)"
    # The task's own timeout: Ansible's result has no rc, only msg and timedout.
    ended = {"failed": True, "msg": "Timed out after 100 seconds.", "timedout": {"period": 100}}
    assert f("cuda13_nvidia_smi_failure")(ended, 60)["code"] == "timeout"
    # The command did not run (no rc, Ansible's msg): its text decides, as before.
    missing = {"failed": True, "msg": "[Errno 2] No such file or directory: b'/opt/nvidia-smi'"}
    assert f("cuda13_nvidia_smi_failure")(missing)["code"] == "not_installed"
    # Without coreutils timeout, 124 is nvidia-smi's own (unknown) exit status.
    assert f("cuda13_nvidia_smi_failure")({"rc": 124, "stdout": "", "stderr": ""})["code"] == "unknown"


# --- cuda13_parse_nvcc_version -----------------------------------------------------------


def test_parse_nvcc_version():
    text = (FIXTURES / "nvcc" / "nvcc-13.0.txt").read_text()
    parsed = f("cuda13_parse_nvcc_version")(text)
    assert (parsed["release"], parsed["version"]) == ("13.0", "13.0.88")


def test_parse_nvcc_version_errors():
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_parse_nvcc_version")(["nvcc"])
    assert str(info.value) == (
        "cuda13_parse_nvcc_version: input must be the stdout text of nvcc --version, got list: ['nvcc']"
    )
    with pytest.raises(AnsibleFilterError, match="^cuda13_parse_nvcc_version: no 'Cuda compilation"):
        f("cuda13_parse_nvcc_version")("nvcc: command not found")


# --- cuda13_preflight --------------------------------------------------------------------


def test_preflight():
    facts = {
        "driver_version": "590.48.01",
        "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0"}],
        "disk_free_bytes": 100 * 1024**3,
        "python_version": "3.11.2",
    }
    report = f("cuda13_preflight")(facts)
    assert report["ok"] is False
    assert [x["check"] for x in report["failures"]] == ["compute_capability"]
    assert f("cuda13_preflight")(facts, {"allowed_compute_capabilities": ["9.0"]})["ok"] is True


def test_preflight_errors():
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_preflight")(["not", "facts"])
    assert str(info.value) == (
        "cuda13_preflight: input (facts) must be a dict of host facts, got list: ['not', 'facts']"
    )
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_preflight")({}, {"expected_gpus": 8})
    assert str(info.value) == (
        "cuda13_preflight: unknown preflight settings: ['expected_gpus']. Option: settings. "
        "Fix: use only ['allow_busy_gpus', 'allow_mixed_gpu_models', 'allow_wsl', "
        "'allowed_compute_capabilities', 'expected_gpu_count', 'jit', 'min_driver_version', "
        "'min_python_version', 'nvidia_smi_timeout', 'required_disk_gib', 'toolkit_release'] "
        "and option_names."
    )


# --- cuda13_torch_cuda_arch_list ---------------------------------------------------------


def test_torch_cuda_arch_list():
    assert f("cuda13_torch_cuda_arch_list")(["12.0", "9.0", "12.0"]) == "9.0;12.0"
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_torch_cuda_arch_list")("12.0")
    assert str(info.value) == (
        "cuda13_torch_cuda_arch_list: input must be a list of compute capabilities such as "
        "['12.0'], got str: '12.0'"
    )
    with pytest.raises(AnsibleFilterError) as info:
        f("cuda13_torch_cuda_arch_list")([])
    assert str(info.value) == (
        "cuda13_torch_cuda_arch_list: no compute capability given: []. Option: capabilities. "
        "Fix: pass the compute_cap of each GPU, e.g. ['12.0']."
    )


# --- through ansible-playbook -------------------------------------------------------------

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Preflight and arch list
      ansible.builtin.set_fact:
        report: >-
          {{ {'driver_version': '590.48.01', 'python_version': '3.11.2', 'disk_free_bytes': 107374182400,
              'gpus': [{'index': 0, 'name': 'NVIDIA B200', 'compute_cap': '10.0'}]} | cuda13_preflight }}
        arch_list: "{{ ['12.0', '9.0', '12.0'] | cuda13_torch_cuda_arch_list }}"
    - name: No compute capability
      ansible.builtin.debug:
        msg: "{{ [] | cuda13_torch_cuda_arch_list }}"
"""


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")
def test_filters_in_a_playbook_and_the_message_a_user_sees(tmp_path):
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
    )
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    tasks = json.loads(result.stdout)["plays"][0]["tasks"]
    facts = tasks[0]["hosts"]["localhost"]["ansible_facts"]
    assert facts["report"]["ok"] is True, facts["report"]
    assert facts["arch_list"] == "9.0;12.0"
    failed = tasks[1]["hosts"]["localhost"]
    assert failed["failed"] is True
    assert failed["msg"].endswith(
        "cuda13_torch_cuda_arch_list: no compute capability given: []. Option: capabilities. "
        "Fix: pass the compute_cap of each GPU, e.g. ['12.0']."
    )


# --- cuda13_stack_driver -----------------------------------------------------------------


def test_stack_driver():
    resolved = [
        {"name": "cuda-bindings", "version": "13.1.0", "url": None, "sha256": None},
        {"name": "torch", "version": "2.9.1+cu130", "url": None, "sha256": None},
    ]
    report = f("cuda13_stack_driver")(resolved, "580.95.05", {"toolkit_release": "13.0.2"})
    assert [x["check"] for x in report["failures"]] == ["stack_driver"]
    assert "cuda-bindings 13.1.0 (CUDA 13.1) needs >= 590.44.01" in report["failures"][0]["message"]
    assert f("cuda13_stack_driver")(resolved, "590.48.01", {"toolkit_release": "13.0.2"})["ok"] is True
    with pytest.raises(AnsibleFilterError, match="^cuda13_stack_driver: input must be the resolved target"):
        f("cuda13_stack_driver")({"torch": "2.9.1+cu130"}, "590.48.01")
    with pytest.raises(AnsibleFilterError, match="^cuda13_stack_driver: driver_version must be"):
        f("cuda13_stack_driver")(resolved, 590)
    with pytest.raises(AnsibleFilterError, match="cu130_wheels_resolved_target"):
        f("cuda13_stack_driver")([{"name": "torch"}], "590.48.01")
