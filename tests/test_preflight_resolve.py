"""The preflight resolves each host's whole target with pip's resolver before any change.

playbooks/preflight.yml on localhost (``-c local``, the nvidia-smi double) with
``cuda13_preflight_resolve=true`` against the sandbox mirror's indexes and its SGLang
repository, whose ``python/pyproject.toml`` at v0.5.9 declares what the real release declares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playbook import mirror_preflight_vars, run_playbook

REPO = Path(__file__).resolve().parents[1]


def _preflight(tmp_path, mirror_url, requirements, hosts="localhost,", kernel_index="sgl-whl/cu130"):
    extra = {
        **mirror_preflight_vars(mirror_url, requirements, kernel_index=kernel_index),
        "cuda13_new_venv": f"{tmp_path}/venv",
        "cuda13_preflight_resolve": True,
        "nvidia_driver_check_space_stack": "sandbox",
    }
    return run_playbook(
        REPO / "playbooks" / "preflight.yml",
        *(() if hosts == "localhost," else ("-c", "local")),
        "-e",
        json.dumps(extra),
        inventory=hosts,
        interpreter=False,
        timeout=600,
    )


def test_an_unresolvable_target_is_refused_before_any_change(tmp_path, mirror_url):
    # The pins the defaults had: flashinfer 0.6.1 beside SGLang v0.5.9 (which pins 0.6.3).
    pins = [
        "torch==2.9.1+cu130",
        "sgl-kernel==0.3.21+cu130",
        "flashinfer-python==0.6.1",
        "flashinfer-cubin==0.6.1",
    ]
    proc = _preflight(tmp_path, mirror_url, pins)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    # pip names one of the two conflicting flashinfer pins, which one depends on
    # the order it visits them in (PIP_CONFIG_FILE=os.devnull, tests/conftest.py).
    conflict = re.search(
        r"the target stack does not resolve: The user requested flashinfer-(python|cubin)==0\.6\.1", out
    )
    assert conflict, out
    assert re.search(rf"sglang 0\.5\.9 depends on flashinfer[-_]{conflict.group(1)}==0\.6\.3", out), out
    assert "Change cu130_wheels_requirements, sglang_build_version" in out
    assert "Nothing on the host was changed" in out
    assert not (tmp_path / "venv").exists()


def test_a_pin_no_index_has_is_refused_on_every_host_of_its_target_before_any_change(tmp_path, mirror_url):
    # The torch pin molecule midway's bad-wheel host had: pip's resolver refuses it in the
    # preflight, on the host that resolves the target, and so on the host that shares it.
    pins = ["torch==2.99.0+cu130", "sgl-kernel==0.3.21+cu130"]
    proc = _preflight(tmp_path, mirror_url, pins, hosts="canary,follower")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "canary: no index has torch==2.99.0+cu130" in out
    assert "follower: its target is the one canary resolves, and that target was refused" in out
    for host in ("canary", "follower"):
        assert re.search(rf"^{host} +: ok=\d+ +changed=0 .* failed=1 ", out, re.M), out[-800:]
    assert not (tmp_path / "venv").exists()


def test_a_coherent_target_resolves_and_is_recorded(tmp_path, mirror_url):
    pins = [
        "torch==2.9.1+cu130",
        "sgl-kernel==0.3.21+cu130",
        "flashinfer-python==0.6.3",
        "flashinfer-cubin==0.6.3",
        "flashinfer-jit-cache==0.6.3+cu130",
    ]
    proc = _preflight(tmp_path, mirror_url, pins)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for pin in ("torch==2.9.1+cu130", "nvidia-cudnn-cu13==9.13.0.50", "sglang==0.5.9", "triton==3.5.1"):
        assert pin in out
    # The driver (the double's 590.48.01) against the resolved target's CUDA components.
    assert re.search(
        r"TASK \[nvidia_driver_check : Check the driver against every CUDA [^\n]*\nok: \[localhost\]", out
    )
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize(
    ("kernel_index", "kernel"),
    [
        # The CUDA 12.8 build: SGLang 0.5.9 requires sgl-kernel==0.3.21, which the +cu128
        # build satisfies; the stack check after the install refuses its label ("is built
        # for CUDA 12.8", tests/test_wheels.py::test_cu128_kernel_under_cu130_torch).
        ("sgl-whl/cu128", "sgl-kernel==0.3.21+cu128"),
        # Molecule midway's bad-wheel host: the +cu130 build with a CUDA 12 object; the
        # check refuses that object, label-blind (tests/test_elf_objects.py,
        # test_the_mirrors_mixed_kernel_installs_and_the_check_refuses_its_cuda_12_object).
        ("sgl-whl/cu130-mixed", "sgl-kernel==0.3.21+cu130"),
    ],
)
def test_a_kernel_that_only_the_check_after_install_refuses_resolves(
    tmp_path, mirror_url, kernel_index, kernel
):
    pins = [
        "torch==2.9.1+cu130",
        kernel,
        "flashinfer-python==0.6.3",
        "flashinfer-cubin==0.6.3",
        "flashinfer-jit-cache==0.6.3+cu130",
    ]
    proc = _preflight(tmp_path, mirror_url, pins, kernel_index=kernel_index)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert kernel in out
