"""The driver facts of a host (hostscripts/driver_facts.py, module cuda13_driver_facts).

Fake /proc, /dev, /lib/modules and efivars trees under tmp_path are built from real records
(tests/fixtures/driver_facts/SOURCES.md); the command runner is replaced only where a test feeds
a tool's recorded output. The last tests run the commands and read the files of this machine.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from cuda13_upgrade import aptplan
from cuda13_upgrade.hostscripts import driver_facts

FIXTURES = Path(__file__).parent / "fixtures" / "driver_facts"
PROC_VERSION = Path(__file__).parent / "fixtures" / "nvidia-smi" / "proc-driver-version-580.95.05.txt"
DPKG_ARGV = [
    "dpkg-query",
    "-W",
    "-f=${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n",
    "nvidia-*",
    "libnvidia-*",
    "libcuda1",
    "cuda-drivers*",
    "xserver-xorg-video-nvidia*",
    "firmware-nvidia-gsp*",
    "linux-modules-nvidia-*",
    "linux-objects-nvidia-*",
    "linux-signatures-nvidia-*",
]
NO_SYSTEMD = {
    "rc": 1,
    "stdout": "",
    "stderr": (FIXTURES / "systemctl-is-active-no-systemd.stderr").read_text(),
}


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


class Runner:
    """Stands in for driver_facts._run: answers from {argv tuple: record}, records every call."""

    def __init__(self, answers: dict) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list, timeout: float) -> dict:
        self.calls.append(list(argv))
        return dict(self.answers.get(tuple(argv), {"rc": 127, "stdout": "", "stderr": f"no {argv[0]}"}))


def _dpkg(name: str) -> dict:
    return {"rc": 1, "stdout": _text(f"{name}.stdout"), "stderr": _text(f"{name}.stderr")}


def _empty_tree(tmp_path: Path) -> dict:
    """Params whose trees are empty directories: nothing to read unless a test puts it there."""
    params = {}
    for key in ("proc", "dev", "lib_modules", "efivars"):
        (tmp_path / key).mkdir()
        params[key] = str(tmp_path / key)
    params["mok_key"] = str(tmp_path / "mok.pub")
    return params


# --- packages -------------------------------------------------------------------------------------


def test_packages_and_holds_from_a_real_listing(tmp_path, monkeypatch):
    runner = Runner({tuple(DPKG_ARGV): _dpkg("dpkg-query-ubuntu-510-held")})
    monkeypatch.setattr(driver_facts, "_run", runner)
    got = driver_facts.facts(_empty_tree(tmp_path))
    assert runner.calls[0] == DPKG_ARGV
    packages = {p["name"]: p for p in got["packages"]}
    assert len(got["packages"]) == 26
    assert packages["nvidia-driver-510"] == {
        "name": "nvidia-driver-510",
        "version": "510.108.03-0ubuntu1",
        "status": "hold ok installed",
        "held": True,
    }
    assert packages["libnvidia-compute-510:i386"]["held"] is False  # the i386 copies were not held
    assert packages["nvidia-dkms-515"] == {
        "name": "nvidia-dkms-515",
        "version": "515.86.01-0ubuntu1",
        "status": "deinstall ok config-files",
        "held": False,
    }
    assert sorted(name for name, p in packages.items() if p["held"]) == [
        "libnvidia-cfg1-510:amd64",
        "libnvidia-common-510",
        "libnvidia-compute-510:amd64",
        "libnvidia-decode-510:amd64",
        "libnvidia-encode-510:amd64",
        "libnvidia-extra-510:amd64",
        "libnvidia-fbc1-510:amd64",
        "libnvidia-gl-510:amd64",
        "nvidia-compute-utils-510",
        "nvidia-dkms-510",
        "nvidia-driver-510",
        "nvidia-kernel-common-510",
        "nvidia-kernel-source-510",
        "nvidia-utils-510",
    ]
    # TensorRT and cuDNN were held on that host too, but are no driver packages: dpkg's patterns left them out.
    assert not any(name.startswith(("libcudnn", "libnvinfer", "cuda-toolkit")) for name in packages)
    # The raw text stays, in the order the control node's reader (aptplan) expects.
    assert got["dpkg_query"] == _text("dpkg-query-ubuntu-510-held.stdout")
    assert got["dpkg_query_exit"] == {"rc": 1, "stderr": _text("dpkg-query-ubuntu-510-held.stderr")}
    held = [p["package"] for p in aptplan.driver_packages(got["dpkg_query"]) if p["held"]]
    assert sorted(held) == sorted(name for name, p in packages.items() if p["held"])


def test_names_dpkg_knows_but_never_installed_are_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(
        driver_facts, "_run", Runner({tuple(DPKG_ARGV): _dpkg("dpkg-query-ubuntu-510-not-installed-names")})
    )
    got = driver_facts.facts(_empty_tree(tmp_path))
    assert [(p["name"], p["status"]) for p in got["packages"]] == [
        ("libnvidia-cfg1-510:amd64", "install ok installed"),
        ("libnvidia-common-495", "install ok installed"),
        ("libnvidia-common-510", "install ok installed"),
        ("libnvidia-compute-495:amd64", "deinstall ok config-files"),
    ]
    assert "libnvidia-cfg1-any\t\tun \tunknown ok not-installed" in got["dpkg_query"]


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")
@pytest.mark.parametrize("name", ["dpkg-query-ubuntu-510-held", "dpkg-query-ubuntu-510-not-installed-names"])
def test_the_command_line_gives_the_recorded_listing_from_a_real_dpkg_query(tmp_path, name):
    """The module's own argv (no shell: dpkg-query reads the \\t escapes itself) over the fixture's database."""
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "available").write_text("")
    shutil.copy(FIXTURES / f"{name}.status", admin / "status")
    argv = [DPKG_ARGV[0], f"--admindir={admin}", *DPKG_ARGV[1:]]
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, env={**os.environ, "LC_ALL": "C.UTF-8"}
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        _text(f"{name}.stdout"),
        _text(f"{name}.stderr"),
    )


# --- kernel headers -------------------------------------------------------------------------------


def _uname(release: str):
    return os.uname_result(("Linux", "host", release, "#1 SMP", "x86_64"))


def test_headers_follow_the_build_link(tmp_path, monkeypatch):
    params = _empty_tree(tmp_path)
    monkeypatch.setattr(driver_facts, "_run", Runner({}))
    monkeypatch.setattr(driver_facts.os, "uname", lambda: _uname("6.5.0-41-generic"))
    headers_dir = tmp_path / "usr" / "src" / "linux-headers-6.5.0-41-generic"
    headers_dir.mkdir(parents=True)
    release_dir = tmp_path / "lib_modules" / "6.5.0-41-generic"
    release_dir.mkdir()
    (release_dir / "build").symlink_to(headers_dir)
    got = driver_facts.facts(params)
    assert got["kernel_release"] == "6.5.0-41-generic"
    assert got["headers"] == {
        "path": str(release_dir / "build"),
        "exists": True,
        "link": str(headers_dir),
        "target": str(headers_dir),
    }
    shutil.rmtree(headers_dir)  # the headers package removed, its link left behind
    assert driver_facts.facts(params)["headers"] == {
        "path": str(release_dir / "build"),
        "exists": False,
        "link": str(headers_dir),
        "target": None,
    }
    (release_dir / "build").unlink()
    assert driver_facts.facts(params)["headers"] == {
        "path": str(release_dir / "build"),
        "exists": False,
        "link": None,
        "target": None,
    }


# --- Secure Boot ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variable, expected",
    [("efivar-SecureBoot-enabled.bin", True), ("efivar-SecureBoot-disabled.bin", False), (None, None)],
)
def test_the_firmware_variable_says_whether_secure_boot_is_on(tmp_path, monkeypatch, variable, expected):
    params = _empty_tree(tmp_path)
    monkeypatch.setattr(driver_facts, "_run", Runner({}))
    if variable:
        shutil.copy(FIXTURES / variable, tmp_path / "efivars" / driver_facts.SECURE_BOOT_VARIABLE)
    assert driver_facts.facts(params)["efi_secure_boot"] is expected


def test_no_efi_variables_at_all_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(driver_facts, "_run", Runner({}))
    assert (
        driver_facts.facts({**_empty_tree(tmp_path), "efivars": str(tmp_path / "absent")})["efi_secure_boot"]
        is None
    )


@pytest.mark.parametrize(
    "sb_state", ["mokutil-sb-state-enabled.stdout", "mokutil-sb-state-disabled-setup-mode.stdout"]
)
@pytest.mark.parametrize(
    "test_key", ["mokutil-test-key-enrolled.stdout", "mokutil-test-key-not-enrolled.stdout"]
)
def test_mokutil_answers_are_kept_as_they_ran(tmp_path, monkeypatch, sb_state, test_key):
    params = _empty_tree(tmp_path)
    key = tmp_path / "mok.pub"
    key.write_text("certificate")
    sb = {"rc": 0, "stdout": _text(sb_state), "stderr": ""}
    tk = {"rc": 0, "stdout": _text(test_key), "stderr": ""}
    runner = Runner({("mokutil", "--sb-state"): sb, ("mokutil", "--test-key", str(key)): tk})
    monkeypatch.setattr(driver_facts, "_run", runner)
    got = driver_facts.facts(params)
    assert got["secure_boot"] == sb
    assert got["mok_test_key"] == tk


def test_no_signing_key_no_test_and_no_efi_is_mokutils_own_error(tmp_path, monkeypatch):
    no_efi = {"rc": 1, "stdout": "", "stderr": _text("mokutil-no-efi.stderr")}
    runner = Runner({("mokutil", "--sb-state"): no_efi})
    monkeypatch.setattr(driver_facts, "_run", runner)
    got = driver_facts.facts(_empty_tree(tmp_path))
    assert got["secure_boot"] == no_efi
    assert got["mok_test_key"] is None
    assert not [argv for argv in runner.calls if "--test-key" in argv]


# --- processes on the GPUs ------------------------------------------------------------------------


def _links(name: str) -> list[tuple[str, str]]:
    """(fd path or number, target) of an ``ls -l`` listing."""
    return [(line.split()[-3], line.split()[-1]) for line in _text(name).splitlines()]


def _fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    for path, target in _links("proc-fd-links-yandex.txt"):
        link = proc / path.removeprefix("/proc/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    for fd, target in _links("proc-fd-links-ml-engineering.txt"):
        (proc / "813" / "fd").mkdir(parents=True, exist_ok=True)
        (proc / "813" / "fd" / fd).symlink_to(target)
    shutil.copy(FIXTURES / "proc-cgroup-cron-hybrid.txt", proc / "1574" / "cgroup")
    (proc / "1574" / "comm").write_text("cron\n")
    shutil.copy(FIXTURES / "proc-cgroup-this-sandbox-pid1.txt", proc / "904" / "cgroup")
    (proc / "904" / "comm").write_text("process_api\n")
    shutil.copy(FIXTURES / "proc-cgroup-pva-allowd-v2.txt", proc / "813" / "cgroup")
    # A process holding nothing of the GPU's, one that ended while the tree was read, /proc/self.
    (proc / "1" / "fd").mkdir(parents=True)
    for fd, target in _links("proc-fd-links-ml-engineering.txt")[:2]:
        (proc / "1" / "fd" / fd).symlink_to(target)
    (proc / "4242").mkdir()
    (proc / "self").symlink_to("1")
    return proc


def test_every_process_holding_a_gpu_device_with_its_unit(tmp_path, monkeypatch):
    params = _empty_tree(tmp_path)
    proc = _fake_proc(tmp_path)
    monkeypatch.setattr(driver_facts, "_run", Runner({}))
    got = driver_facts.facts({**params, "proc": str(proc), "dev": "/dev"})
    assert got["device_holders"] == [
        {
            "pid": 813,
            "comm": None,
            "device": ["/dev/nvidia-caps/nvidia-cap2", "/dev/nvidia0", "/dev/nvidiactl"],
            "unit": "nvidia-pva-allowd.service",
        },
        {
            "pid": 904,
            "comm": "process_api",
            "device": ["/dev/nvidia-modeset", "/dev/nvidia0", "/dev/nvidiactl"],
            "unit": None,
        },
        {"pid": 1574, "comm": "cron", "device": ["/dev/nvidia0", "/dev/nvidiactl"], "unit": "cron.service"},
    ]


@pytest.mark.parametrize(
    "record, unit",
    [
        ("proc-cgroup-cron-hybrid.txt", "cron.service"),
        ("proc-cgroup-pva-allowd-v2.txt", "nvidia-pva-allowd.service"),
        ("proc-cgroup-this-sandbox-pid1.txt", None),
    ],
)
def test_the_unit_is_read_from_the_cgroup(record, unit):
    assert driver_facts.unit_of(_text(record)) == unit


def test_the_unified_line_wins_then_systemds_own_hierarchy():
    # The cron record with systemd's v1 hierarchy moved to the atd unit, to tell the lines apart.
    text = _text("proc-cgroup-cron-hybrid.txt").replace(
        "1:name=systemd:/system.slice/cron.service", "1:name=systemd:/system.slice/atd.service"
    )
    assert driver_facts.unit_of(text) == "cron.service"
    assert driver_facts.unit_of(text.replace("0::/system.slice/cron.service", "0::/")) == "atd.service"
    assert driver_facts.unit_of(None) is None


# --- kernel modules, version, NVSwitch ------------------------------------------------------------


def _modules(tmp_path: Path, record: str) -> list:
    (tmp_path / "proc").mkdir(exist_ok=True)
    shutil.copy(FIXTURES / record, tmp_path / "proc" / "modules")
    return driver_facts.modules(str(tmp_path / "proc"))


def test_the_loaded_nvidia_modules_among_all_others(tmp_path):
    assert _modules(tmp_path, "proc-modules-manjaro-5.15-excerpt.txt") == [
        {"name": "nvidia_uvm", "size": 2576384, "refcount": 0, "users": [], "state": "Live"},
        {"name": "nvidia_drm", "size": 73728, "refcount": 9, "users": [], "state": "Live"},
        {"name": "nvidia_modeset", "size": 1159168, "refcount": 23, "users": ["nvidia_drm"], "state": "Live"},
        {
            "name": "nvidia",
            "size": 36966400,
            "refcount": 1393,
            "users": ["nvidia_uvm", "nvidia_modeset"],
            "state": "Live",
        },
    ]


def test_modules_of_a_recent_driver_and_a_kernel_without_unloading(tmp_path):
    recent = _modules(tmp_path, "proc-modules-talos-580.126.16.txt")
    assert [m["name"] for m in recent] == [
        "nvidia_uvm",
        "nvidia_drm",
        "nvidia_modeset",
        "nvidia",
    ]  # not drm_ttm_helper
    assert recent[-1] == {
        "name": "nvidia",
        "size": 111489024,
        "refcount": 8,
        "users": ["nvidia_uvm", "nvidia_drm", "nvidia_modeset"],
        "state": "Live",
    }
    no_unload = _modules(tmp_path, "proc-modules-talos-docs-no-unload.txt")
    assert [(m["name"], m["refcount"], m["users"]) for m in no_unload] == [
        ("nvidia_uvm", None, []),
        ("nvidia_drm", None, []),
        ("nvidia_modeset", None, []),
        ("nvidia", None, []),
    ]


def test_proc_version_and_the_nvswitch_count(tmp_path, monkeypatch):
    params = _empty_tree(tmp_path)
    monkeypatch.setattr(driver_facts, "_run", Runner({}))
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    shutil.copy(PROC_VERSION, tmp_path / "proc" / "driver" / "nvidia" / "version")
    dev = tmp_path / "dev"
    for name in ["nvidia0", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"]:
        (dev / name).write_text("")
    (dev / "nvidia-caps").mkdir()
    got = driver_facts.facts(params)
    assert got["proc_version"] == PROC_VERSION.read_text()
    assert got["nvswitch"] == 0  # a host without NVSwitch
    for name in [f"nvidia{i}" for i in range(1, 8)] + [f"nvidia-nvswitch{i}" for i in range(6)]:
        (dev / name).write_text("")
    (dev / "nvidia-nvlink").write_text("")
    (dev / "nvidia-nvswitchctl").write_text("")  # there wherever the driver is loaded: not a switch
    assert driver_facts.facts(params)["nvswitch"] == 6


# --- units ----------------------------------------------------------------------------------------


def test_each_unit_is_asked_once(tmp_path, monkeypatch):
    active = {"rc": 0, "stdout": "active\n", "stderr": ""}
    runner = Runner(
        {
            ("systemctl", "is-active", "nvidia-fabricmanager"): active,
            ("systemctl", "is-active", "nvidia-persistenced"): NO_SYSTEMD,
            ("systemctl", "is-active", "nvidia-dcgm.service"): active,
        }
    )
    monkeypatch.setattr(driver_facts, "_run", runner)
    got = driver_facts.facts(
        {**_empty_tree(tmp_path), "units": ["nvidia-dcgm.service", "dcgm-exporter.service"]}
    )
    assert got["fabric_manager"] == active
    assert got["persistenced"] == NO_SYSTEMD
    assert got["units"] == {
        "nvidia-dcgm.service": active,
        "dcgm-exporter.service": {"rc": 127, "stdout": "", "stderr": "no systemctl"},
    }
    assert [argv for argv in runner.calls if argv[0] == "systemctl"] == [
        ["systemctl", "is-active", "nvidia-fabricmanager"],
        ["systemctl", "is-active", "nvidia-persistenced"],
        ["systemctl", "is-active", "nvidia-dcgm.service"],
        ["systemctl", "is-active", "dcgm-exporter.service"],
    ]


# --- the runner -----------------------------------------------------------------------------------


def test_a_missing_tool_is_a_record_not_an_exception(tmp_path):
    got = driver_facts._run([str(tmp_path / "mokutil"), "--sb-state"], 5)
    assert got["rc"] == 127 and got["stdout"] == ""
    assert "No such file or directory" in got["stderr"]


def test_a_command_past_its_time_is_a_record_not_an_exception():
    got = driver_facts._run(["sleep", "5"], 0.2)
    assert got["rc"] is None and got["timedout"] is True


# --- the module -----------------------------------------------------------------------------------


def test_the_module_checks_its_arguments_and_reads_the_same_in_check_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(driver_facts, "_run", Runner({}))
    validated = ArgumentSpecValidator(driver_facts.FACTS_SPEC).validate(
        {**_empty_tree(tmp_path), "units": ["a"]}
    )
    assert not validated.error_messages
    assert validated.validated_parameters["timeout"] == 30
    done = driver_facts.facts_module(validated.validated_parameters, check_mode=True)
    assert done["changed"] is False and set(done["facts"]["units"]) == {"a"}
    bad = ArgumentSpecValidator(driver_facts.FACTS_SPEC).validate({"timeout": "soon"})
    assert any("timeout" in message for message in bad.error_messages)


# --- this machine ---------------------------------------------------------------------------------


def test_facts_of_this_machine():
    got = driver_facts.facts({})
    assert got["kernel_release"] == os.uname().release
    for record in [got["secure_boot"], got["fabric_manager"], got["persistenced"], got["dpkg_query_exit"]]:
        assert isinstance(record["rc"], int)
    if shutil.which("mokutil") is None:
        assert got["secure_boot"]["rc"] == 127
    assert got["mok_test_key"] is None or os.path.isfile("/var/lib/dkms/mok.pub")
    if shutil.which("dpkg-query"):
        assert got["dpkg_query_exit"]["rc"] in (0, 1)
    for package in got["packages"]:
        assert any(
            fnmatch.fnmatchcase(package["name"].split(":")[0], p) for p in driver_facts.DRIVER_PATTERNS
        )
    if not os.path.isdir("/sys/firmware/efi/efivars"):
        assert got["efi_secure_boot"] is None
    if not os.path.isdir(f"/lib/modules/{os.uname().release}/build"):
        assert got["headers"]["exists"] is False and got["headers"]["target"] is None
    assert got["units"] == {}
    if os.path.exists("/proc/driver/nvidia/version"):
        assert got["proc_version"].startswith("NVRM version:")
        assert any(m["name"] == "nvidia" for m in got["modules"])
    else:  # this sandbox: no NVIDIA driver
        assert got["proc_version"] is None
        assert got["modules"] == [] and got["device_holders"] == [] and got["nvswitch"] == 0


def test_the_dkms_signing_key_is_framework_confs_else_the_first_that_exists(tmp_path):
    framework = tmp_path / "framework.conf"
    ubuntu, upstream = tmp_path / "MOK.der", tmp_path / "mok.pub"
    candidates = (str(ubuntu), str(upstream))
    # Nothing there: the upstream DKMS key's path, which DKMS makes at its first signed build.
    assert driver_facts.mok_certificate(str(framework), candidates) == str(upstream)
    ubuntu.write_bytes(b"0")
    assert driver_facts.mok_certificate(str(framework), candidates) == str(ubuntu)
    framework.write_text('# mok_certificate=/ignored\nmok_certificate="/etc/keys/dkms.der"\n')
    assert driver_facts.mok_certificate(str(framework), candidates) == "/etc/keys/dkms.der"


def test_facts_name_the_key_they_tested_and_whether_the_host_booted_through_uefi(tmp_path):
    params = _empty_tree(tmp_path)
    params["efivars"] = str(tmp_path / "no-firmware" / "efi" / "efivars")
    found = driver_facts.facts(params)
    assert (found["mok_key"], found["mok_key_exists"], found["mok_test_key"]) == (
        params["mok_key"],
        False,
        None,
    )
    assert found["efi"] is False
    (tmp_path / "no-firmware" / "efi" / "efivars").mkdir(parents=True)
    assert driver_facts.facts(params)["efi"] is True
