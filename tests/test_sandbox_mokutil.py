"""The sandbox's two driver-window fault hosts: the mokutil double and the kernel headers toggle.

The mokutil double (sandbox/host/mokutil) is run as a program and its answers are compared with
recorded real mokutil outputs (tests/fixtures/driver_facts, tests/fixtures/driver: SOURCES.md
there). The driver window's preflight is then run on what it reads: the host script of module
cuda13_driver_facts with the double as the only mokutil on PATH, and trees under tmp_path laid
out as the sandbox_host role leaves a container (no /sys/firmware/efi: podman masks
/sys/firmware; /lib/modules/<release>/build present or not; /var/lib/dkms/mok.pub as the
role's stand-in), judged by cuda13_upgrade.driverplan.judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from cuda13_upgrade import driver, driverplan
from cuda13_upgrade.hostscripts import driver_facts
from cuda13_upgrade.steps import driver_window

ROOT = Path(__file__).resolve().parents[1]
DOUBLE = ROOT / "sandbox" / "host" / "mokutil"
ROLE = ROOT / "sandbox" / "roles" / "sandbox_host"
FACTS_FIXTURES = ROOT / "tests" / "fixtures" / "driver_facts"
DRIVER_FIXTURES = ROOT / "tests" / "fixtures" / "driver"
APT = ROOT / "tests" / "fixtures" / "apt"
# The recorded key path of the --test-key fixtures, and DKMS's default one.
RECORDED_KEY = "/var/lib/dkms/mok.pub"
# One recorded apt transaction that moves the driver's packages (the sandbox mirror's cuda-13-0,
# which pulls cuda-drivers 580.95.05-1): no prebuilt module package, so DKMS builds the module.
REQUESTS = ["cuda-13-0=13.0.2-1"]
FLOOR = "580.95.05"
SETTINGS = {"flavour": "open", "activation": "reload_or_reboot", "gpu_clients": []}


def _fixture(directory: Path, name: str) -> str:
    return (directory / name).read_text()


def _load_double():
    """The double as a module (its file has no .py suffix), for its constants."""
    loader = SourceFileLoader("mokutil_double", str(DOUBLE))
    module = module_from_spec(spec_from_loader("mokutil_double", loader))
    loader.exec_module(module)
    return module


def _state_file(tmp_path: Path, state: dict) -> Path:
    path = tmp_path / "mokutil-double" / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state))
    return path


def _mokutil(tmp_path: Path, state: dict, *args: str) -> dict:
    """The double's answer to ``mokutil ARGS`` in the shape of driver_facts._run."""
    env = dict(os.environ, MOKUTIL_DOUBLE_STATE=str(_state_file(tmp_path, state)))
    done = subprocess.run(
        [sys.executable, str(DOUBLE), *args], capture_output=True, text=True, env=env, check=False, timeout=30
    )
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _key(tmp_path: Path) -> Path:
    key = tmp_path / "var" / "lib" / "dkms" / "mok.pub"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(
        "Sandbox stand-in of DKMS's module signing certificate (mokutil double: sandbox/host/mokutil)\n"
    )
    return key


# --- the double's texts against the recorded real ones --------------------------------------


@pytest.mark.parametrize(
    ("state", "recorded", "parsed"),
    [
        ("enabled", _fixture(FACTS_FIXTURES, "mokutil-sb-state-enabled.stdout"), "enabled"),
        ("setup_mode", _fixture(FACTS_FIXTURES, "mokutil-sb-state-disabled-setup-mode.stdout"), "disabled"),
        # The recorded Setup Mode answer's first line is the plain one (src/mokutil.c, sb_state).
        (
            "disabled",
            _fixture(FACTS_FIXTURES, "mokutil-sb-state-disabled-setup-mode.stdout").splitlines(True)[0],
            "disabled",
        ),
    ],
)
def test_sb_state_prints_the_recorded_text_and_exits_0(tmp_path, state, recorded, parsed):
    run = _mokutil(tmp_path, {"state": state}, "--sb-state")
    assert run == {"rc": 0, "stdout": recorded, "stderr": ""}
    assert driver.parse_mokutil_sb_state(run["stdout"]) == parsed


@pytest.mark.parametrize("args", [("--sb-state",), ("--test-key", RECORDED_KEY)])
def test_a_host_without_efi_answers_every_command_with_the_recorded_error(tmp_path, args):
    run = _mokutil(tmp_path, {"state": "no_efi"}, *args)
    assert run == {"rc": 1, "stdout": "", "stderr": _fixture(FACTS_FIXTURES, "mokutil-no-efi.stderr")}
    assert driver.parse_mokutil_sb_state(run["stderr"]) == "unsupported"


@pytest.mark.parametrize(
    ("listed", "recorded", "rc", "enrolled"),
    [
        ({}, "mokutil-test-key-not-enrolled.stdout", 0, False),
        ({"enrolled_keys": [RECORDED_KEY]}, "mokutil-test-key-enrolled.stdout", 1, True),
    ],
)
def test_test_key_prints_the_recorded_text(tmp_path, listed, recorded, rc, enrolled):
    key = _key(tmp_path)
    listed = {name: [str(key)] for name in listed}
    run = _mokutil(tmp_path, {"state": "enabled", **listed}, "--test-key", str(key))
    expected = _fixture(FACTS_FIXTURES, recorded).replace(RECORDED_KEY, str(key))
    assert run == {"rc": rc, "stdout": expected, "stderr": ""}
    assert driver.parse_mokutil_test_key(run["stdout"]) is enrolled


def test_test_key_reads_the_other_recorded_sample_the_same_way(tmp_path):
    """tests/fixtures/driver's samples name Ubuntu's MOK; the double prints the path it is given."""
    key = _key(tmp_path)
    for state, recorded in (
        ({"state": "enabled"}, "mokutil-test-key-not-enrolled.txt"),
        ({"state": "enabled", "enrolled_keys": [str(key)]}, "mokutil-test-key-enrolled.txt"),
    ):
        run = _mokutil(tmp_path, state, "--test-key", str(key))
        real = _fixture(DRIVER_FIXTURES, recorded)
        assert run["stdout"] == real.replace("/var/lib/shim-signed/mok/MOK.der", str(key))
        assert driver.parse_mokutil_test_key(run["stdout"]) == driver.parse_mokutil_test_key(real)


def test_test_key_forms_and_a_pending_request(tmp_path):
    key = _key(tmp_path)
    state = {"state": "disabled", "requested_keys": [str(key)]}
    answers = [
        _mokutil(tmp_path, state, *args) for args in (["-t", str(key)], [f"--test-key={key}"], [f"-t{key}"])
    ]
    pending = f"{key} is already in the enrollment request\n"
    assert answers == [{"rc": 1, "stdout": pending, "stderr": ""}] * 3
    # Waiting for the console at the next boot: not enrolled yet.
    assert driver.parse_mokutil_test_key(pending) is False


def test_test_key_of_a_file_that_is_not_there_fails_as_mokutil_does(tmp_path):
    missing = tmp_path / "no" / "mok.pub"
    run = _mokutil(
        tmp_path, {"state": "enabled", "enrolled_keys": [str(missing)]}, "--test-key", str(missing)
    )
    assert run == {"rc": 255, "stdout": "", "stderr": f"Failed to open {missing}\n"}
    assert driver.parse_mokutil_test_key(run["stdout"] + run["stderr"]) is None


def test_other_command_lines_are_not_simulated(tmp_path):
    run = _mokutil(tmp_path, {"state": "enabled"}, "--list-enrolled")
    assert run["rc"] == 2 and run["stdout"] == ""
    assert (
        run["stderr"]
        == "mokutil double: only --sb-state and --test-key FILE are simulated, not: --list-enrolled\n"
    )


def test_a_state_file_that_cannot_be_used_is_named(tmp_path):
    run = _mokutil(tmp_path, {"state": "on"}, "--sb-state")
    assert run["rc"] == 2 and run["stdout"] == ""
    assert "'state' must be one of enabled, disabled, setup_mode, no_efi" in run["stderr"]


# --- the preflight's verdict on a sandbox host ------------------------------------------------


def _sandbox_facts(
    tmp_path: Path, monkeypatch, secure_boot: dict | None, *, headers: bool = True, key: bool = True
) -> dict:
    """cuda13_driver_facts' facts of a container the role provisioned with ``secure_boot``
    (sandbox_host_secure_boot; None: no mokutil), ``headers`` (sandbox_host_kernel_headers) and
    ``key`` (its dkms_key). The double is the only command on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("MOKUTIL_DOUBLE_STATE", raising=False)
    if secure_boot is not None:
        wrapper = bin_dir / "mokutil"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{DOUBLE}" "$@"\n')
        wrapper.chmod(0o755)
        monkeypatch.setenv("MOKUTIL_DOUBLE_STATE", str(_state_file(tmp_path, secure_boot)))
    release = os.uname().release
    lib_modules = tmp_path / "lib" / "modules"
    (lib_modules / release).mkdir(parents=True)
    if headers:
        (lib_modules / release / "build").mkdir()
    mok_key = _key(tmp_path) if key else tmp_path / "var" / "lib" / "dkms" / "mok.pub"
    for name in ("proc", "dev"):
        (tmp_path / name).mkdir()
    return driver_facts.facts(
        {
            "proc": str(tmp_path / "proc"),
            "dev": str(tmp_path / "dev"),
            "lib_modules": str(lib_modules),
            # podman masks /sys/firmware: no efi directory under it.
            "efivars": str(tmp_path / "sys" / "firmware" / "efi" / "efivars"),
            "mok_key": str(mok_key),
            "timeout": 30,
        }
    )


def _plan(facts: dict) -> dict:
    transaction = driverplan.judge_transaction(
        (APT / "apt-get-s-install-cuda-13-0-sandbox.txt").read_text(), REQUESTS
    )
    return driverplan.judge(
        current="570.211.01",
        floor=FLOOR,
        target=driver.parse_target(FLOOR),
        settings=SETTINGS,
        compute_capabilities=["12.0"],
        proc_version=None,
        facts=facts,
        transaction=transaction,
        requests=REQUESTS,
        service="sglang.service",
    )


def _blocker_line(plan: dict, check: str) -> str:
    [line] = [line for line in driverplan.describe(plan) if line.startswith(f"  blocker ({check}):")]
    return line


def test_secure_boot_on_with_the_key_not_enrolled_is_refused(tmp_path, monkeypatch):
    facts = _sandbox_facts(tmp_path, monkeypatch, {"state": "enabled", "enrolled_keys": []})
    key = str(tmp_path / "var" / "lib" / "dkms" / "mok.pub")
    assert facts["secure_boot"] == {"rc": 0, "stdout": "SecureBoot enabled\n", "stderr": ""}
    assert (facts["efi"], facts["efi_secure_boot"], facts["mok_key_exists"]) == (False, None, True)
    assert facts["mok_test_key"] == {"rc": 0, "stdout": f"{key} is not enrolled\n", "stderr": ""}
    plan = _plan(facts)
    assert [b["check"] for b in plan["blockers"]] == ["secure_boot"]
    assert _blocker_line(plan, "secure_boot") == (
        f"  blocker (secure_boot): Secure Boot is on and DKMS's signing key ({key}) is not enrolled: the new"
        ' module would be refused ("Key was rejected by service"). Fix: enrol it with mokutil --import'
        f" {key} and confirm it at the console on the next boot (MOK manager), before the window."
    )


def test_secure_boot_on_without_a_dkms_key_is_refused(tmp_path, monkeypatch):
    facts = _sandbox_facts(tmp_path, monkeypatch, {"state": "enabled"}, key=False)
    key = str(tmp_path / "var" / "lib" / "dkms" / "mok.pub")
    assert (facts["mok_key_exists"], facts["mok_test_key"]) == (False, None)
    [blocker] = _plan(facts)["blockers"]
    assert blocker["check"] == "secure_boot"
    assert f"DKMS has no signing key yet ({key} is missing)" in blocker["problem"]


@pytest.mark.parametrize(
    "secure_boot",
    [
        pytest.param({"state": "disabled"}, id="disabled"),
        pytest.param({"state": "setup_mode"}, id="setup-mode"),
        pytest.param({"state": "no_efi"}, id="no-efi"),
        pytest.param(None, id="no-mokutil"),
        pytest.param("enrolled", id="enabled-key-enrolled"),
    ],
)
def test_secure_boot_off_or_the_key_enrolled_passes(tmp_path, monkeypatch, secure_boot):
    if secure_boot == "enrolled":
        secure_boot = {
            "state": "enabled",
            "enrolled_keys": [str(tmp_path / "var" / "lib" / "dkms" / "mok.pub")],
        }
    plan = _plan(_sandbox_facts(tmp_path, monkeypatch, secure_boot))
    assert plan["blockers"] == [] and plan["ready"], plan["blockers"]


def test_a_host_without_kernel_headers_is_refused(tmp_path, monkeypatch):
    facts = _sandbox_facts(tmp_path, monkeypatch, None, headers=False)
    release = os.uname().release
    assert facts["headers"]["exists"] is False
    plan = _plan(facts)
    assert [b["check"] for b in plan["blockers"]] == ["headers"]
    assert _blocker_line(plan, "headers") == (
        f"  blocker (headers): DKMS builds the new kernel module against /lib/modules/{release}/build, which"
        " is missing (the kernel headers of the running kernel are not installed): the build would fail."
        f" Fix: install linux-headers-{release} (or the prebuilt module package for this kernel), then run"
        " again."
    )
    assert driver_window.refusal_text(plan).endswith(
        f"Fix: install linux-headers-{release} (or the prebuilt module package for this kernel), then run again"
    )


# --- the role's variables --------------------------------------------------------------------


def _options() -> dict:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    return spec["argument_specs"]["main"]["options"]


def test_the_defaults_leave_the_host_as_it_was():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert (defaults["sandbox_host_kernel_headers"], defaults["sandbox_host_secure_boot"]) == (True, None)


@pytest.mark.parametrize(
    "given",
    [
        {"sandbox_host_kernel_headers": False},
        {"sandbox_host_secure_boot": {"state": "enabled", "enrolled_keys": []}},
        {"sandbox_host_secure_boot": {"state": "disabled"}},
        {
            "sandbox_host_secure_boot": {
                "state": "enabled",
                "enrolled_keys": ["/var/lib/dkms/mok.pub"],
                "requested_keys": [],
                "dkms_key": False,
            }
        },
    ],
)
def test_the_argument_specs_accept_the_two_variables(given):
    result = ArgumentSpecValidator(_options()).validate(given)
    assert result.error_messages == []


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"sandbox_host_secure_boot": {"state": "on"}},
            "value of state must be one of: enabled, disabled, setup_mode, no_efi, got: on"
            " found in sandbox_host_secure_boot",
        ),
        (
            {"sandbox_host_secure_boot": {}},
            "missing required arguments: state found in sandbox_host_secure_boot",
        ),
        ({"sandbox_host_kernel_headers": "perhaps"}, "sandbox_host_kernel_headers"),
    ],
)
def test_the_argument_specs_refuse_a_wrong_value_naming_it(given, message):
    result = ArgumentSpecValidator(_options()).validate(given)
    assert any(message in error for error in result.error_messages), result.error_messages


def test_the_role_offers_the_states_the_double_answers():
    choices = _options()["sandbox_host_secure_boot"]["options"]["state"]["choices"]
    assert tuple(choices) == _load_double().STATES


@pytest.mark.parametrize(
    ("secure_boot", "stdout"),
    [
        ({"state": "enabled", "enrolled_keys": []}, "{key} is not enrolled\n"),
        ({"state": "disabled", "enrolled_keys": ["{key}"]}, "{key} is already enrolled\n"),
        ({"state": "enabled", "requested_keys": ["{key}"]}, "{key} is already in the enrollment request\n"),
    ],
)
def test_the_state_file_the_role_writes_is_the_one_the_double_reads(tmp_path, secure_boot, stdout):
    key = str(_key(tmp_path))
    secure_boot = json.loads(json.dumps(secure_boot).replace("{key}", key))
    tasks = yaml.safe_load((ROLE / "tasks" / "secure_boot.yml").read_text())
    [copy] = [
        task["ansible.builtin.copy"]
        for task in tasks[0]["block"]
        if task.get("ansible.builtin.copy", {}).get("dest") == "/etc/mokutil-double/state.json"
    ]
    templar = Templar(loader=DataLoader(), variables={"sandbox_host_secure_boot": secure_boot})
    state = json.loads(templar.template(trust_as_template(copy["content"])))
    assert _mokutil(tmp_path, state, "--test-key", key) == {
        "rc": 1 if "already" in stdout else 0,
        "stdout": stdout.format(key=key),
        "stderr": "",
    }
