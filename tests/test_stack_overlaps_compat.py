"""Two stack checks of the probe and the verdict: files that two distributions write with
different contents (stack_probe.scan_records, stack.overlap_problems), and a libcuda the new
stack would load instead of the driver's (stack_probe.libcuda_files, ld_so_conf_dirs,
stack.forward_compat_problems), fed real RECORD files and the sandbox's fault stand-ins."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from fakehost import FakeHost
from sandbox_mirror import faults
from sandbox_mirror.wheels import write_wheel

from cuda13_upgrade import stack
from cuda13_upgrade.hostscripts import stack_probe
from cuda13_upgrade.steps import wheels
from cuda13_upgrade.steps.host import StepFailed

FIXTURES = Path(__file__).parent / "fixtures"
PROBES = FIXTURES / "probes"
CUTLASS = FIXTURES / "records" / "cutlass-dsl-4.5.0"
REAL_STACK_CACHE = (
    Path(os.environ.get("CUDA13_REAL_STACK_CACHE", "/var/cache/cuda13-upgrade-ci/real-stack")) / "wheels"
)

RTX_SERVER = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
RTX_MAX_Q = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"


def _probe(name: str) -> dict:
    return json.loads((PROBES / f"{name}.json").read_text())


def _consistent_real_stack() -> dict:
    # real-stack.json with the compiler components on torch's release (cuda-toolkit
    # 13.0.3's pins): the verdict finds nothing (tests/test_stack_checks.py).
    probe = _probe("real-stack")
    probe["dists"] = {
        **probe["dists"],
        "nvidia-cuda-nvcc": "13.0.88",
        "nvidia-cuda-crt": "13.0.88",
        "nvidia-cuda-cccl": "13.0.85",
        "nvidia-nvvm": "13.0.88",
    }
    return probe


def _verdict(probe: dict, **kwargs) -> dict:
    return stack.stack_verdict(
        probe, 13, driver_library_optional=True, compute_capabilities=["12.0"], **kwargs
    )


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return site


def _install(wheel: Path, site: Path) -> None:
    # What pip does with a wheel's files: each written to its path, the last one winning.
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)


# -- two distributions writing one file ----------------------------------------------------


def _cutlass_overlaps(tmp_path: Path) -> list[dict]:
    site = _site(tmp_path)
    for dist_info in sorted(CUTLASS.iterdir()):
        shutil.copytree(dist_info, site / dist_info.name)
    dists = list(importlib.metadata.distributions(path=[str(site)]))
    overlaps, libcuda_owners = stack_probe.scan_records(dists, prefix=str(tmp_path / "venv"))
    assert libcuda_owners == {}
    return overlaps


def test_the_real_cutlass_4_5_libs_wheels_claim_98_paths_with_different_contents(tmp_path):
    overlaps = _cutlass_overlaps(tmp_path)
    # 178 paths in both RECORDs: 80 with the same hash (harmless, left out), 98 different.
    assert len(overlaps) == 98
    assert {(o["name"], o["version"]) for ov in overlaps for o in ov["owners"]} == {
        ("nvidia-cutlass-dsl-libs-base", "4.5.0"),
        ("nvidia-cutlass-dsl-libs-cu13", "4.5.0"),
    }
    paths = [o["path"] for o in overlaps]
    assert "nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so" in paths
    assert (
        "nvidia_cutlass_dsl/python_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cpython-311-x86_64-linux-gnu.so"
        in paths
    )
    # A path both write with the same hash is not an overlap.
    base = (CUTLASS / "nvidia_cutlass_dsl_libs_base-4.5.0.dist-info" / "RECORD").read_text()
    cu13 = (CUTLASS / "nvidia_cutlass_dsl_libs_cu13-4.5.0.dist-info" / "RECORD").read_text()
    same = sorted(set(base.splitlines()) & set(cu13.splitlines()))
    assert len([line for line in same if ",sha256=" in line]) == 80
    assert not {line.split(",")[0] for line in same} & set(paths)
    # The files themselves are not installed here: nothing on disk to match.
    assert {o["on_disk"] for o in overlaps} == {None}


def test_the_cutlass_overlap_is_refused_naming_a_file_both_wheels_and_the_remedy(tmp_path):
    probe = {**_consistent_real_stack(), "overlaps": _cutlass_overlaps(tmp_path)}
    verdict = _verdict(probe)
    assert verdict["consistent"] is False
    (problem,) = verdict["problems"]
    assert problem == (
        "nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so is written by nvidia-cutlass-dsl-libs-base 4.5.0 "
        "and nvidia-cutlass-dsl-libs-cu13 4.5.0 with different contents (and 97 more files, among them "
        "nvidia_cutlass_dsl/python_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cpython-311-x86_64-linux-gnu.so, "
        "nvidia_cutlass_dsl/python_packages/cutlass/__init__.py, "
        "nvidia_cutlass_dsl/python_packages/cutlass/_mlir/_mlir_libs/__init__.py): the one installed last "
        "won, so another install order gives another stack (pip does not detect it). Remedy: pin "
        "nvidia-cutlass-dsl and its libs wheels to 4.6 or later, whose wheels no longer share paths "
        "(NVIDIA/cutlass#3170, #3259: fixed in 4.6); on 4.5, make -libs-cu13's files the ones on disk "
        "with `pip install --force-reinstall --no-deps nvidia-cutlass-dsl-libs-cu13==4.5.0` after the "
        "install (smg-project/smg PR #1717; sgl-project/sglang PR #25938 keeps -libs-cu13 on Blackwell)"
    )


def test_the_real_stacks_one_overlap_is_a_build_backend_noted_not_refused():
    # tests/fixtures/probes/real-stack-overlaps.json: flashinfer-python 0.7.2 and
    # torch-c-dlpack-ext 0.1.5 both put their PEP 517 build backend at the top of site-packages.
    overlaps = json.loads((PROBES / "real-stack-overlaps.json").read_text())
    assert [o["path"] for o in overlaps] == ["build_backend.py"]
    verdict = _verdict({**_consistent_real_stack(), "overlaps": overlaps})
    assert verdict["problems"] == []
    assert verdict["consistent"] is True
    assert (
        "build_backend.py is written by flashinfer-python 0.7.2 and torch-c-dlpack-ext 0.1.5 with "
        "different contents; nothing imports it when the stack runs (a build backend), so it is not "
        "refused"
    ) in verdict["notes"]


@pytest.mark.skipif(not REAL_STACK_CACHE.is_dir(), reason="no cache of the real stack's wheels")
def test_the_real_stack_overlaps_fixture_is_what_the_wheels_records_give(tmp_path):
    # The wheels of molecule/real-stack/converge.yml (compiler components pinned to 13.0).
    pinned = {"nvidia-cuda-cccl": "13.0.85", "nvidia-cuda-crt": "13.0.88", "nvidia-cuda-nvcc": "13.0.88"}
    pinned["nvidia-nvvm"] = "13.0.88"
    site = _site(tmp_path)
    for wheel in sorted(REAL_STACK_CACHE.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        if pinned.get(re.sub(r"[-_.]+", "-", name).lower(), version) != version:
            continue
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                top, _, leaf = member.partition("/")
                if top.endswith(".dist-info") and leaf in ("METADATA", "RECORD"):
                    archive.extract(member, site)
    dists = list(importlib.metadata.distributions(path=[str(site)]))
    if len(dists) != 207:
        pytest.skip(f"the cache holds another stack ({len(dists)} distributions)")
    overlaps, libcuda_owners = stack_probe.scan_records(dists, prefix=str(tmp_path / "venv"))
    assert overlaps == json.loads((PROBES / "real-stack-overlaps.json").read_text())
    # No wheel of the real stack installs a libcuda.
    assert libcuda_owners == {}


def _fault_wheels(tmp_path: Path) -> dict[str, Path]:
    out = tmp_path / "wheels"
    return {spec.name: write_wheel(spec, out) for _, spec in faults.fault_specs()}


def test_the_overlap_stand_ins_installed_one_after_the_other(tmp_path):
    built = _fault_wheels(tmp_path)
    site = _site(tmp_path)
    _install(built["sandbox-overlap-standin-a"], site)
    _install(built["sandbox-overlap-standin-b"], site)
    dists = list(importlib.metadata.distributions(path=[str(site)]))
    overlaps, _ = stack_probe.scan_records(dists, prefix=str(tmp_path / "venv"))
    # __init__.py: the same bytes in both (left out); shared.py differs, b's copy on disk.
    (overlap,) = overlaps
    assert overlap["path"] == faults.OVERLAP_PATH == "sandbox_overlap_standin/shared.py"
    assert [o["name"] for o in overlap["owners"]] == [
        "sandbox-overlap-standin-a",
        "sandbox-overlap-standin-b",
    ]
    assert overlap["on_disk"] == "sandbox-overlap-standin-b"
    (problem,) = stack.overlap_problems(overlaps)[0]
    assert problem == (
        "sandbox_overlap_standin/shared.py is written by sandbox-overlap-standin-a 1.0 and "
        "sandbox-overlap-standin-b 1.0 with different contents: the one installed last won (on disk "
        "now: sandbox-overlap-standin-b 1.0's), so another install order gives another stack (pip does "
        "not detect it). Remedy: install only one of them; where both are needed, force-reinstall the "
        "one whose files must win (`pip install --force-reinstall --no-deps <name>==<version>`) after the "
        "install and check again"
    )


def test_a_distribution_alone_or_listed_twice_is_no_overlap(tmp_path):
    built = _fault_wheels(tmp_path)
    site = _site(tmp_path)
    _install(built["sandbox-overlap-standin-a"], site)
    # The same site-packages twice on the path (a .pth file, a duplicate sys.path entry).
    dists = list(importlib.metadata.distributions(path=[str(site), str(site)]))
    assert len(dists) == 2
    assert stack_probe.scan_records(dists, prefix=str(tmp_path / "venv"))[0] == []


# -- a libcuda other than the driver's -----------------------------------------------------


def _write(root: Path, path: str, text: str = "") -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def _link(root: Path, path: str, to: str) -> None:
    link = root / path.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(to)


def _host(tmp_path: Path) -> Path:
    """A host tree: the driver's libcuda 590.48.01 where Debian's driver packages put it,
    NVIDIA's cuda-compat-13-0 (580.65.06) in /usr/local/cuda-13.0/compat named by an
    ld.so.conf.d file, and a copy of that compat library in the venv beside the toolkit
    wheel's link-time stub."""
    root = tmp_path / "root"
    _write(
        root,
        "/etc/ld.so.conf",
        "include /etc/ld.so.conf.d/*.conf\n\n",
    )
    _write(root, "/etc/ld.so.conf.d/libc.conf", "# libc default configuration\n/usr/local/lib\n")
    _write(
        root,
        "/etc/ld.so.conf.d/x86_64-linux-gnu.conf",
        "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
    )
    _write(root, "/etc/ld.so.conf.d/000-cuda-compat.conf", "/usr/local/cuda-13.0/compat/\nhwcap 0 nosegneg\n")
    _write(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.590.48.01", "driver")
    _link(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.590.48.01")
    _link(root, "/usr/lib/x86_64-linux-gnu/libcuda.so", "libcuda.so.1")
    _write(root, "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06", "compat")
    _link(root, "/usr/local/cuda-13.0/compat/libcuda.so.1", "libcuda.so.580.65.06")
    _link(root, "/usr/local/cuda-13.0/compat/libcuda.so", "libcuda.so.1")
    site = "/opt/ml-env-cu130/lib/python3.11/site-packages"
    _write(root, f"{site}/vendored/lib/libcuda.so.580.65.06", "compat")
    _link(root, f"{site}/vendored/lib/libcuda.so.1", "libcuda.so.580.65.06")
    _write(root, f"{site}/nvidia/cu13/lib/stubs/libcuda.so", "stub")
    _write(root, "/opt/extra/libcuda.so.1", "a plain file")
    _write(root, "/opt/extra/libcuda.so.575.57.08", "a plain file")
    return root


def test_ld_so_conf_is_read_as_ldconfig_reads_it(tmp_path):
    root = _host(tmp_path)
    _write(root, "/etc/ld.so.conf.d/zz-relative.conf", "include more/*.conf # a comment\n")
    _write(root, "/etc/ld.so.conf.d/more/extra.conf", "/opt/extra\n")
    assert stack_probe.ld_so_conf_dirs(str(root)) == [
        ("/usr/local/cuda-13.0/compat", "/etc/ld.so.conf.d/000-cuda-compat.conf"),
        ("/usr/local/lib", "/etc/ld.so.conf.d/libc.conf"),
        ("/usr/local/lib/x86_64-linux-gnu", "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"),
        ("/lib/x86_64-linux-gnu", "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"),
        ("/usr/lib/x86_64-linux-gnu", "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"),
        ("/opt/extra", "/etc/ld.so.conf.d/more/extra.conf"),
    ]


def test_ld_so_conf_d_alone_is_read_when_ld_so_conf_is_missing(tmp_path):
    root = _host(tmp_path)
    (root / "etc" / "ld.so.conf").unlink()
    assert [d for d, _ in stack_probe.ld_so_conf_dirs(str(root))][0] == "/usr/local/cuda-13.0/compat"


def _found(tmp_path: Path) -> list[dict]:
    root = _host(tmp_path)
    dirs = [("/opt/extra", "LD_LIBRARY_PATH of sglang.service"), *stack_probe.ld_so_conf_dirs(str(root))]
    return stack_probe.libcuda_files("/opt/ml-env-cu130", dirs, root=str(root))


def test_every_libcuda_in_the_venv_on_ld_library_path_and_in_ld_so_conf_is_found(tmp_path):
    site = "/opt/ml-env-cu130/lib/python3.11/site-packages"
    entries = _found(tmp_path)
    found = {(e["path"], e["version"], e["where"]) for e in entries}
    assert found == {
        (f"{site}/nvidia/cu13/lib/stubs/libcuda.so", None, "venv"),
        (f"{site}/vendored/lib/libcuda.so.1", "580.65.06", "venv"),
        (f"{site}/vendored/lib/libcuda.so.580.65.06", "580.65.06", "venv"),
        # a plain libcuda.so.1 takes the version of the one libcuda.so.<version> beside it
        ("/opt/extra/libcuda.so.1", "575.57.08", "LD_LIBRARY_PATH of sglang.service"),
        ("/opt/extra/libcuda.so.575.57.08", "575.57.08", "LD_LIBRARY_PATH of sglang.service"),
        ("/usr/local/cuda-13.0/compat/libcuda.so", "580.65.06", "/etc/ld.so.conf.d/000-cuda-compat.conf"),
        ("/usr/local/cuda-13.0/compat/libcuda.so.1", "580.65.06", "/etc/ld.so.conf.d/000-cuda-compat.conf"),
        (
            "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06",
            "580.65.06",
            "/etc/ld.so.conf.d/000-cuda-compat.conf",
        ),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so", "590.48.01", "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "590.48.01", "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"),
        (
            "/usr/lib/x86_64-linux-gnu/libcuda.so.590.48.01",
            "590.48.01",
            "/etc/ld.so.conf.d/x86_64-linux-gnu.conf",
        ),
    }
    compat = next(e for e in entries if e["path"] == "/usr/local/cuda-13.0/compat/libcuda.so.1")
    assert compat["target"] == "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06"


def test_on_a_workstation_board_each_foreign_libcuda_is_refused_naming_804_and_803(tmp_path):
    verdict = _verdict(
        {**_consistent_real_stack(), "libcuda": _found(tmp_path)},
        gpu_names=[RTX_SERVER, RTX_SERVER, RTX_MAX_Q, RTX_MAX_Q],
        driver_version="590.48.01",
    )
    assert verdict["consistent"] is False
    site = "/opt/ml-env-cu130/lib/python3.11/site-packages"
    why_804 = (
        "NVIDIA forward compatibility serves only NVIDIA Data Center GPUs and select NGC Server Ready "
        'RTX SKUs (CUDA Compatibility, "Forward Compatibility"), not '
        f"{RTX_MAX_Q}: CUDA fails with cudaErrorCompatNotSupportedOnDevice (804, "
        '"forward compatibility was attempted on non supported HW")'
    )
    assert verdict["problems"] == [
        f"{site}/vendored/lib/libcuda.so.1 (libcuda 580.65.06, in the new venv) would be loaded instead "
        f"of the NVIDIA driver's libcuda (590.48.01): {why_804}; the driver 590.48.01 is newer than this "
        'compat library (580.65.06): CUDA fails with cudaErrorSystemDriverMismatch (803, "system has '
        'unsupported display driver / cuda driver combination"). Remedy: remove the file from the new '
        "venv; the driver's own libcuda is the one this host needs",
        "/opt/extra/libcuda.so.1 (libcuda 575.57.08, in a directory of the LD_LIBRARY_PATH of "
        f"sglang.service) would be loaded instead of the NVIDIA driver's libcuda (590.48.01): {why_804}; "
        "the driver 590.48.01 is newer than this compat library (575.57.08): CUDA fails with "
        'cudaErrorSystemDriverMismatch (803, "system has unsupported display driver / cuda driver '
        'combination"). Remedy: remove /opt/extra from the LD_LIBRARY_PATH of sglang.service; the '
        "driver's own libcuda is the one this host needs",
        "/usr/local/cuda-13.0/compat/libcuda.so.1 (libcuda 580.65.06, in a directory "
        "/etc/ld.so.conf.d/000-cuda-compat.conf gives the loader) would be loaded instead of the NVIDIA "
        f"driver's libcuda (590.48.01): {why_804}; the driver 590.48.01 is newer than this compat "
        'library (580.65.06): CUDA fails with cudaErrorSystemDriverMismatch (803, "system has '
        'unsupported display driver / cuda driver combination"). Remedy: remove the line '
        "/usr/local/cuda-13.0/compat from /etc/ld.so.conf.d/000-cuda-compat.conf (or the file) and run "
        "ldconfig; the driver's own libcuda is the one this host needs",
    ]


def test_on_data_center_gpus_a_newer_driver_is_refused_with_803_alone(tmp_path):
    verdict = _verdict(
        {**_consistent_real_stack(), "libcuda": _found(tmp_path)},
        gpu_names=[RTX_SERVER] * 8,
        driver_version="590.48.01",
    )
    assert len(verdict["problems"]) == 3
    assert all("(803, " in p and "(804, " not in p for p in verdict["problems"])


def test_on_data_center_gpus_with_an_older_driver_forward_compatibility_passes(tmp_path):
    # NVIDIA-NeMo/labs-molt PR #44's case: the compat libcuda for a driver older than CUDA 13's.
    found = [e for e in _found(tmp_path) if "/opt/extra/" not in e["path"]]
    verdict = _verdict(
        {**_consistent_real_stack(), "libcuda": found},
        gpu_names=["NVIDIA H100 80GB HBM3"] * 8,
        driver_version="535.216.03",
    )
    assert verdict["problems"] == []
    assert verdict["consistent"] is True
    notes = [n for n in verdict["notes"] if "forward compatibility over the driver" in n]
    assert notes == [
        "/opt/ml-env-cu130/lib/python3.11/site-packages/vendored/lib/libcuda.so.1 (libcuda 580.65.06, in "
        "the new venv) is CUDA forward compatibility over the driver 535.216.03, on GPUs NVIDIA lists for it",
        "/usr/local/cuda-13.0/compat/libcuda.so.1 (libcuda 580.65.06, in a directory "
        "/etc/ld.so.conf.d/000-cuda-compat.conf gives the loader) is CUDA forward compatibility over the "
        "driver 535.216.03, on GPUs NVIDIA lists for it",
        # The driver's own 590.48.01 is another driver's here: it counts, as a newer library.
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1 (libcuda 590.48.01, in a directory "
        "/etc/ld.so.conf.d/x86_64-linux-gnu.conf gives the loader) is CUDA forward compatibility over the "
        "driver 535.216.03, on GPUs NVIDIA lists for it",
    ]


def test_the_drivers_own_libcuda_and_the_stub_are_not_counted(tmp_path):
    found = [
        e
        for e in _found(tmp_path)
        if e["path"].startswith(("/usr/lib/", "/opt/ml-env-cu130/lib/python3.11/site-packages/nvidia/"))
    ]
    verdict = _verdict(
        {**_consistent_real_stack(), "libcuda": found}, gpu_names=[RTX_MAX_Q], driver_version="590.48.01"
    )
    assert verdict["problems"] == []
    assert not [n for n in verdict["notes"] if "libcuda" in n]
    # The driver unknown: a loader-configuration directory's libcuda (not a compat one) is taken
    # for the driver's own.
    unknown = _verdict({**_consistent_real_stack(), "libcuda": found}, gpu_names=[RTX_MAX_Q])
    assert unknown["problems"] == []


@pytest.mark.parametrize(
    ("name", "served"),
    [
        (RTX_SERVER, True),
        ("NVIDIA RTX PRO 4500 Blackwell Server Edition", True),
        (RTX_MAX_Q, False),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", False),
        ("NVIDIA GeForce RTX 5090", False),
        ("NVIDIA GeForce RTX 3060", False),
        ("NVIDIA H100 80GB HBM3", True),
        ("NVIDIA H200", True),
        ("NVIDIA B200", True),
        ("NVIDIA GB200", True),
        ("NVIDIA A100-SXM4-40GB", True),
        ("NVIDIA L4", True),
        ("NVIDIA L40S", True),
        ("NVIDIA A10", True),
        ("Tesla T4", True),
        ("Tesla V100-SXM2-32GB", True),
        ("NVIDIA RTX A6000", False),
    ],
)
def test_the_gpus_forward_compatibility_serves(name, served):
    assert stack.forward_compat_gpu(name) is served


def test_the_compat_stand_in_in_a_venv_is_found_and_refused_once(tmp_path):
    built = _fault_wheels(tmp_path)
    venv = tmp_path / "venv"
    site = _site(tmp_path)
    _install(built["sandbox-compat-libcuda-standin"], site)
    dists = list(importlib.metadata.distributions(path=[str(site)]))
    _, owners = stack_probe.scan_records(dists, prefix=str(venv))
    found = stack_probe.libcuda_files(str(venv), [], owners=owners)
    lib = f"{site}/{faults.COMPAT_LIBCUDA_DIR}"
    assert [(e["path"], e["version"], e["where"], e["owner"]) for e in found] == [
        (f"{lib}/libcuda.so.1", "580.65.06", "venv", "sandbox-compat-libcuda-standin"),
        (f"{lib}/libcuda.so.580.65.06", "580.65.06", "venv", "sandbox-compat-libcuda-standin"),
    ]
    verdict = _verdict(
        {**_consistent_real_stack(), "libcuda": found},
        gpu_names=[RTX_SERVER, RTX_MAX_Q],
        driver_version="590.48.01",
    )
    (problem,) = verdict["problems"]
    assert problem.startswith(
        f"{lib}/libcuda.so.1 (libcuda 580.65.06, in the new venv) would be loaded instead of the NVIDIA "
        "driver's libcuda (590.48.01): "
    )
    assert "cudaErrorCompatNotSupportedOnDevice (804, " in problem
    assert "cudaErrorSystemDriverMismatch (803, " in problem
    assert problem.endswith(
        "Remedy: uninstall sandbox-compat-libcuda-standin from the new venv (it installed this file); "
        "the driver's own libcuda is the one this host needs"
    )


def test_without_gpu_names_a_foreign_libcuda_is_a_note(tmp_path):
    found = [e for e in _found(tmp_path) if "/vendored/" in e["path"]]
    verdict = _verdict({**_consistent_real_stack(), "libcuda": found}, driver_version="575.57.08")
    assert verdict["problems"] == []
    assert any(
        "the GPUs are unknown, so forward compatibility was not checked" in n for n in verdict["notes"]
    )


def test_the_service_ld_library_path_is_read_from_its_main_process_or_its_unit(monkeypatch, tmp_path):
    class Done:
        returncode = 0

        def __init__(self, stdout):
            self.stdout = stdout

    # systemctl show prints Environment= space-separated (service.parse_show).
    show = "MainPID=0\nEnvironment=CUDA_HOME=/usr/local/cuda LD_LIBRARY_PATH=/usr/local/cuda-13.0/compat::/opt/x\n"
    monkeypatch.setattr(stack_probe.subprocess, "run", lambda *a, **k: Done(show))
    assert stack_probe.service_library_path("sglang.service") == ["/usr/local/cuda-13.0/compat", "/opt/x"]
    monkeypatch.setenv("LD_LIBRARY_PATH", "/from/env")
    dirs = stack_probe._library_dirs("sglang.service", ["/given"])
    assert dirs[:4] == [
        ("/from/env", "LD_LIBRARY_PATH"),
        ("/usr/local/cuda-13.0/compat", "LD_LIBRARY_PATH of sglang.service"),
        ("/opt/x", "LD_LIBRARY_PATH of sglang.service"),
        ("/given", "library_path"),
    ]


# -- the check step: the refusal and where its text goes -------------------------------------


def test_the_wheels_check_refuses_an_overlap_and_a_compat_libcuda_before_the_switch(tmp_path):
    calls = []

    def probe(args):
        validated = ArgumentSpecValidator(stack_probe.PROBE_SPEC).validate(args)
        assert not validated.error_messages
        calls.append(validated.validated_parameters)
        return {
            "changed": False,
            "probe": {
                **_probe("real-stack-pinned"),
                "overlaps": _cutlass_overlaps(tmp_path),
                "libcuda": [e for e in _found(tmp_path) if "/vendored/" in e["path"]],
            },
        }

    venv = str(tmp_path / "srv" / "ml-env-cu130")
    options = {
        "cu130_wheels_venv": venv,
        "cu130_wheels_expected_cuda_major": 13,
        "cu130_wheels_compute_capabilities": [],
        "cu130_wheels_driver_library_optional": True,
        "cuda13_service_name": "sglang.service",
        "stack_switch_environment": {"LD_LIBRARY_PATH": "/usr/local/cuda-13.0/compat:/opt/x"},
    }
    host = FakeHost(handlers={"cuda13_stack_probe": probe})
    with pytest.raises(StepFailed) as failed:
        wheels.check(
            host,
            options,
            compute_capabilities=["12.0"],
            driver_version="590.48.01",
            gpu_names=[RTX_MAX_Q],
        )
    assert calls == [
        {
            "modules": ["torch", "sgl_kernel", "flashinfer"],
            "service": "sglang.service",
            "library_path": ["/usr/local/cuda-13.0/compat", "/opt/x"],
        }
    ]
    message = failed.value.msg
    assert message.startswith(
        f"The new stack in {venv} is inconsistent: nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so is "
        "written by nvidia-cutlass-dsl-libs-base 4.5.0 and nvidia-cutlass-dsl-libs-cu13 4.5.0 with "
        "different contents"
    )
    assert "cudaErrorCompatNotSupportedOnDevice (804, " in message
    assert "cudaErrorSystemDriverMismatch (803, " in message
    assert failed.value.record["verdict"]["consistent"] is False


# -- the sandbox's fault stand-ins, installed by pip from the mirror and probed -------------


def test_pip_installs_the_fault_stand_ins_silently_and_the_probe_finds_both_faults(mirror_url, tmp_path):
    from sandbox_mirror import testkit

    python = testkit.make_venv(tmp_path / "ml-env-cu130")
    testkit.pip(
        python,
        "--index-url",
        f"{mirror_url}/{faults.FAULTS_INDEX}",
        "sandbox-overlap-standin-a==1.0",
        "sandbox-overlap-standin-b==1.0",
        "sandbox-compat-libcuda-standin==1.0",
    )
    out = testkit.run([str(python), stack_probe.__file__, "json"], testkit.clean_env()).stdout
    probe = json.loads(out)
    (overlap,) = probe["overlaps"]
    assert overlap["path"] == faults.OVERLAP_PATH
    assert overlap["on_disk"] in ("sandbox-overlap-standin-a", "sandbox-overlap-standin-b")
    venv_libcuda = [e for e in probe["libcuda"] if e["where"] == "venv"]
    assert [(Path(e["path"]).name, e["version"], e["owner"]) for e in venv_libcuda] == [
        ("libcuda.so.1", "580.65.06", "sandbox-compat-libcuda-standin"),
        (f"libcuda.so.{faults.COMPAT_LIBCUDA_VERSION}", "580.65.06", "sandbox-compat-libcuda-standin"),
    ]
    verdict = _verdict(
        {**_consistent_real_stack(), "overlaps": probe["overlaps"], "libcuda": venv_libcuda},
        gpu_names=[RTX_SERVER, RTX_MAX_Q],
        driver_version="590.48.01",
    )
    overlap_problem, compat_problem = verdict["problems"]
    assert overlap_problem.startswith(
        "sandbox_overlap_standin/shared.py is written by sandbox-overlap-standin-a 1.0 and "
        "sandbox-overlap-standin-b 1.0 with different contents: the one installed last won"
    )
    assert "cudaErrorCompatNotSupportedOnDevice (804, " in compat_problem
    assert "cudaErrorSystemDriverMismatch (803, " in compat_problem
