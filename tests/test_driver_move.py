"""The driver window's change (cuda13_upgrade.steps.driver_move) on a host of files under tmp_path.

The driver's two halves are the sandbox's doubles, run as programs: the nvidia-smi double reads
the installed libnvidia-ml.so.<version> and the loaded module's state, the modprobe double loads
and unloads the module (kmod's texts). What a test machine lacks is answered by the test: apt
installs a version's files, dpkg's package list and holds are a dict, systemd's units a list.
"""

from __future__ import annotations

import json
import re
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


# --- the checks after activation: persistence mode, NVSwitch fabric -------------------------------

#: Real ``nvidia-smi -q`` texts (tests/fixtures/driver/SOURCES.md, tests/fixtures/driver_check/SOURCES.md).
H100_Q = FIXTURES / "driver" / "nvidia-smi-q-h100x8-565.57.01.txt"
IN_PROGRESS_570 = FIXTURES / "driver" / "fabric-grep-in-progress-570.133.20.txt"
IN_PROGRESS_580 = FIXTURES / "driver_check" / "fabric-in-progress-580.159.04.txt"
INSUFFICIENT = FIXTURES / "driver_check" / "fabric-completed-insufficient-resources.txt"
FM = driver_move.FABRIC_MANAGER_UNIT
PERSISTENCED = "nvidia-persistenced.service"
#: NVIDIA's R580 fabric manager package (NVIDIA/gpu-driver-container PR #451, apt's text).
FM_PACKAGE = {"name": "nvidia-fabricmanager", "version": "580.65.06-1", "status": "install ok installed"}
#: systemctl's text for a unit whose start fails (NVIDIA/gpu-operator issue #356), in the message
#: Ansible's systemd_service module fails with ("Unable to %s service %s: %s").
FM_START_FAILED = (
    f"Unable to start service {FM}: Job for nvidia-fabricmanager.service failed because the control"
    " process exited with error code.\n"
    'See "systemctl status nvidia-fabricmanager.service" and "journalctl -xe" for details.\n'
)


class Hgx:
    """An HGX H100 host (4 NVSwitch devices) after the driver's activation: the nvidia-smi double
    answers the checks' query for the eight GPUs of the real ``nvidia-smi -q`` capture (their bus
    ids) on ``driver``; ``nvidia-smi -q`` answers the ``fabric`` texts in turn (the last one again
    and again); dpkg has ``packages``; the fabric manager's unit is ``fm_state``."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        driver: str = "580.65.06",
        fabric: tuple[Path, ...] = (H100_Q,),
        fm_state: str = "inactive",
        packages: tuple[dict, ...] = (FM_PACKAGE,),
        fm_starts: bool = True,
    ) -> None:
        self.bus_ids = re.findall(r"(?m)^GPU (\S+)$", H100_Q.read_text(encoding="utf-8"))
        gpus = [
            {"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "pci_bus_id": b} for b in self.bus_ids
        ]
        self.state = tmp_path / "hgx-state.json"
        self.state.write_text(json.dumps({"driver_version": driver, "gpus": gpus}), encoding="utf-8")
        self.fabric = [p.read_text(encoding="utf-8") for p in fabric]
        self.fm_state, self.packages, self.fm_starts = fm_state, [dict(p) for p in packages], fm_starts
        self.events: list[tuple[str, str]] = []
        self.slept: list[float] = []
        self.options = {"nvidia_driver_check_nvidia_smi": f"{sys.executable} {SMI}"}
        self.host = FakeHost(
            handlers={
                "cuda13_driver_facts": self.facts,
                "ansible.builtin.command": self.command,
                "ansible.builtin.systemd_service": self.systemd,
            }
        )

    def facts(self, args: dict) -> dict:
        rc = 0 if self.fm_state == "active" else 3
        return {
            "facts": {
                "packages": [dict(p) for p in self.packages],
                "nvswitch": 4,
                "fabric_manager": {"rc": rc, "stdout": f"{self.fm_state}\n", "stderr": ""},
                "units": {},
                "modules": [],
            }
        }

    def command(self, args: dict) -> dict:
        argv = list(args["argv"])
        if argv[-1] == "-q":
            self.events.append(("command", "-q"))
            text = self.fabric.pop(0) if len(self.fabric) > 1 else self.fabric[0]
            return {"rc": 0, "stdout": text, "stderr": ""}
        self.events.append(("command", "query"))
        done = subprocess.run(
            [sys.executable, *argv[1:]],
            env={"NVIDIA_SMI_DOUBLE_STATE": str(self.state), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def systemd(self, args: dict) -> dict:
        self.events.append(("start", args["name"]))
        if args["name"] == FM and not self.fm_starts:
            return {"failed": True, "msg": FM_START_FAILED}
        return {"changed": True}

    def check(self, **kw) -> dict:
        return driver_move.check(
            self.host, self.options, expected=kw.pop("expected", "580.65.06"), sleep=self.slept.append, **kw
        )


def test_an_nvswitch_host_starts_the_fabric_manager_first_and_waits_for_the_fabric(tmp_path):
    # The R580 fabric "In Progress" at the first read, every GPU Completed/Success at the second.
    hgx = Hgx(tmp_path, fabric=(IN_PROGRESS_580, H100_Q))
    checked = hgx.check(start=[FM, PERSISTENCED])
    assert checked["nvswitch"] == 4
    assert checked["fabric_manager"] == {
        "unit": FM,
        "state": "inactive",
        "started": True,
        "packages": [{"name": "nvidia-fabricmanager", "version": "580.65.06-1"}],
        "version_ok": True,
    }
    fabric = checked["fabric"]
    assert fabric["ok"] and (fabric["reads"], fabric["waited_s"]) == (2, driver_move.POLL_S)
    assert [g["bus_id"] for g in fabric["gpus"]] == hgx.bus_ids
    assert hgx.slept == [driver_move.POLL_S]
    # The fabric manager once, before the fabric is read; the other clients after the fabric is up.
    assert hgx.events == [
        ("command", "query"),
        ("start", FM),
        ("command", "-q"),
        ("command", "-q"),
        ("start", PERSISTENCED),
    ]
    assert checked["started"] == [FM, PERSISTENCED]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (IN_PROGRESS_570, "GPU #0: In Progress/N/A"),
        (IN_PROGRESS_580, "GPU #0: In Progress/N/A"),
        (INSUFFICIENT, "GPU #0: Completed/Insufficient Resources"),
    ],
)
def test_a_fabric_not_registered_within_the_wait_fails_naming_the_gpu(tmp_path, text, shown):
    hgx = Hgx(tmp_path, fabric=(text,))
    with pytest.raises(StepFailed) as failed:
        hgx.check(start=[PERSISTENCED])
    msg = failed.value.msg
    assert f"after {driver_move.FABRIC_WAIT_S} s the GPUs are not registered with the NVLink fabric" in msg
    assert shown in msg and "error 802" in msg and f"systemctl status {FM}" in msg
    assert sum(hgx.slept) == driver_move.FABRIC_WAIT_S
    reads = hgx.events.count(("command", "-q"))
    assert reads == 1 + driver_move.FABRIC_WAIT_S // driver_move.POLL_S
    assert failed.value.record["fabric"]["ok"] is False
    assert failed.value.record["fabric"]["reads"] == reads
    # The clients are not started on a fabric that is not up.
    assert ("start", PERSISTENCED) not in hgx.events


def test_a_fabric_manager_of_another_version_fails_before_anything_is_started(tmp_path):
    # The driver moved on (580.159.04, the driver of NVIDIA/gpu-operator issue #2511); the fabric
    # manager stayed at 580.65.06-1.
    hgx = Hgx(tmp_path, driver="580.159.04")
    with pytest.raises(StepFailed) as failed:
        hgx.check(expected="580.159.04", start=[FM])
    msg = failed.value.msg
    assert "the driver is 580.159.04, but dpkg has nvidia-fabricmanager 580.65.06-1" in msg
    assert "nvidia-fabricmanager=580.159.04-*" in msg
    assert failed.value.record["fabric_manager"]["version_ok"] is False
    assert hgx.events == [("command", "query")]


def test_an_nvswitch_host_without_a_fabric_manager_package_fails(tmp_path):
    hgx = Hgx(tmp_path, packages=())
    with pytest.raises(StepFailed, match="but dpkg has no fabric manager package"):
        hgx.check()
    assert hgx.events == [("command", "query")]


def test_a_fabric_manager_that_does_not_start_fails_with_systemds_text(tmp_path):
    hgx = Hgx(tmp_path, fm_starts=False)
    with pytest.raises(StepFailed) as failed:
        hgx.check(start=[FM])
    assert f"{FM} does not start on the new driver (inactive before)" in failed.value.msg
    assert "Job for nvidia-fabricmanager.service failed because the control process exited" in (
        failed.value.msg
    )
    assert ("command", "-q") not in hgx.events


def test_a_running_fabric_manager_is_left_alone_and_a_registered_fabric_read_once(tmp_path):
    hgx = Hgx(tmp_path, fm_state="active")
    checked = hgx.check()
    assert checked["fabric_manager"]["started"] is False and checked["started"] == []
    assert checked["fabric"]["reads"] == 1 and hgx.slept == []
    assert checked["fabric"]["summary"] == "all 8 GPUs registered with the fabric (Completed/Success)"
    assert hgx.events == [("command", "query"), ("command", "-q")]


def test_a_host_without_nvswitch_runs_no_new_command(machine):
    driver_move.move(machine.host, machine.options, _plan())
    before = len(machine.host.calls)
    checked = driver_move.check(machine.host, machine.options, expected=NEW, start=[PERSISTENCED])
    calls = machine.host.calls[before:]
    assert [name for name, _args, _python in calls] == [
        "ansible.builtin.command",
        "cuda13_driver_facts",
        "ansible.builtin.systemd_service",
    ]
    assert "--query-gpu=driver_version,pci.bus_id,persistence_mode" in calls[0][1]["argv"]
    assert (checked["nvswitch"], checked["fabric_manager"], checked["fabric"]) == (0, None, None)
    # The preflight's GPU rows carry no persistence mode: no verdict, no second query.
    assert (checked["persistence_before"], checked["persistence_after"]) == (None, None)


def _persistence(machine: Machine, enabled: dict[int, bool]) -> list[dict]:
    """Set the double's persistence mode of GPU ``i`` to ``enabled[i]``; the GPUs' rows as a preflight
    that read persistence_mode would have them, each Enabled."""
    state = json.loads(machine.state.read_text(encoding="utf-8"))
    for i, gpu in enumerate(state["gpus"]):
        gpu["persistence_mode"] = enabled.get(i, True)
    machine.state.write_text(json.dumps(state), encoding="utf-8")
    return [{"pci.bus_id": g["pci_bus_id"], "persistence_mode": "Enabled"} for g in state["gpus"]]


def test_persistence_mode_set_again_by_nvidia_persistenced_passes(machine):
    driver_move.move(machine.host, machine.options, _plan())
    # After the reload no GPU is in persistence mode until nvidia-persistenced runs again.
    before = _persistence(machine, dict.fromkeys(range(8), False))
    start_unit = machine.systemd

    def systemd(args: dict) -> dict:
        if args["name"] == PERSISTENCED and args["state"] == "started":
            _persistence(machine, {})
        return start_unit(args)

    machine.host.handlers["ansible.builtin.systemd_service"] = systemd
    slept: list[float] = []
    calls = len(machine.host.calls)
    checked = driver_move.check(
        machine.host, machine.options, expected=NEW, gpus=before, start=[PERSISTENCED], sleep=slept.append
    )
    assert checked["persistence"] == ["Disabled"] * 8
    assert checked["persistence_before"] == {g["pci.bus_id"]: "Enabled" for g in before}
    assert checked["persistence_after"] == {g["pci.bus_id"]: "Enabled" for g in before}
    assert slept == []
    # Read again once, after nvidia-persistenced started.
    assert [name for name, _args, _python in machine.host.calls[calls:]] == [
        "ansible.builtin.command",
        "cuda13_driver_facts",
        "ansible.builtin.systemd_service",
        "ansible.builtin.command",
    ]


def test_a_gpu_whose_persistence_mode_went_from_enabled_to_disabled_fails(machine):
    driver_move.move(machine.host, machine.options, _plan())
    before = _persistence(machine, {2: False})
    slept: list[float] = []
    with pytest.raises(StepFailed) as failed:
        driver_move.check(
            machine.host, machine.options, expected=NEW, gpus=before, start=[PERSISTENCED], sleep=slept.append
        )
    bus = before[2]["pci.bus_id"]
    msg = failed.value.msg
    assert f"persistence mode is not as before the move ({bus}: Enabled before, Disabled after;" in msg
    assert "nvidia-persistenced" in msg and "'nvidia-smi -pm 1'" in msg
    assert sum(slept) == driver_move.PERSISTENCE_WAIT_S
    assert failed.value.record["persistence_after"][bus] == "Disabled"
    assert failed.value.record["started"] == [PERSISTENCED]


def test_a_gpu_disabled_before_or_of_unknown_mode_gives_no_failure(machine):
    driver_move.move(machine.host, machine.options, _plan())
    rows = _persistence(machine, {0: False, 1: False})
    rows[0]["persistence_mode"] = "Disabled"
    rows[1]["persistence_mode"] = None
    checked = driver_move.check(machine.host, machine.options, expected=NEW, gpus=rows, sleep=[].append)
    assert checked["persistence_before"][rows[0]["pci.bus_id"]] == "Disabled"
    assert rows[1]["pci.bus_id"] not in checked["persistence_before"]


def test_the_move_reads_the_persistence_mode_before_it_stops_anything_and_the_check_wants_it_back(machine):
    moved = driver_move.move(machine.host, machine.options, _plan())
    before = moved["gpus_before"]
    assert len(before) == 8 and {g["persistence_mode"] for g in before} == {"Enabled"}
    # The first command of the move, before any unit stops: nvidia-persistenced still runs.
    commands = [
        c
        for c in machine.host.calls
        if c[0] in ("ansible.builtin.command", "ansible.builtin.systemd_service")
    ]
    assert "--query-gpu=pci.bus_id,persistence_mode" in commands[0][1]["argv"]
    preflight = [{"pci.bus_id": g["pci.bus_id"], "name": "NVIDIA RTX PRO 6000"} for g in before]
    gpus = driver_move.gpus_before(preflight, moved)
    assert [g["persistence_mode"] for g in gpus] == ["Enabled"] * 8 and gpus[0][
        "name"
    ] == "NVIDIA RTX PRO 6000"
    assert driver_move.gpus_before([], moved) == before
    checked = driver_move.check(
        machine.host, machine.options, expected=NEW, gpus=gpus, start=[PERSISTENCED], sleep=[].append
    )
    assert set(checked["persistence_before"].values()) == {"Enabled"}
    # Without a record of before (an older move record), no verdict.
    assert driver_move.gpus_before(preflight, {}) == preflight
