"""cuda13_upgrade.components: the split that makes FlashInfer's JIT fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.components import component_releases, cuda_component_skew, toolkit_skew
from cuda13_upgrade.errors import ParseError

# The mixed set of a public report (flashinfer-ai/flashinfer issue #3493:
# "nvcc / cccl: 13.3, cuda runtime / headers: 13.0, PyTorch: cu130").
MIXED = {
    "nvidia-cuda-nvcc": "13.3.73",
    "nvidia-cuda-crt": "13.3.73",
    "nvidia-cuda-cccl": "13.3.3",
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cuda-nvrtc": "13.0.88",
    "nvidia-cuda-cupti": "13.0.85",
    "torch": "2.10.0+cu130",
}


def test_split_components_are_named():
    problems = cuda_component_skew(MIXED, torch_cuda="13.0")
    assert problems[0].startswith("the CUDA component wheels are on 2 releases (13.0: nvidia-cuda-cupti, ")
    assert "13.3: nvidia-cuda-cccl, nvidia-cuda-crt, nvidia-cuda-nvcc" in problems[0]
    assert "nvidia-cuda-nvcc is 13.3" in problems[1] and "pin the component wheels to 13.0.x" in problems[1]


def test_aligned_components_pass_and_nvcc_is_checked():
    aligned = {k: v for k, v in MIXED.items() if k in ("torch", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc")}
    assert cuda_component_skew(aligned, torch_cuda="13.0", nvcc_release="13.0") == []
    assert cuda_component_skew(aligned, torch_cuda="13.0", nvcc_release="13.1") == [
        "the toolkit's nvcc is CUDA 13.1 but torch was built for CUDA 13.0: point CUDA_HOME at a 13.0 toolkit"
    ]


def test_cu12_names_and_spelling_are_normalised():
    assert component_releases({"NVIDIA_CUDA_Runtime-CU12": "12.8.90", "nvidia-nccl-cu12": "2.27.3"}) == {
        "nvidia-cuda-runtime": "12.8"
    }


def test_probe_problems_name_the_skew_and_the_diagnosis_reads_it():
    from cuda13_upgrade.diagnosis import diagnose
    from cuda13_upgrade.stack import stack_verdict

    probe = {"dists": MIXED, "torch": {"version": "2.10.0+cu130", "cuda": "13.0"}, "imports": {}}
    problems = stack_verdict(probe, 13)["problems"]
    assert any("the CUDA component wheels are on 2 releases" in p for p in problems)
    assert diagnose(problems).kind == "cccl_headers_mismatch"


NVCC = Path(__file__).parent / "fixtures" / "nvcc"


@pytest.mark.parametrize(
    ("nvcc_file", "torch_cuda", "skewed"),
    [
        ("nvcc-13.0.txt", "13.0", False),
        ("nvcc-12.8.txt", "13.0", True),  # CUDA_HOME left on the old toolkit
        ("nvcc-13.2.txt", "13.0", True),  # a newer toolkit beside a cu130 torch
        ("nvcc-12.8.txt", "", False),  # a CPU build of torch reports no CUDA
    ],
)
def test_toolkit_skew_compares_the_real_nvcc_release_with_torchs_cuda(nvcc_file, torch_cuda, skewed):
    text = (NVCC / nvcc_file).read_text()
    problems = toolkit_skew(text, torch_cuda)
    assert bool(problems) is skewed
    if skewed:
        release = nvcc_file.removeprefix("nvcc-").removesuffix(".txt")
        assert f"nvcc is CUDA {release}" in problems[0] and "CUDA 13.0" in problems[0]


def test_toolkit_skew_refuses_text_that_is_not_nvcc():
    with pytest.raises(ParseError):
        toolkit_skew("bash: nvcc: command not found\n", "13.0")
