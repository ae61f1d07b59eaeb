"""Stand-ins against the records of the real distributions, and the inventories' pins
against those records.

Records: sandbox/mirror/records/*.json, written by scripts/record-package-metadata.py from
the real files on PyPI (``source.kind: recorded``) or, for builds that only PyTorch's,
sgl-kernel's and flashinfer's own indexes serve, from the public evidence they name
(``source.kind: inferred``).
"""

from __future__ import annotations

import email.parser
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sandbox_mirror import catalog, gitrepo, records, standins

from cuda13_upgrade.resolve import Conflict, pin_conflicts

REPO = Path(__file__).resolve().parents[1]
SPECS = standins.all_specs()


def _metadata(spec) -> email.message.Message:
    from sandbox_mirror.wheels import _metadata_text

    return email.parser.Parser().parsestr(_metadata_text(spec), headersonly=True)


@pytest.mark.parametrize("index,spec", SPECS, ids=[f"{i}:{s.name}-{s.version}" for i, s in SPECS])
def test_stand_in_metadata_equals_its_record(index, spec):
    rec = records.load(spec.name, spec.version)
    meta = _metadata(spec)
    assert canonicalize_name(meta["Name"]) == canonicalize_name(rec["metadata"]["Name"])
    assert meta["Version"] == rec["metadata"]["Version"] == rec["version"]
    assert meta.get("Requires-Python") == rec["metadata"]["Requires-Python"]
    # Requires-Dist: the record's lines on imitated distributions, verbatim and in order.
    kept = meta.get_all("Requires-Dist") or []
    assert kept == [
        r for r in rec["metadata"]["Requires-Dist"] if catalog.is_imitated(records.requirement_name(r))
    ]
    assert (meta.get_all("Provides-Extra") or []) == rec["metadata"]["Provides-Extra"]
    # The file name's tag is the real file's (torch: recorded for cp311, built per CPython).
    expected = records.wheel_tag(rec)
    if spec.name == "torch":
        python = spec.tag.split("-")[0]
        expected = expected.replace("cp311", python)
    assert spec.tag == expected
    # Every top-level package of the stand-in is one the real wheel has.
    top = {p.split("/", 1)[0] for p in spec.files if "/" in p}
    assert top <= set(rec.get("import_names", [])) | {"nvidia"}, top


def test_library_stand_ins_hold_the_real_shared_objects():
    for _, spec in SPECS:
        rec = records.load(spec.name, spec.version)
        if spec.name.startswith("nvidia-") or spec.name == "triton":
            so = sorted(p for p in spec.files if re.search(r"\.so(\.\d+)*$", p))
            assert so == records.shared_objects(rec), spec.name


def test_a_stand_in_that_differs_from_its_record_fails_the_comparison():
    build = catalog.TORCH_BUILDS[1]
    spec = standins.torch_spec(build, "cp311")
    rec = records.load("torch", build.version)
    altered = [
        r.replace("nvidia-cudnn-cu13==9.13.0.50", "nvidia-cudnn-cu13==9.17.1.4") for r in build.requires
    ]
    assert altered != catalog.imitated_requirements(rec)
    assert (_metadata(spec).get_all("Requires-Dist") or []) == catalog.imitated_requirements(rec)


@pytest.mark.parametrize("path", sorted(records.RECORDS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_record_names_its_source(path):
    import json

    rec = json.loads(path.read_text())
    assert path.name == f"{rec['name']}-{rec['version']}.json"
    for source in (rec["source"], rec.get("wheel_source")):
        if source is None:
            continue
        assert source["date"] and source["filename"]
        if source["kind"] == "recorded":
            assert source["url"].startswith("https://files.pythonhosted.org/")
            assert source["url"].endswith("/" + source["filename"])
            assert source["sha256"] == source["sha256_downloaded"]
            assert source["command"].startswith(
                "pip --isolated download --no-deps --index-url https://pypi.org/simple"
            )
        else:
            assert source["kind"] == "inferred"
            assert source["basis"] and (REPO / "sandbox/mirror/records" / source["like"]).is_file()
    if "wheel_source" in rec:
        # The sdist's record with its wheel's: the wheel file, its tags, its packages.
        assert rec["source"]["filename"].endswith(".tar.gz")
        assert rec["wheel_source"]["filename"].endswith(".whl")
        assert rec["wheel"]["tags"] and rec["import_names"]


def _recorder():
    import importlib.util

    spec = importlib.util.spec_from_file_location("recorder", REPO / "scripts" / "record-package-metadata.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_release_recorded_from_sdist_and_wheel_keeps_both_in_one_record():
    recorder = _recorder()
    both = records.load("sglang", "0.5.9")
    sdist = {k: v for k, v in both.items() if k not in (*recorder._WHEEL_FACTS, "wheel_source")}
    wheel = {k: both[k] for k in ("name", "version", "metadata", *recorder._WHEEL_FACTS)}
    wheel["source"] = both["wheel_source"]
    # In either order, and again: one record.
    assert recorder.merge(sdist, wheel) == both
    assert recorder.merge(wheel, sdist) == both
    assert recorder.merge(both, sdist) == both == recorder.merge(both, wheel)
    assert recorder.merge(sdist, sdist) == sdist
    other = {**wheel, "metadata": {**wheel["metadata"], "Requires-Dist": ["torch==2.10.0"]}}
    with pytest.raises(SystemExit, match=r"differ in \['Requires-Dist'\]"):
        recorder.merge(sdist, other)


def test_the_sglang_0_5_9_wheel_is_pure_python_with_the_sdists_requirements():
    rec = records.load("sglang", "0.5.9")
    assert records.wheel_tag(rec) == "py3-none-any"
    assert rec["wheel"]["root_is_purelib"] is True
    assert rec["import_names"] == ["sglang"]
    assert rec["shared_objects"] == {}
    # Its stand-in: the same module at the same version, and no build record of a source build.
    spec = standins.sglang_spec("0.5.9")
    assert spec.tag == "py3-none-any" and spec.purelib
    assert b'__version__ = "0.5.9"' in spec.files["sglang/version.py"]
    assert "sglang/_build_info.json" not in spec.files
    assert "sglang/launch_server.py" in spec.files


def test_recorded_torch_reports_its_cuda_build_in_version_py():
    assert records.load("torch", "2.9.1")["runtime"]["torch/version.py"]["__version__"] == "2.9.1+cu128"
    assert records.load("torch", "2.14.1")["runtime"]["torch/version.py"]["__version__"] == "2.14.1+cu130"
    # PyPI wheels carry no local label in their metadata.
    assert records.load("torch", "2.14.1")["metadata"]["Version"] == "2.14.1"
    assert records.cuda_runtime_needed(records.load("torch", "2.9.1")) == "libcudart.so.12"
    assert records.cuda_runtime_needed(records.load("sgl-kernel", "0.3.21")) == "libcudart.so.12"


@pytest.mark.parametrize("release", catalog.SGLANG_RELEASES, ids=lambda r: r.tag)
def test_sglang_source_tree_declares_what_the_real_release_declares(release):
    real = records.load("sglang", release.version)
    files = gitrepo._versioned(gitrepo.source_files(REPO / "sandbox/sglang-src"), release.version)
    declared = tomllib.loads(files["python/pyproject.toml"].decode())["project"]["dependencies"]
    assert declared == catalog.sglang_dependencies(release.version)
    pkg_info = {
        canonicalize_name(Requirement(r).name): str(Requirement(r).specifier)
        for r in real["metadata"]["Requires-Dist"]
    }
    for dep in declared:
        req = Requirement(dep)
        assert dep in real["pyproject_dependencies"]
        assert pkg_info[canonicalize_name(req.name)] == str(req.specifier)
    # Each imitated distribution the real release requires is declared.
    imitated = {
        canonicalize_name(Requirement(d).name)
        for d in real["pyproject_dependencies"]
        if catalog.is_imitated(Requirement(d).name)
    }
    assert imitated == {canonicalize_name(Requirement(d).name) for d in declared}


def test_sglang_0_5_9_pins_as_its_pkg_info_says():
    deps = catalog.sglang_dependencies("0.5.9")
    for dep in ("torch==2.9.1", "flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3", "sgl-kernel==0.3.21"):
        assert dep in deps


# -- the inventories' pins resolve against the records -----------------------------------


def _record_metadata(pins: list[str]) -> dict[str, list[str]]:
    out = {}
    for pin in pins:
        req = Requirement(pin)
        version = next(iter(req.specifier)).version
        out[canonicalize_name(req.name)] = records.requires_dist(records.load(req.name, version))
    return out


def _stack(path: str) -> tuple[list[str], str]:
    data = yaml.safe_load((REPO / path).read_text())
    return data["cu130_wheels_requirements"], data["sglang_build_version"]


def _sglang(ref: str) -> tuple[str, list[str]]:
    version = ref.removeprefix("v")
    return version, records.requires_dist(records.load("sglang", version))


STACKS = {
    "roles defaults": (
        yaml.safe_load((REPO / "roles/cu130_wheels/defaults/main.yml").read_text())[
            "cu130_wheels_requirements"
        ],
        yaml.safe_load((REPO / "roles/sglang_build/defaults/main.yml").read_text())["sglang_build_version"],
    ),
    "inventory/blackwell": _stack("inventory/blackwell/group_vars/blackwell/stack.yml"),
    "inventory/sandbox": (
        yaml.safe_load((REPO / "inventory/sandbox/group_vars/all/upgrade.yml").read_text())[
            "cu130_wheels_requirements"
        ],
        yaml.safe_load((REPO / "roles/sglang_build/defaults/main.yml").read_text())["sglang_build_version"],
    ),
    "inventory/examples/pypi-cu130.yml": _stack("inventory/examples/pypi-cu130.yml"),
}


@pytest.mark.parametrize("where", sorted(STACKS))
def test_pinned_stack_resolves_against_real_metadata(where):
    pins, ref = STACKS[where]
    assert pin_conflicts(pins, _record_metadata(pins), sglang=_sglang(ref)) == []


def test_the_old_pins_conflict_with_sglang_0_5_9():
    # What the defaults pinned before: torch 2.10.0 and flashinfer 0.6.1 beside SGLang v0.5.9.
    pins = [
        "torch==2.10.0+cu130",
        "sgl-kernel==0.3.21+cu130",
        "flashinfer-python==0.6.1",
        "flashinfer-cubin==0.6.1",
    ]
    conflicts = pin_conflicts(pins, {}, sglang=_sglang("v0.5.9"))
    assert [str(c) for c in conflicts] == [
        "sglang 0.5.9 requires flashinfer_python==0.6.3, but the pins install flashinfer-python==0.6.1",
        "sglang 0.5.9 requires flashinfer_cubin==0.6.3, but the pins install flashinfer-cubin==0.6.1",
        "sglang 0.5.9 requires torch==2.9.1, but the pins install torch==2.10.0+cu130",
    ]


def test_a_cuda_12_kernel_under_the_pypi_line_conflicts():
    # sglang-kernel 0.4.10 pins the torch it was built for.
    pins = ["torch==2.13.0", "sglang-kernel==0.4.10"]
    conflicts = pin_conflicts(pins, _record_metadata(["sglang-kernel==0.4.10"]))
    assert conflicts == [Conflict("sglang-kernel 0.4.10", "torch==2.14.1", "torch==2.13.0")]
