"""The new stack's checks on what real wheels carry (wheels.classify_import_failure,
stack.stack_verdict, the probe's ELF reader), fed real texts and real probes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda13_upgrade import stack, wheels
from cuda13_upgrade.hostscripts import stack_probe

FIXTURES = Path(__file__).parent / "fixtures"
FAILURES = FIXTURES / "import_failures"


@pytest.mark.parametrize(
    ("fixture", "cause", "detail"),
    [
        ("sglang-4778-libcuda.txt", "driver_library_missing", "libcuda.so.1"),
        ("sglang-13948-torch-abi.txt", "torch_abi", "_ZNK3c106SymInt6sym_neERKS0_"),
        ("sglang-8131-green-ctx.txt", "driver_api_too_old", "cuGreenCtxStreamCreate"),
        ("kaito-2086-libcudart13.txt", "cuda_library_missing", "libcudart.so.13"),
    ],
)
def test_classify_import_failure_real_texts(fixture, cause, detail):
    found = wheels.classify_import_failure((FAILURES / fixture).read_text(), 13)
    assert (found["cause"], found["detail"]) == (cause, detail)
    assert found["remedy"]


def test_a_cuda_library_of_the_other_major_is_the_other_cuda_build():
    # The same real text under a CUDA 12 stack: a CUDA 13 wheel in a CUDA 12 stack.
    found = wheels.classify_import_failure((FAILURES / "kaito-2086-libcudart13.txt").read_text(), 12)
    assert found["cause"] == "cuda_runtime_other_major"
    assert "CUDA 13" in found["remedy"]


def test_the_cause_is_found_above_the_last_line():
    text = (FAILURES / "sglang-13948-torch-abi.txt").read_text()
    assert text.strip().splitlines()[-1] == "- ModuleNotFoundError: No module named 'common_ops'"
    assert wheels.classify_import_failure(text, 13)["cause"] == "torch_abi"


def test_an_unknown_failure_keeps_its_last_line():
    found = wheels.classify_import_failure("Traceback ...\nModuleNotFoundError: No module named 'x'\n", 13)
    assert found == {
        "cause": "other",
        "detail": "ModuleNotFoundError: No module named 'x'",
        "remedy": "read the whole text",
    }


def test_cuda_majors_of_needed_counts_only_libraries_versioned_with_cuda():
    assert wheels.cuda_majors_of_needed(
        ["libcuda.so.1", "libcudart.so.13", "libcufft.so.12", "libcurand.so.10", "libc.so.6"]
    ) == {13}
    assert wheels.cuda_majors_of_needed(["libcuda.so.1", "libstdc++.so.6"]) == set()


def test_check_stack_consistency_reads_the_cuda_major_of_unlabeled_wheels():
    dists = {"torch": "2.14.1", "sglang-kernel": "0.4.0", "flashinfer-python": "0.7.2"}
    problems = wheels.check_stack_consistency(
        dists,
        default_labels={"torch": "cu130"},
        needed_libraries={"sglang-kernel": ["libcuda.so.1", "libcudart.so.12"], "flashinfer-python": []},
    )
    assert problems == [
        "sglang-kernel 0.4.0 is built for CUDA 12 (it loads libcudart.so.12) but torch 2.14.1 for "
        "CUDA 13.0 (cu130); install the CUDA 13 build of sglang-kernel"
    ]
    assert (
        wheels.check_stack_consistency(
            dists,
            default_labels={"torch": "cu130"},
            needed_libraries={"sglang-kernel": ["libcuda.so.1", "libcudart.so.13"]},
        )
        == []
    )


def test_flashinfer_python_alone_is_valid_and_the_trio_must_agree():
    assert wheels.check_stack_consistency({"flashinfer-python": "0.7.2"}) == []
    assert wheels.check_stack_consistency({"flashinfer-python": "0.7.2", "flashinfer-cubin": "0.6.13"}) == [
        "flashinfer distributions differ in version (flashinfer-python 0.7.2, flashinfer-cubin 0.6.13); "
        "install the same version of each"
    ]


def _elf_needed_by_readelf(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines() if "(NEEDED)" in line]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
def test_elf_needed_equals_readelf_on_real_shared_objects():
    import _ctypes
    import _ssl

    for path in (_ctypes.__file__, _ssl.__file__, str(Path(sys.executable).resolve())):
        assert stack_probe.elf_needed(path) == _elf_needed_by_readelf(path)
        assert stack_probe.elf_needed(path)  # each one needs libc at least


def test_elf_needed_of_a_file_that_is_not_elf(tmp_path):
    (tmp_path / "x.so").write_text("not ELF")
    assert stack_probe.elf_needed(str(tmp_path / "x.so")) == []


def test_the_probe_runs_in_this_interpreter():
    out = subprocess.run(
        [sys.executable, stack_probe.__file__, "json", "no_such_module_here"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    probe = json.loads(out)
    assert probe["imports"]["json"] is None
    text = probe["imports"]["no_such_module_here"]
    assert text.startswith("Traceback (most recent call last):")
    assert text.endswith("ModuleNotFoundError: No module named 'no_such_module_here'")
    assert probe["torch"] is None
    assert probe["pip_check"]["rc"] in (0, 1)


PROBES = FIXTURES / "probes"


def _probe(name):
    return json.loads((PROBES / f"{name}.json").read_text())


# tests/fixtures/probes/real-stack.json is the probe of what `pip install
# sglang==0.5.23` resolves from PyPI, left free: torch 2.14.1 pins its CUDA
# 13.0 runtime components (cuda-toolkit 13.0.3: nvidia-cuda-runtime 13.0.96,
# -nvrtc 13.0.88, -cupti 13.0.85), nothing pins the compiler's, and pip picks
# the newest: nvidia-cuda-nvcc, -crt and nvidia-nvvm 13.5.37, -cccl 13.3.5. That split is
# the one problem of the real stack; the molecule real-stack scenario installs
# it with the compiler components pinned to torch's release (cuda-toolkit
# 13.0.3's own pins) and finds it consistent.
_REAL_SKEW = "the CUDA component wheels are on 3 releases (13.0: nvidia-cuda-cupti, nvidia-cuda-nvrtc, nvidia-cuda-runtime; 13.3: "


def test_pip_install_sglang_0_5_23_mixes_cuda_compiler_releases_the_driver_library_the_one_condition():
    verdict = stack.stack_verdict(
        _probe("real-stack"), 13, driver_library_optional=True, compute_capabilities=["12.0"] * 8
    )
    skew, against_torch = verdict["problems"]
    assert skew.startswith(_REAL_SKEW)
    assert "13.5: nvidia-cuda-crt, nvidia-cuda-nvcc, nvidia-nvvm" in skew
    assert against_torch == (
        "torch was built for CUDA 13.0 but nvidia-cuda-cccl is 13.3, nvidia-cuda-crt is 13.5, "
        "nvidia-cuda-nvcc is 13.5, nvidia-nvvm is 13.5: pin the component wheels to 13.0.x"
    )
    assert verdict["consistent"] is False
    assert (verdict["torch"], verdict["cuda"], verdict["kernel"]) == (
        "2.14.1+cu130",
        "13.0",
        "sglang-kernel 0.4.10",
    )
    assert verdict["arch_list_covers"] == ["12.0"]
    assert len(verdict["conditions"]) == 1
    assert verdict["conditions"][0].startswith(
        "import sgl_kernel needs the NVIDIA driver library libcuda.so.1, which this host does not have"
    )
    assert verdict["imports"]["sgl_kernel"]["cause"] == "driver_library_missing"


def test_real_stack_with_the_compiler_on_torchs_release_is_consistent():
    probe = _probe("real-stack")
    # The versions cuda-toolkit 13.0.3 (torch 2.14.1's CUDA) pins; only the
    # four compiler components differ from the recorded probe.
    pinned = {
        "nvidia-cuda-nvcc": "13.0.88",
        "nvidia-cuda-crt": "13.0.88",
        "nvidia-cuda-cccl": "13.0.85",
        "nvidia-nvvm": "13.0.88",
    }
    probe["dists"] = {**probe["dists"], **pinned}
    verdict = stack.stack_verdict(probe, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert verdict["problems"] == []
    assert verdict["consistent"] is True


def test_real_stack_fails_where_the_driver_library_is_required():
    verdict = stack.stack_verdict(_probe("real-stack"), 13, compute_capabilities=["12.0"])
    assert verdict["consistent"] is False
    assert verdict["conditions"] == []
    (problem,) = [p for p in verdict["problems"] if p.startswith("import ")]
    assert problem.startswith("import sgl_kernel fails (driver_library_missing: libcuda.so.1)")
    # the whole text, not its last line
    assert "Traceback (most recent call last):" in problem


def test_real_pypi_torch_has_no_label_in_its_metadata_but_in_torch_version():
    probe = _probe("real-stack")
    assert probe["dists"]["torch"] == "2.14.1"
    assert probe["torch"]["version"] == "2.14.1+cu130"
    assert wheels.cuda_majors_of_needed(probe["needed"]["sglang-kernel"]) == {13}


def test_a_real_stack_on_a_gpu_that_its_arch_list_lacks():
    verdict = stack.stack_verdict(
        _probe("real-stack"), 13, driver_library_optional=True, compute_capabilities=["12.0", "5.0"]
    )
    assert [
        p
        for p in verdict["problems"]
        if p.startswith("torch 2.14.1+cu130 has no kernels for compute capability 5.0")
    ]


@pytest.mark.parametrize(
    ("variant", "reasons"),
    [
        (
            "torch-2.10.0",
            [
                "torch 2.10.0 is installed but does not import, and its libraries are a CUDA 12 build",
                "sglang-kernel 0.4.10 is built for torch==2.14.1 (its Requires-Dist) but torch 2.10.0 is installed",
            ],
        ),
        ("sglang-kernel-0.4.0", ["sglang-kernel 0.4.0 is built for CUDA 12"]),
        (
            "flashinfer-cubin-0.6.13",
            ["flashinfer distributions differ in version (flashinfer-python 0.7.2, flashinfer-cubin 0.6.13)"],
        ),
    ],
)
def test_each_real_inconsistent_variant_is_caught_for_its_reason(variant, reasons):
    verdict = stack.stack_verdict(
        _probe(variant), 13, driver_library_optional=True, compute_capabilities=["12.0"]
    )
    assert verdict["consistent"] is False
    text = "\n".join(verdict["problems"])
    for reason in reasons:
        assert reason in text


# tests/fixtures/failures/torch-cu130-driver-12080.txt (SOURCES.md): torch
# 2.11.0+cu130 under driver 570.133.20 (CUDA 12.8); is_available() printed False.
DRIVER_12080 = (FIXTURES / "failures" / "torch-cu130-driver-12080.txt").read_text(encoding="utf-8")


def _real_stack_on_an_old_driver():
    probe = _probe("real-stack")
    # The same stack on a host whose driver loads but is too old: the probe's
    # torch record as torch 2.14.1+cu130 would report it, with the warning torch
    # printed there (its message is the text after "UserWarning: ").
    message = DRIVER_12080.splitlines()[0].split("UserWarning: ", 1)[1]
    probe["driver_library"] = None
    probe["imports"] = {module: None for module in probe["imports"]}
    probe["torch"] = {**probe["torch"], "cuda_available": False, "device_count": 0, "cuda_warning": message}
    return probe


def test_a_torch_that_cannot_reach_the_gpus_is_refused_naming_the_driver_and_the_floor():
    verdict = stack.stack_verdict(
        _real_stack_on_an_old_driver(),
        13,
        compute_capabilities=["12.0"],
        driver_version="570.133.20",
    )
    assert verdict["consistent"] is False
    (problem,) = [p for p in verdict["problems"] if "cannot reach this host's GPUs" in p]
    assert problem.startswith(
        "torch 2.14.1+cu130 (CUDA 13.0) cannot reach this host's GPUs (compute capability 12.0): "
        "torch.cuda.is_available() is False, 0 devices, under driver 570.133.20: the NVIDIA driver "
        "supports up to CUDA 12.8 (torch found version 12080)"
    )
    assert "the new stack needs driver >= 580" in problem
    assert "upgrade the driver before the switch" in problem


def test_a_host_without_gpus_or_without_the_driver_library_is_not_refused_for_it():
    probe = _real_stack_on_an_old_driver()
    no_gpus = stack.stack_verdict(probe, 13, compute_capabilities=[])
    assert not [p for p in no_gpus["problems"] if "cannot reach" in p]
    probe["driver_library"] = "libcuda.so.1: cannot open shared object file: No such file or directory"
    sandbox = stack.stack_verdict(probe, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert not [p for p in sandbox["problems"] if "cannot reach" in p]


def test_a_probe_without_cuda_available_reads_as_before():
    probe = _real_stack_on_an_old_driver()
    for key in ("cuda_available", "device_count", "cuda_warning"):
        del probe["torch"][key]
    verdict = stack.stack_verdict(probe, 13, compute_capabilities=["12.0"])
    assert not [p for p in verdict["problems"] if "cannot reach" in p]


def test_a_cu128_torch_is_the_wheel_the_remedy_names():
    # torch-2.10.0.json: PyPI's torch 2.10.0 (a CUDA 12.8 build) in the new venv.
    verdict = stack.stack_verdict(
        _probe("torch-2.10.0"), 13, driver_library_optional=True, compute_capabilities=["12.0"]
    )
    text = "\n".join(verdict["problems"])
    assert (
        "torch 2.10.0 is built for CUDA 12 (it loads libcublas.so.12, libcublasLt.so.12, libcudart.so.12, "
        "libcupti.so.12, libnvrtc.so.12), not for the target CUDA 13: install the CUDA 13 build of torch"
    ) in text
    assert "install the CUDA 12 build" not in text
    assert "cu128" not in text
    # each import fails inside torch's own loader: torch is named, not the kernel
    for module in ("torch", "sgl_kernel", "flashinfer"):
        assert verdict["imports"][module]["remedy"].startswith("torch is built for CUDA 12")


def test_a_cu128_torch_label_on_the_cu130_target_names_torch_not_the_kernel():
    problems = wheels.check_stack_consistency(
        {"torch": "2.10.0+cu128", "sglang-kernel": "0.4.10+cu130"}, target_cuda_major=13
    )
    assert problems == [
        "torch 2.10.0+cu128 is built for CUDA 12.8 (cu128), not for the target CUDA 13: install the "
        "CUDA 13 build of torch (the PyTorch cu13X index, or the PyPI torch whose torch.version.cuda is 13.x)"
    ]


def test_the_probe_records_why_torch_cannot_reach_the_gpus(tmp_path, monkeypatch):
    # A stand-in torch module whose is_available() warns as torch does; the
    # warning text is the real one (torch-cu130-driver-12080.txt).
    import types
    import warnings

    message = DRIVER_12080.splitlines()[0].split("UserWarning: ", 1)[1]

    def is_available():
        warnings.warn(message, UserWarning, stacklevel=1)
        return False

    fake = types.ModuleType("torch")
    fake.__version__ = "2.14.1+cu130"
    fake.version = types.SimpleNamespace(cuda="13.0")
    fake.cuda = types.SimpleNamespace(
        is_available=is_available, device_count=lambda: 0, get_arch_list=lambda: []
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    info = stack_probe._torch_info()
    assert info["cuda_available"] is False
    assert info["cuda_warning"] == message
