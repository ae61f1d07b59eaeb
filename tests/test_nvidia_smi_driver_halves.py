"""The driver's two halves in the sandbox: the nvidia-smi double's "driver_halves", the modprobe
and rmmod double and the boot-time module loader, run as programs on files under tmp_path.

The user-space half is a libnvidia-ml.so.<version> file, the installed kernel module a
/usr/src/nvidia-<version> directory, the loaded module the module state file; the texts the
doubles print are checked against real outputs in tests/fixtures/driver_halves/,
tests/fixtures/driver/ and tests/fixtures/nvidia-smi/ (each directory's SOURCES.md names the
sources). The states without "driver_halves" must answer as they did before it existed
(existing-state-answers.json).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from cuda13_upgrade.nvidia_smi import classify_failure, parse_query_gpu, parse_table, parse_version_info

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "sandbox" / "host"
SMI = HOST / "nvidia-smi"
MODPROBE = HOST / "modprobe-double"
MODULE_LOAD = HOST / "nvidia-module-load"
STATES = HOST / "nvidia-smi-states"
GPU_TASKS = ROOT / "sandbox" / "roles" / "sandbox_host" / "tasks" / "gpu.yml"
FIXTURES = ROOT / "tests" / "fixtures"
HALVES = FIXTURES / "driver_halves"
ANSWERS = HALVES / "existing-state-answers.json"

R570 = "570.86.15"
# The driver driver-r570-halves.json loads on a fresh host: the version the mirror's
# nvidia-graphics-drivers/ stand-ins of Ubuntu's 570 packages install.
R570_STANDIN = "570.211.01"
R580 = "580.95.05"
FULL_STACK = ["nvidia", "nvidia_modeset", "nvidia_uvm", "nvidia_drm"]
UNLOAD_ALL = ["-r", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]


def fixture(directory: str, name: str) -> bytes:
    return (FIXTURES / directory / name).read_bytes()


class Host:
    """A host's files under tmp_path: library, module sources, module state, live processes."""

    def __init__(self, root: Path, **halves: object) -> None:
        self.root = root
        self.lib = root / "lib"
        self.src = root / "src"
        self.module_state = root / "run" / "module.json"
        self.processes = root / "processes"
        for directory in (self.lib, self.src, self.processes):
            directory.mkdir(parents=True)
        state = json.loads((STATES / "driver-r570-halves.json").read_text(encoding="utf-8"))
        state["driver_halves"].update(
            library_glob=str(self.lib / "libnvidia-ml.so.*.*"),
            module_state=str(self.module_state),
            module_source_glob=str(self.src / "nvidia-*"),
            **halves,
        )
        self.state = root / "state.json"
        self.state.write_text(json.dumps(state), encoding="utf-8")
        self.rmmod_link = root / "bin" / "rmmod"
        self.rmmod_link.parent.mkdir()
        self.rmmod_link.symlink_to(MODPROBE)
        self.env = {
            **os.environ,
            "NVIDIA_SMI_DOUBLE_STATE": str(self.state),
            "NVIDIA_SMI_DOUBLE_PROCESSES": str(self.processes),
        }

    def install(self, version: str) -> None:
        """What the driver packages of ``version`` install: the library and the DKMS source tree."""
        (self.lib / f"libnvidia-ml.so.{version}").write_bytes(b"")
        (self.src / f"nvidia-{version}").mkdir()

    def uninstall(self, version: str) -> None:
        (self.lib / f"libnvidia-ml.so.{version}").unlink()
        (self.src / f"nvidia-{version}").rmdir()

    def loaded(self, version: str, modules: list[str] | None = None, flavour: str = "open") -> None:
        record: dict = {"version": version, "flavour": flavour}
        if modules is not None:
            record["modules"] = modules
        self.module_state.parent.mkdir(parents=True, exist_ok=True)
        self.module_state.write_text(json.dumps(record), encoding="utf-8")

    def module(self) -> dict | None:
        if not self.module_state.exists():
            return None
        return json.loads(self.module_state.read_text(encoding="utf-8"))

    def run(self, program: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, str(program), *args], env=self.env, capture_output=True, check=False, timeout=30
        )

    def smi(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return self.run(SMI, *args)

    def modprobe(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return self.run(MODPROBE, *args)

    def rmmod(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return self.run(self.rmmod_link, *args)

    def driver_version(self) -> str:
        result = self.smi("--query-gpu=driver_version", "--format=csv,noheader")
        assert result.returncode == 0, result.stdout + result.stderr
        versions = set(result.stdout.decode().split())
        assert len(versions) == 1
        return versions.pop()

    def register(self, pid: int) -> None:
        """What the simulated server writes once its weights are on the GPUs."""
        entry = [
            {"gpu": 0, "pid": pid, "type": "C", "name": "/opt/ml-env/bin/python3", "used_memory_mib": 81234}
        ]
        (self.processes / f"{pid}.json").write_text(json.dumps(entry), encoding="utf-8")


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


@pytest.fixture
def server():
    """A live process (the simulated server's stand-in), ended at the end of the test."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield child
    child.kill()
    child.wait()


# --- the scripts ---------------------------------------------------------------------------


@pytest.mark.parametrize("script", [MODPROBE, MODULE_LOAD, HOST / "gpu-client"])
def test_scripts_are_executable_stdlib_python3(script):
    assert os.access(script, os.X_OK)
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env python3\n")
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)


# --- nvidia-smi: library and module ----------------------------------------------------------


def test_library_and_module_of_one_version_answer_that_version(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    assert host.driver_version() == R570
    table = host.smi()
    assert table.returncode == 0
    header = parse_table(table.stdout.decode())
    assert (header["driver_version"], header["cuda_version"]) == (R570, "12.8")
    info = parse_version_info(host.smi("--version").stdout.decode())
    assert (info["driver_version"], info["nvml_version"]) == (R570, "570.86")
    # the GPUs are the state's
    listed = host.smi("--query-gpu=index,name,compute_cap", "--format=csv,noheader").stdout.decode()
    assert len(parse_query_gpu(listed, ["index", "name", "compute_cap"], "csv,noheader")) == 8


def test_a_newer_library_over_the_loaded_module_is_the_real_nvml_mismatch(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    host.uninstall(R570)
    host.install(R580)
    for args in ([], ["-L"], ["--query-gpu=driver_version", "--format=csv,noheader"]):
        result = host.smi(*args)
        assert result.returncode == 18
        assert result.stdout == (
            b"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"
        )
        real = fixture("nvidia-smi", "failure-nvml-mismatch-550.txt").splitlines()
        assert result.stdout.splitlines()[0] == real[0]
        assert re.sub(rb"\d+\.\d+$", b"V", result.stdout.splitlines()[1]) == re.sub(
            rb"\d+\.\d+$", b"V", real[1]
        )
        assert classify_failure(18, result.stdout.decode(), "").code == "driver_library_mismatch"


def test_the_newest_library_counts_by_number_not_by_text(host):
    # 580.126.09 is newer than 580.65.06, though "1" sorts before "6"
    for version in ("570.86.15", "580.65.06", "580.126.09"):
        (host.lib / f"libnvidia-ml.so.{version}").write_bytes(b"")
    (host.lib / "libnvidia-ml.so.1").symlink_to(host.lib / "libnvidia-ml.so.580.126.09")
    host.loaded("580.126.09")
    assert host.driver_version() == "580.126.09"
    host.loaded("580.65.06")
    assert host.smi("-L").stdout.endswith(b"NVML library version: 580.126\n")


def test_no_module_loaded_is_the_real_no_driver_failure(host):
    host.install(R570)
    result = host.smi()
    assert result.returncode == 9
    # as the double's no-driver state (tests/test_nvidia_smi_double.py): the real line, then a blank one
    assert result.stdout.startswith(fixture("nvidia-smi", "failure-no-driver.txt"))
    assert classify_failure(9, result.stdout.decode(), "").code == "driver_not_loaded"


def test_no_library_is_the_real_library_not_found_failure(host):
    host.loaded(R570)
    result = host.smi("-L")
    assert (result.returncode, result.stdout) == (
        12,
        fixture("driver_halves", "nvidia-smi-no-libnvidia-ml.txt"),
    )


def test_an_explicit_failure_of_the_state_still_wins(tmp_path):
    host = Host(tmp_path)
    state = json.loads(host.state.read_text())
    state["failure"] = "no_devices"
    host.state.write_text(json.dumps(state))
    host.install(R570)
    host.loaded(R570)
    assert host.smi("-L").returncode == 6


def test_a_broken_module_state_is_an_error_of_the_double(host):
    host.install(R570)
    host.module_state.parent.mkdir(parents=True)
    host.module_state.write_text("{not json")
    result = host.smi("-L")
    assert result.returncode == 255
    assert result.stderr.decode().startswith(
        f"nvidia-smi double: cannot read module state file {host.module_state}"
    )


# --- modprobe and rmmod ------------------------------------------------------------------------


def test_the_move_to_r580_unload_install_load(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    host.uninstall(R570)
    host.install(R580)
    assert host.smi().returncode == 18
    unload = host.modprobe(*UNLOAD_ALL)
    assert (unload.returncode, unload.stdout, unload.stderr) == (0, b"", b"")
    assert host.module() is None
    assert host.smi().returncode == 9
    load = host.modprobe("nvidia")
    assert (load.returncode, load.stderr) == (0, b"")
    assert host.module() == {"version": R580, "flavour": "open", "modules": ["nvidia"]}
    assert host.driver_version() == R580
    assert parse_table(host.smi().stdout.decode())["cuda_version"] == "13.0"


def test_loading_a_loaded_module_changes_nothing(host):
    # a package upgrade without a reload: the old module stays, nvidia-smi keeps the mismatch
    host.install(R580)
    host.loaded(R570, ["nvidia"])
    result = host.modprobe("nvidia")
    assert (result.returncode, result.stderr) == (0, b"")
    assert host.module()["version"] == R570
    assert host.smi("-L").returncode == 18


def test_loading_a_module_loads_what_it_uses_and_takes_the_flavour_of_the_state(tmp_path):
    host = Host(tmp_path, module_flavour="proprietary")
    host.install(R570)
    assert host.modprobe("nvidia-drm", "modeset=1").returncode == 0
    assert host.module() == {
        "version": R570,
        "flavour": "proprietary",
        "modules": ["nvidia", "nvidia_modeset", "nvidia_drm"],
    }
    assert host.modprobe("-a", "nvidia_uvm", "nvidia").returncode == 0
    assert host.module()["modules"] == ["nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm"]


def test_unload_is_refused_while_a_compute_process_lives(host, server):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    host.register(server.pid)
    result = host.modprobe(*UNLOAD_ALL)
    assert result.returncode == 1
    assert (
        result.stderr
        == b"modprobe: FATAL: Module nvidia_uvm is in use.\nmodprobe: FATAL: Module nvidia is in use.\n"
    )
    # the same template as the real refusals (kmod's "Module %s is in use.")
    real = fixture("driver", "modprobe-r-in-use.txt")
    assert result.stderr.splitlines()[1] + b"\n" == real
    drm = fixture("driver_halves", "modprobe-r-in-use-nvidia-drm.txt")
    assert result.stderr.splitlines()[0] + b"\n" == drm.replace(b"nvidia_drm", b"nvidia_uvm")
    # the modules nothing held are gone; the driver still answers
    assert host.module()["modules"] == ["nvidia", "nvidia_uvm"]
    assert host.driver_version() == R570
    # the process ends: the unload goes through
    server.kill()
    server.wait()
    again = host.modprobe(*UNLOAD_ALL)
    assert (again.returncode, again.stderr) == (0, b"")
    assert host.module() is None


def test_modprobe_r_nvidia_alone_prints_the_real_refusal(host, server):
    host.install(R570)
    host.loaded(R570)
    host.register(server.pid)
    result = host.modprobe("-r", "nvidia")
    assert (result.returncode, result.stderr) == (1, fixture("driver", "modprobe-r-in-use.txt"))
    assert host.module() is not None


def test_modprobe_r_nvidia_goes_through_when_nothing_holds_it(host):
    host.install(R570)
    host.loaded(R570)
    assert host.modprobe("-r", "nvidia").returncode == 0
    assert host.module() is None


def test_modprobe_r_nvidia_is_refused_while_the_other_modules_use_it(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    result = host.modprobe("-r", "nvidia")
    assert (result.returncode, result.stderr) == (1, fixture("driver", "modprobe-r-in-use.txt"))
    assert host.module()["modules"] == FULL_STACK


def test_modprobe_r_removes_what_became_unused(host):
    host.install(R570)
    host.loaded(R570, ["nvidia", "nvidia_uvm"])
    assert host.modprobe("-r", "nvidia_uvm").returncode == 0
    assert host.module() is None


def test_modprobe_r_of_a_module_not_loaded_is_silent(host):
    host.install(R570)
    result = host.modprobe("-r", "nvidia")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_with_the_packages_removed_modprobe_r_finds_no_module_but_rmmod_unloads_it(host):
    host.install(R570)
    host.loaded(R570)
    host.uninstall(R570)
    result = host.modprobe("-r", "nvidia")
    assert (result.returncode, result.stderr) == (1, fixture("driver_halves", "modprobe-r-not-found.txt"))
    assert host.module() is not None
    assert host.rmmod("nvidia").returncode == 0
    assert host.module() is None


def test_modprobe_q_prints_nothing_but_fails_alike(host, server):
    host.install(R570)
    host.loaded(R570)
    host.register(server.pid)
    before = host.module_state.read_bytes()
    for args in (["-q", "-r", "nvidia"], ["-qr", "nvidia"]):
        result = host.modprobe(*args)
        assert (result.returncode, result.stderr) == (1, b"")
    assert host.module_state.read_bytes() == before


def test_rmmod_names_the_holders_as_the_real_one(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    result = host.rmmod("nvidia")
    real = fixture("driver", "rmmod-in-use-open-modules.txt").splitlines()[-1] + b"\n"
    assert (result.returncode, result.stderr) == (1, real)
    assert host.module()["modules"] == FULL_STACK


def test_rmmod_of_every_module_while_a_process_lives(host, server):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    host.register(server.pid)
    result = host.rmmod("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")
    assert result.returncode == 1
    assert result.stderr == (
        b"rmmod: ERROR: Module nvidia_uvm is in use\nrmmod: ERROR: Module nvidia is in use by: nvidia_uvm\n"
    )
    assert result.stderr.splitlines()[0] in fixture("driver", "rmmod-in-use-open-modules.txt").splitlines()
    assert host.module()["modules"] == ["nvidia", "nvidia_uvm"]


def test_rmmod_nvidia_held_by_a_process_alone(host, server):
    host.install(R570)
    host.loaded(R570)
    host.register(server.pid)
    result = host.rmmod("nvidia")
    assert (result.returncode, result.stderr) == (1, fixture("driver_halves", "rmmod-in-use-no-holders.txt"))


def test_rmmod_in_order_unloads_the_driver(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    result = host.rmmod("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")
    assert (result.returncode, result.stderr) == (0, b"")
    assert host.module() is None
    assert host.smi("-L").returncode == 9


def test_rmmod_of_a_module_not_loaded(host):
    host.install(R570)
    host.loaded(R570)
    result = host.rmmod("nvidia_uvm")
    assert (result.returncode, result.stderr) == (1, fixture("driver_halves", "rmmod-not-loaded.txt"))


def test_a_dead_process_holds_nothing(host):
    host.install(R570)
    host.loaded(R570)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    host.register(int(gone.stdout))
    assert host.modprobe("-r", "nvidia").returncode == 0


def test_key_rejected(tmp_path):
    host = Host(tmp_path, module_key_rejected=True)
    host.install(R580)
    result = host.modprobe("nvidia")
    assert (result.returncode, result.stderr) == (1, fixture("driver", "modprobe-key-rejected-595.71.05.txt"))
    assert host.module() is None
    assert host.smi("-L").returncode == 9


@pytest.mark.parametrize(
    ("release", "name"),
    [
        ("6.8.0-1015-aws", "modprobe-not-found-6.8.0-1015-aws.txt"),
        ("5.2.13-200.fc30.x86_64", "modprobe-not-found-5.2.13-200.fc30.txt"),
    ],
)
def test_module_not_found(tmp_path, release, name):
    host = Host(tmp_path, kernel_release=release)
    (host.lib / f"libnvidia-ml.so.{R580}").write_bytes(b"")
    result = host.modprobe("nvidia")
    assert (result.returncode, result.stderr) == (1, fixture("driver_halves", name))
    assert host.module() is None


def test_module_not_found_names_the_running_kernel_by_default(host):
    result = host.modprobe("nvidia")
    assert result.stderr.decode() == (
        f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{os.uname().release}\n"
    )


def test_a_command_line_mixing_nvidia_and_other_modules_is_refused(host):
    host.install(R570)
    result = host.modprobe("-r", "nvidia", "loop")
    assert result.returncode == 1
    assert result.stderr.startswith(b"modprobe double: ")
    assert host.module() is None


# --- boot ------------------------------------------------------------------------------------


def test_a_reboot_loads_the_installed_driver_s_module(host):
    # R580 installed while R570 was loaded; the reboot empties /run and the unit loads R580
    host.install(R580)
    host.loaded(R570, FULL_STACK)
    assert host.smi("-L").returncode == 18
    host.module_state.unlink()
    env = {**host.env, "NVIDIA_MODULE_LOAD_MODPROBE": str(MODPROBE)}
    boot = subprocess.run(
        [sys.executable, str(MODULE_LOAD)], env=env, capture_output=True, check=False, timeout=30
    )
    assert (boot.returncode, boot.stderr) == (0, b"")
    assert host.module() == {"version": R580, "flavour": "open", "modules": FULL_STACK}
    assert host.driver_version() == R580


def test_a_boot_without_an_installed_module_fails_with_modprobe_s_text(tmp_path):
    host = Host(tmp_path, kernel_release="6.8.0-1015-aws")
    env = {**host.env, "NVIDIA_MODULE_LOAD_MODPROBE": str(MODPROBE)}
    boot = subprocess.run(
        [sys.executable, str(MODULE_LOAD)], env=env, capture_output=True, check=False, timeout=30
    )
    assert boot.returncode == 1
    assert boot.stderr.startswith(fixture("driver_halves", "modprobe-not-found-6.8.0-1015-aws.txt"))


# --- gpu.yml -----------------------------------------------------------------------------------


def _halves_block() -> dict:
    tasks = yaml.safe_load(GPU_TASKS.read_text(encoding="utf-8"))
    (block,) = [t for t in tasks if "block" in t and "__sandbox_host_driver_halves" in t.get("vars", {})]
    return block


def test_gpu_yml_installs_the_doubles_where_the_unit_and_the_loader_look():
    block = _halves_block()
    copies = {
        t["ansible.builtin.copy"]["dest"]: t["ansible.builtin.copy"]
        for t in block["block"]
        if "ansible.builtin.copy" in t
    }
    assert copies["/usr/local/sbin/modprobe"]["src"].endswith("/sandbox/host/modprobe-double")
    assert copies["/usr/local/sbin/nvidia-module-load"]["src"].endswith("/sandbox/host/nvidia-module-load")
    unit = copies["/etc/systemd/system/nvidia-module-load.service"]["content"]
    assert "ExecStart=/usr/local/sbin/nvidia-module-load\n" in unit
    assert "Type=oneshot\n" in unit
    links = [t["ansible.builtin.file"] for t in block["block"] if "ansible.builtin.file" in t]
    assert {"src": "/usr/local/sbin/modprobe", "dest": "/usr/local/sbin/rmmod", "state": "link"} in links
    loader = MODULE_LOAD.read_text(encoding="utf-8")
    assert 'DEFAULT_MODPROBE = "/usr/local/sbin/modprobe"' in loader
    # the module state's default path is the same in gpu.yml and both doubles
    default = re.search(r"default\('([^']+)', true\)", block["vars"]["__sandbox_host_module_state"]).group(1)
    for script in (SMI, MODPROBE):
        assert f'DEFAULT_MODULE_STATE = "{default}"' in script.read_text(encoding="utf-8")


def _render_gpu_yml(tmp_path: Path, state: str) -> dict:
    """The block's condition and the fresh host's module state, templated by ansible-playbook."""
    block = _halves_block()
    content = block["block"][-1]["ansible.builtin.copy"]["content"]
    out = tmp_path / "rendered.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                **block["vars"],
                "__sandbox_host_repo": str(ROOT),
                "sandbox_host_nvidia_smi_state": state,
            },
            "tasks": [
                {
                    "name": "Render",
                    "ansible.builtin.copy": {
                        "content": "{{ {'when': (" + block["when"] + "), 'module': ("
                        "(" + content.strip()[3:-3] + ") if (" + block["when"] + ") else None)} | to_json }}",
                        "dest": str(out),
                        "mode": "0644",
                    },
                }
            ],
        }
    ]
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(book),
        ],
        env={**env, "ANSIBLE_LOCALHOST_WARNING": "false"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text(encoding="utf-8"))


def test_gpu_yml_loads_the_state_s_driver_on_a_fresh_host(tmp_path):
    rendered = _render_gpu_yml(tmp_path, "driver-r570-halves")
    assert rendered["when"] is True
    assert json.loads(rendered["module"]) == {
        "version": R570_STANDIN,
        "flavour": "open",
        "modules": FULL_STACK,
    }


def test_gpu_yml_leaves_states_without_driver_halves_alone(tmp_path):
    assert _render_gpu_yml(tmp_path, "default") == {"when": False, "module": None}


# --- the states without driver_halves answer as before ---------------------------------------

INVENTORY = (
    "index,name,uuid,pci.bus_id,driver_version,compute_cap,memory.total,memory.used,memory.free,power.limit"
)
COMMANDS = [
    [],
    ["-L"],
    ["--version"],
    ["topo", "-m"],
    ["--query-gpu=" + INVENTORY, "--format=csv"],
    ["--query-gpu=index,memory.used,power.draw,fan.speed,temperature.gpu", "--format=csv,noheader,nounits"],
    ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv"],
    ["-h"],
    ["-i", "0"],
    ["-L", "-i", "1"],
    ["--bogus"],
]
TIME_LINE = re.compile(rb"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} *$")


def answers(double: Path, state: Path, processes: Path) -> dict[str, list]:
    """Exit status and SHA-256 of stdout (the table's time line masked) and stderr, per command line."""
    found = {}
    for args in COMMANDS:
        env = {
            **os.environ,
            "NVIDIA_SMI_DOUBLE_STATE": str(state),
            "NVIDIA_SMI_DOUBLE_PROCESSES": str(processes),
        }
        result = subprocess.run(
            [sys.executable, str(double), *args], env=env, capture_output=True, check=False, timeout=30
        )
        lines = result.stdout.split(b"\n")
        if TIME_LINE.match(lines[0]):
            lines[0] = b"<timestamp>"
        found[" ".join(args)] = [
            result.returncode,
            hashlib.sha256(b"\n".join(lines)).hexdigest(),
            hashlib.sha256(result.stderr).hexdigest(),
        ]
    return found


def _states_without_halves() -> list[str]:
    return sorted(
        p.stem
        for p in STATES.glob("*.json")
        if p.stem != "hang" and "driver_halves" not in json.loads(p.read_text(encoding="utf-8"))
    )


def test_every_state_without_driver_halves_has_recorded_answers():
    assert sorted(json.loads(ANSWERS.read_text(encoding="utf-8"))) == _states_without_halves()


@pytest.mark.parametrize("name", _states_without_halves())
def test_states_without_driver_halves_answer_as_recorded(tmp_path, name):
    recorded = json.loads(ANSWERS.read_text(encoding="utf-8"))[name]
    assert answers(SMI, STATES / f"{name}.json", tmp_path) == recorded


def test_the_new_state_is_the_old_driver_s_gpus():
    new = json.loads((STATES / "driver-r570-halves.json").read_text(encoding="utf-8"))
    old = json.loads((STATES / "driver-too-old.json").read_text(encoding="utf-8"))
    assert new["gpus"] == old["gpus"]
    assert new["cuda_version"] == old["cuda_version"]
    # the same branch (R570, CUDA 12.8), at the version the driver stand-ins install
    assert (new["driver_version"], old["driver_version"]) == (R570_STANDIN, R570)
    assert new["driver_version"].split(".")[0] == old["driver_version"].split(".")[0]


if __name__ == "__main__":
    # Record the answers again after a deliberate change of the double:
    #   .venv/bin/python tests/test_nvidia_smi_driver_halves.py
    with tempfile.TemporaryDirectory() as empty:
        recorded = {
            name: answers(SMI, STATES / f"{name}.json", Path(empty)) for name in _states_without_halves()
        }
    ANSWERS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")


GPU_CLIENT = HOST / "gpu-client"


def test_the_sandbox_gpu_client_holds_the_modules_while_it_runs(host):
    host.install(R570)
    host.loaded(R570, FULL_STACK)
    client = subprocess.Popen([sys.executable, str(GPU_CLIENT)], env=host.env)
    try:
        registered = host.processes / f"{client.pid}.json"
        for _ in range(100):
            if registered.exists():
                break
            time.sleep(0.05)
        [entry] = json.loads(registered.read_text(encoding="utf-8"))
        assert (entry["pid"], entry["type"]) == (client.pid, "C")
        refused = host.modprobe(*UNLOAD_ALL)
        assert refused.returncode == 1 and b"Module nvidia is in use." in refused.stderr
    finally:
        client.terminate()
        client.wait(timeout=10)
    # Stopped (SIGTERM, as systemd stops its unit): its entry is gone, the modules unload.
    assert not registered.exists()
    assert host.modprobe(*UNLOAD_ALL).returncode == 0
