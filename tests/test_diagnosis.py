"""cuda13_upgrade.diagnosis on real failure texts (tests/fixtures/failures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.diagnosis import KINDS, cuda_version_from_int, diagnose

FAILURES = Path(__file__).parent / "fixtures" / "failures"


def read(name: str) -> str:
    return (FAILURES / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("fixture", "kind", "in_cause"),
    [
        ("torch-driver-too-old-warning.txt", "driver_too_old", "CUDA 11.0 (torch found version 11000)"),
        ("torch-driver-too-old-error.txt", "driver_too_old", "CUDA 11.4"),
        ("torch-cu130-driver-12080.txt", "driver_too_old", "CUDA 12.8 (torch found version 12080)"),
        (
            "torch-sm120-not-compatible.txt",
            "torch_arch_unsupported",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120)",
        ),
        ("torch-no-kernel-image.txt", "no_kernel_image", "no SASS"),
        (
            "sgl-kernel-greenctx.txt",
            "driver_api_missing",
            "sglang-kernel / sgl-kernel (sgl_kernel/common_ops.abi3.so) calls the CUDA driver API "
            "cuGreenCtxStreamCreate",
        ),
        ("sgl-kernel-torch-abi.txt", "kernel_torch_abi", "common_ops.abi3.so was built for another torch"),
        ("sgl-kernel-libcuda.txt", "libcuda_missing", "libcuda.so.1"),
        (
            "cuda13-extension-on-cuda12.txt",
            "cuda13_on_cuda12",
            "the extension .../deep_gemm/_C.so is a CUDA 13 build: it links libcudart.so.13",
        ),
        (
            "sglang-libnvrtc-12.txt",
            "cuda12_on_cuda13",
            "is a CUDA 12 build: it links libnvrtc.so.12",
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
    seen = {
        diagnose(read(p.name), context=context).kind
        for p in FAILURES.glob("*.txt")
        for context in (None, {"target_cuda": "13.0"})
    }
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


IMPORT_FAILURES = Path(__file__).parent / "fixtures" / "import_failures"


def test_a_missing_cuda_13_library_names_the_package_whose_import_failed() -> None:
    # kaito-project/kaito#2086: nixl_ep's extension needs libcudart.so.13; on the
    # CUDA 13 target its runtime wheel is missing, not a CUDA 12 build wanted.
    text = (IMPORT_FAILURES / "kaito-2086-libcudart13.txt").read_text(encoding="utf-8")
    result = diagnose(text, context={"target_cuda": "13.0"})
    assert result.kind == "cuda_library_missing"
    assert result.cause.startswith("the package nixl_ep links libcudart.so.13, a CUDA 13 library")
    assert "install the nvidia-* wheel that provides libcudart.so.13" in result.remedy
    assert "nixl_ep" in result.remedy
    assert "that package" not in result.remedy + result.cause
    assert "cu128" not in result.remedy


def test_the_package_is_the_last_frame_above_the_error() -> None:
    # sglang#4778: import sgl_kernel fails in sgl_kernel/__init__.py.
    result = diagnose(read("sgl-kernel-libcuda.txt"))
    assert result.kind == "libcuda_missing"
    from cuda13_upgrade.wheels import failing_package

    assert failing_package(read("sgl-kernel-libcuda.txt").splitlines()) == "sgl_kernel"


def test_a_kernel_abi_failure_names_the_distribution_not_the_subdirectory() -> None:
    # sglang PR #13948: the object lives in sgl_kernel/sm100/.
    text = (IMPORT_FAILURES / "sglang-13948-torch-abi.txt").read_text(encoding="utf-8")
    result = diagnose(text)
    assert result.kind == "kernel_torch_abi"
    assert result.cause.startswith(
        "sglang-kernel / sgl-kernel (sgl_kernel/sm100/common_ops.abi3.so) was built for another torch"
    )
    assert not result.cause.startswith("sm100")


@pytest.mark.parametrize("fixture", sorted(p.name for p in FAILURES.glob("*.txt")))
def test_no_remedy_on_the_cuda_13_target_points_back_to_cuda_12(fixture: str) -> None:
    result = diagnose(read(fixture), context={"target_cuda": "13.0"})
    assert "cu128" not in result.remedy
    assert "CUDA 12" not in result.remedy
    assert "driver's CUDA" not in result.remedy


def test_a_cuda_12_library_on_the_cuda_13_target_asks_for_the_cu130_build() -> None:
    result = diagnose(read("sglang-libnvrtc-12.txt"), context={"target_cuda": "13.0"})
    assert result.kind == "cuda12_on_cuda13"
    assert "install the CUDA 13.0 build (+cu130) of" in result.remedy


@pytest.mark.parametrize(
    ("context", "needs"),
    [
        ({"target_cuda": "13.0"}, ">= 580.65.06, the minimum for CUDA 13.0"),
        ({"target_cuda": "13"}, ">= 580, the minimum for CUDA 13.x"),
        ({"torch_version": "2.11.0+cu130"}, ">= 580.65.06, the minimum for CUDA 13.0"),
    ],
)
def test_the_driver_too_old_remedy_names_the_driver_the_target_needs(context, needs) -> None:
    # A cu130 torch under a CUDA 12.8 driver (torch-cu130-driver-12080.txt, SOURCES.md).
    result = diagnose(read("torch-cu130-driver-12080.txt"), context=context)
    assert result.kind == "driver_too_old"
    assert "CUDA 12.8 (torch found version 12080)" in result.cause
    assert needs in result.remedy
    assert "Table" in result.remedy


def test_lines_with_their_source_and_context_as_the_record_a_step_keeps():
    lines = read("sgl-kernel-torch-abi.txt").splitlines()
    result = diagnose(lines, source="import", context={"torch_version": "2.10.0+cu130"}).to_dict()
    assert result["kind"] == "kernel_torch_abi" and result["known"] and result["source"] == "import"
    assert "torch 2.10" in result["remedy"]


def test_the_journal_with_the_units_user_as_serve_passes_it():
    # restarts.serve_outcome (cuda13_upgrade.steps.serve): the unit's User=
    lines = read("systemd-exec-venv-python-denied.txt").splitlines()
    result = diagnose(lines, source="journal", context={"service_user": "sglang"}).to_dict()
    assert result["kind"] == "service_exec_denied" and result["source"] == "journal"
    assert "sudo -u sglang test -x /opt/tinypilot/venv/bin/python" in result["remedy"]
    unnamed = diagnose(lines, source="journal", context={"service_user": ""}).to_dict()
    assert "sudo -u <User> test -x" in unnamed["remedy"]
