"""Tests of cuda13_upgrade.wheels: labels, pip freeze, stack consistency."""

from __future__ import annotations

import pytest

from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.wheels import (
    check_stack_consistency,
    cuda_label,
    cuda_tag_of_label,
    local_label,
    normalize_name,
    parse_pip_freeze,
)

# --- labels ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "label"),
    [
        ("2.10.0+cu128", "cu128"),
        ("2.11.0.dev20251201+cu130", "cu130"),
        ("0.5.3+cu130", "cu130"),
        ("2.10.0+cpu", "cpu"),
        ("0.5.3", None),
    ],
)
def test_local_label(version, label):
    assert local_label(version) == label


def test_local_label_rejects_non_versions():
    with pytest.raises(ValueError) as info:
        local_label("not a version")
    assert str(info.value) == (
        "not a PEP 440 version: 'not a version'. Option: version. Fix: pass the version as pip "
        "reports it, e.g. '2.10.0+cu128'."
    )


@pytest.mark.parametrize(
    ("label", "release"),
    [("cu130", "13.0"), ("cu128", "12.8"), ("cu129", "12.9"), ("cu118", "11.8"), ("cu92", "9.2")],
)
def test_cuda_tag_of_label(label, release):
    assert cuda_tag_of_label(label) == release


@pytest.mark.parametrize("label", ["cpu", "rocm6.4", "cu", "cu1300", "CU130", ""])
def test_cuda_tag_of_label_rejects(label):
    with pytest.raises(ValueError, match=f"not a CUDA wheel label of the form cuXYZ: {label!r}"):
        cuda_tag_of_label(label)


def test_cuda_label():
    assert cuda_label("13.0") == "cu130"
    assert cuda_label("12.8") == "cu128"
    with pytest.raises(ValueError, match="'13'"):
        cuda_label("13")


def test_normalize_name():
    assert normalize_name("SGL_Kernel") == "sgl-kernel"
    assert normalize_name("flashinfer.python") == "flashinfer-python"


# --- pip freeze --------------------------------------------------------------------------

FREEZE = """\
# a comment that pip does not write but people do
aiohttp==3.13.2
flashinfer-cubin==0.5.3
flashinfer-jit-cache @ file:///srv/wheels/flashinfer_jit_cache-0.5.3%2Bcu130-cp39-abi3-manylinux_2_28_x86_64.whl
flashinfer-python==0.5.3
sgl-kernel @ file:///srv/wheels/sgl_kernel-0.3.21%2Bcu130-cp310-abi3-manylinux2014_x86_64.whl
-e git+https://github.com/sgl-project/sglang.git@0123456789abcdef0123456789abcdef01234567#egg=sglang&subdirectory=python
torch==2.10.0+cu130
triton==3.5.1
xgrammar @ git+https://github.com/mlc-ai/xgrammar@v0.1.25
Jinja2==3.1.6
"""


def test_parse_pip_freeze():
    assert parse_pip_freeze(FREEZE) == {
        "aiohttp": "3.13.2",
        "flashinfer-cubin": "0.5.3",
        "flashinfer-jit-cache": "0.5.3+cu130",
        "flashinfer-python": "0.5.3",
        "sgl-kernel": "0.3.21+cu130",
        "sglang": None,
        "torch": "2.10.0+cu130",
        "triton": "3.5.1",
        "xgrammar": None,
        "jinja2": "3.1.6",
    }


def test_parse_pip_freeze_editable_with_version_comment():
    text = (
        "# Editable install with no version control (sglang==0.5.8)\n"
        "-e /opt/sglang/python\n"
        "# Editable Git install with no remote (sgl-kernel==0.3.21)\n"
        "-e /opt/sglang/sgl-kernel\n"
        "torch==2.10.0+cu128\n"
    )
    assert parse_pip_freeze(text) == {
        "sglang": "0.5.8",
        "sgl-kernel": "0.3.21",
        "torch": "2.10.0+cu128",
    }


def test_parse_pip_freeze_skips_options():
    assert parse_pip_freeze("--extra-index-url https://download.pytorch.org/whl/cu130\nsix==1.17.0\n") == {
        "six": "1.17.0"
    }


def test_parse_pip_freeze_quotes_a_bad_line():
    with pytest.raises(ParseError) as info:
        parse_pip_freeze("torch==2.10.0+cu128\nthis is not a requirement\n")
    assert str(info.value) == (
        "pip freeze line is not NAME==VERSION, NAME @ URL or -e ...: 'this is not a requirement'. "
        "Fix: pass the unmodified output of 'pip freeze'."
    )


def test_parse_pip_freeze_editable_without_a_name():
    with pytest.raises(ParseError, match="names no distribution.*'-e /opt/sglang/python'"):
        parse_pip_freeze("-e /opt/sglang/python\n")


# --- stack consistency -------------------------------------------------------------------

CU130 = {
    "torch": "2.10.0+cu130",
    "sgl-kernel": "0.3.21+cu130",
    "flashinfer-python": "0.5.3",
    "flashinfer-cubin": "0.5.3",
    "flashinfer-jit-cache": "0.5.3+cu130",
}


def test_consistent_cu130_stack():
    assert check_stack_consistency(CU130) == []
    assert check_stack_consistency(parse_pip_freeze(FREEZE)) == []


def test_cu128_kernel_under_cu130_torch():
    problems = check_stack_consistency({**CU130, "sgl-kernel": "0.3.21+cu128"})
    assert problems == [
        "sgl-kernel 0.3.21+cu128 is built for CUDA 12.8 (cu128) but torch 2.10.0+cu130 for CUDA "
        "13.0 (cu130); install the +cu130 wheel of sgl-kernel"
    ]


def test_renamed_kernel_and_jit_cache_are_checked():
    dists = {**CU130, "flashinfer-jit-cache": "0.5.3+cu128"}
    del dists["sgl-kernel"]
    dists["sglang-kernel"] = "0.4.1.post1+cu128"
    problems = check_stack_consistency(dists)
    assert problems == [
        "sglang-kernel 0.4.1.post1+cu128 is built for CUDA 12.8 (cu128) but torch 2.10.0+cu130 "
        "for CUDA 13.0 (cu130); install the +cu130 wheel of sglang-kernel",
        "flashinfer-jit-cache 0.5.3+cu128 is built for CUDA 12.8 (cu128) but torch 2.10.0+cu130 "
        "for CUDA 13.0 (cu130); install the +cu130 wheel of flashinfer-jit-cache",
    ]


def test_both_kernel_names_installed():
    problems = check_stack_consistency({**CU130, "sglang-kernel": "0.4.1+cu130"})
    assert problems == [
        "both sgl-kernel 0.3.21+cu130 and sglang-kernel 0.4.1+cu130 are installed and both ship "
        "the sgl_kernel module; uninstall the one that does not match torch"
    ]


def test_flashinfer_versions_must_match():
    problems = check_stack_consistency({**CU130, "flashinfer-cubin": "0.5.2"})
    assert problems == [
        "flashinfer distributions differ in version (flashinfer-python 0.5.3, flashinfer-cubin "
        "0.5.2, flashinfer-jit-cache 0.5.3+cu130); install the same version of each"
    ]


def test_unlabeled_wheels_are_reported_unless_declared():
    dists = {"torch": "2.10.0+cu128", "sgl-kernel": "0.3.21"}
    assert check_stack_consistency(dists) == [
        "sgl-kernel 0.3.21 has no local version label, so its CUDA build cannot be checked "
        "against torch 2.10.0+cu128 (cu128); install the +cu128 wheel of it or declare its label "
        "in default_labels"
    ]
    assert check_stack_consistency(dists, default_labels={"sgl-kernel": "cu128"}) == []


def test_unlabeled_torch():
    problems = check_stack_consistency({"torch": "2.10.0", "sgl-kernel": "0.3.21+cu130"})
    assert problems == [
        "torch 2.10.0 has no local version label (such as +cu130), so its CUDA build cannot be "
        "checked; install torch from the PyTorch cuXYZ index or declare its label in "
        "default_labels"
    ]


def test_cpu_torch():
    problems = check_stack_consistency({"torch": "2.10.0+cpu", "sgl-kernel": "0.3.21+cu130"})
    assert problems == [
        "torch 2.10.0+cpu is a 'cpu' build without CUDA; install torch from the PyTorch cuXYZ "
        "index of the target CUDA release"
    ]


def test_missing_torch():
    assert check_stack_consistency({"sgl-kernel": "0.3.21+cu130"}) == [
        "torch is not installed, so the CUDA build of sgl-kernel has nothing to match; install "
        "torch from the PyTorch index of the target CUDA release"
    ]


def test_names_are_normalised():
    assert check_stack_consistency({"Torch": "2.10.0+cu130", "SGL_Kernel": "0.3.21+cu130"}) == []


def test_flashinfer_without_version():
    problems = check_stack_consistency({**CU130, "flashinfer-python": None})
    assert problems == [
        "flashinfer-python has no known version (installed from a direct reference), so it "
        "cannot be compared with the other flashinfer distributions; install released wheels"
    ]


def test_not_a_mapping():
    with pytest.raises(ValueError, match="must be a mapping of name to version: \\['torch'\\]"):
        check_stack_consistency(["torch"])  # type: ignore[arg-type]
