"""The action cuda13_sglang through ``ansible-playbook``: SGLang from its ref or its release wheel.

roles cu130_wheels and sglang_build on a local host (``-c local``) against the sandbox mirror:

* ``sglang_build_method: wheel`` twice: ``resolved`` as the preflight resolved ``sglang==0.5.9``
  with the cu130 pins (cuda13_upgrade.steps.resolve.resolve: the exact file, its hash, no further
  resolving), ``unresolved`` (no resolution) from the indexes with the stack's distributions
  constrained, over the editable tree of an earlier source build that pip would otherwise keep.
  Neither clones a tree; both end in the step's checks.
* ``sglang_build_method: source``: the mirror's SGLang repository at v0.5.9 cloned into the new
  tree and built editable against the CUDA 13.0 toolkit unpacked from the mirror's packages;
  a second run builds nothing; ``--check`` on a fresh host clones nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakehost import FakeHost
from packaging.utils import canonicalize_name
from playbook import REPO, run_playbook
from sandbox_mirror import testkit

from cuda13_upgrade.steps import resolve

PINS = [
    "torch==2.9.1+cu130",
    "sgl-kernel==0.3.21+cu130",
    "flashinfer-python==0.6.3",
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
]

PLAY = """
- name: Install the wheels and SGLang
  hosts: all
  gather_facts: false
  # The sglang_build role's defaults, the options its action reads (sglang_build_*).
  vars_files:
    - SGLANG_BUILD_DEFAULTS
  roles:
    - cu130_wheels
  tasks:
    - name: Build SGLang as the role does, and keep its record
      cuda13_sglang:
        resolved: "{{ cu130_wheels_resolved_target | default([]) }}"
      register: __sglang
    - name: Keep the step's record
      ansible.builtin.copy:
        content: "{{ __sglang | to_json }}"
        dest: "{{ cuda13_new_venv | dirname }}/sglang.json"
        mode: "0644"
      when: not ansible_check_mode
""".replace("SGLANG_BUILD_DEFAULTS", str(REPO / "roles" / "sglang_build" / "defaults" / "main.yml"))


def _mirror_vars(mirror_url: str, **more) -> dict:
    urls = [f"{mirror_url}/sgl-whl/cu130", f"{mirror_url}/flashinfer-whl/cu130", f"{mirror_url}/pypi/simple"]
    return {
        "cuda13_wheels_index_url": f"{mirror_url}/whl/cu130",
        "cuda13_wheels_extra_index_urls": urls,
        "cu130_wheels_requirements": PINS,
        "cu130_wheels_python": sys.executable,
        "cu130_wheels_driver_library_optional": True,
        **more,
    }


def _freeze(venv: Path) -> dict[str, str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--isolated", "freeze", "--all"],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = (line.split("==", 1) for line in proc.stdout.split() if "==" in line)
    return {canonicalize_name(name): version for name, version in pins}


def _pip_show(venv: Path) -> str:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--isolated", "show", "sglang"],
        capture_output=True,
        text=True,
    ).stdout


def _earlier_source_build(mirror_url: str, venv: Path, tree: Path) -> None:
    """What a source run of the same release left: the stand-in tree installed editable."""
    python = testkit.make_venv(venv)
    testkit.pip(python, "--index-url", f"{mirror_url}/pypi/simple", "setuptools", "wheel")
    testkit.clone_sglang(mirror_url, "v0.5.9", tree)
    testkit.pip(python, "--no-index", "--no-deps", "--no-build-isolation", "-e", str(tree / "python"))
    assert "Editable project location" in _pip_show(venv)


def _run(tmp_path: Path, name: str, extra: dict, *args: str, resolved=None) -> subprocess.CompletedProcess:
    (tmp_path / name).mkdir(exist_ok=True)
    host = {
        "cuda13_new_venv": f"{tmp_path}/{name}/venv",
        "cuda13_new_sglang_src": f"{tmp_path}/{name}/sglang-cu130",
        "cuda13_state_dir": f"{tmp_path}/{name}/state",
        "cuda13_old_venv": f"{tmp_path}/{name}/old-venv",
        "cuda13_old_sglang_src": f"{tmp_path}/{name}/old-sglang",
    }
    if resolved is not None:
        host["cu130_wheels_resolved_target"] = resolved
    inventory = tmp_path / f"{name}.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"hosts": {name: host}, "vars": {"ansible_connection": "local"}}})
    )
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    return run_playbook(play, *args, "-e", json.dumps(extra), inventory=inventory, roles=True, timeout=900)


def _record(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / name / "sglang.json").read_text())


@pytest.fixture(scope="module")
def wheel_resolution(mirror_url, tmp_path_factory):
    """The preflight's resolution of the pins with ``sglang==0.5.9`` (sglang_build_method wheel)."""
    root = tmp_path_factory.mktemp("preflight")
    extra = _mirror_vars(mirror_url)
    options = {
        **extra,
        "cu130_wheels_index_url": extra["cuda13_wheels_index_url"],
        "cu130_wheels_extra_index_urls": extra["cuda13_wheels_extra_index_urls"],
        "cu130_wheels_pip_tmpdir": str(root / "venv" / ".pip-tmp"),
        "sglang_build_method": "wheel",
        "sglang_build_version": "v0.5.9",
    }
    return resolve.resolve(FakeHost("resolved"), options, run_dir=str(root / "run"))


def test_the_release_wheel_goes_into_the_new_venv_and_no_tree_is_cloned(
    tmp_path, mirror_url, wheel_resolution
):
    extra = _mirror_vars(
        mirror_url,
        # Unreachable: the wheel method clones nothing.
        sglang_build_repo="http://127.0.0.1:9/git/sglang.git",
        sglang_build_method="wheel",
    )
    # The preflight resolved sglang==0.5.9 from the index, with its hash.
    [wheel] = [d for d in wheel_resolution["resolved"] if d["name"] == "sglang"]
    assert wheel["version"] == "0.5.9" and wheel["url"].endswith(".whl") and len(wheel["sha256"]) == 64
    proc = _run(tmp_path, "resolved", extra, resolved=wheel_resolution["resolved"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    record = _record(tmp_path, "resolved")
    assert (record["built"], record["wheel_from"], record["changed"]) == (True, "resolved", True)
    assert record["requirement"] == "sglang==0.5.9"

    _earlier_source_build(
        mirror_url, tmp_path / "unresolved" / "venv", tmp_path / "unresolved" / "earlier-tree"
    )
    proc = _run(tmp_path, "unresolved", extra)
    again = proc.stdout + proc.stderr
    assert proc.returncode == 0, again[-6000:]
    for name in ("resolved", "unresolved"):
        venv = tmp_path / name / "venv"
        freeze = _freeze(venv)
        assert freeze["sglang"] == "0.5.9"
        assert (freeze["torch"], freeze["sgl-kernel"]) == ("2.9.1+cu130", "0.3.21+cu130")
        assert "Editable project location" not in _pip_show(venv)
        assert not (tmp_path / name / "sglang-cu130").exists()
        imported = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sglang; print(sglang.__version__, sglang.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout.split()
        assert imported[0] == "0.5.9" and imported[1].startswith(f"{venv}/lib/")
        written = json.loads((tmp_path / name / "state" / "sglang-build.json").read_text())
        assert (written["method"], written["requirement"], written["src"]) == ("wheel", "sglang==0.5.9", None)
        assert written["paths"] == [str(venv)]
        assert _record(tmp_path, name)["imported"]["version"] == "0.5.9"
    # As the preflight resolved it: the exact file with its hash, nothing else resolved.
    requirement = (tmp_path / "resolved" / "venv" / "sglang-build-requirement.txt").read_text()
    assert requirement.startswith("sglang==0.5.9 --hash=sha256:")
    unresolved = _record(tmp_path, "unresolved")
    assert (unresolved["built"], unresolved["wheel_from"]) == (True, "indexes")
    # The earlier editable tree was removed from the venv first (pip would have kept it).
    assert unresolved["plan"]["remove_first"] is True
    assert (
        f"unresolved: removed the sglang {tmp_path}/unresolved/venv held, because sglang 0.5.9 is installed editable from"
        in again
    )
    # No toolkit check, no clone: nothing is built.
    assert "nvcc" not in json.dumps(unresolved)


def test_a_source_build_against_the_new_toolkit_and_a_second_run_builds_nothing(
    tmp_path, mirror_url, toolkits
):
    extra = _mirror_vars(
        mirror_url,
        sglang_build_repo=f"{mirror_url}/git/sglang.git",
        sglang_build_version="v0.5.9",
        sglang_build_cuda_home=str(toolkits["13.0"]),
        sglang_build_compute_capabilities=["12.0"],
    )
    proc = _run(tmp_path, "source", extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    venv, tree = tmp_path / "source" / "venv", tmp_path / "source" / "sglang-cu130"
    record = _record(tmp_path, "source")
    assert (record["method"], record["built"], record["src"]) == ("source", True, str(tree))
    assert record["imported"]["file"] == f"{tree}/python/sglang/__init__.py"
    assert record["freeze_difference"]["removed"] == []
    assert f"Editable project location: {tree}/python" in _pip_show(venv)
    # The stack's wheels were held at their versions by the build's constraints.
    constraints = (venv / "sglang-build-constraints.txt").read_text().splitlines()
    assert "torch==2.9.1+cu130" in constraints and not any(
        c.startswith(("pip==", "setuptools==")) for c in constraints
    )
    written = json.loads((tmp_path / "source" / "state" / "sglang-build.json").read_text())
    assert written["paths"] == [str(venv), str(tree)]
    # Built against the toolkit it was given, for the GPUs' compute capability.
    built = json.loads((tree / "python" / "sglang" / "_build_info.json").read_text())
    assert str(toolkits["13.0"]) in json.dumps(built), built

    proc = _run(tmp_path, "source", extra)
    again = proc.stdout + proc.stderr
    assert proc.returncode == 0, again[-6000:]
    record = _record(tmp_path, "source")
    assert (record["built"], record["needed"], record["changed"]) == (False, False, False)
    assert record["freeze_difference"] is None


def test_check_mode_says_what_it_would_build_and_clones_nothing(tmp_path, mirror_url):
    extra = _mirror_vars(
        mirror_url, sglang_build_repo=f"{mirror_url}/git/sglang.git", sglang_build_version="v0.5.9"
    )
    proc = _run(tmp_path, "checked", extra, "--check")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    venv, tree = tmp_path / "checked" / "venv", tmp_path / "checked" / "sglang-cu130"
    assert f"checked: Would build SGLang v0.5.9 from {tree} into {venv} against /usr/local/cuda-13.0." in out
    assert "changed: [checked]" in out.split("TASK [Build SGLang as the role does")[1]
    assert sorted(p.name for p in (tmp_path / "checked").iterdir()) == []
