"""Space where the run writes: per filesystem, from the measured figures of the stack."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook import local_inventory

from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.preflight import evaluate
from cuda13_upgrade.space import COMPONENTS, PLACES, plan, stack_figures

REPO = Path(__file__).resolve().parents[1]
FIGURES = yaml.safe_load((REPO / "roles/nvidia_driver_check/files/stack-space.yml").read_text())
PROBE = REPO / "src/cuda13_upgrade/hostscripts/space_probe.py"
GIB = 1024**3
MIB = 1024**2

# A host with a 64 MiB tmpfs at /tmp and one large root filesystem (as the
# space probe reports them).
ROOT = {"dev": 2049, "mount": "/", "fstype": "ext4", "free_bytes": 200 * GIB}
TMP = {"dev": 45, "mount": "/tmp", "fstype": "tmpfs", "free_bytes": 64 * MIB}
PLACES_DEFAULT = {
    "pip_tmpdir": "/opt/ml-env-cu130/.pip-tmp",
    "pip_cache": "/root/.cache/pip",
    "apt_archives": "/var/cache/apt/archives",
    "toolkit_prefix": "/usr/local/cuda-13.0",
    "new_venv": "/opt/ml-env-cu130",
    "sglang_src": "/opt/sglang-cu130",
    "cache_root": "/var/cache/cuda13-upgrade",
    "artifact_copy": "",
}


def probe_of(places, devices):
    return {
        place: {"path": path, "measured": path, **devices.get(place, ROOT)}
        for place, path in places.items()
        if path
    }


def test_the_real_stack_figures_are_those_measured():
    figures = stack_figures(FIGURES, "pypi-sglang-0.5.23")
    # ENVIRONMENT/closing note: 207 wheels, 4.34 GB; venv 10.24 GiB
    assert figures["bytes"]["wheels"] == 4_340_000_000
    assert round(figures["bytes"]["venv"] / GIB, 2) == 10.24
    assert figures["margin"] == 1.25
    for stack, entry in FIGURES["stacks"].items():
        assert set(entry["measured"]) >= set(COMPONENTS), stack  # every figure says where it comes from
        stack_figures(FIGURES, stack)


def test_places_on_one_filesystem_need_the_sum():
    figures = stack_figures(FIGURES, "pypi-sglang-0.5.23")
    groups = plan(probe_of(PLACES_DEFAULT, {}), PLACES_DEFAULT, figures)
    assert len(groups) == 1
    (root,) = groups
    b = figures["bytes"]
    expected = sum(
        int(sum(b[c] for c in PLACES[p]["holds"]) * 1.25) for p, path in PLACES_DEFAULT.items() if path
    )
    assert root["need_bytes"] == expected
    assert root["ok"]  # 200 GiB free
    assert [p["place"] for p in root["places"]] == [p for p, path in PLACES_DEFAULT.items() if path]


def test_pip_tmpdir_on_a_small_tmpfs_is_refused_naming_the_filesystem_paths_and_option():
    places = {**PLACES_DEFAULT, "pip_tmpdir": "/tmp"}
    groups = plan(probe_of(places, {"pip_tmpdir": TMP}), places, stack_figures(FIGURES, "pypi-sglang-0.5.23"))
    tmp = next(g for g in groups if g["mount"] == "/tmp")
    assert not tmp["ok"]
    assert tmp["message"] == (
        "not enough space: the filesystem at /tmp (tmpfs) holds pip's temporary directory /tmp "
        "(cuda13_pip_tmpdir) 5.1 GiB: needs 5.1 GiB, 64.0 MiB free. Fix: point cuda13_pip_tmpdir at a "
        "filesystem with room, or free 5.0 GiB on /tmp"
    )
    assert next(g for g in groups if g["mount"] == "/")["ok"]


def test_the_preflight_lists_each_filesystem_refused():
    places = {**PLACES_DEFAULT, "pip_tmpdir": "/tmp"}
    groups = plan(probe_of(places, {"pip_tmpdir": TMP}), places, stack_figures(FIGURES, "pypi-sglang-0.5.23"))
    facts = {
        "driver_version": "590.48.01",
        "gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0"}],
        "disk_free_bytes": 200 * GIB,
        "python_version": "3.11.2",
        "architecture": "x86_64",
        "space_plan": groups,
    }
    report = evaluate(facts)
    (failure,) = report.failures
    assert failure["check"] == "space" and failure["option"] == "cuda13_pip_tmpdir"
    assert failure["value"] == 64 * MIB
    assert "the filesystem at /tmp (tmpfs) holds pip's temporary directory /tmp" in failure["message"]
    assert "Option: cuda13_pip_tmpdir." in failure["message"]
    assert any(p["check"] == "space" and "the filesystem at /" in p["message"] for p in report.passed)


def test_a_place_that_could_not_be_measured_fails():
    places = {"new_venv": "/opt/ml-env-cu130"}
    (group,) = plan(
        {"new_venv": {"path": "x", "error": "no existing ancestor"}},
        places,
        stack_figures(FIGURES, "sandbox"),
    )
    assert (
        not group["ok"]
        and "could not measure the filesystem of the new venv /opt/ml-env-cu130" in group["message"]
    )


def test_unknown_stack_and_bad_figures_name_the_option():
    with pytest.raises(Cuda13Error, match="nvidia_driver_check_space_stack") as info:
        stack_figures(FIGURES, "pypi-sglang-9.9")
    assert "pypi-sglang-0.5.23" in str(info.value)
    bad = {"stacks": {"x": {"margin": 1.0, "bytes": {**dict.fromkeys(COMPONENTS, 1), "venv": -1}}}}
    with pytest.raises(Cuda13Error, match="venv figure of stack x"):
        stack_figures(bad, "x")
    with pytest.raises(Cuda13Error, match="unknown places"):
        plan({}, {"scratch": "/x"}, stack_figures(FIGURES, "sandbox"))


def test_space_probe_measures_a_path_not_yet_created_at_its_parent(tmp_path):
    target = tmp_path / "venv" / ".pip-tmp"
    out = subprocess.run(
        [sys.executable, str(PROBE), f"pip_tmpdir={target}", "pip_cache=~/.cache/pip"],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(out.stdout)
    assert found["pip_tmpdir"]["measured"] == str(tmp_path)
    assert found["pip_tmpdir"]["dev"] == os.stat(tmp_path).st_dev
    vfs = os.statvfs(tmp_path)
    assert abs(found["pip_tmpdir"]["free_bytes"] - vfs.f_bavail * vfs.f_frsize) < 64 * MIB
    assert os.stat(found["pip_tmpdir"]["mount"]).st_dev == os.stat(tmp_path).st_dev
    assert found["pip_cache"]["path"].startswith(os.path.expanduser("~"))


def test_space_probe_refuses_a_malformed_argument():
    out = subprocess.run([sys.executable, str(PROBE), "no-equals-sign"], capture_output=True, text=True)
    assert out.returncode == 2 and "expected NAME=PATH" in out.stderr


def test_a_stack_without_figures_is_refused_naming_it():
    with pytest.raises(Cuda13Error, match="no measured space figures"):
        stack_figures(FIGURES, "nope")


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "small-tmp"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_the_preflight_refuses_pip_tmpdir_on_a_small_tmpfs_and_nothing_changes(tmp_path, small_tmpfs):
    """pypa/pip#12868: the wheels unpack under TMPDIR; an 8 MiB tmpfs cannot hold the real stack's."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        str(REPO / "playbooks" / "preflight.yml"),
        "-i",
        str(local_inventory(tmp_path / "inventory")),
        "-e",
        json.dumps(
            {
                "cuda13_target_hosts": "all",
                "ansible_python_interpreter": sys.executable,
                "nvidia_driver_check_python": sys.executable,
                "nvidia_driver_check_nvidia_smi": str(REPO / "sandbox/host/nvidia-smi"),
                "nvidia_driver_check_host_checks": False,
                "nvidia_driver_check_required_disk_gib": 0.001,
                "cuda13_new_venv": f"{tmp_path}/venv",
                "cuda13_pip_tmpdir": f"{small_tmpfs}/pip",
                "nvidia_driver_check_space_stack": "pypi-sglang-0.5.23",
            }
        ),
    ]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "fails the preflight" in out and "nothing was changed" in out
    assert (
        f"the filesystem at {small_tmpfs} (tmpfs) holds pip's temporary directory {small_tmpfs}/pip "
        "(cuda13_pip_tmpdir) 5.1 GiB: needs 5.1 GiB, 8.0 MiB free" in out
    )
    assert "Option: cuda13_pip_tmpdir." in out
    assert not (small_tmpfs / "pip").exists() and not (tmp_path / "venv").exists()
