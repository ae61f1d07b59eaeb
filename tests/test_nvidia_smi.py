"""Tests of cuda13_upgrade.nvidia_smi against real recorded outputs (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.nvidia_smi import (
    INVENTORY_FIELDS,
    GpuInventory,
    classify_failure,
    parse_format,
    parse_list,
    parse_query_gpu,
    parse_table,
    parse_table_header,
    parse_topology,
    parse_version_info,
)

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- --query-gpu -----------------------------------------------------------------------


def test_query_csv_with_header_nine_rtx_pro_6000():
    rows = parse_query_gpu(
        fixture("query-csv-rtxpro6000-9gpu-580.65.06.txt"),
        ["index", "name", "compute_cap", "memory.total", "driver_version"],
        "csv",
    )
    assert len(rows) == 9
    assert rows[0]["memory.total"] == 97887
    assert rows[8] == {
        "index": 8,
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "compute_cap": "12.0",
        "memory.total": 97887,
        "driver_version": "580.65.06",
    }


def test_query_csv_noheader():
    rows = parse_query_gpu(
        fixture("query-csv-noheader-rtxpro6000-580.126.09.txt"),
        "name,driver_version,compute_cap",
        "csv,noheader",
    )
    assert rows == [
        {
            "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "driver_version": "580.126.09",
            "compute_cap": "12.0",
        }
    ]


def test_query_csv_header_with_units_and_other_field_order():
    rows = parse_query_gpu(
        fixture("query-csv-rtx5060ti-595.79.txt"),
        ["name", "driver_version", "compute_cap", "memory.total"],
        "csv",
    )
    assert rows == [
        {
            "name": "NVIDIA GeForce RTX 5060 Ti",
            "driver_version": "595.79",
            "compute_cap": "12.0",
            "memory.total": 16311,
        }
    ]


def test_query_not_available_values_become_none():
    rows = parse_query_gpu(
        fixture("query-csv-v100-570.144-mig-na.txt"),
        "index,name,compute_cap,memory.total,driver_version,compute_mode,mig.mode.current",
        "csv",
    )
    assert [row["mig.mode.current"] for row in rows] == [None, None]
    assert rows[1]["compute_mode"] == "Default"
    assert rows[1]["compute_cap"] == "7.0"


def test_query_alias_and_na_memory_of_gb10():
    rows = parse_query_gpu(
        fixture("query-csv-noheader-gb10-580.142.txt"),
        "index,gpu_name,pci.bus_id,driver_version,compute_cap,memory.total",
        "csv,noheader",
    )
    assert rows == [
        {
            "index": 0,
            "gpu_name": "NVIDIA GB10",
            "pci.bus_id": "0000000F:01:00.0",
            "driver_version": "580.142",
            "compute_cap": "12.1",
            "memory.total": None,
        }
    ]


def test_query_nounits_and_not_supported():
    rows = parse_query_gpu("0, 97887, 600.00, [Not Supported]\n", "index,memory.total,power.limit,fan.speed")
    assert rows == [{"index": 0, "memory.total": 97887, "power.limit": 600.0, "fan.speed": None}]


def test_query_units_of_power_and_utilization():
    rows = parse_query_gpu(
        "power.limit [W], utilization.gpu [%], temperature.gpu\n600.00 W, 3 %, 34\n",
        ["power.limit", "utilization.gpu", "temperature.gpu"],
        "csv",
    )
    assert rows == [{"power.limit": 600.0, "utilization.gpu": 3, "temperature.gpu": 34}]


def test_query_garbage_quotes_the_line():
    with pytest.raises(ParseError) as info:
        parse_query_gpu("hello world\n", ["index", "name"], "csv,noheader")
    assert str(info.value) == (
        "nvidia-smi line does not have one value per queried field (1 values, 2 fields): "
        "'hello world'. Option: fields. Fix: query exactly index,name with --format=csv,noheader."
    )


def test_query_empty_output():
    with pytest.raises(ParseError) as info:
        parse_query_gpu("", ["index"], "csv,noheader")
    assert str(info.value).startswith("nvidia-smi printed no GPU line: ''.")


def test_query_of_a_failed_run_explains_the_failure():
    with pytest.raises(ParseError) as info:
        parse_query_gpu(fixture("failure-no-driver.txt"), ["index", "name"], "csv")
    message = str(info.value)
    assert message.startswith('nvidia-smi failed (rc unknown, driver_not_loaded): "NVIDIA-SMI has failed')
    assert "the NVIDIA kernel module is not loaded" in message


def test_query_header_must_match_fields():
    with pytest.raises(ParseError, match="header does not name the queried fields: 'name, driver"):
        parse_query_gpu(fixture("query-csv-rtx5060ti-595.79.txt"), ["index", "name"], "csv")


def test_query_value_that_is_not_a_number():
    with pytest.raises(ParseError, match="value of memory.total is not a number of MiB: '0, lots MiB'"):
        parse_query_gpu("0, lots MiB\n", ["index", "memory.total"], "csv,noheader")


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("csv", (True, True)),
        ("csv,noheader", (False, True)),
        ("csv,noheader,nounits", (False, False)),
        ("csv,nounits", (True, False)),
    ],
)
def test_parse_format(fmt, expected):
    assert parse_format(fmt) == expected


def test_parse_format_rejects_json():
    with pytest.raises(ValueError, match="csv with optional noheader and nounits, got 'json'"):
        parse_format("json")


# --- inventory -------------------------------------------------------------------------

INVENTORY_TEXT = (
    "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-0a1b2c3d-0000-4000-8000-000000000000, "
    "590.48.01, 12.0, 97887, 00000000:16:00.0\n"
    "1, NVIDIA H200, GPU-0a1b2c3d-0000-4000-8000-000000000001, 590.48.01, 9.0, 143771, "
    "00000000:38:00.0\n"
)


def test_inventory_from_query():
    inventory = GpuInventory.from_query(INVENTORY_TEXT)
    assert inventory.driver_version == "590.48.01"
    assert inventory.count == 2
    assert inventory.compute_capabilities == ["12.0", "9.0"]
    assert inventory.gpus[1].name == "NVIDIA H200"
    assert inventory.gpus[1].memory_total_mib == 143771
    assert inventory.to_dict()["gpus"][0] == {
        "index": 0,
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "compute_capability": "12.0",
        "memory_total_mib": 97887,
        "uuid": "GPU-0a1b2c3d-0000-4000-8000-000000000000",
        "pci_bus_id": "00000000:16:00.0",
    }


def test_inventory_needs_its_fields():
    with pytest.raises(ParseError, match=r"lacks fields: \['uuid', 'memory.total', 'pci.bus_id'\]"):
        GpuInventory.from_query("0, x, 590.48.01, 12.0\n", "index,name,driver_version,compute_cap")


def test_inventory_refuses_two_driver_versions():
    text = INVENTORY_TEXT.replace("9.0, 143771", "9.0, 143771").replace(
        "H200, GPU-0a1b2c3d-0000-4000-8000-000000000001, 590.48.01",
        "H200, GPU-0a1b2c3d-0000-4000-8000-000000000001, 580.95.05",
    )
    with pytest.raises(ParseError, match=r"different or no driver versions: \['580.95.05', '590.48.01'\]"):
        GpuInventory.from_query(text, INVENTORY_FIELDS)


# --- the default table -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "smi", "driver", "cuda"),
    [
        ("table-590.48.01-rtxpro6000-2gpu.txt", "590.48.01", "590.48.01", "13.1"),
        ("table-580.126.09-rtxpro6000-server-1gpu.txt", "580.126.09", "580.126.09", "13.0"),
        ("table-570.124.06-h200-1gpu.txt", "570.124.06", "570.124.06", "12.8"),
        ("table-575.51.03-rtx6000ada-4gpu.txt", "575.51.03", "575.51.03", "12.9"),
        ("table-610.43.02-rtxpro6000-mig-excerpt.txt", "610.43.02", "610.43.02", "13.3"),
        ("table-580.126.09-a100-mig-host.txt", "580.126.09", "580.126.09", "13.0"),
        ("table-580.105.08-rtxpro6000-maxq-mig-no-devices.txt", "580.105.08", "580.105.08", "13.0"),
        ("table-580.105.08-rtxpro6000-maxq-mig-container.txt", "580.105.08", "580.105.08", "13.0"),
    ],
)
def test_table_header(name, smi, driver, cuda):
    assert parse_table_header(fixture(name)) == {
        "nvidia_smi_version": smi,
        "driver_version": driver,
        "cuda_version": cuda,
    }


def test_table_header_when_tool_and_driver_differ():
    # A real header from a host whose nvidia-smi binary is older than its driver.
    line = "| NVIDIA-SMI 580.95.05              Driver Version: 590.48.01      CUDA Version: 13.1     |"
    assert parse_table_header(line) == {
        "nvidia_smi_version": "580.95.05",
        "driver_version": "590.48.01",
        "cuda_version": "13.1",
    }


def test_table_header_of_a_failed_run():
    with pytest.raises(ParseError) as info:
        parse_table_header(fixture("failure-nvml-mismatch-550.txt"))
    assert str(info.value).startswith(
        "no 'NVIDIA-SMI ... Driver Version: ... CUDA Version: ...' line in nvidia-smi output: "
        "'Failed to initialize NVML: Driver/library version mismatch'. Fix: the loaded kernel module"
    )


def test_table_rows_of_the_server_edition():
    table = parse_table(fixture("table-580.126.09-rtxpro6000-server-1gpu.txt"))
    assert table["processes"] == []
    assert table["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA RTX PRO 6000 Blac...",
            "persistence_mode": "On",
            "bus_id": "00000000:F3:00.0",
            "display_active": "Off",
            "ecc": "0",
            "fan": "N/A",
            "temperature_c": 31,
            "perf": "P8",
            "power_usage_w": 30,
            "power_cap_w": 600,
            "memory_used_mib": 0,
            "memory_total_mib": 97887,
            "utilization_pct": 0,
            "compute_mode": "Default",
            "mig_mode": "Disabled",
        }
    ]


def test_table_rows_and_processes_of_two_gpus():
    table = parse_table(fixture("table-590.48.01-rtxpro6000-2gpu.txt"))
    assert [g["bus_id"] for g in table["gpus"]] == ["00000000:51:00.0", "00000000:C3:00.0"]
    assert [g["fan"] for g in table["gpus"]] == ["30%", "30%"]
    assert table["processes"] == [
        {"gpu": 0, "gi": None, "ci": None, "pid": 315292, "type": "G",
         "name": "/usr/lib/xorg/Xorg", "memory_mib": 4},
        {"gpu": 1, "gi": None, "ci": None, "pid": 315292, "type": "G",
         "name": "/usr/lib/xorg/Xorg", "memory_mib": 4},
    ]  # fmt: skip


def test_table_of_the_r570_layout():
    table = parse_table(fixture("table-570.124.06-h200-1gpu.txt"))
    assert [(g["name"], g["memory_total_mib"], g["power_cap_w"]) for g in table["gpus"]] == [
        ("NVIDIA H200", 143771, 700)
    ]


def test_table_with_mig_enabled():
    table = parse_table(fixture("table-610.43.02-rtxpro6000-mig-excerpt.txt"))
    assert [g["index"] for g in table["gpus"]] == [2, 3]
    assert {g["mig_mode"] for g in table["gpus"]} == {"Enabled"}
    assert table["gpus"][1]["utilization_pct"] is None
    assert table["processes"] == [
        {"gpu": 3, "gi": "6", "ci": "0", "pid": 698976, "type": "C", "name": "python3",
         "memory_mib": 1714}
    ]  # fmt: skip


def test_mig_devices_of_the_r610_host_view():
    table = parse_table(fixture("table-610.43.02-rtxpro6000-mig-excerpt.txt"))
    assert [(d["gpu"], d["gi"], d["ci"], d["mig_dev"]) for d in table["mig_devices"]] == [
        (gpu, gi, 0, gi - 3) for gpu in (2, 3) for gi in (3, 4, 5, 6)
    ]
    assert table["mig_devices"][-1]["memory_used_mib"] == 1786


def test_table_of_an_r580_host_with_four_mig_devices():
    # A100 host, MIG enabled: the GPU row keeps its memory, GPU-Util is N/A, and
    # GPU instance 3 holds two compute instances that share its memory.
    table = parse_table(fixture("table-580.126.09-a100-mig-host.txt"))
    (gpu,) = table["gpus"]
    assert (gpu["mig_mode"], gpu["ecc"], gpu["utilization_pct"]) == ("Enabled", "On", None)
    assert (gpu["memory_used_mib"], gpu["memory_total_mib"]) == (249, 40960)
    assert [(d["gi"], d["ci"], d["mig_dev"]) for d in table["mig_devices"]] == [
        (2, 0, 0), (3, 0, 1), (3, 1, 2), (9, 0, 3)
    ]  # fmt: skip
    assert table["mig_devices"][1] == {
        "gpu": 0, "gi": 3, "ci": 0, "mig_dev": 1, "memory_used_mib": 71, "memory_total_mib": 9984,
        "sm": 14, "ecc": 0, "ce": 2, "enc": 0, "dec": 1, "ofa": 0, "jpg": 0,
        "bar1_used_mib": 0, "bar1_total_mib": 6105,
    }  # fmt: skip
    assert table["processes"] == []


def test_table_of_an_r580_host_with_mig_enabled_and_no_mig_device():
    # "No MIG devices found" is not a device, and the graphics processes outside
    # MIG keep N/A for their GPU and compute instance.
    table = parse_table(fixture("table-580.105.08-rtxpro6000-maxq-mig-no-devices.txt"))
    assert [(g["mig_mode"], g["fan"], g["power_cap_w"]) for g in table["gpus"]] == [("Enabled", "30%", 300)]
    assert table["mig_devices"] == []
    assert [(p["gi"], p["ci"], p["pid"], p["type"], p["name"]) for p in table["processes"]] == [
        (None, None, 2019, "G", "/usr/lib/xorg/Xorg"),
        (None, None, 2154, "G", "/usr/bin/gnome-shell"),
    ]


def test_table_of_an_r580_container_on_one_mig_device():
    table = parse_table(fixture("table-580.105.08-rtxpro6000-maxq-mig-container.txt"))
    (gpu,) = table["gpus"]
    assert (gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["mig_mode"]) == (None, None, "Enabled")
    (device,) = table["mig_devices"]
    assert (device["gi"], device["memory_total_mib"], device["ecc"], device["bar1_total_mib"]) == (
        3, 24192, None, 8327
    )  # fmt: skip


def test_tables_without_mig_have_no_mig_devices():
    for name in ("table-590.48.01-rtxpro6000-2gpu.txt", "table-570.124.06-h200-1gpu.txt"):
        assert parse_table(fixture(name))["mig_devices"] == []


def test_table_of_four_gpus():
    table = parse_table(fixture("table-575.51.03-rtx6000ada-4gpu.txt"))
    assert [g["index"] for g in table["gpus"]] == [0, 1, 2, 3]
    assert {g["memory_total_mib"] for g in table["gpus"]} == {49140}


# --- -L ----------------------------------------------------------------------------------


def test_list_eight_gpus():
    gpus = parse_list(fixture("list-rtxpro6000-server-8gpu.txt"))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert gpus[7]["uuid"] == "GPU-0a1b2c3d-0000-4000-8000-000000000007"
    assert gpus[0]["mig_devices"] == []


def test_list_with_mig_devices():
    gpus = parse_list(fixture("list-rtxpro6000-server-mig.txt"))
    assert len(gpus) == 2
    assert [m["device"] for m in gpus[0]["mig_devices"]] == [0, 1, 2, 3]
    assert gpus[0]["mig_devices"][0] == {
        "profile": "1g.24gb",
        "device": 0,
        "uuid": "MIG-0a1b2c3d-0000-5000-8000-000000000100",
    }
    assert gpus[1]["mig_devices"] == []


def test_list_of_mig_devices_of_two_compute_instances():
    (gpu,) = parse_list(fixture("list-a100-mig-580.126.09.txt"))
    assert gpu["name"] == "NVIDIA A100-SXM4-40GB"
    assert [(m["profile"], m["device"]) for m in gpu["mig_devices"]] == [
        ("4g.20gb", 0), ("1c.2g.10gb", 1), ("1c.2g.10gb", 2), ("1g.5gb", 3)
    ]  # fmt: skip


def test_list_of_a_failed_run():
    with pytest.raises(ParseError) as info:
        parse_list(fixture("failure-no-devices.txt"))
    assert str(info.value).startswith(
        "nvidia-smi -L line is not 'GPU <n>: <name> (UUID: GPU-...)': 'No devices were found'. "
        "Fix: the driver sees no GPU"
    )


def test_list_empty():
    with pytest.raises(ParseError, match="nvidia-smi -L listed no GPU: ''"):
        parse_list("")


# --- --version -------------------------------------------------------------------------


def test_version_info():
    info = parse_version_info(fixture("version-580.142-gb10.txt"))
    assert info["driver_version"] == "580.142"
    assert info["cuda_version"] == "13.0"
    assert info["nvml_version"] == "580.142"
    assert info["nvidia-smi_version"] == "580.142"
    assert parse_version_info(fixture("version-550.107.02.txt"))["nvml_version"] == "550.107"


def test_version_info_of_the_r610_names():
    info = parse_version_info("KMD version : 616.56\nCUDA UMD version : 13.4\n")
    assert (info["driver_version"], info["cuda_version"]) == ("616.56", "13.4")


def test_version_info_of_a_failed_run():
    with pytest.raises(
        ParseError, match="no 'DRIVER version : ...' or 'KMD version : ...' line.*\"NVIDIA-SMI has failed"
    ):
        parse_version_info(fixture("failure-no-driver.txt"))


# --- topo -m -----------------------------------------------------------------------------


def test_topology_with_nics_expanded_to_spaces():
    topo = parse_topology(fixture("topo-575.51.03-4gpu-4nic.txt"))
    assert topo["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3"]
    assert topo["links"]["GPU0"]["GPU1"] == "NODE"
    assert topo["links"]["GPU0"]["GPU2"] == "SYS"
    assert topo["links"]["NIC0"]["NIC1"] == "PIX"
    assert topo["links"]["GPU3"]["GPU3"] == "X"
    assert topo["cpu_affinity"] == {
        "GPU0": "0-31",
        "GPU1": "0-31",
        "GPU2": "32-63",
        "GPU3": "32-63",
    }
    assert topo["numa_affinity"]["GPU2"] == "1"
    assert topo["gpu_numa_id"]["GPU0"] == "N/A"
    assert topo["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert topo["legend"]["PIX"] == "Connection traversing at most a single PCIe bridge"


def test_topology_with_ansi_header_and_tabs():
    topo = parse_topology(fixture("topo-6gpu-pcie-ansi.txt"))
    assert topo["devices"] == [f"GPU{i}" for i in range(6)]
    assert topo["links"]["GPU0"] == {
        "GPU0": "X", "GPU1": "PIX", "GPU2": "NODE", "GPU3": "NODE", "GPU4": "SYS", "GPU5": "SYS",
    }  # fmt: skip
    assert topo["cpu_affinity"]["GPU5"] == "24-47,72-95"
    assert topo["gpu_numa_id"]["GPU5"] == "N/A"


def test_topology_of_an_old_driver():
    with pytest.raises(ParseError, match='no nvidia-smi topo -m header row naming GPU0: "Invalid'):
        parse_topology(fixture("failure-topo-invalid-arguments.txt"))


def test_topology_row_too_short():
    with pytest.raises(ParseError) as info:
        parse_topology("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-3\nGPU1\tSYS\n")
    assert str(info.value) == (
        "nvidia-smi topo -m row GPU1 has 1 link cells for 2 devices (column GPU1): 'GPU1\\tSYS'. "
        "Fix: pass the unmodified output of 'nvidia-smi topo -m'."
    )


def test_topology_with_fourteen_nics():
    topo = parse_topology(fixture("topo-8gpu-14nic-excerpt.txt"))
    assert topo["devices"][-4:] == ["NIC10", "NIC11", "NIC12", "NIC13"]
    assert topo["links"]["GPU0"]["NIC0"] == "PIX"
    assert topo["links"]["GPU3"]["NIC7"] == "PIX"
    assert topo["links"]["GPU0"]["NIC13"] == "SYS"
    assert topo["cpu_affinity"]["GPU2"] == "0-47,96-143"
    assert topo["numa_affinity"]["GPU2"] == "0"


def _merge(text: str, row: str, column: int, sep: str = "") -> str:
    """The row with the separator before link cell ``column`` (0-based) removed, as
    nvidia-smi prints a cell that runs into the next with many NICs."""
    out = []
    for line in text.splitlines():
        if line.startswith(row + " "):
            cells = line.split()
            cells[column + 1 : column + 3] = [cells[column + 1] + sep + cells[column + 2]]
            line = "    ".join(cells)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(("row", "column"), [("GPU0", 8), ("GPU1", 0), ("GPU2", 18), ("NIC0", 3)])
def test_merged_cells_are_split_back(row, column):
    real = (
        fixture("topo-575.51.03-4gpu-4nic.txt")
        if row == "NIC0" or column < 8
        else fixture("topo-8gpu-14nic-excerpt.txt")
    )
    merged = _merge(real, row, column)
    assert merged != real
    assert parse_topology(merged) == parse_topology(real)


def test_a_lost_cell_is_refused_never_shifted():
    real = fixture("topo-575.51.03-4gpu-4nic.txt")
    lines = real.splitlines()
    cells = lines[1].split()
    del cells[3]  # GPU0 loses its GPU2 cell: the old reading shifted NIC0's value into GPU2
    lines[1] = "    ".join(cells)
    with pytest.raises(ParseError, match=r"row GPU0, column NIC3: cell '0-31' is not a link value"):
        parse_topology("\n".join(lines) + "\n")


def test_a_cell_that_is_no_link_value_is_refused_naming_row_and_column():
    real = fixture("topo-575.51.03-4gpu-4nic.txt").replace(
        "GPU1    NODE     X      SYS", "GPU1    NODE     X      S?S", 1
    )
    with pytest.raises(ParseError, match=r"row GPU1, column GPU2: cell 'S\?S'"):
        parse_topology(real)


# --- failures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rc", "code"),
    [
        ("failure-no-driver.txt", 9, "driver_not_loaded"),
        ("failure-nvml-mismatch-535.txt", 18, "driver_library_mismatch"),
        ("failure-nvml-mismatch-550.txt", 18, "driver_library_mismatch"),
        ("failure-no-devices.txt", 6, "no_devices"),
        ("failure-no-supported-gpus.txt", 255, "no_supported_gpus"),
        ("failure-invalid-field.txt", 2, "invalid_argument"),
        ("failure-topo-invalid-arguments.txt", 2, "invalid_argument"),
    ],
)
def test_classify_real_failures(name, rc, code):
    failure = classify_failure(rc, fixture(name), "")
    assert failure.code == code
    assert failure.rc == rc
    assert failure.detail == fixture(name).splitlines()[0]
    assert failure.remedy


def test_classify_mismatch_remedy():
    failure = classify_failure(18, fixture("failure-nvml-mismatch-550.txt"), "")
    assert failure.remedy.startswith("the loaded kernel module and the user-space NVML library")
    assert "reboot the host" in failure.remedy


def test_classify_command_not_found():
    failure = classify_failure(127, "", "/bin/sh: 1: nvidia-smi: not found\n")
    assert (failure.code, failure.detail) == ("not_installed", "/bin/sh: 1: nvidia-smi: not found")


def test_classify_by_return_code_when_the_text_is_unknown():
    assert classify_failure(9, "", "").code == "driver_not_loaded"
    assert classify_failure(127, "", "").code == "not_installed"
    unknown = classify_failure(3, "Some new error\n", "")
    assert (unknown.code, unknown.detail) == ("unknown", "Some new error")
    assert unknown.remedy.startswith("nvidia-smi failed with return code 3")


def test_classify_success():
    failure = classify_failure(0, fixture("list-rtxpro6000-server-8gpu.txt"), "")
    assert failure.to_dict() == {
        "code": "ok",
        "remedy": "",
        "detail": "",
        "rc": 0,
        "timeout_s": None,
        "summary": "",
    }


def test_a_run_ended_by_coreutils_timeout_is_a_hang_named_with_its_option():
    # timeout --foreground --kill-after=10 60 nvidia-smi: 124 after TERM, 137 after KILL.
    for rc in (124, 137):
        failure = classify_failure(rc, "", "", timeout_s=60)
        assert (failure.code, failure.rc, failure.timeout_s) == ("timeout", rc, 60)
        assert failure.summary == "did not answer within 60 s (nvidia_driver_check_nvidia_smi_timeout)"
        for needed in ("dmesg", "journalctl -k", "NVRM", "Xid", "kernel module", "bad state"):
            assert needed in failure.remedy
    # Partial output does not make it another failure: the run did not finish.
    partial = classify_failure(124, "No devices were found\n", "", timeout_s=5)
    assert (partial.code, partial.detail) == ("timeout", "No devices were found")


def test_exit_status_124_without_coreutils_timeout_is_not_a_hang():
    assert classify_failure(124, "", "").code == "unknown"
    assert classify_failure(124, "Some new error\n", "").summary == "failed (rc 124, unknown): Some new error"


def test_a_run_ended_by_the_task_timeout_is_a_hang_without_an_exit_status():
    failure = classify_failure(None, "", "Timed out after 100 seconds", timeout_s=60, timed_out=True)
    assert (failure.code, failure.rc) == ("timeout", None)
    assert failure.summary.startswith("did not answer within 60 s")
    assert classify_failure(None, timed_out=True).summary == (
        "did not answer in time (nvidia_driver_check_nvidia_smi_timeout)"
    )


def test_a_run_without_an_exit_status_is_classified_by_its_text():
    missing = classify_failure(None, "", "[Errno 2] No such file or directory: b'nvidia-smi'")
    assert (missing.code, missing.rc) == ("not_installed", None)
    assert missing.summary.startswith("failed (rc unknown, not_installed): [Errno 2]")
    assert classify_failure(None, "", "").remedy.startswith("nvidia-smi did not run")


def test_summary_of_a_failure_names_rc_code_and_line():
    failure = classify_failure(9, fixture("failure-no-driver.txt"), "")
    assert (
        failure.summary
        == f"failed (rc 9, driver_not_loaded): {fixture('failure-no-driver.txt').splitlines()[0]}"
    )
    assert failure.to_dict()["summary"] == failure.summary


# --- values are never error texts ---------------------------------------------


@pytest.mark.parametrize("name", ["failure-nvml-mismatch-535.txt", "failure-nvml-mismatch-550.txt"])
def test_one_field_query_never_returns_the_mismatch_text_as_the_driver(name):
    # The preflight's own remedy suggests this one-field query; its single value
    # per line used to come back as driver_version.
    with pytest.raises(ParseError) as info:
        parse_query_gpu(fixture(name), ["driver_version"], "csv,noheader")
    assert "driver_library_mismatch" in str(info.value)
    assert "reboot" in str(info.value)


def test_non_zero_rc_is_refused_even_with_plausible_output():
    with pytest.raises(ParseError, match=r"rc 6"):
        parse_query_gpu("590.48.01\n", ["driver_version"], "csv,noheader", rc=6)


def test_a_value_of_the_wrong_shape_is_refused():
    with pytest.raises(ParseError, match="driver_version does not have the shape of one"):
        parse_query_gpu("Deprecated\n", ["driver_version"], "csv,noheader")
    with pytest.raises(ParseError, match="compute_cap does not have the shape"):
        parse_query_gpu("sm_120\n", ["compute_cap"], "csv,noheader")


# --- R610 --version, /proc/driver/nvidia/version, WSL, compute apps -----------


def test_r610_version_reads_kmd_not_the_deprecation_text():
    # The R610 lines as quoted in the field report that found the fault (no full
    # capture of R610's --version was found published).
    text = (
        "NVIDIA-SMI version  : 610.43.02\n"
        'DRIVER version      : Deprecated, see "KMD version" instead\n'
        "KMD version         : 610.43.02\n"
        "CUDA UMD version    : 13.3\n"
    )
    info = parse_version_info(text)
    assert info["driver_version"] == "610.43.02"
    assert info["cuda_version"] == "13.3"


def test_deprecation_text_alone_is_not_a_driver_version():
    with pytest.raises(ParseError, match="KMD version"):
        parse_version_info('DRIVER version      : Deprecated, see "KMD version" instead\n')


def test_proc_driver_version_gives_the_loaded_module():
    from cuda13_upgrade.nvidia_smi import parse_proc_driver_version

    info = parse_proc_driver_version(fixture("proc-driver-version-580.95.05.txt"))
    assert info == {
        "module_version": "580.95.05",
        "open": True,
        "arch": "x86_64",
        "gcc": "gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04.2)",
    }
    with pytest.raises(ParseError, match="lsmod"):
        parse_proc_driver_version("")


def test_wsl_header_is_recognised_by_its_split_version():
    from cuda13_upgrade.nvidia_smi import is_wsl_header

    wsl = parse_table_header(fixture("table-wsl-570.124.06-572.70-excerpt.txt"))
    assert wsl["nvidia_smi_version"] == "570.124.06" and wsl["driver_version"] == "572.70"
    assert is_wsl_header(wsl)
    assert not is_wsl_header(parse_table_header(fixture("table-590.48.01-rtxpro6000-2gpu.txt")))
    assert not is_wsl_header(parse_table_header(fixture("table-610.43.02-rtxpro6000-mig-excerpt.txt")))


def test_compute_apps_empty_and_rows():
    from cuda13_upgrade.nvidia_smi import parse_compute_apps

    assert parse_compute_apps("", rc=0) == []
    rows = parse_compute_apps("GPU-0a1b2c3d-0000-1111-2222-333344445555, 698976, python3, 1714\n")
    assert rows == [
        {
            "gpu_uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
            "pid": 698976,
            "process_name": "python3",
            "used_memory": 1714,
        }
    ]
    with pytest.raises(ParseError, match="driver_library_mismatch"):
        parse_compute_apps(fixture("failure-nvml-mismatch-550.txt"), rc=18)
