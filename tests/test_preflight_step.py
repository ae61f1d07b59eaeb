"""The preflight (cuda13_upgrade.steps.preflight, action cuda13_preflight), without Ansible: the host
module cuda13_host_facts runs for real (the GPUs are the sandbox's nvidia-smi double, in the states
of sandbox/host/nvidia-smi-states); Ansible's uri module, which the checks of the options against
the host call, is answered by the test. The rules themselves are tests/test_preflight.py's; the
playbook path is tests/test_preflight_playbook.py's and tests/test_stack_driver_playbook.py's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakehost import FakeHost
from playbook import NVIDIA_SMI_DOUBLE, NVIDIA_SMI_STATES
from stepdoubles import options

from cuda13_upgrade.steps import preflight
from cuda13_upgrade.steps.host import StepFailed

NOT_CHECKED = [
    "not checked: the options against the host, NVIDIA's repository, the indexes and apt's transaction"
    " (nvidia_driver_check_host_checks is false)",
    "not checked: the target's resolution and its driver floor (cuda13_preflight_resolve is false)",
]
REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
INDEXES = ["https://download.pytorch.org/whl/cu130", "https://pypi.org/simple"]


def _opts(tmp_path: Path, **given) -> dict:
    (tmp_path / "opt").mkdir(exist_ok=True)
    defaults = {
        "nvidia_driver_check_nvidia_smi": str(NVIDIA_SMI_DOUBLE),
        "nvidia_driver_check_nvidia_smi_timeout": 20,
        "nvidia_driver_check_host_checks": False,
        "cuda13_preflight_resolve": False,
        "nvidia_driver_check_required_disk_gib": 0.001,
        "nvidia_driver_check_disk_path": str(tmp_path / "opt"),
        "nvidia_driver_check_python": sys.executable,
        "nvidia_driver_check_space_stack": "",
        "cuda13_service_name": "nosuch-cuda13-test.service",
        "cu130_wheels_index_url": INDEXES[0],
        "cu130_wheels_extra_index_urls": INDEXES[1:],
        "cu130_wheels_venv": "/opt/ml-env-cu130",
        # No drain hook on the test host: the drain rule is tested on its own below.
        "cuda13_allow_undrained": True,
    }
    return options(tmp_path, **{**defaults, **given})


def _check(host, opts, tmp_path, **given):
    return preflight.check(host, opts, run_dir=tmp_path / "reports" / "r1", **given)


def test_a_host_of_the_target_platform_passes_and_each_check_is_told(tmp_path):
    host = FakeHost()
    record = _check(host, _opts(tmp_path), tmp_path)
    assert record["ok"] is True and record["refusals"] == []
    assert len(record["gpus"]) == 8 and record["compute_capabilities"] == ["12.0"]
    assert record["driver_version"] == "590.48.01" and record["report"]["ok"] is True
    assert (record["toolkit"], record["resolved"], record["stack_driver"]) == (None, None, None)
    assert host.told[-2:] == NOT_CHECKED
    assert "passed: 8 GPUs" in host.told
    assert all(line.startswith("passed: ") for line in host.told[:-2])
    (asked,) = host.called("cuda13_host_facts")
    assert (asked["nvidia_smi"], asked["host_checks"], asked["space_places"]) == (
        str(NVIDIA_SMI_DOUBLE),
        False,
        {},
    )


def test_a_host_whose_driver_is_not_loaded_is_refused_with_the_remedy(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "no-driver.json"))
    host = FakeHost()
    with pytest.raises(StepFailed) as failed:
        _check(host, _opts(tmp_path), tmp_path)
    msg = failed.value.msg
    assert msg.startswith(
        f"gpu-node-01: {NVIDIA_SMI_DOUBLE} failed (rc 9, driver_not_loaded): NVIDIA-SMI has failed"
    )
    assert "Fix: the NVIDIA kernel module is not loaded: check 'lsmod | grep nvidia' and dmesg" in msg
    assert msg.endswith("Nothing on the host was changed.")
    # The failed task's record is kept small: the resolved set as its size.
    assert failed.value.record["ok"] is False and failed.value.record["resolved_count"] is None
    assert "resolved" not in failed.value.record and host.told == []


def test_without_refuse_the_refusal_is_recorded_and_the_hosts_checks_stop(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "no-driver.json"))
    record = _check(FakeHost(), _opts(tmp_path), tmp_path, refuse=False)
    assert record["ok"] is False and record["report"] is None
    (refusal,) = record["refusals"]
    assert refusal.startswith(f"gpu-node-01: {NVIDIA_SMI_DOUBLE} failed (rc 9, driver_not_loaded)")


def test_a_host_that_fails_a_check_names_each_failure_after_the_checks_that_passed(tmp_path):
    host = FakeHost()
    with pytest.raises(StepFailed) as failed:
        _check(host, _opts(tmp_path, nvidia_driver_check_expected_gpu_count=4), tmp_path)
    lines = failed.value.msg.splitlines()
    assert lines[0] == "gpu-node-01 fails the preflight for CUDA 13.0.2; nothing was changed:"
    assert (
        len(lines) == 2 and lines[1].startswith("- ") and "nvidia_driver_check_expected_gpu_count" in lines[1]
    )
    assert failed.value.record["report"]["ok"] is False and len(failed.value.record["gpus"]) == 8
    assert "passed: 8 GPUs" not in host.told and "passed: not a WSL host" in host.told


def _uri(packages: dict | None = None, index: dict | None = None):
    def answer(args: dict) -> dict:
        if args["url"].endswith("Packages"):
            return packages or {
                "status": 200,
                "content": "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\nArchitecture: amd64\n\n",
            }
        return index or {"status": 200, "msg": "OK (unknown bytes)"}

    return answer


def test_options_that_fit_the_host_are_told_with_what_was_checked(tmp_path):
    host = FakeHost(handlers={"ansible.builtin.uri": _uri()})
    found = {
        "unit_show": {
            "rc": 0,
            "stdout": "LoadState=loaded\nExecStart={ path=/opt/ml-env/bin/python ; argv[]=/opt/ml-env/bin/python -m sglang.launch_server ; ignore_errors=no }\n",
        },
        "old_python_exists": True,
    }
    preflight.option_host_checks(host, _opts(tmp_path, cuda13_service_name="sglang.service"), found)
    assert host.told == [
        "passed: the options fit the host: sglang.service runs the Python of /opt/ml-env;"
        f" {REPO_URL} offers cuda-toolkit-13-0 13.0.2-1; the 2 package index(es) answer"
    ]
    assert [a["url"] for a in host.called("ansible.builtin.uri")] == [f"{REPO_URL}Packages", *INDEXES]


def test_options_that_do_not_fit_the_host_are_each_named_with_the_option(tmp_path):
    host = FakeHost(
        handlers={
            "ansible.builtin.uri": _uri(
                {"status": 404, "msg": "HTTP Error 404: Not Found"},
                {"status": -1, "msg": "Request failed: <urlopen error [Errno -2] Name or service not known>"},
            )
        }
    )
    found = {
        "unit_show": {
            "rc": 0,
            "stdout": "LoadState=loaded\nExecStart={ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang.launch_server ; ignore_errors=no }\n",
        },
        "old_python_exists": False,
    }
    with pytest.raises(StepFailed) as failed:
        preflight.option_host_checks(host, _opts(tmp_path, cuda13_service_name="sglang.service"), found)
    lines = failed.value.msg.splitlines()
    assert lines[0] == "gpu-node-01: option values that do not fit the host; nothing on the host was changed."
    assert lines[1] == (
        "- cuda13_old_venv is not the venv whose Python the unit sglang.service runs ('{ path=/usr/bin/python3 ;"
        " argv[]=/usr/bin/python3 -m sglang.launch_server ; ignore_errors=no }'): '/opt/ml-env'."
        " Option: cuda13_old_venv. Fix: give the venv of the unit's ExecStart (<venv>/bin/python -m sglang.launch_server)."
    )
    assert lines[2] == (
        "- cuda13_old_venv has no bin/python on the host: '/opt/ml-env'. Option: cuda13_old_venv."
        " Fix: give the path of the serving virtual environment."
    )
    assert lines[3] == (
        f"- cuda_toolkit_apt_repo_url does not answer (HTTP 404 HTTP Error 404: Not Found): '{REPO_URL}'."
        " Option: cuda_toolkit_apt_repo_url. Fix: give the URL of NVIDIA's repository (or a mirror) that the host can read."
    )
    assert [line.split(" does not answer")[0] for line in lines[4:]] == [
        "- cuda13_wheels_index_url",
        "- cuda13_wheels_extra_index_urls",
    ]
    assert host.told == []


def test_with_an_artifact_cache_the_indexes_are_not_asked(tmp_path):
    host = FakeHost(handlers={"ansible.builtin.uri": _uri()})
    found = {
        "unit_show": {"rc": 0, "stdout": "LoadState=loaded\nExecStart=/opt/ml-env/bin/python -m sglang\n"},
        "old_python_exists": True,
    }
    preflight.option_host_checks(host, _opts(tmp_path, cuda13_artifact_cache=True), found)
    assert [a["url"] for a in host.called("ansible.builtin.uri")] == [f"{REPO_URL}Packages"]


def test_the_driver_is_checked_against_the_floor_of_each_resolved_component(tmp_path):
    opts = _opts(tmp_path)
    resolved = [{"name": "cuda-bindings", "version": "13.1.0"}, {"name": "torch", "version": "2.14.1"}]
    host = FakeHost()
    with pytest.raises(StepFailed) as failed:
        preflight.stack_driver(host, opts, resolved, "580.95.05")
    lines = failed.value.msg.splitlines()
    assert lines[0] == "gpu-node-01 fails the preflight for its resolved target; nothing was changed:"
    assert "cuda-bindings 13.1.0 (CUDA 13.1) needs >= 590.44.01" in lines[1]
    assert failed.value.record["stack_driver"]["ok"] is False
    passed = preflight.stack_driver(host, opts, resolved, "590.48.01")
    assert passed["ok"] is True and host.told == [
        f"passed: {' '.join(p['message'].split())}" for p in passed["passed"]
    ]


def test_a_host_without_a_drain_hook_is_refused_before_it_is_read(tmp_path):
    """The rollout restarts and loads a serving host; with no drain hook (and
    no cuda13_allow_undrained) its preflight refuses it before any module runs on the host."""
    host = FakeHost()
    opts = {**_opts(tmp_path), "cuda13_allow_undrained": False, "cuda13_service_name": "sglang.service"}
    with pytest.raises(StepFailed) as failed:
        _check(host, opts, tmp_path)
    assert failed.value.msg == (
        "gpu-node-01: the rollout restarts sglang.service into each profile on both stacks and sends it "
        "the gate's benchmark load, and no drain hook takes the host out of service first: "
        "cuda13_drain_tasks is empty. Nothing was changed. Set cuda13_drain_tasks and cuda13_undrain_tasks "
        "(playbooks/hooks/sglang-router-drain.yml and -undrain.yml with cuda13_router_url), or run it "
        "while the host serves with -e cuda13_allow_undrained=true."
    )
    assert host.calls == []


def test_plan_records_the_drain_refusal_and_reads_nothing(tmp_path):
    host = FakeHost()
    opts = {**_opts(tmp_path), "cuda13_allow_undrained": False}
    record = _check(host, opts, tmp_path, refuse=False)
    assert record["ok"] is False
    assert record["refusals"][0].startswith("gpu-node-01: the rollout restarts nosuch-cuda13-test.service")
    assert host.calls == []


def _apt_not_found(args: dict) -> dict:
    """apt's answer when the host's sources carry none of the requests: the recorded output of
    tests/fixtures/apt/apt-get-install-unable-to-locate.txt with the names requested here."""
    recorded = (
        Path(__file__).parent / "fixtures" / "apt" / "apt-get-install-unable-to-locate.txt"
    ).read_text()
    head, _, _ = recorded.partition("E: Unable to locate package")
    names = [r.split("=", 1)[0] for r in args["requests"]]
    stderr = "".join(f"E: Unable to locate package {name}\n" for name in names)
    return {
        "changed": False,
        "update_rc": 0,
        "update_stderr": "",
        "rc": 100,
        "stdout": head,
        "stderr": stderr,
    }


def test_a_driver_below_the_floor_with_a_driver_window_gets_its_plan_in_the_refusal(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "driver-too-old.json"))
    host = FakeHost(handlers={"cuda13_apt_simulate": _apt_not_found})
    opts = _opts(
        tmp_path, cuda13_driver_target="580.95.05", cuda13_driver_gpu_clients=["nvidia-dcgm.service"]
    )
    with pytest.raises(StepFailed) as failed:
        _check(host, opts, tmp_path)
    # The host's side ran for real on this machine (no NVIDIA driver: no holders, no packages).
    [facts_args] = host.called("cuda13_driver_facts")
    assert facts_args["units"] == ["nvidia-dcgm.service"]
    [simulated] = host.called("cuda13_apt_simulate")
    assert simulated["requests"] == ["nvidia-driver-pinning-580.95.05", "nvidia-open"]
    window = failed.value.record["driver_window"]
    assert (window["current"], window["target"], window["needs_move"]) == ("570.86.15", "580.95.05", True)
    assert window["blockers"][0]["check"] == "packages"
    msg = failed.value.msg
    assert "the NVIDIA driver is too old for CUDA 13.0.2" in msg
    assert (
        "- driver window (cuda13_driver_target=580.95.05): the move to 580.95.05 cannot be made here:"
        " apt cannot install nvidia-driver-pinning-580.95.05, nvidia-open:"
        " E: Unable to locate package nvidia-driver-pinning-580.95.05; E: Unable to locate package nvidia-open"
        " (Option: cuda13_driver_target)."
    ) in msg
    assert (
        "driver window: 570.86.15 -> 580.95.05 (open kernel modules; below the floor 580.95.05)" in host.told
    )


def test_a_driver_at_the_floor_skips_the_driver_window_and_reads_nothing_more(tmp_path):
    host = FakeHost()
    record = _check(host, _opts(tmp_path, cuda13_driver_target="R580"), tmp_path)
    assert record["ok"] and record["driver_window"]["needs_move"] is False
    assert host.called("cuda13_driver_facts") == [] and host.called("cuda13_apt_simulate") == []
    assert "driver 590.48.01 meets the floor 580.95.05: no driver change" in host.told


def test_without_a_driver_target_the_preflight_reads_no_driver_facts(tmp_path):
    host = FakeHost()
    record = _check(host, _opts(tmp_path), tmp_path)
    assert record["driver_window"] is None and host.called("cuda13_driver_facts") == []


def test_plan_keeps_the_driver_windows_plan_of_a_refused_host(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "driver-too-old.json"))
    host = FakeHost(handlers={"cuda13_apt_simulate": _apt_not_found})
    record = _check(host, _opts(tmp_path, cuda13_driver_target="R580"), tmp_path, refuse=False)
    assert not record["ok"] and "- driver window (cuda13_driver_target=R580)" in record["refusals"][0]
    assert record["driver_window"]["target"] == "R580"
    assert host.called("cuda13_apt_simulate")[0]["requests"] == ["nvidia-driver-pinning-580", "nvidia-open"]


def test_a_ready_move_of_a_host_refused_for_another_cause_lists_its_steps():
    from cuda13_upgrade.steps import driver_window

    plan = {
        "target": "580.95.05",
        "ready": True,
        "requests": ["nvidia-driver-pinning-580.95.05", "nvidia-open"],
        "held": ["nvidia-driver"],
        "activation": "reload",
        "clients": [{"comm": "python3", "pid": 2211, "unit": "sglang.service", "known": True}],
    }
    text = driver_window.refusal_text(plan)
    assert text.startswith(
        "- driver window (cuda13_driver_target=580.95.05): every check of the move to 580.95.05 passes;"
        " the run makes it once the checks above pass: (1) apt-mark unhold nvidia-driver;"
        " (2) install nvidia-driver-pinning-580.95.05 in an apt run of its own"
    )
    assert "(3) install nvidia-open; (4) stop sglang.service, unload the loaded ones of nvidia_drm," in text
    assert text.endswith("(5) hold the driver's packages at the new version")
    assert "(4) reboot;" in driver_window.refusal_text({**plan, "activation": "reboot"})


def test_a_host_outside_debian_and_ubuntu_gets_the_guides_remedy_without_an_option(tmp_path, monkeypatch):
    from cuda13_upgrade.steps import driver_window

    # Rocky Linux 9's /etc/os-release names it ID="rocky", ID_LIKE="rhel centos fedora".
    os_release = {
        "read": {"/etc/os-release": {"exists": True, "content": 'ID="rocky"\nID_LIKE="rhel centos fedora"\n'}}
    }
    host = FakeHost(handlers={"cuda13_record": lambda args: os_release})
    opts = {
        "cuda13_driver_target": "R580",
        "nvidia_driver_check_toolkit_release": "13.0.2",
        "cuda13_service_name": "sglang.service",
    }
    plan = driver_window.readiness(
        host, opts, current="570.86.15", compute_capabilities=["12.0"], proc_version=None
    )
    first = plan["blockers"][0]
    assert (first["check"], first["value"], first["option"]) == ("packages", "rocky", None)
    assert first["problem"] == "NVIDIA's pinning packages are documented for Debian and Ubuntu only"
    assert host.called("cuda13_apt_simulate") == [] and not plan["ready"]


def test_the_hosts_own_driver_packages_replace_nvidias_repositorys(tmp_path, monkeypatch):
    from cuda13_upgrade.steps import driver_window

    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "driver-too-old.json"))
    host = FakeHost(handlers={"cuda13_apt_simulate": _apt_not_found})
    opts = _opts(tmp_path, cuda13_driver_target="R580", cuda13_driver_packages=["nvidia-driver-580-open"])
    with pytest.raises(StepFailed) as failed:
        _check(host, opts, tmp_path)
    assert host.called("cuda13_apt_simulate")[0]["requests"] == ["nvidia-driver-580-open"]
    window = failed.value.record["driver_window"]
    assert not any("pinning package" in note for note in window["notes"])
    ready = {**window, "ready": True, "blockers": [], "held": [], "activation": "reboot", "clients": []}
    text = driver_window.refusal_text(ready)
    assert "(1) install nvidia-driver-580-open; (2) reboot; (3) hold the driver's packages" in text
    assert "apt run of its own" not in text


def test_a_host_below_the_floor_with_a_ready_driver_window_passes_with_the_targets_driver(
    tmp_path, monkeypatch
):
    """The window installs the target first: the host's other checks are made with its version,
    and the record says the move is to be made (driver_window.move) from the driver it runs now."""
    from cuda13_upgrade.steps import driver_window

    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "driver-too-old.json"))
    ready = {"needs_move": True, "ready": True, "target": "580.95.05", "floor": "580.95.05", "blockers": []}
    monkeypatch.setattr(driver_window, "readiness", lambda host, options, **kw: dict(ready))
    host = FakeHost()
    record = _check(host, _opts(tmp_path, cuda13_driver_target="580.95.05"), tmp_path)
    assert record["ok"] is True and record["refusals"] == []
    assert record["driver_version"] == "580.95.05" and record["driver_version_now"] == "570.86.15"
    assert record["driver_window"]["move"] is True
    assert (
        "gpu-node-01: driver window: 570.86.15 is below the floor; the run moves the driver to 580.95.05"
        " first, then every other check passes"
    ) in host.told


def test_a_blocked_driver_window_leaves_the_host_refused(tmp_path, monkeypatch):
    from cuda13_upgrade.steps import driver_window

    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE", str(NVIDIA_SMI_STATES / "driver-too-old.json"))
    blocked = {
        "needs_move": True,
        "ready": False,
        "target": "580.95.05",
        "floor": "580.95.05",
        "blockers": [
            {
                "check": "headers",
                "value": None,
                "option": None,
                "problem": "no headers",
                "remedy": "install them",
            }
        ],
    }
    monkeypatch.setattr(driver_window, "readiness", lambda host, options, **kw: dict(blocked))
    with pytest.raises(StepFailed) as failed:
        _check(FakeHost(), _opts(tmp_path, cuda13_driver_target="580.95.05"), tmp_path)
    assert "no headers. Fix: install them" in failed.value.msg
    assert "move" not in failed.value.record["driver_window"]
