"""The sandbox's nvidia-smi double, run as a program and read back with the real parsers.

Every output format of the double goes through cuda13_upgrade.nvidia_smi, every state file
in sandbox/host/nvidia-smi-states/ is exercised, failure states are checked against the
real texts in tests/fixtures/nvidia-smi/, and recorded real outputs are replayed byte for
byte.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda13_upgrade.nvidia_smi import (
    COMPUTE_APPS_FIELDS,
    INVENTORY_FIELDS,
    GpuInventory,
    classify_failure,
    is_wsl_header,
    parse_compute_apps,
    parse_list,
    parse_query_gpu,
    parse_table,
    parse_topology,
    parse_version_info,
)
from cuda13_upgrade.preflight import GIB, evaluate

ROOT = Path(__file__).resolve().parents[1]
DOUBLE = ROOT / "sandbox" / "host" / "nvidia-smi"
STATES = ROOT / "sandbox" / "host" / "nvidia-smi-states"
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"

HEALTHY = [
    "default",
    "driver-too-old",
    "mixed-gpus",
    "h200",
    "mixed-models",
    "wsl",
    "mig-a100",
    "mig-enabled",
]
FORMATS = ["csv", "csv,noheader", "csv,noheader,nounits"]


def run(state: Path | None, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_SMI_DOUBLE_STATE"}
    if state is not None:
        env["NVIDIA_SMI_DOUBLE_STATE"] = str(state)
    return subprocess.run(
        [sys.executable, str(DOUBLE), *args], env=env, capture_output=True, check=False, timeout=30
    )


def out(state: Path | None, *args: str) -> str:
    result = run(state, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.decode("utf-8")


def state_file(name: str) -> Path:
    return STATES / f"{name}.json"


def load(name: str) -> dict:
    return json.loads(state_file(name).read_text(encoding="utf-8"))


def write_state(tmp_path: Path, state: dict) -> Path:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state), encoding="utf-8")
    return path


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# --- the script itself -------------------------------------------------------------------


def test_double_is_one_executable_stdlib_python3_script():
    assert os.access(DOUBLE, os.X_OK)
    text = DOUBLE.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env python3\n")
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)


def test_double_runs_through_its_shebang():
    env = dict(os.environ, NVIDIA_SMI_DOUBLE_STATE=str(state_file("default")))
    result = subprocess.run([str(DOUBLE), "-L"], env=env, capture_output=True, check=False)
    assert result.returncode == 0
    assert len(parse_list(result.stdout.decode())) == 8


def test_every_state_file_is_listed_here():
    assert sorted(p.stem for p in STATES.glob("*.json")) == sorted(
        HEALTHY + ["no-driver", "nvml-mismatch", "no-gpus", "hang", "driver-r570-halves"]
    )
    # driver-r570-halves answers from the installed driver's files (driver_halves), not from
    # the state alone: tests/test_nvidia_smi_driver_halves.py exercises it.


@pytest.mark.parametrize("args", [["--query-gpu=index,name", "--format=csv"], [], ["-h"]])
def test_hang_answers_nothing_and_does_not_exit(args):
    with pytest.raises(subprocess.TimeoutExpired) as info:
        subprocess.run(
            [sys.executable, str(DOUBLE), *args],
            env={**os.environ, "NVIDIA_SMI_DOUBLE_STATE": str(state_file("hang"))},
            capture_output=True,
            timeout=1.5,
        )
    assert not info.value.stdout


def test_hang_ends_under_coreutils_timeout_with_its_exit_status():
    result = subprocess.run(
        ["timeout", "--foreground", "--kill-after=10", "1", sys.executable, str(DOUBLE), "-L"],
        env={**os.environ, "NVIDIA_SMI_DOUBLE_STATE": str(state_file("hang"))},
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert (result.returncode, result.stdout) == (124, b"")


# --- healthy states, every format ----------------------------------------------------------


@pytest.mark.parametrize("name", HEALTHY)
@pytest.mark.parametrize("fmt", FORMATS)
def test_inventory_query_in_every_format(name, fmt):
    state = load(name)
    text = out(state_file(name), f"--query-gpu={','.join(INVENTORY_FIELDS)}", f"--format={fmt}")
    inventory = GpuInventory.from_query(text, INVENTORY_FIELDS, fmt)
    assert inventory.driver_version == state["driver_version"]
    assert inventory.count == len(state["gpus"])
    for gpu, expected in zip(inventory.gpus, state["gpus"], strict=True):
        assert gpu.name == expected["name"]
        assert gpu.compute_capability == expected["compute_cap"]
        assert gpu.memory_total_mib == expected["memory_total_mib"]
        assert gpu.uuid == expected["uuid"]
        assert gpu.pci_bus_id == expected["pci_bus_id"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_query_fields_with_units_in_every_format(fmt):
    fields = "index,power.limit,temperature.gpu,memory.used,memory.free,utilization.gpu,count"
    rows = parse_query_gpu(out(state_file("h200"), f"--query-gpu={fields}", f"--format={fmt}"), fields, fmt)
    assert rows == [
        {
            "index": 0,
            "power.limit": 700.0,
            "temperature.gpu": 33,
            "memory.used": 0,
            "memory.free": 143771,
            "utilization.gpu": 0,
            "count": 1,
        }
    ]


def test_query_header_is_the_real_one():
    text = out(
        state_file("default"),
        "--query-gpu=name,driver_version,compute_cap,memory.total",
        "--format=csv",
    )
    assert text.splitlines()[0] == "name, driver_version, compute_cap, memory.total [MiB]"
    assert text.splitlines()[1] == "NVIDIA RTX PRO 6000 Blackwell Server Edition, 590.48.01, 12.0, 97887 MiB"


def test_query_as_the_molecule_verifier_runs_it():
    text = out(
        state_file("default"),
        "--query-gpu=name,compute_cap,driver_version",
        "--format=csv,noheader",
    )
    assert {tuple(line.split(", ")) for line in text.splitlines()} == {
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "590.48.01")
    }


def test_query_selects_gpus_with_id():
    text = out(
        state_file("mixed-gpus"),
        "--query-gpu=index,name,compute_cap",
        "--format=csv,noheader",
        "-i",
        "7",
    )
    assert parse_query_gpu(text, "index,name,compute_cap", "csv,noheader") == [
        {"index": 7, "name": "NVIDIA H200", "compute_cap": "9.0"}
    ]
    text = out(state_file("mixed-gpus"), "--id=0,7", "--query-gpu=index", "--format=csv,noheader")
    assert text == "0\n7\n"
    missing = run(state_file("h200"), "-i", "3", "--query-gpu=index", "--format=csv")
    assert (missing.returncode, missing.stdout) == (6, b"No devices were found\n")


def test_query_alias_prints_the_canonical_header():
    text = out(state_file("h200"), "--query-gpu=gpu_name,gpu_bus_id", "--format=csv")
    assert text == "name, pci.bus_id\nNVIDIA H200, 00000000:29:00.0\n"


def test_query_override_of_a_raw_value(tmp_path):
    state = load("h200")
    state["gpus"][0]["query"] = {"power.limit": "[Not Supported]"}
    rows = parse_query_gpu(out(write_state(tmp_path, state), "--query-gpu=index,power.limit", "--format=csv"),
                           "index,power.limit", "csv")  # fmt: skip
    assert rows == [{"index": 0, "power.limit": None}]


@pytest.mark.parametrize("name", HEALTHY)
def test_table_reads_back(name):
    state = load(name)
    table = parse_table(out(state_file(name)))
    assert table["driver_version"] == state["driver_version"]
    assert table["cuda_version"] == state["cuda_version"]
    assert [g["bus_id"] for g in table["gpus"]] == [g["pci_bus_id"] for g in state["gpus"]]
    assert [g["memory_total_mib"] for g in table["gpus"]] == [g["memory_total_mib"] for g in state["gpus"]]
    for gpu, expected in zip(table["gpus"], state["gpus"], strict=True):
        shown = expected["name"] if len(expected["name"]) <= 27 else expected["name"][:24] + "..."
        assert gpu["name"] == shown
        assert gpu["power_cap_w"] == expected["power_limit_w"]
        assert gpu["mig_mode"] == expected.get("mig_mode", "Disabled")
    assert [(d["gpu"], d["gi"], d["ci"], d["memory_total_mib"]) for d in table["mig_devices"]] == [
        (d["gpu"], d["gi"], d["ci"], d["memory_total_mib"]) for d in state.get("mig_devices", [])
    ]
    assert [(p["gpu"], p["pid"], p["name"]) for p in table["processes"]] == [
        (p["gpu"], p["pid"], p["name"]) for p in state.get("processes", [])
    ]


def test_table_lines_are_the_real_width():
    lines = out(state_file("default")).splitlines()
    assert {len(line) for line in lines[1:] if line} == {91}


@pytest.mark.parametrize("name", HEALTHY)
def test_list_reads_back(name):
    state = load(name)
    gpus = parse_list(out(state_file(name), "-L"))
    assert [(g["index"], g["name"], g["uuid"]) for g in gpus] == [
        (i, g["name"], g["uuid"]) for i, g in enumerate(state["gpus"])
    ]
    assert [(m["device"], m["uuid"]) for g in gpus for m in g["mig_devices"]] == [
        (d["mig_dev"], d["uuid"]) for d in state.get("mig_devices", [])
    ]
    assert out(state_file(name), "--list-gpus") == out(state_file(name), "-L")


@pytest.mark.parametrize("name", HEALTHY)
def test_version_reads_back(name):
    state = load(name)
    info = parse_version_info(out(state_file(name), "--version"))
    assert (info["driver_version"], info["cuda_version"]) == (
        state["driver_version"],
        state["cuda_version"],
    )
    assert info["nvml_version"] == ".".join(state["driver_version"].split(".")[:2])


def test_topology_reads_back_as_pcie_only():
    topo = parse_topology(out(state_file("default"), "topo", "-m"))
    assert topo["devices"] == [f"GPU{i}" for i in range(8)]
    assert {topo["links"][f"GPU{i}"][f"GPU{i}"] for i in range(8)} == {"X"}
    assert topo["links"]["GPU0"]["GPU3"] == "NODE"
    assert topo["links"]["GPU0"]["GPU4"] == "SYS"
    assert not any(v.startswith("NV") for row in topo["links"].values() for v in row.values())
    assert topo["numa_affinity"] == {f"GPU{i}": "0" if i < 4 else "1" for i in range(8)}
    assert topo["cpu_affinity"]["GPU7"] == "48-95,144-191"
    assert topo["legend"]["NODE"] == (
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"
    )


def test_topology_header_carries_the_real_escapes():
    first = out(state_file("h200"), "topo", "-m").splitlines()[0]
    assert first == "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"


def test_topology_of_gpus_behind_one_switch(tmp_path):
    state = load("default")
    state["gpus"] = state["gpus"][:2]
    for gpu in state["gpus"]:
        gpu["pcie_switch"] = "sw0"
    topo = parse_topology(out(write_state(tmp_path, state), "topo", "-m"))
    assert topo["links"]["GPU0"]["GPU1"] == "PIX"


# --- the states drive preflight end to end -----------------------------------------------


def facts_of(name: str) -> dict:
    text = out(
        state_file(name),
        f"--query-gpu={','.join(INVENTORY_FIELDS)}",
        "--format=csv,noheader,nounits",
    )
    inventory = GpuInventory.from_query(text).to_dict()
    header = parse_table(out(state_file(name)))
    return {
        "driver_version": inventory["driver_version"],
        "cuda_driver_version": header["cuda_version"],
        "nvidia_smi_version": header["nvidia_smi_version"],
        "gpus": inventory["gpus"],
        "compute_apps": parse_compute_apps(
            out(
                state_file(name),
                f"--query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}",
                "--format=csv,noheader,nounits",
            )
        ),
        "disk_free_bytes": 500 * GIB,
        "python_version": "3.11.2",
    }


def test_preflight_passes_the_default_host():
    assert evaluate(facts_of("default"), {"expected_gpu_count": 8}).ok


def test_preflight_refuses_the_old_driver():
    report = evaluate(facts_of("driver-too-old"))
    assert [f["check"] for f in report.failures] == ["driver", "driver_cuda_version"]
    assert report.failures[0]["value"] == "570.86.15"


def test_preflight_refuses_the_h200_of_the_mixed_host():
    report = evaluate(facts_of("mixed-gpus"))
    assert [(f["check"], f["value"]) for f in report.failures] == [
        ("compute_capability", "9.0"),
        ("gpu_models", ["NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Server Edition"]),
    ]
    assert report.failures[0]["message"].startswith("GPU 7 (NVIDIA H200) has compute capability 9.0")
    assert not evaluate(facts_of("mixed-gpus"), {"allowed_compute_capabilities": ["9.0", "12.0"]}).ok
    assert evaluate(
        facts_of("mixed-gpus"),
        {"allowed_compute_capabilities": ["9.0", "12.0"], "allow_mixed_gpu_models": True},
    ).ok


def test_preflight_refuses_the_a100_mig_host():
    report = evaluate(facts_of("mig-a100"))
    assert [(f["check"], f["value"]) for f in report.failures] == [("compute_capability", "8.0")]


def test_preflight_refuses_the_h200_host():
    report = evaluate(facts_of("h200"))
    assert [(f["check"], f["value"]) for f in report.failures] == [("compute_capability", "9.0")]


# --- failure states ------------------------------------------------------------------------

ALL_COMMANDS = [
    [],
    ["-L"],
    ["--version"],
    ["topo", "-m"],
    ["--query-gpu=index,name", "--format=csv,noheader"],
]


@pytest.mark.parametrize("args", ALL_COMMANDS)
def test_no_driver(args):
    result = run(state_file("no-driver"), *args)
    assert result.returncode == 9
    assert result.stdout.startswith(fixture_bytes("failure-no-driver.txt"))
    failure = classify_failure(result.returncode, result.stdout.decode(), result.stderr.decode())
    assert failure.code == "driver_not_loaded"


@pytest.mark.parametrize("args", ALL_COMMANDS)
def test_nvml_mismatch(args):
    result = run(state_file("nvml-mismatch"), *args)
    assert result.returncode == 18
    assert result.stdout == (
        b"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n"
    )
    real_first_line = fixture_bytes("failure-nvml-mismatch-550.txt").splitlines()[0]
    assert result.stdout.splitlines()[0] == real_first_line
    assert classify_failure(18, result.stdout.decode(), "").code == "driver_library_mismatch"


@pytest.mark.parametrize("args", ALL_COMMANDS)
def test_no_gpus(args):
    result = run(state_file("no-gpus"), *args)
    assert (result.returncode, result.stdout) == (6, fixture_bytes("failure-no-devices.txt"))
    assert classify_failure(6, result.stdout.decode(), "").code == "no_devices"


def test_no_supported_gpus(tmp_path):
    path = write_state(tmp_path, {"failure": "no_supported_gpus"})
    result = run(path, "-L")
    assert (result.returncode, result.stdout) == (
        255,
        fixture_bytes("failure-no-supported-gpus.txt"),
    )


def test_unknown_field_prints_the_real_error():
    result = run(state_file("default"), "--query-gpu=driver_version,cuda_version", "--format=csv,noheader")
    assert (result.returncode, result.stdout) == (2, fixture_bytes("failure-invalid-field.txt"))
    foo = run(state_file("default"), "--query-gpu=foo", "--format=csv")
    assert (foo.returncode, foo.stdout) == (2, b'Field "foo" is not a valid field to query.\n\n')


@pytest.mark.parametrize(
    "args",
    [["topo"], ["--bogus"], ["--query-gpu=index"], ["--query-gpu=index", "--format=json"]],
)
def test_invalid_arguments(args):
    result = run(state_file("default"), *args)
    assert (result.returncode, result.stdout) == (
        2,
        fixture_bytes("failure-topo-invalid-arguments.txt"),
    )


def test_missing_state_file_is_an_error(tmp_path):
    result = run(tmp_path / "absent.json", "-L")
    assert result.returncode == 255
    assert result.stderr.decode() == (
        f"nvidia-smi double: state file {tmp_path / 'absent.json'} (from $NVIDIA_SMI_DOUBLE_STATE) "
        "does not exist\n"
    )


def test_broken_state_file_is_an_error(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("{not json", encoding="utf-8")
    result = run(path, "-L")
    assert result.returncode == 255
    assert result.stderr.decode().startswith(f"nvidia-smi double: cannot read state file {path}:")


@pytest.mark.skipif(
    os.path.exists("/etc/nvidia-smi-double/state.json"), reason="this machine has a state file"
)
def test_builtin_default_equals_default_json():
    for args in (
        ["-L"],
        ["--query-gpu=" + ",".join(INVENTORY_FIELDS), "--format=csv"],
        ["topo", "-m"],
    ):
        assert out(None, *args) == out(state_file("default"), *args)


# --- replaying and reproducing real outputs -------------------------------------------------


def test_replay_is_byte_identical(tmp_path):
    table = (FIXTURES / "table-590.48.01-rtxpro6000-2gpu.txt").read_text(encoding="utf-8")
    topo = (FIXTURES / "topo-6gpu-pcie-ansi.txt").read_text(encoding="utf-8")
    mismatch = (FIXTURES / "failure-nvml-mismatch-535.txt").read_text(encoding="utf-8")
    state = {
        "replay": {
            "": {"stdout": table, "rc": 0},
            "topo -m": {"stdout": topo, "rc": 0},
            "--query-gpu=index --format=csv": {"stdout": mismatch, "rc": 18},
            "-L": {"stdout_file": "recorded-list.txt", "rc": 0},
        }
    }
    (tmp_path / "recorded-list.txt").write_bytes(fixture_bytes("list-rtxpro6000-server-mig.txt"))
    path = write_state(tmp_path, state)
    assert run(path).stdout == fixture_bytes("table-590.48.01-rtxpro6000-2gpu.txt")
    assert run(path, "topo", "-m").stdout == fixture_bytes("topo-6gpu-pcie-ansi.txt")
    replayed = run(path, "--query-gpu=index", "--format=csv")
    assert (replayed.returncode, replayed.stdout) == (
        18,
        fixture_bytes("failure-nvml-mismatch-535.txt"),
    )
    assert run(path, "-L").stdout == fixture_bytes("list-rtxpro6000-server-mig.txt")
    # a command line that is not recorded is answered from the state as usual
    assert len(parse_list(out(path, "--list-gpus"))) == 8


def test_replay_wins_over_a_failure(tmp_path):
    path = write_state(
        tmp_path,
        {"failure": "no_driver", "replay": {"--version": {"stdout": "recorded\n", "rc": 0}}},
    )
    assert run(path, "--version").stdout == b"recorded\n"
    assert run(path, "-L").returncode == 9


def test_reproduces_a_real_580_server_edition_table(tmp_path):
    state = {
        "driver_version": "580.126.09",
        "cuda_version": "13.0",
        "timestamp": "Sat Jul 11 10:55:20 2026",
        "gpus": [{"pci_bus_id": "00000000:F3:00.0", "temperature_c": 31, "power_draw_w": 30}],
    }
    assert run(write_state(tmp_path, state)).stdout == fixture_bytes(
        "table-580.126.09-rtxpro6000-server-1gpu.txt"
    )


def test_reproduces_a_real_570_table_layout(tmp_path):
    state = load("h200")
    state.update(driver_version="570.124.06", cuda_version="12.8", timestamp="Mon Aug  3 11:55:12 2026")
    state["gpus"][0]["memory_used_mib"] = 1
    assert run(write_state(tmp_path, state)).stdout == fixture_bytes("table-570.124.06-h200-1gpu.txt")


def test_reproduces_a_real_590_table_with_processes(tmp_path):
    common = {"persistence_mode": False, "fan_percent": 30, "ecc": "Off", "mig_mode": "N/A",
              "memory_used_mib": 15}  # fmt: skip
    state = {
        "gpus": [
            {**common, "pci_bus_id": "00000000:51:00.0", "temperature_c": 31, "power_draw_w": 20},
            {**common, "pci_bus_id": "00000000:C3:00.0", "temperature_c": 34, "power_draw_w": 15},
        ],
        "processes": [
            {
                "gpu": gpu,
                "pid": 315292,
                "type": "G",
                "name": "/usr/lib/xorg/Xorg",
                "used_memory_mib": 4,
            }
            for gpu in (0, 1)
        ],
    }
    produced = run(write_state(tmp_path, state)).stdout.decode()
    # the published sample starts at the box, without nvidia-smi's timestamp line
    assert produced.split("\n", 1)[1] == (FIXTURES / "table-590.48.01-rtxpro6000-2gpu.txt").read_text()


def test_r610_header_wording(tmp_path):
    state = load("default")
    state.update(driver_version="610.43.02", cuda_version="13.3")
    lines = out(write_state(tmp_path, state)).splitlines()
    real = (FIXTURES / "table-610.43.02-rtxpro6000-mig-excerpt.txt").read_text().splitlines()
    assert lines[1:4] == real[1:4]


def _r610_mig_gpu(index: int, bus: str, **over) -> dict:
    gpu = {"index": index, "pci_bus_id": bus, "ecc": "On", "mig_mode": "Enabled",
           "utilization_percent": None, "pstate": "P0", "power_draw_w": 108}  # fmt: skip
    gpu.update(over)
    return gpu


def _r610_state(**over) -> dict:
    state = {"driver_version": "610.43.02", "cuda_version": "13.3"}
    state.update(over)
    return state


def test_reproduces_the_r610_mig_table_of_a_container_byte_for_byte(tmp_path):
    # the whole capture: one GPU seen through one MIG device, memory "N/A"
    state = _r610_state(
        timestamp="Tue Jul 14 19:44:18 2026",
        gpus=[
            _r610_mig_gpu(
                0, "00000000:61:00.0", temperature_c=34, memory_used_mib=None, memory_total_mib=None
            )
        ],  # fmt: skip
        mig_devices=[{"gpu": 0, "gi": 6, "ci": 0, "mig_dev": 0, "memory_used_mib": 1786}],
        processes=[{"gpu": 0, "gi": "6", "ci": "0", "pid": 1, "name": "python3", "used_memory_mib": 1714}],
    )
    assert run(write_state(tmp_path, state)).stdout == fixture_bytes(
        "table-610.43.02-rtxpro6000-mig-container.txt"
    )


def test_reproduces_the_r610_mig_table_of_a_host(tmp_path):
    # The published host view is cut to GPUs 2 and 3 (of eight) and has no
    # empty lines between its boxes; the container view of the same post has
    # them, so the double keeps them, and the comparison cuts what the author cut.
    state = _r610_state(
        timestamp="Tue Jul 14 19:52:39 2026",
        gpus=[
            _r610_mig_gpu(0, "00000000:01:00.0"),
            _r610_mig_gpu(1, "00000000:21:00.0"),
            _r610_mig_gpu(
                2, "00000000:41:00.0", pstate="P8", power_draw_w=40, temperature_c=26, memory_used_mib=256
            ),
            _r610_mig_gpu(3, "00000000:61:00.0", temperature_c=36, memory_used_mib=1977),
        ],  # fmt: skip
        mig_devices=[
            {
                "gpu": gpu,
                "gi": gi,
                "ci": 0,
                "mig_dev": gi - 3,
                "memory_used_mib": 1786 if (gpu, gi) == (3, 6) else 64,
            }
            for gpu in (2, 3)
            for gi in (3, 4, 5, 6)
        ],  # fmt: skip
        processes=[
            {"gpu": 3, "gi": "6", "ci": "0", "pid": 698976, "name": "python3", "used_memory_mib": 1714}
        ],
    )
    produced = [line for line in out(write_state(tmp_path, state)).splitlines() if line]
    first = produced.index(SEP_GPU_HEAD) + 1
    del produced[first : first + 8]  # GPUs 0 and 1: three lines and a rule each
    real = (FIXTURES / "table-610.43.02-rtxpro6000-mig-excerpt.txt").read_text().splitlines()
    assert produced == real


SEP_GPU_HEAD = "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"


def as_published(produced: bytes) -> bytes:
    """The double's table as a Markdown page keeps it: the timestamp line without
    the seven trailing spaces that R580 prints (table-580.126.09-rtxpro6000-server-1gpu.txt)."""
    first, rest = produced.split(b"\n", 1)
    assert first.endswith(b"2026       ")
    return first.rstrip(b" ") + b"\n" + rest


def test_reproduces_a_real_580_mig_host_table_byte_for_byte():
    # nvidia-smi -i 0 on an A100 host with four MIG devices (two compute
    # instances in GPU instance 3): the "MIG devices" box, R580's "Shared" headers
    produced = run(state_file("mig-a100"), "-i", "0").stdout
    assert as_published(produced) == fixture_bytes("table-580.126.09-a100-mig-host.txt")
    assert run(state_file("mig-a100")).stdout == produced  # the host has this one GPU


def test_reproduces_a_real_580_mig_list_byte_for_byte():
    assert run(state_file("mig-a100"), "-i", "0", "-L").stdout == fixture_bytes(
        "list-a100-mig-580.126.09.txt"
    )
    assert run(state_file("mig-a100"), "--list-gpus").stdout == fixture_bytes("list-a100-mig-580.126.09.txt")


def test_reproduces_a_real_580_host_with_mig_enabled_and_no_mig_device():
    # Blackwell (Max-Q) host: MIG mode on, no GPU instance yet, Xorg and gnome-shell
    produced = run(state_file("mig-enabled")).stdout
    assert as_published(produced) == fixture_bytes("table-580.105.08-rtxpro6000-maxq-mig-no-devices.txt")


def test_reproduces_the_same_hosts_list_and_container_after_a_mig_device(tmp_path):
    # The same post, after 'nvidia-smi mig -cgi 14 -C' made GPU instance 3:
    # the host's -L, and nvidia-smi in a container given that MIG device.
    state = load("mig-enabled")
    device = {"gpu": 0, "gi": 3, "ci": 0, "mig_dev": 0, "profile": "1g.24gb",
              "uuid": "MIG-0a1b2c3d-0000-5000-8000-000000000100"}  # fmt: skip
    state["mig_devices"] = [device]
    assert run(write_state(tmp_path, state), "-L").stdout == fixture_bytes(
        "list-rtxpro6000-maxq-mig-580.105.08.txt"
    )
    state.update(timestamp="Mon Feb  2 00:04:39 2026", processes=[])
    state["gpus"][0].update(temperature_c=30, power_draw_w=14, memory_used_mib=None, memory_total_mib=None)
    state["mig_devices"] = [{**device, "memory_used_mib": 64, "bar1_total_mib": 8327, "ecc": "N/A"}]
    produced = run(write_state(tmp_path, state)).stdout
    assert as_published(produced) == fixture_bytes("table-580.105.08-rtxpro6000-maxq-mig-container.txt")


def test_id_narrows_the_table_and_the_list(tmp_path):
    state = load("default")
    state["processes"] = [
        {"gpu": g, "pid": 4242 + g, "type": "C", "name": "python3", "used_memory_mib": 1714} for g in (0, 3)
    ]
    path = write_state(tmp_path, state)
    table = parse_table(out(path, "-i", "3"))
    assert [g["bus_id"] for g in table["gpus"]] == ["00000000:5A:00.0"]
    assert [p["pid"] for p in table["processes"]] == [4245]
    assert parse_table(out(path, "--id=0,3"))["processes"] == parse_table(out(path))["processes"]
    assert [g["index"] for g in parse_list(out(path, "--id", "7", "-L"))] == [7]
    for args in (["-i", "8"], ["-i", "8", "-L"]):
        assert (run(path, *args).returncode, run(path, *args).stdout) == (6, b"No devices were found\n")


def test_no_mig_devices_box_without_mig_devices(tmp_path):
    lines = out(write_state(tmp_path, _r610_state())).splitlines()
    assert not any("MIG devices" in line for line in lines)
    assert lines.count("") == 1  # the one empty line between the GPU and process boxes


# --- WSL, mixed models, compute apps -----------------------------------------


def test_wsl_table_is_the_real_capture_byte_for_byte():
    assert (
        run(state_file("wsl")).stdout == (FIXTURES / "table-wsl-570.124.06-572.70-excerpt.txt").read_bytes()
    )
    assert (STATES / "wsl-table.txt").read_bytes() == (
        FIXTURES / "table-wsl-570.124.06-572.70-excerpt.txt"
    ).read_bytes()


def test_wsl_header_without_replay_has_the_real_layout(tmp_path):
    state = load("wsl")
    state.pop("replay")
    header_line = next(
        line for line in out(write_state(tmp_path, state)).splitlines() if "NVIDIA-SMI" in line
    )
    real = next(
        line
        for line in (FIXTURES / "table-wsl-570.124.06-572.70-excerpt.txt").read_text().splitlines()
        if "NVIDIA-SMI" in line
    )
    assert header_line == real


def test_preflight_refuses_the_wsl_host():
    facts = facts_of("wsl")
    assert is_wsl_header(
        {"nvidia_smi_version": facts["nvidia_smi_version"], "driver_version": facts["driver_version"]}
    )
    report = evaluate(facts)
    assert "wsl" in [f["check"] for f in report.failures]
    wsl = next(f for f in report.failures if f["check"] == "wsl")
    assert "nvidia-smi 570.124.06 reports the driver as 572.70" in wsl["message"]


def test_preflight_flags_the_mixed_models_host():
    facts = facts_of("mixed-models")
    names = {g["name"] for g in facts["gpus"]}
    assert names == {
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    }
    # The table cuts both names to the same text; the full query does not.
    assert {g["name"] for g in parse_table(out(state_file("mixed-models")))["gpus"]} == {
        "NVIDIA RTX PRO 6000 Blac..."
    }
    report = evaluate(facts)
    assert [f["check"] for f in report.failures] == ["gpu_models"]
    assert (
        "GPU 2, 3: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition" in report.failures[0]["message"]
    )
    assert evaluate(facts, {"allow_mixed_gpu_models": True}).ok


def test_compute_apps_of_the_double(tmp_path):
    assert (
        out(
            state_file("default"),
            "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
            "--format=csv,noheader,nounits",
        )
        == ""
    )
    state = load("default")
    state["processes"] = [{"gpu": 1, "pid": 698976, "type": "C", "name": "python3", "used_memory_mib": 1714}]
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(state))
    rows = parse_compute_apps(
        out(
            path,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
            "--format=csv,noheader,nounits",
        )
    )
    assert rows == [
        {
            "gpu_uuid": facts_of("default")["gpus"][1]["uuid"],
            "pid": 698976,
            "process_name": "python3",
            "used_memory": 1714,
        }
    ]
    header = out(path, "--query-compute-apps=pid,used_memory", "--format=csv")
    assert header.splitlines()[0] == "pid, used_gpu_memory [MiB]"


def _double_module():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("nvidia_smi_double", str(DOUBLE))
    spec = importlib.util.spec_from_loader("nvidia_smi_double", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("fixture", "proc"),
    [
        (
            "table-610.43.02-rtxpro6000-mig-excerpt.txt",
            {
                "gpu": 3,
                "gi": "6",
                "ci": "0",
                "pid": 698976,
                "type": "C",
                "name": "python3",
                "used_memory_mib": 1714,
            },
        ),
        (
            "table-590.48.01-rtxpro6000-2gpu.txt",
            {"gpu": 0, "pid": 315292, "type": "G", "name": "/usr/lib/xorg/Xorg", "used_memory_mib": 4},
        ),
    ],
)
def test_process_rows_are_the_captures_byte_for_byte(fixture, proc):
    row = _double_module()._process_row(proc)
    assert row in (FIXTURES / fixture).read_text(encoding="utf-8").splitlines()


def test_live_compute_processes_count_while_their_process_runs(tmp_path):
    # The simulated server registers its GPU memory in the processes directory;
    # an entry whose process has ended is no longer listed, as with the real driver.
    procs = tmp_path / "processes"
    procs.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = [
            {
                "gpu": g,
                "pid": sleeper.pid,
                "type": "C",
                "name": "/opt/ml-env/bin/python3",
                "used_memory_mib": 81234,
            }
            for g in (0, 1)
        ]
        (procs / f"{sleeper.pid}.json").write_text(json.dumps(live), encoding="utf-8")
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        gone = [{"gpu": 0, "pid": int(dead.stdout), "type": "C", "name": "x", "used_memory_mib": 5}]
        (procs / f"{int(dead.stdout)}.json").write_text(json.dumps(gone), encoding="utf-8")
        env = {
            **os.environ,
            "NVIDIA_SMI_DOUBLE_STATE": str(state_file("default")),
            "NVIDIA_SMI_DOUBLE_PROCESSES": str(procs),
        }
        argv = [
            sys.executable,
            str(DOUBLE),
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ]
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        assert result.stdout == f"{sleeper.pid}, 81234\n{sleeper.pid}, 81234\n"
        table = subprocess.run(
            [sys.executable, str(DOUBLE)], env=env, capture_output=True, text=True, check=True
        ).stdout
        assert "No running processes found" not in table
        assert str(sleeper.pid) in table
    finally:
        sleeper.kill()
        sleeper.wait()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    assert result.stdout == ""
