"""The toolkit step's pin (cuda13_upgrade.steps.toolkit.install) with Debian's real update-alternatives.

The groups live in a private alternatives directory (a wrapper adds --altdir,
--admindir and --log), shaped like NVIDIA's packages register them: cuda and
cuda-12 in auto mode on 12.8. The step reads them with the real module
cuda13_apt_read and pins them with `update-alternatives --set` (Ansible's command
module, run here); the installation, answered here, does what installing
cuda-toolkit-13-0 does: a package script's `update-alternatives --install` of 13.0
at a higher priority. /usr/local/cuda must stay where it was, and the step's own
check after the installation must pass. The rollback's restore of a group
(cuda13_upgrade.steps.rollback) then runs on the same real groups.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fakehost import FakeHost

from cuda13_upgrade import aptplan
from cuda13_upgrade.steps import rollback, toolkit

REPO = Path(__file__).resolve().parents[1]
UA = shutil.which("update-alternatives")
TOOLKIT_SIM = REPO / "tests" / "fixtures" / "apt" / "apt-get-s-install-cuda-toolkit-13-0-sandbox.txt"
NVCC = REPO / "tests" / "fixtures" / "nvcc" / "nvcc-13.0.txt"

pytestmark = pytest.mark.skipif(UA is None, reason="needs Debian's update-alternatives")


@pytest.fixture
def alternatives(tmp_path):
    root = tmp_path / "root"
    for d in ("etc/alternatives", "var/lib/dpkg/alternatives", "usr/local", "log"):
        (root / d).mkdir(parents=True)
    for release in ("12.8", "13.0"):
        (root / f"usr/local/cuda-{release}").mkdir()
    wrapper = tmp_path / "bin" / "update-alternatives"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec {UA} --altdir {root}/etc/alternatives --admindir {root}/var/lib/dpkg/alternatives "
        f'--log {root}/log/alternatives.log "$@"\n'
    )
    wrapper.chmod(0o755)

    def ua(*args):
        return subprocess.run([str(wrapper), *args], capture_output=True, text=True, check=True).stdout

    def install(release, priority, group):
        link = f"{root}/usr/local/{group}"
        ua("--install", link, group, f"{root}/usr/local/cuda-{release}", str(priority))

    install("12.8", 128, "cuda")
    install("12.8", 128, "cuda-12")
    return root, wrapper.parent, ua, install


def _pin(tmp_path, bin_dir, install, monkeypatch):
    """The toolkit step on a host whose toolkit is to install (the preflight's plan), the driver's
    hold off and NVIDIA's source reused: the pin, the installation, the pins' check, nvcc."""
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def command(args):
        argv = args["argv"]
        if argv[0].endswith("/bin/nvcc"):
            return {"changed": True, "rc": 0, "stdout": NVCC.read_text()}
        proc = subprocess.run(argv, capture_output=True, text=True)
        return {"changed": True, "rc": proc.returncode, "stdout": proc.stdout, "failed": proc.returncode != 0}

    def apt(args):
        # What installing cuda-toolkit-13-0 does: register 13.0 at priority 130.
        if (tmp_path / "installed").exists():
            return {"changed": False}
        install("13.0", 130, "cuda")
        (tmp_path / "installed").write_text(" ".join(args["name"]))
        return {"changed": True}

    host = FakeHost(
        name="localhost", handlers={"ansible.builtin.command": command, "ansible.builtin.apt": apt}
    )
    request = "cuda-toolkit-13-0=13.0.2-1"
    plan = {
        "package": "cuda-toolkit-13-0",
        "version": "13.0.2-1",
        "to_install": True,
        "source": {"action": "reuse", "entries": [{"file": "/etc/apt/sources.list.d/cuda.list"}]},
        "transaction": aptplan.check_transaction(TOOLKIT_SIM.read_text(), [request]),
    }
    options = {
        "cuda_toolkit_release": "13.0",
        "cuda_toolkit_package": "cuda-toolkit-13-0",
        "cuda_toolkit_package_version": "13.0.2-1",
        "cuda_toolkit_apt_source_file": "cuda-debian12-x86_64",
        "cuda_toolkit_hold_driver": False,
        "cuda_toolkit_pin_alternatives": True,
        "cuda_toolkit_apt_record": str(tmp_path / "state" / "apt.json"),
    }
    return host, toolkit.install(host, options, plan)


def test_the_pin_puts_auto_groups_in_manual_mode_and_the_install_leaves_them(
    tmp_path, alternatives, monkeypatch
):
    root, bin_dir, ua, install = alternatives
    assert "Status: auto" in ua("--query", "cuda")
    host, result = _pin(tmp_path, bin_dir, install, monkeypatch)
    assert result["pinned"] == ["cuda", "cuda-12"]
    assert f"pinned the alternatives group cuda -> {root}/usr/local/cuda-12.8" in host.told
    assert host.called("ansible.builtin.command")[:2] == [
        {"argv": ["update-alternatives", "--set", group, f"{root}/usr/local/cuda-12.8"]}
        for group in ("cuda", "cuda-12")
    ]
    for group in ("cuda", "cuda-12"):
        query = ua("--query", group)
        assert "Status: manual" in query
        assert f"Value: {root}/usr/local/cuda-12.8" in query
    # The step installed cuda-toolkit-13-0 (13.0 registered at priority 130) and its check passed.
    query = ua("--query", "cuda")
    assert "Best: " + f"{root}/usr/local/cuda-13.0" in query
    assert f"Value: {root}/usr/local/cuda-12.8" in query and "Status: manual" in query
    assert os.path.realpath(root / "usr/local/cuda") == str(root / "usr/local/cuda-12.8")
    assert result["nvcc"]["release"] == "13.0"
    # A second run changes nothing.
    again_host, again = _pin(tmp_path, bin_dir, install, monkeypatch)
    assert again["pinned"] == [] and again["changed"] is False, again
    assert [a["argv"][0] for a in again_host.called("ansible.builtin.command")] == [
        "/usr/local/cuda-13.0/bin/nvcc"
    ]


def test_an_install_that_moves_a_pinned_group_is_caught_by_the_step(tmp_path, alternatives, monkeypatch):
    """Something outside dpkg's manual mode (here: update-alternatives --set during the
    installation) moves /usr/local/cuda: the step fails naming the group."""
    root, bin_dir, ua, install = alternatives

    def moving(release, priority, group):
        install(release, priority, group)
        ua("--set", group, f"{root}/usr/local/cuda-{release}")

    with pytest.raises(toolkit.StepFailed) as failed:
        _pin(tmp_path, bin_dir, moving, monkeypatch)
    assert failed.value.msg == (
        f"Installing cuda-toolkit-13-0 moved the alternatives group cuda ({root}/usr/local/cuda) from"
        f" {root}/usr/local/cuda-12.8 to {root}/usr/local/cuda-13.0 (manual mode), under the running stack:"
        " something on the host sets CUDA alternatives outside dpkg's manual mode. Find it in"
        " /var/log/alternatives.log; rollback puts the group back."
    )


def test_without_the_pin_the_install_moves_the_link(alternatives):
    """The fault itself, with the real tool: an auto group follows the higher priority."""
    root, _, ua, install = alternatives
    install("13.0", 130, "cuda")
    assert os.path.realpath(root / "usr/local/cuda") == str(root / "usr/local/cuda-13.0")
    assert "link group cuda updated to point to" in (root / "log/alternatives.log").read_text()


def test_the_rollback_leaves_a_group_manual_while_auto_would_pick_the_new_toolkit(
    tmp_path, alternatives, monkeypatch
):
    """After the pin and the 13.0 install, the snapshot's auto group cannot go back to auto:
    the rollback (cuda13_upgrade.steps.rollback, action cuda13_rollback) keeps 12.8 selected
    (manual) and records what --auto would select."""
    root, bin_dir, ua, install = alternatives
    _, result = _pin(tmp_path, bin_dir, install, monkeypatch)
    assert result["pinned"] == ["cuda", "cuda-12"]

    def command(args):
        proc = subprocess.run(args["argv"], capture_output=True, text=True)
        return {"changed": True, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    def select(args):
        # community.general.alternatives, state selected: update-alternatives --set.
        assert args["state"] == "selected"
        ua("--set", args["name"], args["path"])
        return {"changed": True}

    host = FakeHost(
        name="localhost",
        handlers={"ansible.builtin.command": command, "community.general.alternatives": select},
    )
    recorded = {
        "cuda": {"status": "auto", "value": f"{root}/usr/local/cuda-12.8", "link": f"{root}/usr/local/cuda"}
    }
    left = rollback._restore_alternatives(host, recorded)
    query = ua("--query", "cuda")
    assert "Status: manual" in query and f"Value: {root}/usr/local/cuda-12.8" in query
    assert left == [
        {
            "group": "cuda",
            "selected": f"{root}/usr/local/cuda-12.8",
            "auto_would_select": f"{root}/usr/local/cuda-13.0",
        }
    ]
