"""cuda13_upgrade.diagnosis: a server without its GPUs, JIT failures at first use, and remedies that
follow the stack that failed (the real texts of tests/fixtures/failures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.diagnosis import diagnose

FAILURES = Path(__file__).parent / "fixtures" / "failures"
IMPORT_FAILURES = Path(__file__).parent / "fixtures" / "import_failures"

TARGET = {"target_cuda": "13.0"}
OLD = {"stack": "old", "stack_cuda": "12.8", "target_cuda": "13.0", "venv": "/opt/ml-env"}
NEW = {"stack": "new", "stack_cuda": "13.0", "target_cuda": "13.0", "venv": "/opt/ml-env-cu130"}


def read(name: str) -> str:
    return (FAILURES / name).read_text(encoding="utf-8")


# --- a server that starts without its GPUs ---------------------------------------------------------


@pytest.mark.parametrize("fixture", ["torch-802-system-not-initialized.txt", "sglang-802-no-accelerator.txt"])
def test_error_802_names_the_fabric_manager_and_how_to_check_it(fixture):
    # pytorch's warning (hiyouga/LlamaFactory#7888) and SGLang's start on R610 (sgl-project/sglang#27487):
    # the 802 comes before SGLang's "No accelerator" and is the cause.
    result = diagnose(read(fixture), source="journal", context=NEW)
    assert result.kind == "cuda_not_initialized"
    assert "error 802, system not yet initialized" in result.cause
    assert "fabric manager is not running" in result.cause
    assert "systemctl status nvidia-fabricmanager" in result.remedy
    assert "nvidia-smi -q | grep -A2 Fabric" in result.remedy
    assert "Error 802: system not yet initialized" in result.evidence


def test_no_accelerator_alone_says_the_server_found_no_gpu_and_what_the_stack_needs():
    result = diagnose(read("sglang-no-accelerator.txt"), context=NEW)
    assert result.kind == "no_accelerator"
    assert result.cause.startswith("the server found no GPU at all")
    assert "/opt/ml-env-cu130/bin/python -c 'import torch; print(torch.cuda.is_available())'" in result.remedy
    assert "the new stack needs the NVIDIA driver >= 580.65.06, the minimum for CUDA 13.0" in result.remedy
    # without a context: no venv to name, no driver to require
    bare = diagnose(read("sglang-no-accelerator.txt"))
    assert "<venv>/bin/python" in bare.remedy and "needs the NVIDIA driver" not in bare.remedy


def test_a_cpu_fallback_names_the_driver_the_stack_needs():
    # sgl-project/sglang#11395: SGLang falls back to the CPU; torch's CUDA initialization warning
    # (found version 12040 there) follows it. The warning here is torch-cu130-driver-12080.txt's.
    journal = read("sglang-cpu-fallback.txt") + read("torch-cu130-driver-12080.txt")
    new = diagnose(journal, context=NEW)
    assert new.kind == "cpu_fallback"
    assert new.evidence == "Warning: No accelerator (CUDA, XPU, HPU) is available. - Falling back to CPU"
    assert new.cause == (
        "the server found no usable GPU and fell back to the CPU: torch says the NVIDIA driver supports"
        " up to CUDA 12.8 (found version 12080), older than the CUDA release torch was built for"
    )
    assert new.remedy.startswith("upgrade the NVIDIA driver to >= 580.65.06, the minimum for CUDA 13.0")
    assert new.remedy.endswith("until then the new stack serves from the CPU, not the GPUs")
    old = diagnose(journal, context=OLD)
    assert old.remedy.startswith("upgrade the NVIDIA driver to >= 570.26, the minimum for CUDA 12.8")
    assert "the old stack serves from the CPU" in old.remedy


def test_a_cpu_fallback_without_torch_s_warning_still_names_the_floor():
    result = diagnose(read("sglang-cpu-fallback.txt"), context=NEW)
    assert result.kind == "cpu_fallback"
    assert result.cause == "the server found no usable GPU and fell back to the CPU (device cpu)"
    assert "the new stack needs the NVIDIA driver >= 580.65.06" in result.remedy
    assert "CUDA_VISIBLE_DEVICES" in result.remedy


# --- JIT failures at first use ---------------------------------------------------------------------


def test_block_scaled_mma_on_the_generic_sm_120_target_asks_for_sm_120a():
    # antirez/ds4#679: RTX PRO 6000 Blackwell, CUDA 13.1, make CUDA_ARCH=sm_120.
    result = diagnose(read("ptxas-block-scale-sm120.txt"), source="journal", context=NEW)
    assert result.kind == "jit_arch_unsupported"
    assert result.cause.startswith("ptxas rejected ds4_mmq.ptx compiled for .target 'sm_120':")
    assert "'mma with block scale'" in result.cause and "'.kind::mxf4'" in result.cause
    assert "architecture-specific target sm_120a" in result.cause
    assert 'FLASHINFER_CUDA_ARCH_LIST="12.0a"' in result.remedy
    assert 'TORCH_CUDA_ARCH_LIST="12.0a"' in result.remedy
    assert "arch=compute_120a,code=sm_120a" in result.remedy


def test_ptxas_rejecting_a_jit_s_ptx_names_the_generator_fix_and_the_stack_s_toolkit():
    # NVIDIA/cutlass#3227: nvidia-cutlass-dsl 4.5.0 via flashinfer-python 0.6.11, CUDA 13.0 ptxas.
    new = diagnose(read("cutlass-dsl-ptxas-mma.txt"), context=NEW)
    assert new.kind == "jit_ptxas_error"
    assert new.cause.startswith(
        "ptxas rejected PTX generated at run time (ptxas application ptx input):"
        " Unexpected instruction types specified for '_mma'"
    )
    assert "nvidia-cutlass-dsl 4.5.1" in new.remedy
    assert "/usr/local/cuda-13.0 (the CUDA 13.0 toolkit of the new stack) as CUDA_HOME" in new.remedy
    old = diagnose(read("cutlass-dsl-ptxas-mma.txt"), context=OLD)
    assert "/usr/local/cuda-12.8 (the CUDA 12.8 toolkit of the old stack)" in old.remedy


def test_flashinfer_without_a_target_arch_points_cuda_home_at_the_stack_s_toolkit():
    # flashinfer-ai/flashinfer PR #3633 and #2577: torch cu130 on an RTX PRO 6000, nvcc older than 12.9.
    result = diagnose(read("flashinfer-sm12-nvcc-too-old.txt"), context=NEW)
    assert result.kind == "jit_no_target_arch"
    # the error is the evidence; the warning before it says why
    assert result.evidence == "RuntimeError: No supported CUDA architectures found for major versions [12]."
    assert "older than CUDA 12.9, the first release that builds for SM 12.x" in result.cause
    assert result.remedy == (
        "point the service's CUDA_HOME and PATH at /usr/local/cuda-13.0 (the CUDA 13.0 toolkit of the new"
        ' stack), or set FLASHINFER_CUDA_ARCH_LIST="12.0a" in its environment, then restart it'
    )


# --- remedies that follow the failing stack ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        read("cuda13-extension-on-cuda12.txt"),
        (IMPORT_FAILURES / "kaito-2086-libcudart13.txt").read_text(encoding="utf-8"),
    ],
)
def test_a_cuda_13_library_on_the_old_stack_asks_for_its_cuda_12_8_build_in_the_old_venv(text):
    result = diagnose(text, source="journal", context=OLD)
    assert result.kind == "cuda13_on_cuda12"
    assert "is a CUDA 13 build: it links libcudart.so.13, which the old stack (CUDA 12.8)" in result.cause
    assert "install the CUDA 12.8 build (+cu128) of" in result.remedy
    assert "into the old venv (/opt/ml-env)" in result.remedy
    assert "or remove the CUDA 13 package that got into it" in result.remedy
    assert "new venv" not in result.remedy and "cu130" not in result.remedy
    # the same text on the new stack: its own CUDA 13 runtime wheel is missing there
    new = diagnose(text, source="journal", context=NEW)
    assert new.kind == "cuda_library_missing"
    assert "into the new venv (/opt/ml-env-cu130)" in new.remedy


@pytest.mark.parametrize(
    ("context", "needs", "stack"),
    [
        (OLD, ">= 570.26, the minimum for CUDA 12.8", "the old stack"),
        (NEW, ">= 580.65.06, the minimum for CUDA 13.0", "the new stack"),
    ],
)
def test_a_driver_too_old_names_the_driver_the_failing_stack_needs(context, needs, stack):
    result = diagnose(read("torch-cu130-driver-12080.txt"), context=context)
    assert result.kind == "driver_too_old"
    assert result.remedy.startswith(f"upgrade the NVIDIA driver to {needs}")
    assert result.remedy.endswith(f"until then {stack} cannot reach the GPUs")
    api = diagnose(read("sgl-kernel-greenctx.txt"), context=context)
    assert api.kind == "driver_api_missing" and needs in api.remedy and f"{stack} cannot run" in api.remedy


def test_the_old_stack_without_its_release_never_gets_the_target_s_build():
    result = diagnose(read("cuda13-extension-on-cuda12.txt"), context={**OLD, "stack_cuda": ""})
    assert result.kind == "cuda13_on_cuda12"
    assert "build for the old stack's CUDA release" in result.remedy
    assert "13.0" not in result.remedy and "cu130" not in result.remedy


@pytest.mark.parametrize("fixture", sorted(p.name for p in FAILURES.glob("*.txt")))
def test_without_the_stack_the_remedy_is_the_target_s_as_before(fixture):
    # stack and venv unknown: the words of the target-only diagnosis, whatever else the context holds
    assert diagnose(read(fixture), context=TARGET) == diagnose(
        read(fixture), context={**TARGET, "service_user": "", "stack": "", "venv": ""}
    )
