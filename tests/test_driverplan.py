"""The driver window's plan (cuda13_upgrade.driverplan) on real apt outputs and host facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade import driver, driverplan

FIXTURES = Path(__file__).parent / "fixtures"
APT = FIXTURES / "apt"
DRIVER = FIXTURES / "driver"
# The floor of the default toolkit package, 13.0.2-1 (CUDA 13.0 Update 2, release notes Table 3).
FLOOR = "580.95.05"
SERVICE = "sglang.service"
SETTINGS = {"flavour": "open", "activation": "reload_or_reboot", "gpu_clients": ["nvidia-dcgm.service"]}
# The request of the one recorded apt transaction that moves the driver's packages (the sandbox
# mirror's cuda-13-0, which pulls cuda-drivers 580.95.05-1); no apt output of NVIDIA's own
# nvidia-driver-pinning-580 + nvidia-open is on record.
REQUESTS = ["cuda-13-0=13.0.2-1"]


def _run(fixture: str, rc: int = 0) -> dict:
    """A command's record whose stdout is a recorded real output (tests/fixtures/driver)."""
    return {"rc": rc, "stdout": (DRIVER / fixture).read_text(), "stderr": ""}


def _sandbox_transaction() -> dict:
    """A real transaction that moves the four driver packages to 580.95.05-1 (sandbox mirror)."""
    text = (APT / "apt-get-s-install-cuda-13-0-sandbox.txt").read_text()
    return driverplan.judge_transaction(text, REQUESTS)


def _facts(**changes) -> dict:
    facts = {
        "kernel_release": "6.1.0-41-amd64",
        "headers": {"exists": True, "target": "/usr/src/linux-headers-6.1.0-41-amd64"},
        "secure_boot": _run("mokutil-sb-state-disabled-setup-mode.txt"),
        "efi_secure_boot": False,
        "efi": True,
        "mok_test_key": None,
        "device_holders": [
            {"pid": 2211, "comm": "python3", "device": ["/dev/nvidia0"], "unit": SERVICE},
            {
                "pid": 1010,
                "comm": "nvidia-persiste",
                "device": ["/dev/nvidiactl"],
                "unit": "nvidia-persistenced.service",
            },
        ],
        "nvswitch": 0,
        "packages": [
            {
                "name": "nvidia-driver",
                "version": "570.86.15-1",
                "status": "install ok installed",
                "held": True,
            },
            {
                "name": "libcuda1:amd64",
                "version": "570.86.15-1",
                "status": "install ok installed",
                "held": False,
            },
        ],
    }
    facts.update(changes)
    return facts


def _judge(
    facts: dict | None = None,
    *,
    current: str = "570.86.15",
    settings: dict | None = None,
    transaction: dict | None = None,
    capabilities=("12.0",),
) -> dict:
    return driverplan.judge(
        current=current,
        floor=FLOOR,
        target=driver.parse_target("580.95.05"),
        settings=settings or SETTINGS,
        compute_capabilities=list(capabilities),
        proc_version=None,
        facts=_facts() if facts is None else facts,
        transaction=_sandbox_transaction() if transaction is None else transaction,
        requests=REQUESTS,
        service=SERVICE,
    )


def test_a_transaction_that_moves_only_driver_packages_passes():
    judged = _sandbox_transaction()
    assert judged["ok"], judged["reason"]
    assert "upgrade nvidia-driver 535.216.03-2~bpo12+1 -> 580.95.05-1" in judged["changes"]


def test_a_transaction_that_upgrades_systemd_is_refused_naming_it():
    text = (APT / "apt-get-s-install-nvidia-driver.txt").read_text()
    judged = driverplan.judge_transaction(text, ["nvidia-driver"])
    assert not judged["ok"]
    assert "upgrade systemd 252.38-1~deb12u1 -> 252.39-1~deb12u2 (installed package)" in judged["refused"]
    assert not any("nvidia" in r for r in judged["refused"]), judged["refused"]
    assert "changes the driver's packages only" in judged["reason"]


def test_a_package_apt_cannot_find_is_refused_with_apts_own_error():
    text = "Reading package lists...\nBuilding dependency tree...\nE: Unable to locate package nvidia-open\n"
    judged = driverplan.judge_transaction(text, ["nvidia-open=580.95.05-1"])
    assert not judged["ok"]
    assert judged["reason"] == (
        "apt cannot install nvidia-open=580.95.05-1: E: Unable to locate package nvidia-open"
    )


def test_a_driver_at_the_floor_needs_no_move():
    plan = _judge(current="590.48.01")
    assert (plan["needs_move"], plan["ready"], plan["blockers"]) == (False, True, [])
    assert driverplan.describe(plan) == ["driver 590.48.01 meets the floor 580.95.05: no driver change"]


def test_a_ready_host_reloads_when_only_the_stopped_units_hold_the_gpus():
    plan = _judge()
    assert plan["needs_move"] and plan["ready"], plan["blockers"]
    assert plan["activation"] == "reload"
    assert plan["held"] == ["nvidia-driver"]
    assert [c["known"] for c in plan["clients"]] == [True, True]
    lines = driverplan.describe(plan)
    assert (
        lines[0] == "driver window: 570.86.15 -> 580.95.05 (open kernel modules; below the floor 580.95.05)"
    )
    assert "  every check of the move passes" in lines


def test_an_unknown_holder_makes_it_a_reboot_or_refuses_a_reload_only_host():
    holders = _facts()["device_holders"] + [
        {"pid": 77, "comm": "nv-hostengine", "device": ["/dev/nvidia0"], "unit": "dcgm-exporter.service"}
    ]
    plan = _judge(_facts(device_holders=holders))
    assert (plan["activation"], plan["ready"]) == ("reboot", True)
    assert "nv-hostengine (pid 77, dcgm-exporter.service)" in plan["activation_why"]
    refused = _judge(_facts(device_holders=holders), settings={**SETTINGS, "activation": "reload"})
    assert not refused["ready"]
    [blocker] = refused["blockers"]
    assert (blocker["check"], blocker["option"]) == ("activation", "cuda13_driver_activation")
    assert "Module nvidia is in use" in blocker["problem"]


def test_missing_kernel_headers_block_the_dkms_build():
    plan = _judge(_facts(headers={"exists": False, "target": None}))
    [blocker] = plan["blockers"]
    assert blocker["check"] == "headers"
    assert "/lib/modules/6.1.0-41-amd64/build" in blocker["problem"]
    assert blocker["remedy"].startswith("install linux-headers-6.1.0-41-amd64")


def test_secure_boot_with_the_key_not_enrolled_blocks_naming_the_key():
    facts = _facts(
        secure_boot=_run("mokutil-sb-state-enabled.txt"),
        mok_key="/var/lib/shim-signed/mok/MOK.der",
        mok_key_exists=True,
        mok_test_key=_run("mokutil-test-key-not-enrolled.txt", rc=1),
    )
    [blocker] = _judge(facts)["blockers"]
    assert blocker["check"] == "secure_boot"
    assert "(/var/lib/shim-signed/mok/MOK.der) is not enrolled" in blocker["problem"]
    assert "Key was rejected by service" in blocker["problem"]
    assert blocker["remedy"].startswith("enrol it with mokutil --import /var/lib/shim-signed/mok/MOK.der")


def test_secure_boot_without_a_dkms_key_blocks_and_says_it_must_be_made_first():
    facts = _facts(
        secure_boot=_run("mokutil-sb-state-enabled.txt"),
        mok_key="/var/lib/dkms/mok.pub",
        mok_key_exists=False,
        mok_test_key=None,
    )
    [blocker] = _judge(facts)["blockers"]
    assert "DKMS has no signing key yet (/var/lib/dkms/mok.pub is missing)" in blocker["problem"]
    assert blocker["remedy"].startswith("create DKMS's key")


def test_secure_boot_with_the_key_enrolled_passes():
    facts = _facts(
        secure_boot=_run("mokutil-sb-state-enabled.txt"),
        mok_key="/var/lib/shim-signed/mok/MOK.der",
        mok_key_exists=True,
        mok_test_key=_run("mokutil-test-key-enrolled.txt"),
    )
    assert _judge(facts)["ready"]


@pytest.mark.parametrize(
    "secure_boot",
    [
        {"rc": 127, "stdout": "", "stderr": "[Errno 2] No such file or directory: 'mokutil'"},
        _run("mokutil-sb-state-no-efi-variables.txt", rc=255),
    ],
)
def test_secure_boot_that_cannot_be_read_on_a_uefi_host_blocks(secure_boot):
    facts = _facts(secure_boot=secure_boot, efi_secure_boot=None, efi=True)
    [blocker] = _judge(facts)["blockers"]
    assert blocker["check"] == "secure_boot" and "cannot be read" in blocker["problem"]
    assert blocker["remedy"].startswith("install mokutil")
    # A host that did not boot through UEFI has no Secure Boot.
    assert _judge(_facts(secure_boot=secure_boot, efi_secure_boot=None, efi=False))["ready"]


def test_proprietary_modules_on_blackwell_are_refused():
    plan = _judge(settings={**SETTINGS, "flavour": "proprietary"})
    assert [b["check"] for b in plan["blockers"]] == ["flavour"]
    assert plan["blockers"][0]["option"] == "cuda13_driver_flavour"


def test_an_nvswitch_system_needs_the_fabric_manager_at_the_drivers_version():
    plan = _judge(_facts(nvswitch=6))
    [blocker] = plan["blockers"]
    assert blocker["check"] == "fabric_manager"
    assert "6 NVSwitch device(s)" in blocker["problem"] and "802" in blocker["problem"]
    assert "(driver 580.95.05)" in blocker["problem"]


def test_the_fabric_manager_at_the_drivers_version_passes_and_the_pin_is_not_a_driver_version():
    transaction = _sandbox_transaction()
    extra = [
        {
            "action": "install",
            "package": "nvidia-driver-pinning-580",
            "version": "580-1",
            "old_version": None,
        },
        {
            "action": "install",
            "package": "cuda-drivers-fabricmanager-580",
            "version": "580.95.05-1",
            "old_version": None,
        },
    ]
    plan = _judge(_facts(nvswitch=6), transaction={**transaction, "actions": transaction["actions"] + extra})
    assert plan["ready"], plan["blockers"]
    assert driverplan.fabric_manager_package(driver.parse_target("R580")) == "cuda-drivers-fabricmanager-580"


def test_a_loaded_nvidia_drm_in_use_makes_it_a_reboot():
    modules = [{"name": "nvidia_drm", "size": 1, "refcount": 2, "users": [], "state": "Live"}]
    plan = _judge(_facts(modules=modules))
    assert plan["activation"] == "reboot" and "nvidia_drm" in plan["activation_why"]
    unused = [{"name": "nvidia_drm", "size": 1, "refcount": 0, "users": [], "state": "Live"}]
    assert _judge(_facts(modules=unused))["activation"] == "reload"


def test_a_request_apt_has_already_is_satisfied():
    text = (APT / "apt-get-s-install-apt-already-newest.txt").read_text()
    assert driverplan.judge_transaction(text, ["apt"])["ok"]


def test_held_broken_packages_get_the_unhold_remedy():
    # apt's text for it, as NVIDIA/ansible-role-nvidia-driver PR #11 quotes it.
    text = "E: Unable to correct problems, you have held broken packages.\n"
    failed = driverplan.judge_transaction(text, ["nvidia-open"])
    [blocker] = _judge(transaction=failed)["blockers"]
    assert blocker["remedy"].startswith(
        "release the holds of the driver's packages first (apt-mark unhold nvidia-driver)"
    )


def test_odd_facts_are_blockers_or_ignored_never_a_crash():
    odd = {
        "nvswitch": "yes",
        "device_holders": [None, "x", {"pid": "7", "comm": None, "unit": 5}],
        "packages": ["x"],
        "secure_boot": "SecureBoot enabled",
        "mok_test_key": "x",
        "modules": "nvidia",
        "headers": None,
        "kernel_release": "",
    }
    plan = _judge(odd)
    assert [b["check"] for b in plan["blockers"]] == ["headers", "secure_boot"], plan["blockers"]
    assert "/lib/modules/<the running kernel>/build" in plan["blockers"][0]["problem"]
    # The holder without a unit is not among the units to stop.
    assert plan["activation"] == "reboot"
    actionless = {**_sandbox_transaction(), "actions": [{"action": "install"}]}
    assert _judge(transaction=actionless)["blockers"] == []
    assert not driverplan.judge_transaction(None, ["nvidia-open"])["ok"]


def test_a_move_whose_transaction_was_not_simulated_is_not_ready():
    plan = driverplan.judge(
        current="570.86.15",
        floor=FLOOR,
        target=driver.parse_target("R580"),
        settings=SETTINGS,
        compute_capabilities=["12.0"],
        proc_version=None,
        facts=_facts(),
        transaction=None,
        requests=[],
        service=SERVICE,
    )
    assert [b["check"] for b in plan["blockers"]] == ["packages"] and not plan["ready"]


def test_an_unresolvable_target_blocks_with_apts_reason():
    failed = driverplan.judge_transaction(
        "E: Unable to locate package nvidia-open\n", ["nvidia-open=580.95.05-1"]
    )
    plan = _judge(transaction=failed)
    assert plan["blockers"][0]["check"] == "packages"
    assert "E: Unable to locate package nvidia-open" in plan["blockers"][0]["problem"]
