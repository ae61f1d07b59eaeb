"""sglang_build_method: wheel, on local hosts against the sandbox mirror; the rollback's removal.

playbooks/preflight.yml, then roles cu130_wheels and sglang_build on a local host (``-c
local``, the nvidia-smi double) that installs SGLang's release wheel, twice: ``resolved`` as
the preflight resolved ``sglang==0.5.9`` with the cu130 pins (the exact file, its hash, no
further resolving), ``unresolved`` (cuda13_preflight_resolve false) from the indexes with the
stack's distributions constrained, over the editable tree of an earlier source build that
pip would otherwise keep. Neither clones a tree; both end in the role's checks. Then the
rollback's removal of the new stack (roles/rollback/tasks/remove.yml) as the step's record
says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name
from playbook import mirror_preflight_vars, run_playbook
from sandbox_mirror import testkit

REPO = Path(__file__).resolve().parents[1]

PINS = [
    "torch==2.9.1+cu130",
    "sgl-kernel==0.3.21+cu130",
    "flashinfer-python==0.6.3",
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
]


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


def _run(tmp_path: Path, mirror_url: str, name: str, resolve: bool) -> subprocess.CompletedProcess:
    (tmp_path / name).mkdir(exist_ok=True)
    hosts = {
        name: {
            "cuda13_new_venv": f"{tmp_path}/{name}/venv",
            "cuda13_new_sglang_src": f"{tmp_path}/{name}/sglang-cu130",
            "cuda13_state_dir": f"{tmp_path}/{name}/state",
        }
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": {"ansible_connection": "local"}}}))
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "preflight.yml")},
                {
                    "name": "Install the wheels and SGLang's",
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {"ansible.builtin.import_role": {"name": "cuda13"}},
                        {"ansible.builtin.import_role": {"name": "cu130_wheels"}},
                        {"ansible.builtin.import_role": {"name": "sglang_build"}},
                    ],
                },
            ]
        )
    )
    extra = {
        **mirror_preflight_vars(mirror_url, PINS),
        "nvidia_driver_check_space_stack": "sandbox",
        "cu130_wheels_driver_library_optional": True,
        # Unreachable: the wheel method clones nothing.
        "sglang_build_repo": "http://127.0.0.1:9/git/sglang.git",
        "sglang_build_method": "wheel",
        "cuda13_preflight_resolve": resolve,
    }
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "filter_plugins"),
        "PIP_CONFIG_FILE": os.devnull,
    }
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), str(play), "-i", str(inventory)]
    argv += ["-e", json.dumps(extra)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)


def test_the_release_wheel_goes_into_the_new_venv_and_no_tree_is_cloned(tmp_path, mirror_url):
    proc = _run(tmp_path, mirror_url, "resolved", True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    # The preflight resolved sglang==0.5.9 from the index, with its hash.
    assert (
        "sglang==0.5.9" in out.split("TASK [cu130_wheels : Show the resolved target]")[1].split("TASK [")[0]
    )
    installed = out.split("TASK [sglang_build : Install SGLang's wheel as the preflight resolved it")[1]
    assert "changed: [resolved]" in installed.split("TASK [")[0]
    _earlier_source_build(
        mirror_url, tmp_path / "unresolved" / "venv", tmp_path / "unresolved" / "earlier-tree"
    )
    proc = _run(tmp_path, mirror_url, "unresolved", False)
    again = proc.stdout + proc.stderr
    assert proc.returncode == 0, again[-6000:]
    out += again
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
        record = json.loads((tmp_path / name / "state" / "sglang-build.json").read_text())
        assert (record["method"], record["requirement"], record["src"]) == ("wheel", "sglang==0.5.9", None)
        assert record["paths"] == [str(venv)]
    # As the preflight resolved it: the exact file with its hash, nothing else resolved.
    requirement = (tmp_path / "resolved" / "venv" / "sglang-build-requirement.txt").read_text()
    assert requirement.startswith("sglang==0.5.9 --hash=sha256:")
    from_index = again.split("TASK [sglang_build : Install SGLang's wheel from the indexes")[1]
    assert "changed: [unresolved]" in from_index.split("TASK [")[0]
    # The earlier editable tree was removed from the venv first (pip would have kept it).
    removed = again.split("TASK [sglang_build : Remove the sglang the venv holds")[1].split("TASK [")[0]
    assert "changed: [unresolved]" in removed
    assert "sglang 0.5.9 is installed editable from" in removed
    # No toolkit check, no clone: nothing is built.
    assert "TASK [sglang_build : Check out SGLang" not in out
    assert "TASK [sglang_build : Read nvcc --version" not in out


PLAY_REMOVE = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: rollback
        tasks_from: remove
      vars:
        __rollback_manifest: {{venv: {{path: {old_venv}}}}}
"""


def _remove(tmp_path: Path) -> subprocess.CompletedProcess:
    play = tmp_path / "remove.yml"
    play.write_text(PLAY_REMOVE.format(old_venv=tmp_path / "old-venv"))
    return run_playbook(
        play,
        "-e",
        json.dumps(
            {
                "cuda13_state_dir": str(tmp_path / "state"),
                "cuda13_new_venv": str(tmp_path / "new-venv"),
                "cuda13_new_sglang_src": str(tmp_path / "sglang-cu130"),
                "cuda13_old_venv": str(tmp_path / "old-venv"),
                "cuda13_old_sglang_src": str(tmp_path / "old-sglang"),
            }
        ),
        roles=True,
        filters=True,
    )


def test_removing_the_new_stack_removes_what_the_sglang_step_recorded(tmp_path):
    for path in ("new-venv", "sglang-cu130", "old-venv", "old-sglang", "state"):
        (tmp_path / path).mkdir()
    record = tmp_path / "state" / "sglang-build.json"
    # The wheel: the venv only; a tree there is not this stack's record.
    record.write_text(json.dumps({"method": "wheel", "paths": [str(tmp_path / "new-venv")]}))
    proc = _remove(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "new-venv").exists() and (tmp_path / "sglang-cu130").exists()
    assert not record.exists()
    # No record (the run failed before the SGLang step): the options' venv and tree.
    (tmp_path / "new-venv").mkdir()
    proc = _remove(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "new-venv").exists() and not (tmp_path / "sglang-cu130").exists()
    # Never the serving stack, whatever a record names.
    record.write_text(json.dumps({"paths": [str(tmp_path / "old-venv"), str(tmp_path / "old-sglang")]}))
    proc = _remove(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "old-venv").exists() and (tmp_path / "old-sglang").exists()
