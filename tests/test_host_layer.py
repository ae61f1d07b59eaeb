"""sandbox/image/host-layer.py: the provisioned host layer's key changes with every input.

A stale layer (a scenario host provisioned from older doubles, role or
mirror) must be impossible: the key covers the base image, the mirror's
stamp and every file that goes into the provisioning.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("host_layer", ROOT / "sandbox" / "image" / "host-layer.py")
host_layer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_layer)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the layer's inputs (without the mirror's sources, which the stamp stands for)."""
    for name in host_layer.INPUTS:
        src = ROOT / name
        dst = tmp_path / name
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return tmp_path


def key(root: Path, base: str = "localhost/cuda13-sandbox:abc", stamp: str = "s1\n") -> str:
    return host_layer.layer_key(root, base, stamp)


def test_the_key_is_the_same_for_the_same_inputs(tree):
    assert key(tree) == key(tree)
    assert len(key(tree)) == 16


@pytest.mark.parametrize(
    "change",
    [
        "sandbox/host/nvidia-smi",
        "sandbox/roles/sandbox_host/tasks/python.yml",
        "sandbox/roles/sandbox_host/defaults/main.yml",
        "roles/cuda13/tasks/serve.yml",
        "src/cuda13_upgrade/hostscripts/service_cycle.py",
        "src/cuda13_upgrade/hostscripts/server_auth.py",  # service_cycle imports it
        "molecule/shared/provision.yml",
        "sandbox/mirror/scenarios/default.json",
    ],
)
def test_an_edited_input_changes_the_key(tree, change):
    before = key(tree)
    path = tree / change
    path.write_bytes(path.read_bytes() + b"\n")
    assert key(tree) != before


def test_a_new_file_a_removed_file_and_a_mode_change_each_change_the_key(tree):
    before = key(tree)
    added = tree / "sandbox" / "host" / "nvidia-smi-states" / "new-state.json"
    added.write_text("{}\n")
    with_added = key(tree)
    assert with_added != before
    added.unlink()
    assert key(tree) == before
    (tree / "sandbox" / "roles" / "sandbox_host" / "tasks" / "gpu.yml").unlink()
    assert key(tree) != before


def test_the_mode_of_a_file_is_part_of_the_key(tree):
    script = tree / "sandbox" / "host" / "sglang-router"
    before = key(tree)
    script.chmod(script.stat().st_mode & ~0o111)
    assert key(tree) != before


def test_the_base_image_and_the_mirror_stamp_are_part_of_the_key(tree):
    assert key(tree, base="localhost/cuda13-sandbox:other") != key(tree)
    assert key(tree, stamp="s2\n") != key(tree)
    # the stamp file's trailing newline is not a change
    assert key(tree, stamp="s1") == key(tree)


def test_in_a_git_checkout_ignored_build_products_do_not_change_the_key(tree):
    (tree / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    before = key(tree)
    products = tree / "sandbox" / "sglang-src" / "python" / "sglang.egg-info"
    products.mkdir(parents=True)
    (products / "PKG-INFO").write_text("Name: sglang\n")
    assert key(tree) == before
    # an untracked source file that git does not ignore is an input
    (tree / "sandbox" / "host" / "extra-double").write_text("#!/bin/sh\n")
    assert key(tree) != before


def test_a_missing_input_is_an_error_naming_it(tree):
    (tree / "roles" / "cuda13" / "tasks" / "serve.yml").unlink()
    with pytest.raises(FileNotFoundError, match="roles/cuda13/tasks/serve.yml"):
        key(tree)


def test_the_checkout_s_own_key_is_stable():
    assert key(ROOT) == key(ROOT)
