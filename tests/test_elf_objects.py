"""The per-object, label-blind check of the new stack's shared objects: what the
probe records per object (its CUDA ``NEEDED`` libraries, whether the imports
mapped it) and how the verdict judges it (wheels.check_shared_objects), on
real objects of the real kernel wheels, the real stack's probe, and stand-ins."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elf_standin import write_elf

from cuda13_upgrade import stack, wheels
from cuda13_upgrade.hostscripts import stack_probe

FIXTURES = Path(__file__).parent / "fixtures"
ELF = FIXTURES / "elf"
KERNEL_12 = ELF / "sglang_kernel-0.4.0" / "sgl_kernel" / "spatial_ops.abi3.so"
KERNEL_13 = ELF / "sglang_kernel-0.4.10" / "sgl_kernel" / "spatial_ops.abi3.so"
CACHE = Path(os.environ.get("CUDA13_REAL_STACK_CACHE", "/var/cache/cuda13-upgrade-ci/real-stack"))
NO_CACHE = "the real-stack wheel cache is absent (make real-stack-cache, or set CUDA13_REAL_STACK_CACHE)"


def _needed_list(major):
    return [
        "libtorch.so",
        "libc10.so",
        f"libnvrtc.so.{major}",
        "libc10_cuda.so",
        "libcuda.so.1",
        "libtorch_cpu.so",
        "libtorch_cuda.so",
        f"libcudart.so.{major}",
        "libstdc++.so.6",
        "libgcc_s.so.1",
        "libc.so.6",
    ]


@pytest.mark.parametrize(("path", "major"), [(KERNEL_12, 12), (KERNEL_13, 13)])
def test_the_elf_reader_on_real_kernel_objects(path, major):
    needed = stack_probe.elf_needed(str(path))
    assert needed == _needed_list(major)
    assert stack_probe.cuda_libraries(needed) == [
        f"libnvrtc.so.{major}",
        "libcuda.so.1",
        f"libcudart.so.{major}",
    ]
    assert wheels.cuda_majors_of_needed(needed) == {major}


def test_cuda_libraries_keeps_the_cuda_ones_in_order():
    assert stack_probe.cuda_libraries(
        ["libtorch.so", "libcudart.so.13", "libc.so.6", "libnccl.so.2", "libnvidia-ml.so.1", "libcufft.so.12"]
    ) == ["libcudart.so.13", "libnccl.so.2", "libnvidia-ml.so.1", "libcufft.so.12"]


def test_which_sonames_fix_the_cuda_major():
    # torch 2.14.1 (CUDA 13.0) needs libcufft.so.12 and libcusolver.so.12: their
    # majors are cuFFT's and cuSOLVER's, not CUDA's (tests/fixtures/elf/REAL_STACK.md).
    assert wheels.cuda_majors_of_needed(["libcufft.so.12", "libcusolver.so.12", "libcusparse.so.12"]) == set()
    assert wheels.cuda_majors_of_needed(["libnccl.so.2", "libcudnn.so.9", "libcuda.so.1"]) == set()
    assert wheels.cuda_majors_of_needed(["libnvblas.so.13", "libnvJitLink.so.13"]) == {13}


def test_the_stand_in_elf_is_read_like_a_real_one(tmp_path):
    path = write_elf(tmp_path / "x.so", ["libcudart.so.12", "libcuda.so.1"])
    assert stack_probe.elf_needed(str(path)) == ["libcudart.so.12", "libcuda.so.1"]
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
        assert "Shared library: [libcudart.so.12]" in out


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (
            "torch_memory_saver_hook_mode_preload_cu12.abi3.so",
            ("torch_memory_saver_hook_mode_preload.abi3.so", 12),
        ),
        (
            "torch_memory_saver_hook_mode_preload.abi3.so",
            ("torch_memory_saver_hook_mode_preload.abi3.so", None),
        ),
        ("nccl/ep/lib/cu13/libnccl_ep.so", ("nccl/ep/lib//libnccl_ep.so", 13)),
        (
            "nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu12.cpython-311-x86_64-linux-gnu.so",
            (
                "nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cpython-311-x86_64-linux-gnu.so",
                12,
            ),
        ),
        ("x-cu128.so", ("x.so", 12)),
        ("sgl_kernel/sm100/common_ops.abi3.so", ("sgl_kernel/sm100/common_ops.abi3.so", None)),
        ("libcudart.so.13", ("libcudart.so.13", None)),
    ],
)
def test_variant_key(path, key):
    assert wheels.variant_key(path) == key


def _site_with_kernel(root: Path) -> Path:
    """A site directory holding a stand-in ``sglang-kernel 0.4.10+cu130``: its sm90
    object and the real 0.4.10 spatial_ops need CUDA 13, its sm100 object
    libcudart.so.12 (the shape of a wheel that mixes the two)."""
    site = root / "site"
    package = site / "sgl_kernel"
    write_elf(package / "sm90" / "common_ops.abi3.so", ["libcuda.so.1", "libcudart.so.13", "libcublas.so.13"])
    write_elf(
        package / "sm100" / "common_ops.abi3.so", ["libcuda.so.1", "libcudart.so.12", "libcublas.so.13"]
    )
    shutil.copy(KERNEL_13, package / "spatial_ops.abi3.so")
    (package / "__init__.py").write_text("")
    info = site / "sglang_kernel-0.4.10+cu130.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.10+cu130\n")
    files = [
        "sgl_kernel/__init__.py",
        "sgl_kernel/sm90/common_ops.abi3.so",
        "sgl_kernel/sm100/common_ops.abi3.so",
        "sgl_kernel/spatial_ops.abi3.so",
        "sglang_kernel-0.4.10+cu130.dist-info/METADATA",
        "sglang_kernel-0.4.10+cu130.dist-info/RECORD",
    ]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return site


def test_the_probe_records_each_object_and_the_verdict_refuses_the_cuda_12_one_despite_the_label(tmp_path):
    site = _site_with_kernel(tmp_path)
    out = subprocess.run(
        [sys.executable, stack_probe.__file__, "json"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(site)},
    ).stdout
    probe = json.loads(out)
    assert probe["dists"]["sglang-kernel"] == "0.4.10+cu130"
    assert probe["objects"]["sglang-kernel"] == {
        "sgl_kernel/sm100/common_ops.abi3.so": {
            "needed": ["libcuda.so.1", "libcudart.so.12", "libcublas.so.13"],
            "mapped": False,
        },
        "sgl_kernel/sm90/common_ops.abi3.so": {
            "needed": ["libcuda.so.1", "libcudart.so.13", "libcublas.so.13"],
            "mapped": False,
        },
        "sgl_kernel/spatial_ops.abi3.so": {
            "needed": ["libnvrtc.so.13", "libcuda.so.1", "libcudart.so.13"],
            "mapped": False,
        },
    }
    # The label alone passes: that is what the per-object check is for.
    assert (
        wheels.check_stack_consistency(
            {"torch": "2.14.1+cu130", "sglang-kernel": "0.4.10+cu130"}, target_cuda_major=13
        )
        == []
    )
    found = wheels.check_shared_objects(probe["objects"], 13, dists=probe["dists"])
    assert found == {
        "problems": [
            "sglang-kernel 0.4.10+cu130 ships shared objects built for another CUDA major than the "
            "target CUDA 13, whatever its version label says: sgl_kernel/sm100/common_ops.abi3.so "
            "needs libcudart.so.12; install the build of sglang-kernel made for CUDA 13 (one whose "
            "objects need libcudart.so.13 and its libraries)"
        ],
        "notes": [],
    }


def test_the_probe_marks_what_is_mapped(tmp_path):
    import _ctypes

    mapped = stack_probe.mapped_files()
    if mapped is None:
        pytest.skip("/proc/self/maps cannot be read here")
    assert os.path.realpath(_ctypes.__file__) in mapped
    assert stack_probe.mapped_files(str(tmp_path / "absent")) is None

    class File:
        name = "a.so"

        def __init__(self, path):
            self.path = path

        def locate(self):
            return self.path

        def as_posix(self):
            return "pkg/a.so"

    class Dist:
        files = [File(write_elf(tmp_path / "pkg" / "a.so", ["libcudart.so.12"]))]

    where = os.path.realpath(tmp_path / "pkg" / "a.so")
    assert stack_probe._objects(Dist, {where}) == {
        "pkg/a.so": {"needed": ["libcudart.so.12"], "mapped": True}
    }
    assert stack_probe._objects(Dist, set())["pkg/a.so"]["mapped"] is False
    assert stack_probe._objects(Dist, None)["pkg/a.so"]["mapped"] is None


# torch-memory-saver 0.0.10's real objects (tests/fixtures/elf/REAL_STACK.md):
# <stem>.abi3.so and <stem>_cu12.abi3.so are the same CUDA 12 build,
# <stem>_cu13.abi3.so the CUDA 13 one; the package loads <stem>_cu<torch's CUDA major>.
def _tms(mapped=None, only12=False):
    objects = {}
    for stem in ("torch_memory_saver_hook_mode_preload", "torch_memory_saver_hook_mode_torch"):
        for suffix, major in (("", 12), ("_cu12", 12), ("_cu13", 13)):
            if only12 and major == 13:
                continue
            name = f"{stem}{suffix}.abi3.so"
            objects[name] = {
                "needed": ["libcuda.so.1", f"libcudart.so.{major}"],
                "mapped": (mapped or {}).get(name, False),
            }
    return {"torch-memory-saver": objects}


def test_per_major_variants_that_the_imports_did_not_map_pass_with_a_note():
    found = wheels.check_shared_objects(
        _tms(), 13, dists={"torch-memory-saver": "0.0.10"}, imported=["torch", "flashinfer"]
    )
    assert found["problems"] == []
    (note,) = found["notes"]
    assert note.startswith("torch-memory-saver 0.0.10 ships per-CUDA-major variants of its objects; ")
    assert (
        "torch_memory_saver_hook_mode_preload_cu12.abi3.so needs libcudart.so.12 beside "
        "torch_memory_saver_hook_mode_preload_cu13.abi3.so" in note
    )
    assert "torch_memory_saver_hook_mode_torch.abi3.so needs libcudart.so.12" in note
    assert note.endswith(
        "not mapped after importing torch, flashinfer, and the package picks the CUDA 13 build"
    )


def test_a_mapped_variant_of_the_other_major_is_refused():
    found = wheels.check_shared_objects(
        _tms(mapped={"torch_memory_saver_hook_mode_preload_cu12.abi3.so": True}),
        13,
        dists={"torch-memory-saver": "0.0.10"},
    )
    (problem,) = found["problems"]
    assert (
        "torch_memory_saver_hook_mode_preload_cu12.abi3.so needs libcudart.so.12 "
        "(mapped by the import of the stack)" in problem
    )
    assert problem.startswith("torch-memory-saver 0.0.10 ships shared objects built for another CUDA major")
    assert "install the build of torch-memory-saver made for CUDA 13" in problem


def test_variants_without_a_build_for_the_target_are_refused():
    found = wheels.check_shared_objects(_tms(only12=True), 13, dists={"torch-memory-saver": "0.0.9"})
    (problem,) = found["problems"]
    assert problem.count("needs libcudart.so.12") == 4
    assert found["notes"] == []


def test_the_driver_libraries_and_libraries_numbered_apart_are_not_judged():
    objects = {
        "torch": {
            "torch/lib/libtorch_cuda_linalg.so": {
                "needed": ["libcusolver.so.12", "libcudart.so.13", "libcublas.so.13", "libcusparse.so.12"],
                "mapped": True,
            }
        },
        "nccl-extensions": {
            "nccl/ep/lib/cu12/libnccl_ep.so": {"needed": ["libnccl.so.2", "libcuda.so.1"], "mapped": False}
        },
        "x": {"x/y.so": {"needed": ["libcuda.so.1", "libnvidia-ml.so.1"], "mapped": True}},
    }
    assert wheels.check_shared_objects(objects, 13) == {"problems": [], "notes": []}
    assert wheels.DRIVER_LIBRARIES == ("libcuda.so.1", "libnvidia-ml.so.1")


def _probe(name):
    return json.loads((FIXTURES / "probes" / f"{name}.json").read_text())


def test_the_real_stack_probe_per_object():
    probe = _probe("real-stack-pinned")
    objects = probe["objects"]
    assert objects["sglang-kernel"]["sgl_kernel/sm100/common_ops.abi3.so"] == {
        "needed": [
            "libnvrtc.so.13",
            "libcuda.so.1",
            "libcublas.so.13",
            "libcublasLt.so.13",
            "libcudart.so.13",
        ],
        "mapped": False,  # import sgl_kernel fails here: no libcuda.so.1
    }
    # import torch maps torch's libraries and the nvidia-* libraries they need
    assert objects["torch"]["torch/lib/libtorch_cuda.so"]["mapped"] is True
    assert objects["nvidia-cublas"]["nvidia/cu13/lib/libcublas.so.13"]["mapped"] is True
    # torch-memory-saver loads its binary only when it is used
    assert not any(r["mapped"] for r in objects["torch-memory-saver"].values())
    verdict = stack.stack_verdict(probe, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert verdict["problems"] == []
    assert verdict["consistent"] is True
    (note,) = [n for n in verdict["notes"] if n.startswith("torch-memory-saver 0.0.10 ships per-CUDA-major")]
    assert "not mapped after importing torch, flashinfer" in note


def test_the_real_stack_with_a_cuda_12_object_under_a_cu130_label_is_refused():
    probe = _probe("real-stack-pinned")
    probe["dists"]["sglang-kernel"] = "0.4.10+cu130"
    probe["objects"]["sglang-kernel"]["sgl_kernel/sm100/common_ops.abi3.so"]["needed"] = [
        "libcuda.so.1",
        "libcudart.so.12",
        "libcublas.so.12",
        "libcublasLt.so.12",
        "libnvrtc.so.12",
    ]
    verdict = stack.stack_verdict(probe, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert verdict["consistent"] is False
    assert verdict["problems"] == [
        "sglang-kernel 0.4.10+cu130 ships shared objects built for another CUDA major than the target "
        "CUDA 13, whatever its version label says: sgl_kernel/sm100/common_ops.abi3.so needs "
        "libcudart.so.12, libcublas.so.12, libcublasLt.so.12, libnvrtc.so.12; install the build of "
        "sglang-kernel made for CUDA 13 (one whose objects need libcudart.so.13 and its libraries)"
    ]


def test_a_probe_without_objects_is_judged_as_before():
    verdict = stack.stack_verdict(_probe("sglang-kernel-0.4.0"), 13, driver_library_optional=True)
    assert "objects" not in _probe("sglang-kernel-0.4.0")
    assert not [p for p in verdict["problems"] if "ships shared objects" in p]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.skipif(not (CACHE / "wheels").is_dir(), reason=NO_CACHE)
def test_the_committed_objects_are_those_of_the_cached_wheels():
    for fixture, wheel in (
        (KERNEL_12, CACHE / "variants" / "sglang_kernel-0.4.0-cp310-abi3-manylinux2014_x86_64.whl"),
        (KERNEL_13, CACHE / "wheels" / "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl"),
    ):
        if not wheel.is_file():
            pytest.skip(f"{wheel.name} is not in the cache")
        with zipfile.ZipFile(wheel) as archive:
            assert _sha256(archive.read("sgl_kernel/spatial_ops.abi3.so")) == _sha256(fixture.read_bytes())


@pytest.mark.skipif(not (CACHE / "wheels").is_dir(), reason=NO_CACHE)
def test_the_real_torch_memory_saver_wheel_passes_by_its_variants(tmp_path):
    wheel = CACHE / "wheels" / "torch_memory_saver-0.0.10-cp39-abi3-manylinux2014_x86_64.whl"
    if not wheel.is_file():
        pytest.skip(f"{wheel.name} is not in the cache")
    objects = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if stack_probe.SHARED_OBJECT.search(name):
                path = Path(archive.extract(name, tmp_path))
                needed = stack_probe.cuda_libraries(stack_probe.elf_needed(str(path)))
                objects[name] = {"needed": needed, "mapped": False}
    assert objects == _tms()["torch-memory-saver"]
    found = wheels.check_shared_objects({"torch-memory-saver": objects}, 13)
    assert found["problems"] == [] and len(found["notes"]) == 1
    objects["torch_memory_saver_hook_mode_torch_cu12.abi3.so"]["mapped"] = True
    assert len(wheels.check_shared_objects({"torch-memory-saver": objects}, 13)["problems"]) == 1


@pytest.mark.skipif(not (CACHE / "wheels").is_dir(), reason=NO_CACHE)
def test_real_stack_md_records_the_cached_torch_memory_saver():
    text = (ELF / "REAL_STACK.md").read_text()
    assert (
        "| `torch_memory_saver_hook_mode_preload.abi3.so` | 12 | yes | libcuda.so.1 libcudart.so.12 |" in text
    )
    assert (
        "| `torch_memory_saver_hook_mode_preload_cu13.abi3.so` | 13 | yes | libcuda.so.1 libcudart.so.13 |"
        in text
    )


def test_the_sandbox_stand_in_objects_are_not_elf_so_labels_judge_the_sandbox(tmp_path):
    # The sandbox's stand-in wheels carry text placeholders for their shared
    # objects (sandbox_mirror.standins): the per-object check finds nothing
    # there, and the sandbox's stacks are judged by their labels as before,
    # but for the real object of sgl-whl/cu130-mixed (the test below).
    from sandbox_mirror import standins

    path = tmp_path / "common_ops.abi3.so"
    path.write_bytes(standins._placeholder({"needed": ["libcudart.so.12"]}))
    assert stack_probe.elf_needed(str(path)) == []


def test_the_mirrors_mixed_kernel_installs_and_the_check_refuses_its_cuda_12_object(
    mirror_url, toolkits, no_ld_conf, tmp_path
):
    # sgl-whl/cu130-mixed: the +cu130 stand-in plus sglang-kernel 0.4.0's real
    # spatial_ops.abi3.so (needs libcudart.so.12), the shape of
    # sgl-project/sglang-omni#620. pip installs it in the cu130 stack; the role's
    # probe (roles/cu130_wheels/tasks/check.yml: stack_probe.py torch sgl_kernel
    # flashinfer with the venv's python) and verdict (the sandbox's
    # cu130_wheels_driver_library_optional, the nvidia-smi double's 12.0)
    # refuse it by that object, although every label says cu130.
    from sandbox_mirror import testkit

    python = testkit.make_venv(tmp_path / "venv")
    testkit.install_stack(python, mirror_url, "cu130", kernel_index="sgl-whl/cu130-mixed")
    env = testkit.clean_env(CUDA_HOME=str(toolkits["13.0"]), SANDBOX_LD_SO_CONF_D=str(no_ld_conf))
    out = testkit.run([str(python), stack_probe.__file__, "torch", "sgl_kernel", "flashinfer"], env).stdout
    probe = json.loads(out.strip().splitlines()[-1])
    assert probe["dists"]["sgl-kernel"] == "0.3.21+cu130"
    assert probe["imports"] == {"torch": None, "sgl_kernel": None, "flashinfer": None}
    # The stand-in's placeholders are not ELF; the real object is read, and
    # import sgl_kernel (which loads sm100/common_ops) did not map it.
    assert probe["objects"] == {
        "sgl-kernel": {
            "sgl_kernel/spatial_ops.abi3.so": {
                "needed": ["libnvrtc.so.12", "libcuda.so.1", "libcudart.so.12"],
                "mapped": False,
            }
        }
    }
    # The labels alone pass.
    assert wheels.check_stack_consistency(probe["dists"], target_cuda_major=13) == []
    verdict = stack.stack_verdict(probe, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert verdict["consistent"] is False
    assert verdict["problems"] == [
        "sgl-kernel 0.3.21+cu130 ships shared objects built for another CUDA major than the target "
        "CUDA 13, whatever its version label says: sgl_kernel/spatial_ops.abi3.so needs "
        "libnvrtc.so.12, libcudart.so.12; install the build of sgl-kernel made for CUDA 13 (one "
        "whose objects need libcudart.so.13 and its libraries)"
    ]


def test_loader_cache_reads_ldconfig_p():
    # `ldconfig -p` on a Debian 12 build machine with part of a CUDA 13.0 toolkit.
    text = (
        "542 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibz3.so.4 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz3.so.4\n"
        "\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib/libcudart.so.13\n"
        "\tlibcudart.so (libc6,x86-64) => /usr/local/cuda-13.0/lib/libcudart.so\n"
        "\tlibcupti.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib/libcupti.so.13\n"
    )
    assert stack_probe.loader_cache(text) == {
        "libz3.so.4": "/lib/x86_64-linux-gnu/libz3.so.4",
        "libcudart.so.13": "/usr/local/cuda-13.0/lib/libcudart.so.13",
        "libcudart.so": "/usr/local/cuda-13.0/lib/libcudart.so",
        "libcupti.so.13": "/usr/local/cuda-13.0/lib/libcupti.so.13",
    }


def test_the_real_stack_finds_every_library_it_needs_in_the_venv():
    probe = _probe("real-stack-pinned")
    libraries = probe["libraries"]
    assert libraries["libcudart.so.13"]["venv"] == ["nvidia/cu13/lib/libcudart.so.13"]
    assert libraries["libcufft.so.12"] == {"venv": ["nvidia/cu13/lib/libcufft.so.12"], "system": None}
    # only torch-memory-saver's CUDA 12 variants need it, and the venv has none
    assert libraries["libcudart.so.12"] == {"venv": [], "system": None}
    found = wheels.check_shared_objects(probe["objects"], 13, dists=probe["dists"], libraries=libraries)
    assert found["problems"] == []


def _with_linalg_needing(lib, where):
    probe = _probe("real-stack-pinned")
    record = probe["objects"]["torch"]["torch/lib/libtorch_cuda_linalg.so"]
    record["needed"] = [lib if n == "libcusolver.so.12" else n for n in record["needed"]]
    probe["libraries"][lib] = where
    return probe


def test_a_library_found_only_in_the_old_toolkit_is_refused():
    # libcusolver.so.11 is CUDA 12's cuSOLVER (torch 2.10.0 needs it): its soname
    # says nothing of the CUDA major, where the loader finds it does.
    probe = _with_linalg_needing(
        "libcusolver.so.11",
        {"venv": [], "system": "/usr/local/cuda-12.8/targets/x86_64-linux/lib/libcusolver.so.11"},
    )
    verdict = stack.stack_verdict(probe, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert verdict["problems"] == [
        "torch 2.14.1 needs CUDA libraries that the new venv does not provide: "
        "torch/lib/libtorch_cuda_linalg.so needs libcusolver.so.11, found only in "
        "/usr/local/cuda-12.8/targets/x86_64-linux/lib/libcusolver.so.11, a CUDA 12 toolkit's directory; "
        "install the nvidia-* wheels of CUDA 13 that provide them into the new venv (the CUDA 13 build of "
        "torch requires them; pip check names what is missing)"
    ]


def test_a_library_found_nowhere_is_refused_and_the_targets_toolkit_is_accepted():
    probe = _with_linalg_needing("libcusolver.so.11", {"venv": [], "system": None})
    found = wheels.check_shared_objects(
        probe["objects"], 13, dists=probe["dists"], libraries=probe["libraries"]
    )
    (problem,) = found["problems"]
    assert "libcusolver.so.11, found nowhere (not in the venv, not in the loader's cache)" in problem
    probe = _with_linalg_needing(
        "libcusolver.so.12",
        {"venv": [], "system": "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcusolver.so.12"},
    )
    found = wheels.check_shared_objects(
        probe["objects"], 13, dists=probe["dists"], libraries=probe["libraries"]
    )
    assert found["problems"] == []


@pytest.mark.parametrize(
    ("variant", "dist", "found"),
    [
        (
            "sglang-kernel-0.4.0-pinned",
            "sglang-kernel 0.4.0",
            "sgl_kernel/sm100/common_ops.abi3.so needs libnvrtc.so.12, libcublas.so.12, libcublasLt.so.12, "
            "libcudart.so.12",
        ),
        (
            "torch-2.10.0-pinned",
            "torch 2.10.0",
            "torch/lib/libtorch_cuda.so needs libcudart.so.12, libcublas.so.12, libcublasLt.so.12",
        ),
    ],
)
def test_each_real_cuda_12_variant_is_refused_per_object(variant, dist, found):
    verdict = stack.stack_verdict(
        _probe(variant), 13, driver_library_optional=True, compute_capabilities=["12.0"]
    )
    (problem,) = [p for p in verdict["problems"] if "ships shared objects built for another CUDA major" in p]
    assert problem.startswith(f"{dist} ships shared objects")
    assert found in problem
    # what the CUDA 12 objects need is theirs to answer for, not a missing library
    assert not [p for p in verdict["problems"] if "does not provide" in p]


def test_a_target_build_that_needs_only_the_driver_counts_by_its_marker():
    objects = {
        "pkg": {
            "pkg/cu12/lib/libx.so": {"needed": ["libcuda.so.1", "libcudart.so.12"], "mapped": False},
            "pkg/cu13/lib/libx.so": {"needed": ["libcuda.so.1"], "mapped": False},
        }
    }
    found = wheels.check_shared_objects(objects, 13)
    assert found["problems"] == []
    assert "pkg/cu12/lib/libx.so needs libcudart.so.12 beside pkg/cu13/lib/libx.so" in found["notes"][0]
    # a build marked for another major is no target build
    objects["pkg"] = {k.replace("cu13", "cu11"): v for k, v in objects["pkg"].items()}
    assert len(wheels.check_shared_objects(objects, 13)["problems"]) == 1
