"""cuda13_upgrade.diagnosis on real failure texts (tests/fixtures/failures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.diagnosis import KINDS, cuda_version_from_int, diagnose, diagnose_nvidia_smi

FAILURES = Path(__file__).parent / "fixtures" / "failures"
SMI = Path(__file__).parent / "fixtures" / "nvidia-smi"


def read(name: str) -> str:
    return (FAILURES / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("fixture", "kind", "in_cause"),
    [
        ("torch-driver-too-old-warning.txt", "driver_too_old", "CUDA 11.0 (torch found version 11000)"),
        ("torch-driver-too-old-error.txt", "driver_too_old", "CUDA 11.4"),
        (
            "torch-sm120-not-compatible.txt",
            "torch_arch_unsupported",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120)",
        ),
        ("torch-no-kernel-image.txt", "no_kernel_image", "no SASS"),
        (
            "sgl-kernel-greenctx.txt",
            "driver_api_missing",
            "sgl_kernel (common_ops.abi3.so) calls the CUDA driver API cuGreenCtxStreamCreate",
        ),
        ("sgl-kernel-torch-abi.txt", "kernel_torch_abi", "common_ops.abi3.so was built for another torch"),
        ("sgl-kernel-libcuda.txt", "libcuda_missing", "libcuda.so.1"),
        (
            "cuda13-extension-on-cuda12.txt",
            "cuda13_on_cuda12",
            "a CUDA 13 extension on a CUDA 12 stack: it links libcudart.so.13",
        ),
        (
            "sglang-libnvrtc-12.txt",
            "cuda12_on_cuda13",
            "a CUDA 12 extension in a CUDA 13 venv: it links libnvrtc.so.12",
        ),
        ("cccl-headers-incompatible.txt", "cccl_headers_mismatch", "nvcc and the CUDA headers"),
        ("pip-no-space.txt", "no_space", "full"),
        ("apt-no-space.txt", "no_space", "full"),
        ("apt-write-error-no-space.txt", "no_space", "full"),
        ("git-no-space.txt", "no_space", "full"),
        (
            "systemd-exec-venv-python-denied.txt",
            "service_exec_denied",
            "systemd could not execute /opt/tinypilot/venv/bin/python for tinypilot.service "
            "(status=203/EXEC, Permission denied)",
        ),
        (
            "systemd-exec-locate-denied.txt",
            "service_exec_denied",
            "/home/flathunter/.local/bin/pipenv for flathunter.service",
        ),
        ("systemd-exec-failed-to-execute-denied.txt", "service_exec_denied", "/tmp for evcc.service"),
        (
            "systemd-exec-command-denied.txt",
            "service_exec_denied",
            "/root/go/bin/imageproxy for imageproxy.service",
        ),
    ],
)
def test_each_real_text_has_its_kind_cause_and_remedy(fixture: str, kind: str, in_cause: str) -> None:
    result = diagnose(read(fixture), source="test")
    assert result.kind == kind
    assert in_cause in result.cause
    assert result.remedy
    assert result.evidence and result.evidence in read(fixture)
    assert result.to_dict()["known"] is True
    assert result.source == "test"


def test_every_kind_has_a_real_fixture() -> None:
    seen = {diagnose(read(p.name)).kind for p in FAILURES.glob("*.txt")}
    # flashinfer's version check is quoted from its source (test below), not a capture.
    assert set(KINDS) - {"flashinfer_jit_cache_mismatch"} <= seen


def test_torch_version_names_the_wheel_to_install() -> None:
    result = diagnose(read("sgl-kernel-torch-abi.txt"), context={"torch_version": "2.10.0+cu130"})
    assert "install the kernel wheel built for torch 2.10" in result.remedy
    assert "installed torch 2.10.0+cu130" in result.cause


def test_no_space_wins_over_what_a_full_disk_leaves_behind() -> None:
    text = read("sgl-kernel-torch-abi.txt") + read("pip-no-space.txt")
    assert diagnose(text).kind == "no_space"


def test_lines_and_none_are_accepted() -> None:
    assert diagnose(read("git-no-space.txt").splitlines()).kind == "no_space"
    assert diagnose(None).kind == "unknown"
    assert diagnose(None).cause == "the step failed without output"


def test_unknown_text_names_its_last_line() -> None:
    result = diagnose("starting\nTraceback (most recent call last):\nValueError: boom\n")
    assert result.kind == "unknown"
    assert "'ValueError: boom'" in result.cause
    assert result.to_dict()["known"] is False


@pytest.mark.parametrize(
    ("value", "release"), [(12080, "12.8"), ("11040", "11.4"), (13000, "13.0"), (9010, "9.1")]
)
def test_cuda_version_from_int(value: int | str, release: str) -> None:
    assert cuda_version_from_int(value) == release


def test_cuda_version_from_int_refuses_negative() -> None:
    with pytest.raises(ValueError, match="-1"):
        cuda_version_from_int(-1)


def test_nvidia_smi_mismatch_names_the_loaded_module() -> None:
    text = (SMI / "failure-nvml-mismatch-550.txt").read_text(encoding="utf-8")
    result = diagnose_nvidia_smi(18, text, "", module_version="550.127.05")
    assert result.kind == "nvidia_smi_driver_library_mismatch"
    assert "the loaded kernel module is 550.127.05" in result.cause
    assert "reboot" in result.remedy


def test_nvidia_smi_no_driver() -> None:
    text = (SMI / "failure-no-driver.txt").read_text(encoding="utf-8")
    assert diagnose_nvidia_smi(9, text).kind == "nvidia_smi_driver_not_loaded"


def test_flashinfer_jit_cache_version_check():
    # flashinfer/jit/env.py's check, as the stand-in flashinfer raises it (sandbox/mirror/stubs/flashinfer).
    text = (
        "RuntimeError: flashinfer-jit-cache version (0.6.0+cu128) does not match flashinfer "
        "version (0.6.1). Please install the same version of both packages. "
        "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."
    )
    result = diagnose(text)
    assert result.kind == "flashinfer_jit_cache_mismatch"
    assert "flashinfer-jit-cache 0.6.0+cu128 and flashinfer 0.6.1" in result.cause


def test_exec_denied_evidence_is_the_line_that_names_the_program():
    # older systemd says "Failed to execute command:" without the path; the
    # "Failed at step EXEC spawning" line after it names the program
    result = diagnose(read("systemd-exec-command-denied.txt"), source="journal")
    assert result.evidence.endswith(
        "imageproxy.service: Failed at step EXEC spawning /root/go/bin/imageproxy: Permission denied"
    )
    assert "namei -l /root/go/bin/imageproxy" in result.remedy


def test_exec_denied_names_the_units_user():
    # journalctl --output cat drops the timestamp, host and pid prefix
    lines = [line.split(": ", 1)[1] for line in read("systemd-exec-venv-python-denied.txt").splitlines()]
    assert (
        lines[0]
        == "tinypilot.service: Failed at step EXEC spawning /opt/tinypilot/venv/bin/python: Permission denied"
    )
    result = diagnose(lines, context={"service_user": "tinypilot"})
    assert result.kind == "service_exec_denied"
    assert "its User= (tinypilot) may not execute that file" in result.cause
    assert "sudo -u tinypilot test -x /opt/tinypilot/venv/bin/python" in result.remedy


def test_exec_failure_other_than_permission_is_not_exec_denied():
    # github.com/tiny-pilot/ansible-role-tinypilot issue #23, after a reboot: the symlink points nowhere
    text = (
        "Jul 28 19:40:06 raspberrypi systemd[561]: tinypilot.service: Failed to execute command: "
        "No such file or directory\n"
        "Jul 28 19:40:06 raspberrypi systemd[561]: tinypilot.service: Failed at step EXEC spawning "
        "/opt/tinypilot/venv/bin/python: No such file or directory\n"
    )
    assert diagnose(text).kind == "unknown"
