"""The driver floor of the whole resolved target.

NVIDIA/cutlass#2866 (a maintainer, 2025-12-16): "if you have a 13.0+ cuda-python
installed, it won't work as 13.0+ cuda-python requires 580+ driver". The floors
themselves are versions.DRIVER_TABLE (release notes Table 3) and
versions.MINOR_VERSION_COMPATIBILITY (Table 2).
"""

from __future__ import annotations

from cuda13_upgrade.preflight import GIB, evaluate
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
