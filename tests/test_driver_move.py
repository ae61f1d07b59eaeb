"""The driver window's change (cuda13_upgrade.steps.driver_move) on a host of files under tmp_path.

The driver's two halves are the sandbox's doubles, run as programs: the nvidia-smi double reads
the installed libnvidia-ml.so.<version> and the loaded module's state, the modprobe double loads
and unloads the module (kmod's texts). What a test machine lacks is answered by the test: apt
installs a version's files, dpkg's package list and holds are a dict, systemd's units a list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cuda13_upgrade.steps import driver_move, driver_window
from cuda13_upgrade.steps.host import StepFailed
from tests.fakehost import FakeHost

ROOT = Path(__file__).resolve().parents[1]
HOST_DIR = ROOT / "sandbox" / "host"
SMI = HOST_DIR / "nvidia-smi"
MODPROBE = HOST_DIR / "modprobe-double"
STATES = HOST_DIR / "nvidia-smi-states"
FIXTURES = ROOT / "tests" / "fixtures"

OLD, NEW = "570.211.01", "580.142"
OLD_DEB, NEW_DEB = f"{OLD}-0ubuntu0.24.04.2", f"{NEW}-0ubuntu0.24.04.1"
SERVICE = "sglang.service"


def _packages(branch: str, version: str, held: bool) -> list[dict]:
    names = [
        f"libnvidia-compute-{branch}",
        f"nvidia-dkms-{branch}-open",
        f"nvidia-driver-{branch}-open",
        f"nvidia-kernel-common-{branch}",
        f"nvidia-kernel-source-{branch}-open",
    ]
    status = "hold ok installed" if held else "install ok installed"
    return [{"name": n, "version": version, "status": status, "held": held} for n in names]


class Machine:
    """The host under tmp_path: the driver's files, dpkg's list, units, and the calls made."""

    def __init__(self, root: Path, *, activation: str = "reload_or_reboot") -> None:
        self.root = root
        self.lib, self.src, self.processes = root / "lib", root / "src", root / "processes"
        for d in (self.lib, self.src, self.processes, root / "state"):
            d.mkdir(parents=True)
        self.module_state = root / "run" / "module.json"
        state = json.loads((STATES / "driver-r570-halves.json").read_text(encoding="utf-8"))
        state["driver_halves"].update(
            library_glob=str(self.lib / "libnvidia-ml.so.*.*"),
            module_state=str(self.module_state),
            module_source_glob=str(self.src / "nvidia-*"),
        )
        self.state = root / "state.json"
        self.state.write_text(json.dumps(state), encoding="utf-8")
        self.env = {
            "NVIDIA_SMI_DOUBLE_STATE": str(self.state),
            "NVIDIA_SMI_DOUBLE_PROCESSES": str(self.processes),
        }
        self.packages = _packages("570", OLD_DEB, held=True)
        self.active = {SERVICE, "nvidia-persistenced.service"}
        self.apt_cache: set[str] = set()
        self.repository = {OLD_DEB, NEW_DEB}
        self.install_files(OLD)
        self.load(OLD)
        self.options = {
            "cuda13_state_dir": str(root / "state"),
            "cuda13_service_name": SERVICE,
            "cuda13_kernel_log_command": "dmesg",
            "cuda13_driver_activation": activation,
            "cuda13_driver_gpu_clients": [],
            "nvidia_driver_check_nvidia_smi": f"{sys.executable} {SMI}",
        }
        self.host = FakeHost(
            handlers={
                "cuda13_driver_facts": self.facts,
                "ansible.builtin.command": self.command,
                "ansible.builtin.apt": self.apt,
                "ansible.builtin.dpkg_selections": self.selection,
                "ansible.builtin.systemd_service": self.systemd,
                "ansible.builtin.file": self.directory,
                "ansible.builtin.copy": self.copy,
                "ansible.builtin.stat": lambda args: {"stat": {"exists": Path(args["path"]).exists()}},
                "cuda13_kernel_log": lambda args: {"log": {"mark": "m1"}},
            }
        )

    def install_files(self, version: str) -> None:
        (self.lib / f"libnvidia-ml.so.{version}").write_bytes(b"")
        (self.src / f"nvidia-{version}").mkdir()

    def remove_files(self, version: str) -> None:
        (self.lib / f"libnvidia-ml.so.{version}").unlink()
        (self.src / f"nvidia-{version}").rmdir()

    def load(self, version: str) -> None:
        self.module_state.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "version": version,
            "flavour": "open",
            "modules": ["nvidia", "nvidia_modeset", "nvidia_uvm"],
        }
        self.module_state.write_text(json.dumps(record), encoding="utf-8")

    def loaded(self) -> str | None:
        return json.loads(self.module_state.read_text())["version"] if self.module_state.exists() else None

    # --- handlers ---------------------------------------------------------------------------
    def facts(self, args: dict) -> dict:
        def run(active: bool) -> dict:
            return {"rc": 0 if active else 3, "stdout": "active\n" if active else "inactive\n", "stderr": ""}

        return {
            "facts": {
                "packages": [dict(p) for p in self.packages],
                "units": {u: run(u in self.active) for u in args.get("units") or []},
                "persistenced": run("nvidia-persistenced.service" in self.active),
                "modules": [],
            }
        }

    def command(self, args: dict) -> dict:
        # The parameters ansible.builtin.command takes (a step that passes another fails on a host).
        assert set(args) <= {"argv", "chdir", "creates", "removes", "stdin"}, args
        argv = list(args["argv"])
        if argv[:2] == ["dpkg", "--print-architecture"]:
            return {"rc": 0, "stdout": "amd64\n", "stderr": ""}
        if argv[:2] == ["apt-get", "download"]:
            name, version = argv[2].split("=", 1)
            if version not in self.repository:
                # apt-private/private-cacheset.cc: "Version '%s' for '%s' was not found"
                return {
                    "rc": 100,
                    "stdout": "",
                    "stderr": f"E: Version '{version}' for '{name}' was not found\n",
                }
            Path(args["chdir"], driver_move.deb_file_name(name.split(":")[0], version, "amd64")).write_bytes(
                b""
            )
            return {"rc": 0, "stdout": "", "stderr": ""}
        if argv[:2] == ["apt-get", "install"]:
            files = [a for a in argv if a.endswith(".deb")]
            assert all(Path(f).exists() for f in files), files
            self.remove_files(NEW)
            self.install_files(OLD)
            self.packages = _packages("570", OLD_DEB, held=False)
            return {"rc": 0, "stdout": "", "stderr": ""}
        program = {"modprobe": MODPROBE}.get(argv[0])
        if program is None and argv[0] == sys.executable:
            program, argv = Path(argv[1]), argv[1:]
        assert program is not None, argv
        done = subprocess.run(
            [sys.executable, str(program), *argv[1:]],
            env={**self.env, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def apt(self, args: dict) -> dict:
        assert set(args) <= {"name", "state", "install_recommends", "update_cache", "allow_downgrade"}, args
        names = args["name"]
        if names == ["nvidia-driver-580-open"]:
            self.remove_files(OLD)
            self.install_files(NEW)
            self.packages = _packages("580", NEW_DEB, held=False)
        return {"changed": True}

    def selection(self, args: dict) -> dict:
        for p in self.packages:
            if p["name"] == args["name"]:
                p["held"] = args["selection"] == "hold"
                p["status"] = ("hold" if p["held"] else "install") + " ok installed"
        return {"changed": True}

    def systemd(self, args: dict) -> dict:
        (self.active.discard if args["state"] == "stopped" else self.active.add)(args["name"])
        return {"changed": True}

    def directory(self, args: dict) -> dict:
        Path(args["path"]).mkdir(parents=True, exist_ok=True)
        return {"changed": True}

    def copy(self, args: dict) -> dict:
        name = Path(args["src"]).name
        if name in self.apt_cache:
            Path(args["dest"]).write_bytes(b"")
            return {"changed": True}
        return {"failed": True, "msg": f"Source {args['src']} not found"}


def _plan(**given) -> dict:
    plan = {
        "current": OLD,
        "floor": "580.95.05",
        "needs_move": True,
        "target": NEW,
        "target_branch": 580,
        "ready": True,
        "requests": ["nvidia-driver-580-open"],
        "activation": "reload",
        "clients": [],
        "blockers": [],
    }
    return {**plan, **given}


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def test_the_old_driver_is_cached_from_apts_cache_or_downloaded_at_its_installed_version(machine):
    machine.apt_cache.add(driver_move.deb_file_name("nvidia-driver-570-open", OLD_DEB, "amd64"))
    record = driver_move.cache(machine.host, machine.options, _plan())
    assert record["dir"] == f"{machine.options['cuda13_state_dir']}/driver-cache/{OLD}"
    sources = {p["name"]: p["from"] for p in record["packages"]}
    assert sources["nvidia-driver-570-open"] == "apt-cache"
    assert sources["libnvidia-compute-570"] == "download"
    assert all(Path(p["file"]).exists() for p in record["packages"])
    assert Path(record["dir"], f"libnvidia-compute-570_{OLD_DEB}_amd64.deb").exists()


def test_a_version_no_repository_has_refuses_the_move_before_any_change(machine):
    machine.repository = {NEW_DEB}
    with pytest.raises(StepFailed) as failed:
        driver_move.cache(machine.host, machine.options, _plan())
    assert f"libnvidia-compute-570 {OLD_DEB} (E: Version '{OLD_DEB}' for 'libnvidia-compute-570:amd64'" in (
        failed.value.msg
    )
    assert "Only the cache directory" in failed.value.msg
    assert machine.host.called("ansible.builtin.apt") == []
    assert machine.loaded() == OLD


def test_the_epoch_of_a_version_is_quoted_in_apts_file_name():
    assert driver_move.deb_file_name("cuda-drivers", "1:580.95.05-1", "amd64") == (
        "cuda-drivers_1%3a580.95.05-1_amd64.deb"
    )


def test_the_move_reloads_the_modules_and_the_new_driver_answers(machine):
    moved = driver_move.move(machine.host, machine.options, _plan())
    assert moved["stopped"] == [SERVICE, "nvidia-persistenced.service"]
    assert moved["unheld"] == [p["name"] for p in _packages("570", OLD_DEB, True)]
    assert moved["held"] == [p["name"] for p in _packages("580", NEW_DEB, True)]
    assert all(p["held"] for p in machine.packages)
    assert (moved["activation"], moved["reboot"]) == ("reload", False)
    assert moved["loaded"] == ["nvidia"] and machine.loaded() == NEW
    checked = driver_move.check(
        machine.host, machine.options, expected=NEW, start=["nvidia-persistenced.service"]
    )
    assert checked["driver_version"] == NEW and len(checked["gpus"]) == 8
    assert checked["started"] == ["nvidia-persistenced.service"]
    assert "nvidia-persistenced.service" in machine.active and SERVICE not in machine.active


def test_the_pinning_package_goes_in_an_apt_run_of_its_own(machine):
    plan = _plan(requests=["nvidia-driver-pinning-580.142", "nvidia-driver-580-open"])
    driver_move.move(machine.host, machine.options, plan)
    runs = [a["name"] for a in machine.host.called("ansible.builtin.apt")]
    assert runs == [["nvidia-driver-pinning-580.142"], ["nvidia-driver-580-open"]]


def test_without_the_reload_the_library_and_the_module_disagree_and_the_check_says_so(machine):
    moved = driver_move.move(machine.host, machine.options, _plan(activation="reboot"))
    assert moved["reboot"] is True and machine.loaded() == OLD
    with pytest.raises(StepFailed) as failed:
        driver_move.check(machine.host, machine.options, expected=NEW)
    assert "Failed to initialize NVML: Driver/library version mismatch" in failed.value.msg
    assert "(driver_library_mismatch)" in failed.value.msg


def test_a_module_in_use_falls_back_to_a_reboot_or_fails_under_reload(machine, tmp_path):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        entry = [{"gpu": 0, "pid": server.pid, "type": "C", "name": "python3", "used_memory_mib": 1000}]
        (machine.processes / f"{server.pid}.json").write_text(json.dumps(entry))
        moved = driver_move.move(machine.host, machine.options, _plan())
        assert moved["reboot"] is True and moved["activation"] == "reboot"
        assert "is in use" in moved["reason"]
        other = Machine(tmp_path / "b", activation="reload")
        (other.processes / f"{server.pid}.json").write_text(json.dumps(entry))
        with pytest.raises(StepFailed) as failed:
            driver_move.move(other.host, other.options, _plan())
        assert "could not be unloaded" in failed.value.msg and "is in use" in failed.value.msg
    finally:
        server.kill()
        server.wait()


def test_a_plan_that_is_not_ready_changes_nothing(machine):
    with pytest.raises(StepFailed) as failed:
        driver_move.move(machine.host, machine.options, _plan(ready=False, blockers=[{"check": "headers"}]))
    assert "(headers)" in failed.value.msg and "nothing on the host was changed" in failed.value.msg
    assert machine.host.calls == []


def test_a_branch_target_accepts_the_branchs_version_at_or_above_the_floor(machine):
    driver_move.move(machine.host, machine.options, _plan(target="R580"))
    found = driver_move.check(machine.host, machine.options, expected="R580", branch=580, floor="580.95.05")
    assert found["driver_version"] == NEW
    with pytest.raises(StepFailed, match="the driver version is 580.142, not R590"):
        driver_move.check(machine.host, machine.options, expected="R590", branch=590, floor="590.44.01")


def test_other_gpus_after_the_move_fail_the_check(machine):
    driver_move.move(machine.host, machine.options, _plan())
    before = [{"pci.bus_id": "00000000:17:00.0"}]
    with pytest.raises(StepFailed, match="the GPUs are .*, before 00000000:17:00.0"):
        driver_move.check(machine.host, machine.options, expected=NEW, gpus=before)


def test_the_restore_puts_the_cached_packages_back_in_one_transaction(machine):
    cached = driver_move.cache(machine.host, machine.options, _plan())
    moved = driver_move.move(machine.host, machine.options, _plan())
    driver_move.check(machine.host, machine.options, expected=NEW, start=["nvidia-persistenced.service"])
    restored = driver_move.restore(machine.host, machine.options, cached=cached, moved=moved)
    (install,) = [
        c["argv"] for c in machine.host.called("ansible.builtin.command") if c["argv"][1:2] == ["install"]
    ]
    assert install[:5] == ["apt-get", "install", "-y", "--allow-downgrades", "--no-install-recommends"]
    assert install[5:9] == ["-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
    files = [a for a in install if a.endswith(".deb")]
    assert sorted(files) == sorted(p["file"] for p in cached["packages"])
    # Ubuntu's packages of another branch carry other names: the move's are removed in the same run.
    new_names = sorted(p["name"] for p in _packages("580", NEW_DEB, False))
    assert restored["removed"] == new_names and install[-5:] == [f"{n}-" for n in new_names]
    assert restored["check"]["driver_version"] == OLD and machine.loaded() == OLD
    assert all(p["held"] for p in machine.packages)
    # nvidia-persistenced, started again after the move's check, was stopped for the reload and
    # started again after the restore's.
    assert restored["clients"] == ["nvidia-persistenced.service"]
    assert "nvidia-persistenced.service" in machine.active and SERVICE not in machine.active


def test_a_ready_window_passes_the_preflight_with_the_targets_version(monkeypatch):
    plan = _plan(target="580.95.05")
    assert driver_window.planned_version(plan) == "580.95.05"
    assert driver_window.planned_version(_plan(target="R580")) == "580.95.05"
    assert driver_window.planned_version(_plan(ready=False)) is None
    assert driver_window.planned_version(_plan(needs_move=False)) is None
    assert driver_window.planned_version(None) is None


def test_check_mode_changes_nothing_and_says_what_apt_would_install(tmp_path):
    machine = Machine(tmp_path)
    machine.host.check_mode = True
    moved = driver_move.move(machine.host, machine.options, _plan())
    assert machine.host.called("ansible.builtin.apt") == []
    assert "check mode: apt would install nvidia-driver-580-open" in machine.host.told
    assert moved["activation"] == "reload" and machine.loaded() == OLD
    assert driver_move.check(machine.host, machine.options, expected=NEW)["driver_version"] is None


def test_a_restore_under_reboot_activation_leaves_the_reload_to_the_plays_reboot(machine):
    cached = driver_move.cache(machine.host, machine.options, _plan())
    moved = driver_move.move(machine.host, machine.options, _plan(activation="reboot"))
    restored = driver_move.restore(machine.host, machine.options, cached=cached, moved=moved)
    assert restored["reboot"] is True and "check" not in restored
    assert not [c for c in machine.host.called("ansible.builtin.command") if c["argv"][0] == "modprobe"]


def test_a_host_between_two_drivers_is_refused_before_anything_is_kept(machine):
    # The 580 library installed while the 570 module runs (a package change without a reload).
    machine.packages = _packages("580", NEW_DEB, held=False)
    with pytest.raises(StepFailed) as failed:
        driver_move.cache(machine.host, machine.options, _plan())
    assert "is installed while the driver that runs is 570.211.01: the host is between two drivers" in (
        failed.value.msg
    )
    assert machine.host.called("ansible.builtin.file") == []


def test_the_container_toolkit_is_neither_kept_nor_held(machine):
    machine.packages.append(
        {
            "name": "nvidia-container-toolkit",
            "version": "1.17.8-1",
            "status": "hold ok installed",
            "held": True,
        }
    )
    cached = driver_move.cache(machine.host, machine.options, _plan())
    assert "nvidia-container-toolkit" not in {p["name"] for p in cached["packages"]}
    moved = driver_move.move(machine.host, machine.options, _plan())
    assert "nvidia-container-toolkit" not in moved["unheld"] + moved["held"]
