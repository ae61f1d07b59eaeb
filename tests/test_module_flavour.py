"""The loaded kernel module's flavour and the preflight's refusal of Blackwell on the
proprietary module, on real /proc/driver/nvidia/version captures.

Each capture is a file of tests/fixtures/nvidia-smi/, its source named in that
directory's SOURCES.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.nvidia_smi import kernel_module_flavour
from cuda13_upgrade.preflight import GIB, evaluate

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def host(**changes):
    facts = {
        "driver_version": "590.48.01",
        "gpus": [{"index": i, "name": BLACKWELL, "compute_capability": "12.0"} for i in range(8)],
        "disk_free_bytes": 200 * GIB,
        "python_version": "3.11.2",
    }
    facts.update(changes)
    return facts


def module_failures(report):
    return [f for f in report.failures if f["check"] == "kernel_module"]


@pytest.mark.parametrize(
    ("name", "flavour", "version"),
    [
        ("proc-driver-version-580.95.05.txt", "open", "580.95.05"),
        ("proc-driver-version-open-515.57-double-space.txt", "open", "515.57"),
        ("proc-driver-version-proprietary-525.60.13.txt", "proprietary", "525.60.13"),
        ("proc-driver-version-proprietary-510.60.02.txt", "proprietary", "510.60.02"),
    ],
)
def test_flavour_of_real_captures(name, flavour, version):
    assert kernel_module_flavour(fixture(name)) == {
        "flavour": flavour,
        "driver_version": version,
        "arch": "x86_64",
    }


def test_two_spaces_after_the_label_are_read():
    # NVIDIA/open-gpu-kernel-modules#326 prints "NVRM version:  NVIDIA UNIX Open ...":
    # the former pattern wanted exactly one space and refused the file.
    assert (
        kernel_module_flavour(fixture("proc-driver-version-open-515.57-double-space.txt"))["flavour"]
        == "open"
    )


@pytest.mark.parametrize("text", ["", "GCC version:  gcc version 11.2.0 (Ubuntu 11.2.0-19ubuntu1)\n"])
def test_odd_content_names_the_file(text):
    with pytest.raises(ParseError, match=r"/proc/driver/nvidia/version"):
        kernel_module_flavour(text)


def test_blackwell_on_the_proprietary_module_is_refused_with_the_remedy():
    report = evaluate(host(module_version_text=fixture("proc-driver-version-proprietary-525.60.13.txt")))
    (failure,) = module_failures(report)
    assert failure["value"] == "proprietary 525.60.13"
    assert failure["option"] is None
    message = failure["message"]
    assert "GPU 0 (NVIDIA RTX PRO 6000 Blackwell Server Edition), 1 (" in message
    assert "need the open NVIDIA kernel module" in message
    assert "/proc/driver/nvidia/version shows the proprietary kernel module 525.60.13" in message
    assert "nvidia-driver-525-open" in message and "nvidia-open" in message


def test_blackwell_on_the_open_module_passes():
    report = evaluate(host(module_version_text=fixture("proc-driver-version-580.95.05.txt")))
    assert module_failures(report) == []
    assert {
        "check": "kernel_module",
        "value": "open",
        "message": "the open kernel module 580.95.05 is loaded",
    } in (report.passed)


def test_pre_blackwell_gpus_may_run_the_proprietary_module():
    hopper = [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]
    report = evaluate(
        host(gpus=hopper, module_version_text=fixture("proc-driver-version-proprietary-510.60.02.txt")),
        {"allowed_compute_capabilities": ["9.0"]},
    )
    assert module_failures(report) == []
    assert any(p["check"] == "kernel_module" and p["value"] == "proprietary" for p in report.passed)


def test_not_read_means_not_checked_but_unreadable_is_refused():
    assert not any(p["check"] == "kernel_module" for p in evaluate(host()).passed)
    assert module_failures(evaluate(host(module_version_text=None))) == []
    (failure,) = module_failures(evaluate(host(module_version_text="")))
    assert "/proc/driver/nvidia/version does not name the loaded NVIDIA kernel module" in failure["message"]
    assert "lsmod | grep nvidia" in failure["message"]
