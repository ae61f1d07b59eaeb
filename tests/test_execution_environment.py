"""Tests of execution-environment.yml: ansible-builder turns it into a build context.

``ansible-builder create`` only writes the context (Containerfile, dependency
files, scripts); it needs no container engine and no network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
EE_FILE = ROOT / "execution-environment.yml"


def _builder() -> str:
    found = Path(sys.executable).parent / "ansible-builder"
    if found.exists():
        return str(found)
    which = shutil.which("ansible-builder")
    if which is None:
        pytest.skip("ansible-builder is not installed (pip install -e '.[dev]')")
    return which


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ee") / "context"
    proc = subprocess.run(
        [_builder(), "create", "-f", str(EE_FILE), "-c", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_schema_version_3():
    ee = yaml.safe_load(EE_FILE.read_text())
    assert ee["version"] == 3
    assert ee["images"]["base_image"]["name"]
    assert set(ee["dependencies"]) >= {
        "ansible_core",
        "ansible_runner",
        "python",
        "galaxy",
        "system",
    }


def test_context_has_the_containerfile_and_dependency_files(context):
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    assert 'ARG PYCMD="/usr/bin/python3.11"' in containerfile
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.19,<2.20 ansible-runner>=2.4,<3"' in containerfile
    assert "ansible-galaxy collection install" in containerfile
    for name in ("requirements.txt", "requirements.yml", "bindep.txt"):
        assert (context / "_build" / name).is_file(), name
    for script in ("assemble", "install-from-bindep", "introspect.py"):
        assert (context / "_build" / "scripts" / script).is_file(), script
    assert "openssh-clients [platform:rpm]" in (context / "_build" / "bindep.txt").read_text()


def test_collections(context):
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert galaxy == yaml.safe_load((ROOT / "requirements.yml").read_text())
    names = [c["name"] for c in galaxy["collections"]]
    assert names == ["community.general", "containers.podman", "ansible.posix"]


def test_python_requirements_follow_pyproject(context):
    """Every runtime dependency of pyproject.toml is in the image (ansible-runner
    through dependencies.ansible_runner); no test or lint tool is."""
    ee_reqs = {
        Requirement(line).name.lower(): str(Requirement(line).specifier)
        for line in (context / "_build" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {Requirement(r).name.lower(): str(Requirement(r).specifier) for r in project["dependencies"]}
    runner = runtime.pop("ansible-runner")
    assert ee_reqs == runtime
    ee = yaml.safe_load(EE_FILE.read_text())
    assert (
        Requirement(ee["dependencies"]["ansible_runner"]["package_pip"]).specifier
        == Requirement(f"x{runner}").specifier
    )
    dev = {Requirement(r).name.lower() for r in project["optional-dependencies"]["dev"]}
    assert not dev & set(ee_reqs)
