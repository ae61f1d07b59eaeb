"""Pin sets against real metadata (cuda13_upgrade.resolve) and pip's resolver refusals.

pip's refusals here are real pip output: pip itself run in report mode
(``pip install --dry-run --ignore-installed --report -``) against the sandbox mirror's indexes
and a metadata-only SGLang wheel that declares what the real release declares
(``catalog.sglang_dependencies``, from the recorded sdist).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_mirror import catalog, testkit
from sandbox_mirror.wheels import WheelSpec, write_wheel

from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.resolve import (
    Conflict,
    ResolutionFailure,
    parse_pip_resolution_error,
    pin_conflicts,
    pinned_versions,
    refusal_message,
    resolution_leaders,
    resolved_requirements,
    resolved_set,
)


def test_pinned_versions_reads_exact_pins_with_extras():
    assert pinned_versions(["Flashinfer_Python[cu13]==0.7.2", "torch==2.9.1+cu130"]) == {
        "flashinfer-python": ("0.7.2", {"cu13"}),
        "torch": ("2.9.1+cu130", set()),
    }


@pytest.mark.parametrize("pin", ["torch>=2.9", "torch", "torch==2.9.*"])
def test_a_pin_that_is_not_exact_is_refused_naming_the_option(pin):
    with pytest.raises(Cuda13Error) as err:
        pinned_versions([pin])
    assert str(err.value) == (
        f"not an exact pin: {pin!r}. Option: cu130_wheels_requirements. "
        "Fix: pin one version: name==version (with its local label)."
    )


def test_a_public_pin_accepts_any_local_label_and_markers_apply_to_the_target():
    deps = ['torch==2.9.1; platform_system == "Linux"', 'torch==9; sys_platform == "win32"']
    assert pin_conflicts(["torch==2.9.1+cu130"], {}, sglang=("0.5.9", deps)) == []


def test_extra_requirements_apply_only_when_the_extra_is_requested():
    meta = {"flashinfer-python": ['torch>=2.12.0; extra == "b12x"']}
    assert pin_conflicts(["flashinfer-python==0.7.2", "torch==2.9.1"], meta) == []
    assert pin_conflicts(["flashinfer-python[b12x]==0.7.2", "torch==2.9.1"], meta) == [
        Conflict("flashinfer-python 0.7.2", 'torch>=2.12.0; extra == "b12x"', "torch==2.9.1")
    ]


# -- pip's own resolver -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_links(tmp_path_factory):
    """A find-links directory with a metadata-only ``sglang`` 0.5.9 wheel."""
    out = tmp_path_factory.mktemp("sglang-links")
    spec = WheelSpec(
        name="sglang",
        version="0.5.9",
        tag="py3-none-any",
        files={"sglang/__init__.py": b""},
        metadata=(
            ("Requires-Python", ">=3.10"),
            *(("Requires-Dist", d) for d in catalog.sglang_dependencies("0.5.9")),
        ),
        purelib=True,
    )
    write_wheel(spec, out)
    return out


def _pip_report(mirror_url, links, tag, *requirements):
    """pip in report mode; the report goes to a file: pip prints its cause lines on stdout."""
    report = links / "report.json"
    report.unlink(missing_ok=True)
    argv = [
        sys.executable,
        *("-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed", "--no-cache-dir"),
        *("--report", str(report), "--find-links", str(links)),
        *testkit.index_args(mirror_url, tag),
        *requirements,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=testkit.clean_env(), timeout=300)
    proc.report = json.loads(report.read_text()) if report.is_file() else None
    proc.output = proc.stdout + proc.stderr
    return proc


def test_pip_resolves_the_defaults_pins_with_sglang_0_5_9(mirror_url, sglang_links):
    proc = _pip_report(
        mirror_url,
        sglang_links,
        "cu130",
        "sglang==0.5.9",
        *testkit.stack_requirements("cu130")[:-1],
    )
    assert proc.returncode == 0, proc.stderr
    target = {d["name"]: d for d in resolved_set(proc.report)}
    assert target["torch"]["version"] == "2.9.1+cu130"
    assert target["flashinfer-python"]["version"] == "0.6.3"
    assert target["nvidia-cudnn-cu13"]["version"] == "9.13.0.50"
    assert len(target["torch"]["sha256"]) == 64
    assert parse_pip_resolution_error(proc.output) is None


def test_pip_refuses_flashinfer_0_6_1_beside_sglang_0_5_9(mirror_url, sglang_links):
    # The running stack's flashinfer with the target release: what the defaults pinned before.
    proc = _pip_report(
        mirror_url, sglang_links, "cu128", "sglang==0.5.9", "torch==2.9.1+cu128", "flashinfer-python==0.6.1"
    )
    assert proc.returncode == 1
    failure = parse_pip_resolution_error(proc.output)
    assert failure == ResolutionFailure(
        causes=(
            "The user requested flashinfer-python==0.6.1",
            "sglang 0.5.9 depends on flashinfer_python==0.6.3",
        )
    )
    assert failure.message() == (
        "the target stack does not resolve: The user requested flashinfer-python==0.6.1; "
        "sglang 0.5.9 depends on flashinfer_python==0.6.3. Change cu130_wheels_requirements, "
        "sglang_build_version: pin the versions the SGLang release requires (its "
        "python/pyproject.toml at that ref), or choose the release that requires your pins."
    )


def test_pip_refuses_a_version_no_index_has(mirror_url, sglang_links):
    proc = _pip_report(mirror_url, sglang_links, "cu130", "torch==2.99.0+cu130")
    assert proc.returncode == 1
    failure = parse_pip_resolution_error(proc.output)
    assert failure.missing == "torch==2.99.0+cu130"
    assert failure.available is not None and "2.9.1+cu130" in failure.available
    assert failure.message().startswith("no index has torch==2.99.0+cu130 (versions there: ")


def test_real_pypi_refusal_of_the_old_defaults():
    fixtures = Path(__file__).parent / "fixtures" / "pip"
    text = (fixtures / "sglang-0.5.9-torch-2.10.0.stdout").read_text()
    text += (fixtures / "sglang-0.5.9-torch-2.10.0.stderr").read_text()
    failure = parse_pip_resolution_error(text)
    assert failure.causes == ("The user requested torch==2.10.0", "sglang 0.5.9 depends on torch==2.9.1")
    assert refusal_message(text).startswith(
        "the target stack does not resolve: The user requested torch==2.10.0; "
        "sglang 0.5.9 depends on torch==2.9.1. Change cu130_wheels_requirements, sglang_build_version"
    )


def test_resolved_set_refuses_what_is_not_a_report():
    with pytest.raises(ValueError, match="not a pip installation report"):
        resolved_set({"version": "1"})


def test_text_without_a_resolver_refusal_is_not_one():
    assert parse_pip_resolution_error("ERROR: Could not install packages due to an OSError\n") is None


# -- the resolved set as what the wheels role installs ------------------------------------

_RESOLVED = [
    {"name": "torch", "version": "2.9.1+cu130", "url": "http://i/torch.whl", "sha256": "a" * 64},
    {"name": "sglang", "version": "0.5.9", "url": "git+http://i/sglang.git", "sha256": None},
    {"name": "Flashinfer_Python", "version": "0.6.3", "url": "http://i/fi.whl", "sha256": "b" * 64},
]


def test_resolved_requirements_pins_every_distribution_with_its_hash():
    text = resolved_requirements(_RESOLVED, ["sglang"])
    assert text == (
        f"flashinfer-python==0.6.3 --hash=sha256:{'b' * 64}\ntorch==2.9.1+cu130 --hash=sha256:{'a' * 64}\n"
    )


def test_resolved_requirements_without_every_hash_writes_none():
    # pip's hash-checking mode covers the whole file once one line has a hash.
    text = resolved_requirements(_RESOLVED)
    assert text == "flashinfer-python==0.6.3\nsglang==0.5.9\ntorch==2.9.1+cu130\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "torch"}, "not a resolved distribution"),
        (
            {"name": "torch", "version": "2.9.1", "sha256": "xyz"},
            "not a sha256 (64 hex digits) for torch: 'xyz'",
        ),
    ],
)
def test_resolved_requirements_refuses_what_is_not_a_resolved_set(entry, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        resolved_requirements([entry])


def test_one_resolution_per_distinct_target():
    keys = {"canary": "k1", "node-2": "k1", "odd": "k2", "node-3": "k1", "odd-2": "k2"}
    leaders = resolution_leaders(keys, ["canary", "node-2", "odd", "node-3", "odd-2"])
    assert leaders == {
        "canary": "canary",
        "node-2": "canary",
        "odd": "odd",
        "node-3": "canary",
        "odd-2": "odd",
    }
    with pytest.raises(ValueError, match="no resolution key for host 'lost'"):
        resolution_leaders(keys, ["lost"])


def test_pip_installs_exactly_the_resolved_set_with_hashes(mirror_url, sglang_links, tmp_path):
    # What pip resolved (with the index's sha256) installs with --require-hashes --no-deps.
    proc = _pip_report(
        mirror_url, sglang_links, "cu130", "sglang==0.5.9", *testkit.stack_requirements("cu130")[:-1]
    )
    assert proc.returncode == 0, proc.stderr
    resolved = resolved_set(proc.report)
    requirements = tmp_path / "resolved.txt"
    requirements.write_text(resolved_requirements(resolved, ["sglang"]))
    assert "--hash=sha256:" in requirements.read_text()
    python = testkit.make_venv(tmp_path / "venv")
    argv = [
        str(python),
        "-m",
        "pip",
        "--isolated",
        "install",
        "--no-deps",
        "--require-hashes",
        "--no-cache-dir",
    ]
    argv += ["-r", str(requirements), *testkit.index_args(mirror_url, "cu130")]
    install = subprocess.run(argv, capture_output=True, text=True, env=testkit.clean_env(), timeout=600)
    assert install.returncode == 0, install.stderr
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    installed = {line.split("==")[0].lower() for line in freeze.stdout.split()}
    assert installed == {d["name"] for d in resolved} - {"sglang"}
