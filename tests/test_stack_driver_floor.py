"""The driver floor of the whole resolved target.

NVIDIA/cutlass#2866 (a maintainer, 2025-12-16): "if you have a 13.0+ cuda-python
installed, it won't work as 13.0+ cuda-python requires 580+ driver". The floors
themselves are versions.DRIVER_TABLE (release notes Table 3) and
versions.MINOR_VERSION_COMPATIBILITY (Table 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda13_upgrade.errors import PreflightError
from cuda13_upgrade.preflight import GIB, check_stack_driver, evaluate, resolved_target_facts
from cuda13_upgrade.versions import stack_driver_floor

BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
TARGET = {
    "torch": "2.9.1",
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-nvjitlink": "13.0.88",
    "cuda-bindings": "13.0.3",
}


def host(driver, **changes):
    facts = {
        "driver_version": driver,
        "gpus": [{"index": i, "name": BLACKWELL, "compute_capability": "12.0"} for i in range(8)],
        "disk_free_bytes": 200 * GIB,
        "python_version": "3.11.2",
    }
    facts.update(changes)
    return facts


def test_cuda13_target_needs_580_65_06_for_jit_and_580_without():
    floor = stack_driver_floor(TARGET, torch_cuda="13.0", toolkit_release="13.0")
    assert floor["floor"] == "580.65.06"
    assert floor["rule"] == "toolkit-driver"
    assert floor["mvc_floor"] == "580"
    assert floor["set_by"] == "torch built for CUDA 13.0"
    assert [row["component"] for row in floor["components"]] == [
        "torch",
        "cuda-bindings",
        "nvidia-cuda-runtime",
        "nvidia-nvjitlink",
        "cuda-toolkit",
    ]
    plain = stack_driver_floor(TARGET, torch_cuda="13.0", toolkit_release="13.0", jit=False)
    assert (plain["floor"], plain["rule"]) == ("580", "minor-version-compatibility")


def test_the_component_with_the_newest_release_sets_the_floor():
    floor = stack_driver_floor(
        {**TARGET, "cuda-bindings": "13.1.0"}, torch_cuda="13.0", toolkit_release="13.0.2"
    )
    assert floor["floor"] == "590.44.01"
    assert floor["set_by"] == "cuda-bindings 13.1.0 (CUDA 13.1)"
    toolkit = stack_driver_floor(TARGET, torch_cuda="13.0", toolkit_release="13.0.2")
    assert (toolkit["floor"], toolkit["set_by"]) == ("580.95.05", "cuda-toolkit 13.0.2 (CUDA 13.0 Update 2)")


def test_cuda12_components_and_suffixes():
    floor = stack_driver_floor(
        {"nvidia-cuda-runtime-cu12": "12.8.90", "nvidia_nvjitlink_cu12": "12.8.93"}, torch_cuda="12.8"
    )
    assert floor["floor"] == "570.26"
    assert floor["mvc_floor"] == "525.60.13"


def test_unlisted_release_is_named():
    floor = stack_driver_floor({"cuda-bindings": "13.4.0"}, torch_cuda="13.0")
    assert floor["unknown"] == ["cuda-bindings 13.4.0"]
    assert floor["floor"] == "580.65.06"


def test_nothing_given():
    assert stack_driver_floor({"torch": "2.9.1"})["floor"] is None


def test_preflight_refuses_a_575_driver_under_a_cuda13_cuda_bindings():
    # cutlass#2866: a 575 driver, CUDA 12.9 toolkit, cuda-python 13 installed.
    report = evaluate(
        host("575.51.03", target_dists={"cuda-bindings": "13.0.3"}, target_torch_cuda="12.8"),
        {"toolkit_release": "12.8"},
    )
    (failure,) = [f for f in report.failures if f["check"] == "stack_driver"]
    assert "driver 575.51.03 is too old for the resolved target" in failure["message"]
    assert "cuda-bindings 13.0.3 (CUDA 13.0) needs >= 580.65.06" in failure["message"]
    assert "upgrade the driver to 580.65.06 or newer" in failure["message"]
    assert not [f for f in report.failures if f["check"] == "driver"]


def test_preflight_passes_and_names_the_floor():
    report = evaluate(host("590.48.01", target_dists=TARGET, target_torch_cuda="13.0"))
    (passed,) = [p for p in report.passed if p["check"] == "stack_driver"]
    assert passed["message"].startswith("driver 590.48.01 >= 580.65.06, set by torch built for CUDA 13.0")


def test_the_toolkit_alone_is_left_to_the_driver_check():
    report = evaluate(
        host("580.65.06", target_dists=TARGET, target_torch_cuda="13.0"), {"toolkit_release": "13.0.2"}
    )
    assert [f["check"] for f in report.failures] == ["driver"]


def test_override_skips_the_table():
    report = evaluate(
        host("575.51.03", target_dists={"cuda-bindings": "13.0.3"}),
        {"toolkit_release": "12.8", "min_driver_version": "575.51.03"},
    )
    assert not [f for f in report.failures if f["check"] == "stack_driver"]


# --- the resolved target, as pip's resolver gives it (cu130_wheels_resolved_target) --------

REPO = Path(__file__).resolve().parents[1]


def _resolved(dists):
    """A resolved set (cuda13_upgrade.resolve.resolved_set) of {name: version}."""
    return [{"name": n, "version": v, "url": None, "sha256": None} for n, v in sorted(dists.items())]


def _real_stack():
    """The real PyPI stack (sglang 0.5.23, 208 distributions, tests/fixtures/probes/README.md):
    torch 2.14.1 without a label, nvidia-cuda-runtime 13.0.96, nvidia-cuda-nvrtc 13.0.88,
    nvidia-nvjitlink 13.5.37, cuda-bindings and cuda-python 13.4.4."""
    return json.loads((REPO / "tests" / "fixtures" / "probes" / "real-stack.json").read_text())["dists"]


def test_torch_cuda_comes_from_its_label_only():
    # The sandbox mirror's PyTorch-index torch, and PyPI's (no label: its runtime wheels count).
    assert resolved_target_facts(_resolved({"torch": "2.9.1+cu130"}))["target_torch_cuda"] == "13.0"
    assert resolved_target_facts(_resolved({"torch": "2.14.1"}))["target_torch_cuda"] is None
    assert resolved_target_facts(_resolved({"torch": "2.9.1+cpu"}))["target_torch_cuda"] is None
    facts = resolved_target_facts(_resolved(_real_stack()))
    assert facts["target_dists"]["nvidia-cuda-runtime"] == "13.0.96"
    with pytest.raises(PreflightError, match="cu130_wheels_resolved_target"):
        resolved_target_facts({"torch": "2.9.1+cu130"})


def test_the_real_stack_passes_on_590_and_the_toolkit_sets_its_floor():
    report = check_stack_driver(_resolved(_real_stack()), "590.48.01", {"toolkit_release": "13.0.2"})
    (passed,) = report.passed
    assert passed["message"].startswith(
        "driver 590.48.01 >= 580.95.05, set by cuda-toolkit 13.0.2 (CUDA 13.0 Update 2) "
        "(CUDA Toolkit Release Notes, Table 3"
    )
    # 13.4 and 13.5 components have no Table 3 row (versions.stack_driver_floor, "unknown"):
    # the highest known row sets the floor; a 13.0 GA toolkit leaves it to the runtime wheels.
    ga = check_stack_driver(_resolved(_real_stack()), "580.65.06", {"toolkit_release": "13.0"})
    assert ga.ok
    assert "set by nvidia-cuda-nvrtc 13.0.88 (CUDA 13.0)" in ga.passed[0]["message"]


def test_cuda_python_13_1_in_the_target_refuses_a_580_driver_naming_component_floor_and_table():
    # cutlass#2866's case in this stack: the resolution brings cuda-bindings / cuda-python 13.1.0,
    # whose release needs 590.44.01 (Table 3), on a host whose 580.95.05 runs the 13.0.2 toolkit.
    stack = {**_real_stack(), "cuda-bindings": "13.1.0", "cuda-python": "13.1.0"}
    report = check_stack_driver(_resolved(stack), "580.95.05", {"toolkit_release": "13.0.2"})
    (failure,) = report.failures
    assert failure["check"] == "stack_driver"
    assert failure["option"] == "cu130_wheels_requirements"
    assert failure["message"].startswith(
        "the NVIDIA driver 580.95.05 is too old for the resolved target: cuda-bindings 13.1.0 "
        "(CUDA 13.1) needs >= 590.44.01 (CUDA Toolkit Release Notes, Table 3: the release's own "
        "minimum, which PTX JIT needs (nvidia_driver_check_require_jit)): '580.95.05'."
    )
    assert "upgrade the driver to 590.44.01 or newer" in failure["message"]
    # Without PTX JIT, Table 2 (minor version compatibility: any 13.x on 580) lets it pass.
    plain = check_stack_driver(_resolved(stack), "580.95.05", {"toolkit_release": "13.0.2", "jit": False})
    assert plain.ok
    assert "CUDA Toolkit Release Notes, Table 2: minor version compatibility" in plain.passed[0]["message"]
    # An explicit minimum (nvidia_driver_check_min_driver_version) replaces the tables.
    assert check_stack_driver(
        _resolved(stack), "580.95.05", {"toolkit_release": "13.0.2", "min_driver_version": "580.95.05"}
    ).to_dict() == {"ok": True, "failures": [], "passed": []}


def test_a_floor_the_toolkit_alone_sets_is_left_to_the_driver_check():
    report = check_stack_driver(_resolved(_real_stack()), "580.82.07", {"toolkit_release": "13.0.2"})
    assert report.to_dict() == {"ok": True, "failures": [], "passed": []}


def test_a_two_entry_target_and_one_without_its_version():
    resolved = [
        {"name": "cuda-bindings", "version": "13.1.0", "url": None, "sha256": None},
        {"name": "torch", "version": "2.9.1+cu130", "url": None, "sha256": None},
    ]
    report = check_stack_driver(resolved, "580.95.05", {"toolkit_release": "13.0.2"}).to_dict()
    assert [x["check"] for x in report["failures"]] == ["stack_driver"]
    assert "cuda-bindings 13.1.0 (CUDA 13.1) needs >= 590.44.01" in report["failures"][0]["message"]
    assert check_stack_driver(resolved, "590.48.01", {"toolkit_release": "13.0.2"}).ok is True
    with pytest.raises(PreflightError, match="cu130_wheels_resolved_target"):
        check_stack_driver([{"name": "torch"}], "590.48.01")
