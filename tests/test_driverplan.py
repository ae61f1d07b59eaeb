"""The driver window's plan (cuda13_upgrade.driverplan) on real apt outputs and host facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade import driver, driverplan

APT = Path(__file__).parent / "fixtures" / "apt"
FLOOR = "580.65.06"
SERVICE = "sglang.service"
SETTINGS = {"flavour": "open", "activation": "reload_or_reboot", "gpu_clients": ["nvidia-dcgm.service"]}
REQUESTS = ["cuda-13-0=13.0.2-1"]


def _sandbox_transaction() -> dict:
    """A real transaction that moves the four driver packages to 580.95.05-1 (sandbox mirror)."""
    text = (APT / "apt-get-s-install-cuda-13-0-sandbox.txt").read_text()
    return driverplan.judge_transaction(text, REQUESTS)


def _facts(**changes) -> dict:
    facts = {
        "kernel_release": "6.1.0-41-amd64",
        "headers": {"exists": True, "target": "/usr/src/linux-headers-6.1.0-41-amd64"},
        "secure_boot": {"rc": 0, "stdout": "SecureBoot disabled\n", "stderr": ""},
        "efi_secure_boot": False,
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
    assert driverplan.describe(plan) == ["driver 590.48.01 meets the floor 580.65.06: no driver change"]


def test_a_ready_host_reloads_when_only_the_stopped_units_hold_the_gpus():
    plan = _judge()
    assert plan["needs_move"] and plan["ready"], plan["blockers"]
    assert plan["activation"] == "reload"
    assert plan["held"] == ["nvidia-driver"]
    assert [c["known"] for c in plan["clients"]] == [True, True]
    lines = driverplan.describe(plan)
    assert (
        lines[0] == "driver window: 570.86.15 -> 580.95.05 (open kernel modules; below the floor 580.65.06)"
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


@pytest.mark.parametrize(
    "test_key, word",
    [
        ({"rc": 1, "stdout": "/var/lib/dkms/mok.pub is not enrolled\n", "stderr": ""}, "not enrolled"),
        (None, "missing"),
    ],
)
def test_secure_boot_without_a_trusted_key_blocks(test_key, word):
    facts = _facts(
        secure_boot={"rc": 0, "stdout": "SecureBoot enabled\n", "stderr": ""}, mok_test_key=test_key
    )
    [blocker] = _judge(facts)["blockers"]
    assert blocker["check"] == "secure_boot"
    assert word in blocker["problem"] and "Key was rejected by service" in blocker["problem"]


def test_secure_boot_with_the_key_enrolled_passes():
    facts = _facts(
        secure_boot={"rc": 0, "stdout": "SecureBoot enabled\n", "stderr": ""},
        mok_test_key={"rc": 0, "stdout": "/var/lib/dkms/mok.pub is already enrolled\n", "stderr": ""},
    )
    assert _judge(facts)["ready"]


def test_proprietary_modules_on_blackwell_are_refused():
    plan = _judge(settings={**SETTINGS, "flavour": "proprietary"})
    assert [b["check"] for b in plan["blockers"]] == ["flavour"]
    assert plan["blockers"][0]["option"] == "cuda13_driver_flavour"


def test_an_nvswitch_system_needs_the_fabric_manager_at_the_drivers_version():
    plan = _judge(_facts(nvswitch=6))
    [blocker] = plan["blockers"]
    assert blocker["check"] == "fabric_manager"
    assert "6 NVSwitch device(s)" in blocker["problem"] and "802" in blocker["problem"]


def test_an_unresolvable_target_blocks_with_apts_reason():
    failed = driverplan.judge_transaction(
        "E: Unable to locate package nvidia-open\n", ["nvidia-open=580.95.05-1"]
    )
    plan = _judge(transaction=failed)
    assert plan["blockers"][0]["check"] == "packages"
    assert "E: Unable to locate package nvidia-open" in plan["blockers"][0]["problem"]
