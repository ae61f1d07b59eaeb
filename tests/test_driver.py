"""Tests of cuda13_upgrade.driver on real recorded texts (tests/fixtures/driver, sources in its SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.driver import (
    BRANCHES,
    branch_info,
    check_flavour,
    check_target,
    classify_driver_text,
    fabric_verdict,
    flavour_required,
    install_packages,
    module_unload_order,
    needs_move,
    parse_fabric,
    parse_mokutil_sb_state,
    parse_mokutil_test_key,
    parse_target,
)
from cuda13_upgrade.errors import Cuda13Error, ParseError

FIXTURES = Path(__file__).parent / "fixtures" / "driver"
SMI_FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
FLOOR = "580.65.06"  # CUDA 13.0 GA, versions.DRIVER_TABLE


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def smi_fixture(name: str) -> str:
    return (SMI_FIXTURES / name).read_text(encoding="utf-8")


# --- parse_target ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("R580", {"kind": "branch", "version": None, "branch": 580}),
        ("r580", {"kind": "branch", "version": None, "branch": 580}),
        ("580", {"kind": "branch", "version": None, "branch": 580}),
        (580, {"kind": "branch", "version": None, "branch": 580}),
        (" R595 ", {"kind": "branch", "version": None, "branch": 595}),
        ("580.95.05", {"kind": "version", "version": "580.95.05", "branch": 580}),
        # two-part versions are real: 580.142 (GB10), 595.79 (tests/fixtures/nvidia-smi)
        ("580.142", {"kind": "version", "version": "580.142", "branch": 580}),
        ("595.79", {"kind": "version", "version": "595.79", "branch": 595}),
    ],
)
def test_parse_target_accepts_branches_and_versions(value, expected):
    assert parse_target(value) == expected


@pytest.mark.parametrize("value", [None, "", "   "])
def test_parse_target_empty_turns_the_move_off(value):
    assert parse_target(value) is None


@pytest.mark.parametrize(
    "value", ["58O.95", "R", "latest", "R58", "5800", "580.95.05.1", "R580.95.05", "580."]
)
def test_parse_target_refuses_malformed_strings(value):
    with pytest.raises(Cuda13Error) as err:
        parse_target(value, option="cuda13_driver_target")
    message = str(err.value)
    assert f"{value!r}" in message
    assert "Option: cuda13_driver_target." in message
    assert "'R580'" in message and "'580.95.05'" in message


def test_parse_target_message_in_full():
    with pytest.raises(Cuda13Error) as err:
        parse_target("58O.95")
    assert str(err.value) == (
        "driver target is neither a branch (R580) nor a driver version (580.95.05): '58O.95'. "
        "Option: cuda13_driver_target. Fix: write a branch such as 'R580' or a driver version such as "
        "'580.95.05'; leave it empty to keep the installed driver."
    )


@pytest.mark.parametrize("value", [True, False, 580.95, 580.1])
def test_parse_target_refuses_yaml_booleans_and_floats(value):
    with pytest.raises(Cuda13Error) as err:
        parse_target(value, option="my_target")
    assert str(err.value).startswith(
        f"driver target is a YAML boolean or number: {value!r}. Option: my_target."
    )
    assert "quote it" in str(err.value)


def test_parse_target_refuses_other_types():
    with pytest.raises(Cuda13Error, match=r"\['R580'\]\. Option: cuda13_driver_target\."):
        parse_target(["R580"])


# --- check_target / needs_move -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["R580", "580.65.06", "580.95.05", "R595", "595.79", "580.142"])
def test_check_target_accepts_the_floor_and_above(value):
    assert check_target(parse_target(value), floor=FLOOR) is None


def test_check_target_without_target_passes():
    assert check_target(None, floor=FLOOR) is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [("R575", "'R575'"), ("570", "'R570'"), ("575.64.05", "'575.64.05'"), ("580.65.05", "'580.65.05'")],
)
def test_check_target_refuses_below_the_floor(value, shown):
    with pytest.raises(Cuda13Error) as err:
        check_target(parse_target(value), floor=FLOOR)
    assert str(err.value) == (
        f"driver target is older than 580.65.06, the driver this CUDA release needs: {shown}. "
        "Option: cuda13_driver_target. Fix: target the R580 branch ('R580': its newest release) or a "
        "version of 580.65.06 or newer."
    )


def test_check_target_against_a_later_update_floor():
    # CUDA 13.0 Update 2 needs 580.95.05: the branch still passes, an older R580 version does not
    check_target(parse_target("R580"), floor="580.95.05")
    with pytest.raises(Cuda13Error, match="older than 580.95.05"):
        check_target(parse_target("580.82.07"), floor="580.95.05")


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ("570.124.06", True),
        ("575.51.03", True),
        ("580.65.05", True),
        ("580.65.06", False),
        ("590.48.01", False),
        ("580.142", False),
    ],
)
def test_needs_move_on_versions(current, expected):
    assert needs_move(current, FLOOR) is expected


def test_needs_move_reads_the_loaded_module():
    assert needs_move(smi_fixture("proc-driver-version-proprietary-525.60.13.txt"), FLOOR) is True
    assert needs_move(smi_fixture("proc-driver-version-580.95.05.txt"), FLOOR) is False


def test_needs_move_refuses_a_malformed_version():
    with pytest.raises(Cuda13Error, match="'N/A'"):
        needs_move("N/A", FLOOR)


# --- branches ---------------------------------------------------------------------------------


def test_branch_table_says_what_nvidia_publishes():
    assert branch_info(580)["type"] == "long-term support branch"
    assert branch_info(580)["end_of_life"] == "June 2028"
    assert branch_info(570)["type"] == "production branch"
    assert branch_info(570)["end_of_life"] == "February 2026"
    assert branch_info(595)["end_of_life"] == "March 2027"
    assert branch_info(590)["type"] == "new feature branch"
    assert branch_info(590)["end_of_life"] is None
    assert branch_info(575)["type"] is None  # the source says only that it is end of life
    assert all(row["source"] for row in BRANCHES.values())


def test_branch_info_unknown_and_copies():
    assert branch_info(600) is None
    assert branch_info(True) is None
    branch_info(580)["end_of_life"] = "never"
    assert BRANCHES[580]["end_of_life"] == "June 2028"


# --- packages ---------------------------------------------------------------------------------


def test_install_packages_r580_version_open_on_ubuntu():
    plan = install_packages(parse_target("580.95.05"), flavour="open", distro="ubuntu")
    assert plan["packages"] == ["nvidia-driver-pinning-580.95.05", "nvidia-open"]
    assert plan["pinning"] == "nvidia-driver-pinning-580.95.05"
    assert "Driver Installation Guide" in plan["source"]


def test_install_packages_r580_branch_proprietary_on_debian():
    plan = install_packages(parse_target("R580"), flavour="proprietary", distro="debian")
    assert plan["packages"] == ["nvidia-driver-pinning-580", "cuda-drivers"]
    assert plan["pinning"] == "nvidia-driver-pinning-580"


def test_install_packages_r590_branch_is_pinned():
    plan = install_packages(parse_target("590"), flavour="open", distro="Ubuntu")
    assert plan["packages"] == ["nvidia-driver-pinning-590", "nvidia-open"]
    assert plan["pinning"] == "nvidia-driver-pinning-590"


def test_install_packages_refuses_other_distributions():
    with pytest.raises(Cuda13Error) as err:
        install_packages(parse_target("R580"), flavour="open", distro="rhel")
    assert str(err.value) == (
        "NVIDIA's pinning packages are documented for Debian and Ubuntu only: 'rhel'. Option: distro. "
        "Fix: on other distributions follow the NVIDIA Driver Installation Guide, 'Version locking' (dnf, zypper)."
    )


def test_install_packages_refuses_unknown_flavour_and_no_target():
    with pytest.raises(
        Cuda13Error, match=r"driver flavour is unknown: 'closed'\. Option: cuda13_driver_flavour\."
    ):
        install_packages(parse_target("R580"), flavour="closed", distro="ubuntu")
    with pytest.raises(
        Cuda13Error, match=r"no driver target to install: None\. Option: cuda13_driver_target\."
    ):
        install_packages(None, flavour="open", distro="ubuntu")


# --- flavour ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "expected"),
    [(["12.0"], "open"), (["10.0"], "open"), (["9.0", "12.1"], "open"), (["9.0", "8.0"], None), ([], None)],
)
def test_flavour_required(caps, expected):
    assert flavour_required(caps) == expected


def test_flavour_required_refuses_a_malformed_capability():
    with pytest.raises(Cuda13Error, match="'sm_120'"):
        flavour_required(["sm_120"])


def test_check_flavour_refuses_proprietary_on_blackwell():
    with pytest.raises(Cuda13Error) as err:
        check_flavour("proprietary", ["12.0", "12.0", "9.0", "10.0"])
    message = str(err.value)
    assert message.startswith(
        "GPUs of compute capability 10.0, 12.0 need the open kernel modules: 'proprietary'. "
        "Option: cuda13_driver_flavour. Fix: set it to 'open' (NVIDIA driver README"
    )
    assert "Blackwell and later are only supported by the open kernel modules" in message


def test_check_flavour_accepts_open_and_proprietary_before_blackwell():
    assert check_flavour("open", ["12.0"]) is None
    assert check_flavour("proprietary", ["9.0", "8.0"]) is None


def test_check_flavour_refuses_unknown_flavours():
    with pytest.raises(Cuda13Error) as err:
        check_flavour("closed", ["9.0"], option="my_flavour")
    assert str(err.value) == (
        "driver flavour is unknown: 'closed'. Option: my_flavour. Fix: use 'open' (NVIDIA's default since "
        "R560, required for Blackwell) or 'proprietary'."
    )


# --- failure texts ----------------------------------------------------------------------------


def test_rmmod_in_use_by_modules():
    result = classify_driver_text(fixture("rmmod-in-use-open-modules.txt").splitlines()[-1])
    assert result["kind"] == "module_in_use"
    assert result["cause"] == "the nvidia kernel module cannot be unloaded: nvidia_uvm nvidia_modeset use it"
    assert result["line"] == "rmmod: ERROR: Module nvidia is in use by: nvidia_uvm nvidia_modeset"
    assert "nvidia_modeset, nvidia_uvm, nvidia_peermem" in result["fix"]


@pytest.mark.parametrize("name", ["rmmod-in-use-open-modules.txt", "rmmod-in-use-dgx-spark.txt"])
def test_rmmod_in_use_whole_outputs_name_the_first_refusal(name):
    result = classify_driver_text(fixture(name))
    assert result["kind"] == "module_in_use"
    assert result["line"] == "rmmod: ERROR: Module nvidia_drm is in use"
    assert (
        result["cause"]
        == "the nvidia_drm kernel module cannot be unloaded: it is in use, not by a module (a process, the console)"
    )
    assert "unload nvidia_drm if loaded" in result["fix"]


@pytest.mark.parametrize("name", ["modprobe-r-in-use.txt", "modprobe-r-in-use-wrapped.txt"])
def test_modprobe_r_in_use(name):
    result = classify_driver_text(fixture(name))
    assert result["kind"] == "module_in_use"
    assert result["cause"].startswith("the nvidia kernel module cannot be unloaded")
    assert result["line"].endswith("modprobe: FATAL: Module nvidia is in use.")


def test_secure_boot_key_rejected():
    result = classify_driver_text(fixture("modprobe-key-rejected-595.71.05.txt"))
    assert result["kind"] == "secure_boot_key_rejected"
    assert result["cause"].startswith("Secure Boot refused the signature of the nvidia module")
    assert "mokutil --import" in result["fix"]


def test_key_rejected_for_other_modules_is_not_the_drivers():
    assert classify_driver_text(fixture("modprobe-key-rejected-other-modules.txt")) is None


@pytest.mark.parametrize(
    ("name", "kernel"),
    [
        ("dkms-headers-missing-dkms3.txt", "6.6.15-amd64"),
        ("dkms-headers-missing-postinst.txt", "4.11.1+"),
        ("dkms-headers-missing-nvidia-installer.txt", "3.10.0-957.el7.x86_64"),
    ],
)
def test_dkms_without_kernel_headers(name, kernel):
    result = classify_driver_text(fixture(name))
    assert result["kind"] == "dkms_headers_missing"
    assert (
        result["cause"]
        == f"DKMS cannot build the NVIDIA module: the headers of kernel {kernel} are not installed"
    )
    assert f"linux-headers-{kernel}" in result["fix"]


def test_driver_container_cannot_unload():
    result = classify_driver_text(fixture("driver-container-unload-in-use.txt"))
    assert result["kind"] == "driver_container_in_use"
    assert result["line"] == "Could not unload NVIDIA driver kernel modules, driver is in use"
    assert "ENABLE_GPU_POD_EVICTION" in result["fix"]


@pytest.mark.parametrize(
    ("name", "library"),
    [("failure-nvml-mismatch-535.txt", "535.161"), ("failure-nvml-mismatch-550.txt", "550.144")],
)
def test_nvml_mismatch_quotes_both_versions(name, library):
    module_text = smi_fixture("proc-driver-version-580.95.05.txt")
    result = classify_driver_text(smi_fixture(name), module_version_text=module_text)
    assert result["kind"] == "driver_library_mismatch"
    assert result["line"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert result["cause"].endswith(f"(NVML library {library}, kernel module 580.95.05)")
    assert "reboot" in result["fix"]


def test_nvml_mismatch_without_the_module_text():
    result = classify_driver_text(smi_fixture("failure-nvml-mismatch-535.txt"))
    assert result["cause"].endswith("(NVML library 535.161)")


def test_an_unload_refusal_outranks_the_mismatch_that_led_to_it():
    text = smi_fixture("failure-nvml-mismatch-550.txt") + fixture("rmmod-in-use-open-modules.txt")
    assert classify_driver_text(text)["kind"] == "module_in_use"


@pytest.mark.parametrize("text", ["", smi_fixture("table-590.48.01-rtxpro6000-2gpu.txt"), None])
def test_healthy_or_empty_text_is_not_classified(text):
    assert classify_driver_text(text) is None


def test_module_unload_order_is_k8s_driver_managers():
    order = module_unload_order()
    assert order == [
        "nvidia_modeset",
        "nvidia_uvm",
        "nvidia_peermem",
        "nvidia_fs",
        "nvidia_vgpu_vfio",
        "gdrdrv",
        "nvidia",
    ]
    order.clear()
    assert module_unload_order()[-1] == "nvidia"


# --- mokutil ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("mokutil-sb-state-enabled.txt", "enabled"),
        ("mokutil-sb-state-disabled-setup-mode.txt", "disabled"),
        ("mokutil-sb-state-unsupported.txt", "unsupported"),
        ("mokutil-sb-state-no-efi-variables.txt", "unsupported"),
    ],
)
def test_mokutil_sb_state(name, state):
    assert parse_mokutil_sb_state(fixture(name)) == state


def test_mokutil_sb_state_unknown_texts():
    # mokutil.c prints this when the variables hold unexpected values
    assert parse_mokutil_sb_state("Cannot determine secure boot state.\n") is None
    assert parse_mokutil_sb_state(fixture("mokutil-test-key-enrolled.txt")) is None
    assert parse_mokutil_sb_state(None) is None


def test_mokutil_test_key():
    assert parse_mokutil_test_key(fixture("mokutil-test-key-enrolled.txt")) is True
    assert parse_mokutil_test_key(fixture("mokutil-test-key-not-enrolled.txt")) is False
    # print_skip_message in mokutil.c: a request waiting for the MOK manager is not an enrolment yet
    assert parse_mokutil_test_key("MOK.der is already in the enrollment request\n") is False
    assert parse_mokutil_test_key(fixture("mokutil-sb-state-no-efi-variables.txt")) is None


# --- Fabric ----------------------------------------------------------------------------------


def test_fabric_of_an_hgx_h100_all_completed():
    gpus = parse_fabric(fixture("nvidia-smi-q-h100x8-565.57.01.txt"))
    assert [g["bus_id"] for g in gpus] == [
        "00000000:18:00.0",
        "00000000:2A:00.0",
        "00000000:3A:00.0",
        "00000000:5D:00.0",
        "00000000:9A:00.0",
        "00000000:AB:00.0",
        "00000000:BA:00.0",
        "00000000:DB:00.0",
    ]
    assert {(g["state"], g["status"]) for g in gpus} == {("Completed", "Success")}
    verdict = fabric_verdict(gpus)
    assert verdict == {
        "ok": True,
        "applicable": True,
        "not_ready": [],
        "summary": "all 8 GPUs registered with the fabric (Completed/Success)",
    }


def test_fabric_of_a100_without_nvswitch_does_not_apply():
    gpus = parse_fabric(fixture("nvidia-smi-q-a100x4-555.42.02.txt"))
    assert len(gpus) == 4
    assert {(g["state"], g["status"]) for g in gpus} == {("N/A", "N/A")}
    verdict = fabric_verdict(gpus)
    assert verdict["ok"] is True and verdict["applicable"] is False


def test_fabric_in_progress_then_completed():
    before = parse_fabric(fixture("fabric-grep-in-progress-570.133.20.txt"))
    assert before == [{"bus_id": None, "state": "In Progress", "status": "N/A"}]
    verdict = fabric_verdict(before)
    assert verdict["ok"] is False
    assert verdict["not_ready"] == before
    assert verdict["summary"].startswith(
        "1 of 1 GPUs not registered with the fabric (GPU #0: In Progress/N/A)"
    )
    after = parse_fabric(fixture("fabric-grep-completed-570.133.20.txt"))
    assert fabric_verdict(after)["ok"] is True


def test_fabric_verdict_names_the_gpu_not_ready():
    gpus = parse_fabric(fixture("nvidia-smi-q-h100x8-565.57.01.txt"))
    gpus[3] = {
        **gpus[3],
        **parse_fabric(fixture("fabric-grep-in-progress-570.133.20.txt"))[0],
        "bus_id": gpus[3]["bus_id"],
    }
    verdict = fabric_verdict(gpus)
    assert verdict["ok"] is False
    assert [g["bus_id"] for g in verdict["not_ready"]] == ["00000000:5D:00.0"]
    assert "(00000000:5D:00.0: In Progress/N/A)" in verdict["summary"]


def test_fabric_without_sections_and_malformed():
    assert parse_fabric(smi_fixture("table-590.48.01-rtxpro6000-2gpu.txt")) == []
    assert fabric_verdict([])["applicable"] is False
    with pytest.raises(ParseError, match="has no 'State' line"):
        parse_fabric(fixture("fabric-grep-in-progress-570.133.20.txt").splitlines()[0])
    with pytest.raises(ParseError, match="not text"):
        parse_fabric(None)
